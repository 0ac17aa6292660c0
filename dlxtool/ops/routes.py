"""Where RabbitMQ would route a message, read from the management API's exchanges and bindings.

Two questions replay (and history) ask:

* `dead_letter_drop(queue, key)`: would the next dead-lettering of a message with routing key `key`
  from `queue` reach a queue, or be dropped? (DESIGN: the default exchange changes the key to the
  queue name; a direct/topic dead-letter exchange then often routes it nowhere.)
* `through_wait_queue(queue, key, dlq)`: a message whose deaths are only TTL expiries waited in
  `queue`; which queue did that wait queue send it back to (the queue that processes it)?

Direct, topic and fanout exchanges, the default exchange, exchange-to-exchange bindings and
alternate exchanges (by argument) are followed. A headers exchange routes on the message's headers,
which these questions do not have: its answer is "unknown" (None), never a guess.

Below them, the routes of the commands that move messages (replay, load, purge --move-to): `Routes`
(per target: a temporary exchange that keeps the routing key, or the default exchange; per (target,
key): the dead-letter check above, so that a moved message's next failure is not dropped) and
`TemporaryExchanges` (one fanout exchange bound only to each target).
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from dlxtool.broker.management import POLICIES_PENDING, QueueInfo
from dlxtool.errors import DlxtoolError, ManagementMismatch, NotFoundError
from dlxtool.ops.stay import Stay, Why

if TYPE_CHECKING:
    from dlxtool.broker.channel import AsyncChannel
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.publisher import Publisher
    from dlxtool.ops.actions import Decider, Decision, RawDecide
    from dlxtool.record import MessageRecord

# The dead-letter questions of a queue whose policies the management API does not show yet (QueueInfo)
POLICIES_UNREAD = f"its dead-letter exchange cannot be read: {POLICIES_PENDING}"
MAX_HOPS = 8  # exchange-to-exchange bindings followed at most this deep (and never in a cycle)


class Management(Protocol):
    def get(self, path: str, **query: Any) -> Any: ...

    def queue(self, vhost: str, name: str, *, settled: bool = False) -> QueueInfo: ...


@dataclass(frozen=True)
class Resolved:
    queue: str | None
    why: str


def topic_matches(pattern: str, key: str) -> bool:
    """AMQP topic matching: words split on '.', '*' = one word, '#' = zero or more."""
    def match(p: list[str], k: list[str]) -> bool:
        if not p:
            return not k
        if p[0] == "#":
            return any(match(p[1:], k[i:]) for i in range(len(k) + 1))
        if not k:
            return False
        return (p[0] == "*" or p[0] == k[0]) and match(p[1:], k[1:])

    return match(pattern.split("."), key.split("."))


def topics_overlap(a: str, b: str) -> bool:
    """Whether some routing key matches both topic patterns (words split on '.', '*' = one word, '#' = any)."""
    x, y = a.split("."), b.split(".")

    @functools.cache
    def meet(i: int, j: int) -> bool:
        if i == len(x) and j == len(y):
            return True
        if i < len(x) and x[i] == "#":  # matches nothing more, or takes what y has next and stays
            return meet(i + 1, j) or (j < len(y) and meet(i, j + 1))
        if j < len(y) and y[j] == "#":
            return meet(i, j + 1) or (i < len(x) and meet(i + 1, j))
        if i == len(x) or j == len(y):
            return False
        return (x[i] == y[j] or "*" in (x[i], y[j])) and meet(i + 1, j + 1)

    return meet(0, 0)


@dataclass(frozen=True)
class Key:
    """A routing key as far as it is known: the key itself, or (`pattern`) a topic pattern the key matches —
    a queue bound to a topic exchange with 'order.#' gets keys that match it; '#': any key at all."""

    text: str
    pattern: bool = False


ANY_KEY = Key("#", pattern=True)


def binding_matches(kind: str, binding_key: str, key: Key) -> bool:
    """Whether a binding of a direct/topic/fanout exchange matches a message with `key` (for a pattern: may), one
    binding at a time: the definition BindingIndex answers for all of an exchange's bindings at once (and is
    checked against in tests/ops/test_routes.py)."""
    if kind == "fanout":
        return True
    if kind == "direct":
        return topic_matches(key.text, binding_key) if key.pattern else binding_key == key.text
    return topics_overlap(binding_key, key.text) if key.pattern else topic_matches(binding_key, key.text)


class BindingIndex:
    """The bindings of one direct or topic exchange, indexed as RabbitMQ indexes them (a topic exchange: a trie of
    its patterns' words), so that a key is matched against all of them at once: a vhost of thousands of queues
    dead-lettering to one topic exchange with thousands of bindings is asked once per queue, not once per pair."""

    def __init__(self, kind: str, bindings: Iterable[dict[str, Any]]) -> None:
        self.kind = kind
        self.by_key: dict[str, list[dict[str, Any]]] = {}  # direct: binding key -> bindings
        self.root = _Node()  # topic
        for b in bindings:
            key = str(b.get("routing_key", ""))
            if kind == "direct":
                self.by_key.setdefault(key, []).append(b)
                continue
            node = self.root
            for word in key.split("."):
                node = node.children.setdefault(word, _Node())
            node.bindings.append(b)

    def match(self, key: Key) -> list[dict[str, Any]]:
        """The bindings a message with `key` matches (for a pattern: may match)."""
        if self.kind == "direct":
            if not key.pattern:
                return list(self.by_key.get(key.text, ()))
            return [b for k, bs in self.by_key.items() if topic_matches(key.text, k) for b in bs]
        words = key.text.split(".")
        found: dict[int, dict[str, Any]] = {}
        seen: set[tuple[int, int]] = set()
        todo = [(self.root, 0)]
        while todo:
            node, i = todo.pop()
            if (id(node), i) in seen:
                continue
            seen.add((id(node), i))
            hashed = node.children.get("#")
            if hashed is not None:  # the pattern's '#' takes none or more of what is left of the key
                todo += [(hashed, j) for j in range(i, len(words) + 1)]
            if i == len(words):
                found.update((id(b), b) for b in node.bindings)
                continue
            word = words[i]
            if key.pattern and word == "#":  # the key's '#': no word of the pattern, or one and stay
                todo.append((node, i + 1))
                todo += [(child, i) for w, child in node.children.items() if w != "#"]
            elif key.pattern and word == "*":
                todo += [(child, i + 1) for w, child in node.children.items() if w != "#"]
            else:
                todo += [(child, i + 1) for child in (node.children.get(word), node.children.get("*")) if child]
        return list(found.values())


class _Node:
    __slots__ = ("bindings", "children")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.bindings: list[dict[str, Any]] = []


class Router:
    """Routing questions against one vhost, each exchange and queue read once (a replay asks per origin)."""

    def __init__(self, mgmt: Management, vhost: str, consumers_now: Callable[[str], int | None] | None = None,
                 *, settled: bool = True) -> None:
        self.mgmt = mgmt
        self.vhost = vhost
        self.settled = settled  # wait for a queue's policies when the API has none yet (ManagementClient.queue)
        # A queue's consumer count from the broker now (AMQP passive declare), where a decision rests on it: the
        # API's is a sample up to one statistics interval old (a worker started 5 s ago still shows none there).
        self.consumers_now = consumers_now
        self._exchanges: dict[str, dict[str, Any] | None] = {}
        self._bindings: dict[str, list[dict[str, Any]]] = {}
        self._indexes: dict[str, BindingIndex] = {}
        self._reached: dict[tuple[str, Key], tuple[set[str], list[str]]] = {}
        self._queues: dict[str, QueueInfo | None] = {}
        self._consumers: dict[str, int | None] = {}

    # -- reading the broker ---------------------------------------------------------------------------

    def _path(self, *parts: str) -> str:
        return "/".join(quote(p, safe="") for p in parts)

    def exchange(self, name: str) -> dict[str, Any] | None:
        if name not in self._exchanges:
            try:
                self._exchanges[name] = self.mgmt.get("exchanges/" + self._path(self.vhost, name or "amq.default"))
            except NotFoundError:
                self._exchanges[name] = None
        return self._exchanges[name]

    def bindings(self, exchange: str) -> list[dict[str, Any]]:
        if exchange not in self._bindings:
            self._bindings[exchange] = list(self.mgmt.get(
                "exchanges/" + self._path(self.vhost, exchange) + "/bindings/source") or [])
        return self._bindings[exchange]

    def queue(self, name: str) -> QueueInfo | None:
        """QueueInfo, or None when the queue does not exist."""
        if name not in self._queues:
            try:
                self._queues[name] = self.mgmt.queue(self.vhost, name, settled=self.settled)
            except NotFoundError:
                self._queues[name] = None
        return self._queues[name]

    def has_queue(self, name: str) -> bool:
        """Whether the queue exists (all the default exchange asks)."""
        return self.queue(name) is not None

    def consumers(self, name: str, info: QueueInfo) -> int:
        """The queue's consumer count: the broker's own now (consumers_now), else the API's sample in `info`."""
        if self.consumers_now is not None:
            if name not in self._consumers:  # once per queue and command, as its settings are read once
                self._consumers[name] = self.consumers_now(name)
            counted = self._consumers[name]
            if counted is not None:
                return counted
        return int(info.consumers)

    # -- routing --------------------------------------------------------------------------------------

    def route(self, exchange: str, key: str) -> set[str] | None:
        """The queues a message with routing key `key` published to `exchange` would reach (empty: it
        would be unroutable), or None when that cannot be told (a headers exchange on the way)."""
        return self._route(exchange, Key(key), set(), None)

    def may_reach(self, exchange: str, key: Key) -> tuple[set[str], list[str]]:
        """The queues a message whose routing key is `key` (a key, or a pattern any key matching it may be)
        published to `exchange` may reach, and what was taken on trust on the way: an exchange whose bindings
        are not on the key (headers, a plugin's type) counts every binding as matching, and says so. For
        questions about the topology (which queues are dead-letter targets: dlxtool.ops.dead_letter_roles),
        where a maybe is kept, not dropped."""
        if (exchange, key) not in self._reached:  # queues of one vhost share keys (any key, a routing key set)
            notes: list[str] = []
            self._reached[(exchange, key)] = (self._route(exchange, key, set(), notes) or set(), notes)
        found, said = self._reached[(exchange, key)]
        return set(found), list(said)

    def _matching(self, exchange: str, kind: str, key: Key) -> list[dict[str, Any]]:
        if kind == "fanout":
            return self.bindings(exchange)
        if exchange not in self._indexes:
            self._indexes[exchange] = BindingIndex(kind, self.bindings(exchange))
        return self._indexes[exchange].match(key)

    def _route(self, exchange: str, key: Key, seen: set[str], loose: list[str] | None) -> set[str] | None:
        """`loose`: None for the exact question (route); else the list may_reach collects its notes in."""
        if exchange in seen or len(seen) > MAX_HOPS:
            return set()  # RabbitMQ visits an exchange once per publish
        seen.add(exchange)
        if exchange == "":  # the default exchange: the queue named by the key, if any
            found = not key.pattern and key.text and self.has_queue(key.text)
            return {key.text} if found else set()
        ex = self.exchange(exchange)
        if ex is None:
            return set()
        kind = ex.get("type")
        if kind in ("direct", "topic", "fanout"):
            matched = self._matching(exchange, str(kind), key)
        elif loose is None:
            return None
        else:
            loose.append(f"exchange {exchange!r} ({kind}) routes on more than the key: every binding counted")
            matched = self.bindings(exchange)
        queues: set[str] = set()
        for binding in matched:
            if binding.get("destination_type") == "queue":
                queues.add(binding.get("destination", ""))
            else:
                more = self._route(binding.get("destination", ""), key, seen, loose)
                if more is None:
                    return None
                queues |= more
        arguments: Any = ex.get("arguments") or {}
        alternate = arguments.get("alternate-exchange")
        if alternate and (not queues or (loose is not None and key.pattern)):  # a pattern: some keys match nothing
            more = self._route(str(alternate), key, seen, loose)
            return None if more is None else queues | more
        return queues

    def dead_letter_drop(self, queue: str, key: str) -> str | None:
        """Why the next dead-lettering of a message with routing key `key` from `queue` would reach no
        queue (so RabbitMQ drops it), or None when it would reach one, has no dead-letter exchange, or
        cannot be told."""
        info = self.queue(queue)
        if info is None:
            return None  # the publish itself is returned: the message stays where it is
        if not info.policies_known:
            return POLICIES_UNREAD
        dlx = info.dead_letter_exchange
        if dlx is None:
            return None
        fixed = info.dead_letter_routing_key
        reaches = self.route(str(dlx), str(fixed) if fixed is not None else key)
        if reaches is None or reaches:
            return None
        if fixed is not None:
            return f"its dead-letter exchange {dlx!r} routes its dead-letter routing key {fixed!r} to no queue"
        kind = (self.exchange(str(dlx)) or {}).get("type", "missing") if dlx else "default"
        return (f"its dead-letter exchange {dlx!r} ({kind}) routes routing key {key!r} to no queue: "
                "the next dead-lettering would drop the message")

    def dead_letter_gone(self, queue: str) -> str | None:
        """Why a message the broker dead-lettered from `queue` must not go back there: the queue has no
        dead-letter exchange now (a policy deleted or no longer matching, the queue declared again without
        one), so its next failure there would drop it. None when it has one, or the queue is missing."""
        info = self.queue(queue)
        if info is None or "x-dead-letter-exchange" in info.arguments:  # an argument wins over any policy
            return None
        if not info.policies_known:
            return POLICIES_UNREAD
        if info.dead_letter_exchange is not None:
            return None
        return ("it has no dead-letter exchange now, though these messages were dead-lettered from it (a policy "
                "removed, or the queue declared again without one): the next dead-lettering would drop the message")

    def through_wait_queue(self, queue: str, key: str | None, dlq: str) -> Resolved:
        """A message expired out of `queue` (with routing key `key` there) and its deaths say nothing else:
        follow where `queue` dead-letters to. Reaching one other queue means `queue` is a wait queue: the
        queue it sends messages back to is the origin. Reaching `dlq` itself: with consumers, `queue` is a
        work queue with a TTL where the message expired unprocessed (the origin); without, it may as well be
        a retry ladder's last tier that parks by expiry, which is never an origin: no origin, with the reason."""
        try:
            info = self.queue(queue)
            if info is None:
                return Resolved(None, f"only TTL expiries, from {queue!r}, which no longer exists")
            if not info.policies_known:
                return Resolved(None, f"only TTL expiries, from {queue!r}; {POLICIES_UNREAD}")
            dlx = info.dead_letter_exchange
            if dlx is None:
                if info.setting("message-ttl") is None:
                    # Not a wait queue (any more): nothing sends its messages anywhere, and no queue TTL would
                    # expire them there and drop them (no dead-letter exchange): it is where they belong.
                    return Resolved(queue, "expired there (it has no TTL and no dead-letter exchange now)")
                return Resolved(None, f"only TTL expiries, from {queue!r}, which has no dead-letter exchange now "
                                      "(its TTL would drop a replayed message)")
            fixed = info.dead_letter_routing_key
            use = str(fixed) if fixed is not None else key
            if use is None:
                return Resolved(None, f"only TTL expiries, from {queue!r}; the routing key it had there is not "
                                      "recorded")
            reaches = self.route(str(dlx), use)
        except ManagementMismatch:
            raise  # the API answers for another broker now: exit 3, not a reason to stay
        except DlxtoolError as exc:
            return Resolved(None, f"only TTL expiries, from {queue!r}; cannot read its routes ({exc.message})")
        where = f"{queue!r} dead-letters to exchange {dlx!r} with routing key {use!r}"
        if reaches is None:
            return Resolved(None, f"only TTL expiries: {where}, which routes on headers (cannot follow)")
        if dlq in reaches:
            if self.consumers(queue, info):  # consumed there: a work queue with a TTL where it expired unprocessed
                return Resolved(queue, "expired there (it has consumers and dead-letters to this DLQ)")
            # Never the wait queue: replayed there, the message would only expire back into this DLQ.
            return Resolved(None, f"only TTL expiries: {where}, which leads back to this DLQ, and {queue!r} has no "
                                  "consumer: a wait queue that parks by expiry (a retry ladder's last tier), or a work "
                                  "queue whose consumers are gone; which one cannot be told (--to QUEUE names it)")
        if len(reaches) == 1:
            target = next(iter(reaches))
            return Resolved(target, f"after waiting in {queue!r} (its dead-letter route leads to {target!r})")
        if not reaches:
            return Resolved(None, f"only TTL expiries: {where}, which routes to no queue")
        return Resolved(None, f"only TTL expiries: {where}, which routes to several queues "
                              f"({', '.join(sorted(reaches))})")


# -- the routes of a run: replay, load, purge --move-to ---------------------------------------------------


ORIGINAL_KEY = "original routing key"       # through a temporary exchange bound only to the target
DEFAULT_EXCHANGE = "default exchange (routing key = queue name)"
QUEUE_MISSING = "queue missing (no temporary exchange can be bound to it)"
UNCHECKED = ("its dead-letter exchange cannot be checked (management API not reachable): the next dead-lettering "
             "of a message could drop it")
DROP_FLAG = "--allow-dlx-drop"


# A route: (the exchange to publish through, whether the message keeps its own routing key), or why it stays
Way = tuple[str, bool] | Why

REFUSED = "the broker refused to"  # TemporaryExchanges' reasons start so (after the queue's name)


def route_hint(kinds: Iterable[Stay]) -> str:
    """What to do about the kinds of reason messages stayed for (a run refused: dlxtool.ops.outcomes.refusal)."""
    kinds = set(kinds)
    steps: list[str] = []
    if Stay.QUEUE_MISSING in kinds:
        steps.append("create the missing queue")
    if Stay.ROUTE_REFUSED in kinds:
        steps.append("grant the user configure permission on the vhost, or use --default-exchange (no temporary "
                     "exchange)")
    if Stay.DEAD_LETTER_UNSAFE in kinds:
        steps.append(f"make the dead-letter exchange route the key, or {DROP_FLAG} to move them anyway (their next "
                     "dead-lettering there may drop them)")
    if Stay.DESTINATION_FULL in kinds:
        steps.append("--allow-displace for a full destination")
    return "; ".join(steps) or "fix the cause named above"


class RouteUnavailable(DlxtoolError):
    """The broker refused a temporary exchange (its declare, or its bind) for another reason than a missing
    queue: a user without configure permission on the vhost (403 ACCESS_REFUSED)."""


def usable_router(mgmt: Management | None, vhost: str) -> Router | None:
    """A Router on `mgmt`, or None when there is no API to ask: none, or one that cannot be used (unreachable, or
    not proven to answer for the broker AMQP reached), so that routes say so once per target, up front."""
    from dlxtool.broker.identity import UnusableManagement

    return None if mgmt is None or isinstance(mgmt, UnusableManagement) else Router(mgmt, vhost)


class Routes:
    """Per target queue, once: the exchange to publish through and whether the message keeps its original
    routing key, or why its messages stay where they are. Per (target, routing key), once: whether the
    target's dead-letter exchange routes the key a message arrives with — else its next dead-lettering there
    (a rejection, an expiry) would drop it, and it stays where it is, with the reason.

    `exchanges(queue)` gives a temporary exchange bound only to `queue` (None: the queue is missing; raises
    RouteUnavailable when the broker refuses it otherwise); `router` (the target broker's management API,
    None when unreachable) answers the dead-letter questions: unreachable, nothing can be checked and nothing
    goes. `allow_drop` (--allow-dlx-drop) accepts both risks. Replay's, load's and purge --move-to's routes.
    `unsafe`: every reason given, so that a run that moved nothing because of them is refused (exit 6)."""

    def __init__(self, default_exchange: bool, *, exchanges: Callable[[str], str | None] | None,
                 router: Router | None, allow_drop: bool = False) -> None:
        self.default_exchange = default_exchange
        self.exchanges = exchanges
        self.router = router
        self.allow_drop = allow_drop
        self.routes: dict[str, Way] = {}
        self.unsafe: set[Why] = set()
        self._by_name: dict[str, Way] = {}
        self._keys: dict[tuple[str, str], Why | None] = {}  # None = the key is routed
        self._gone: dict[str, Why | None] = {}  # died_there's answers (None = it still dead-letters)

    def __call__(self, target: str) -> Way:
        route = self.routes.get(target)
        if route is None:
            route = self.routes[target] = self._noted(self._decide(target))
        return route

    def with_key(self, target: str, key: str) -> Way:
        """The route of one message that arrives with routing key `key` if the route keeps it (load's per-record
        question; the engine's deciders ask through `checked`)."""
        route = self(target)
        if isinstance(route, str) or not route[1]:
            return route
        return self.key(target, key) or route

    def for_every_key(self, target: str) -> Why | None:
        """Why no message may go to `target` whatever its routing key (None: that depends on the key, or any may)."""
        route = self(target)
        if isinstance(route, str):
            return route
        if route[1] and self.router is None:
            return self.key(target, "")  # nothing can be checked (or, allowed, nothing needs to be)
        return None

    def died_there(self, target: str) -> Why | None:
        """Why a message the broker dead-lettered from `target` must not go back to it (Router.dead_letter_gone:
        it has no dead-letter exchange now), once per target; None: it may (or --allow-dlx-drop, or no API to
        ask: `key` says so for the routes that need it)."""
        if self.allow_drop or self.router is None:
            return None
        if target not in self._gone:
            try:
                gone = self.router.dead_letter_gone(target)
            except ManagementMismatch:
                raise  # the API answers for another broker now: exit 3, not a reason to stay
            except DlxtoolError as exc:
                gone = f"cannot check its dead-letter exchange ({exc.message})"
            self._gone[target] = self._noted_why(_unsafe(f"{target}: {gone}")) if gone else None
        return self._gone[target]

    def key(self, target: str, key: str | bytes) -> Why | None:
        """Why a message keeping routing key `key` must not go to `target` (None: it may)."""
        if not isinstance(key, str):  # not UTF-8: no binding key equals it, and topic patterns match its text
            key = key.decode("utf-8", "replace")
        if (target, key) not in self._keys:
            self._keys[(target, key)] = self._noted_why(self._key_check(target, key))
        return self._keys[(target, key)]

    def describe(self, target: str) -> str:
        """The route in words (the plan, the summary), or why the target's messages stay."""
        route = self.routes.get(target)
        if isinstance(route, str):
            return route
        return DEFAULT_EXCHANGE if self.default_exchange else ORIGINAL_KEY

    def by_queue_name(self, target: str) -> Way:
        """The default-exchange route (routing key = queue name), checked like --default-exchange, for
        messages whose consumer republishes to the exchange it received them from: Celery's Task.retry
        sends the retry to the delivery's exchange and key (celery/app/task.py, signature_from_request),
        which after a replay through a temporary exchange is deleted once the run ends, and the retry is
        lost. A delivery from the default exchange Celery retries by queue name instead."""
        route = self._by_name.get(target)
        if route is None:
            route = self._by_name[target] = self._noted(self._default_exchange_route(target))
        return route

    def checked(self, decide: Decider) -> Decider:
        """`decide` (an engine decider: record → Decision, with its `.raw` fast path where it has one) with each move
        that keeps its routing key — through a temporary exchange — checked by `key`. A move on the default
        exchange was checked with its target already."""
        from dlxtool.ops.actions import Action, Decision  # here: the queue survey's roles use the Router only

        move, leave, key, known = Action.MOVE, Decision.leave, self.key, self._keys

        def check(decision: Decision) -> Decision:  # per message: a dict lookup once the (target, key) pair was checked
            if decision.action is not move or not decision.exchange:
                return decision
            pair = (decision.group, decision.routing_key)
            why = known[pair] if pair in known else key(*pair)
            return leave(why) if why is not None else decision

        inner = decide.raw
        raw: RawDecide | None = None
        if inner is not None:
            def checked_raw(routing_key: str | bytes, props: bytes, body: bytes) -> Decision | None:
                decision = inner(routing_key, props, body)
                return None if decision is None else check(decision)

            raw = checked_raw

        return _Checked(decide, check, raw)

    def _noted(self, route: Way) -> Way:
        if isinstance(route, Why):
            self.unsafe.add(route)
        return route

    def _noted_why(self, why: Why | None) -> Why | None:
        if why is not None:
            self.unsafe.add(why)
        return why

    def _decide(self, target: str) -> Way:
        if self.default_exchange:
            return self._default_exchange_route(target)
        try:
            name = self.exchanges(target) if self.exchanges else None
        except RouteUnavailable as exc:
            return Why(f"{target}: {exc.message}", Stay.ROUTE_REFUSED)
        if name is None:
            return Why(f"{target}: {QUEUE_MISSING}", Stay.QUEUE_MISSING)
        return name, True

    def _key_check(self, target: str, key: str) -> Why | None:
        if self.allow_drop:
            return None
        if self.router is None:
            return _unsafe(f"{target}: {UNCHECKED}")
        try:
            drop = self.router.dead_letter_drop(target, key)
        except ManagementMismatch:
            raise  # the API answers for another broker now: exit 3, not a reason to stay
        except DlxtoolError as exc:
            return _unsafe(f"{target}: cannot check its dead-letter exchange ({exc.message})")
        return _unsafe(f"{target}: {drop}") if drop else None

    def _default_exchange_route(self, target: str) -> Way:
        if self.allow_drop:
            return "", False
        if self.router is None:
            return _unsafe(f"{target}: the default-exchange route needs the management API to check its dead-letter "
                           "exchange, and it is not reachable")
        try:
            drop = self.router.dead_letter_drop(target, target)
        except ManagementMismatch:
            raise  # the API answers for another broker now: exit 3, not a reason to stay
        except DlxtoolError as exc:
            return _unsafe(f"{target}: cannot check its dead-letter exchange ({exc.message})")
        if drop:
            return _unsafe(f"{target}: with the default exchange (routing key {target!r}), {drop}")
        return "", False


def _unsafe(text: str) -> Why:
    """Its next dead-lettering there would be dropped, or that cannot be checked."""
    return Why(text, Stay.DEAD_LETTER_UNSAFE)


class _Checked:
    """An engine decider behind Routes.checked: the engine reads `raw` (its fast path) when there is one."""

    def __init__(self, decide: Decider, check: Callable[[Decision], Decision], raw: RawDecide | None) -> None:
        self.decide = decide
        self.check = check
        self.raw = raw  # check(decide.raw(…)), where the decider has that fast path

    def __call__(self, record: MessageRecord) -> Decision:
        return self.check(self.decide(record))


TEMPORARY_PREFIX = "dlxtool."
MAX_EXCHANGE_NAME = 255  # bytes (AMQP short string)
TEMPORARY_PURPOSES = ("replay", "load", "purge", "keep")  # keep: messages that stayed, back to the DLQ's tail


@dataclass(frozen=True)
class TemporaryName:
    """What a temporary exchange's name says (TemporaryExchanges._name): which command made it and the queue it
    was bound to — None where the name was cut at 255 bytes and the end of the queue's name may be lost."""

    purpose: str
    queue: str | None


def temporary_exchange(name: str) -> TemporaryName | None:
    """The name of one of dlxtool's temporary exchanges, read (None: another exchange). It is long deleted when
    someone reads it in a message's x-death or delivery: the queue it was bound to is what it stood for."""
    parts = name.split(".", 4)
    if not (len(parts) == 5 and name.startswith(TEMPORARY_PREFIX) and parts[1] in TEMPORARY_PURPOSES
            and parts[3].isdigit() and parts[4]):
        return None
    return TemporaryName(parts[1], parts[4] if len(name.encode()) < MAX_EXCHANGE_NAME else None)


class TemporaryExchanges:
    """The original-key route: one fanout exchange per target queue, bound only to it, deleted at the end.

    Fanout ignores the routing key, so the message keeps its original key yet reaches exactly one
    queue. Not auto-delete: deleting the queue mid-run must make publishes unroutable (returned),
    not make the exchange vanish (which would close the channel)."""

    def __init__(self, connection: AmqpConnection, timeout: float = 30.0, purpose: str = "replay") -> None:
        self.connection = connection
        self.purpose = purpose  # in the names: dlxtool.replay.…, dlxtool.load.…, dlxtool.purge.…
        self.timeout = timeout
        self.by_queue: dict[str, str | None] = {}  # routing: None = no exchange bound to that queue
        self.refused: dict[str, str] = {}          # queue -> what the broker said (not a missing queue)
        self.declared: list[str] = []              # every exchange that may exist: all deleted at the end
        self._tag = uuid.uuid4().hex[:8]
        self._channel: AsyncChannel | None = None

    def _ch(self) -> AsyncChannel:
        from dlxtool.broker.channel import AsyncChannel

        if self._channel is None or not self._channel.is_open:
            self._channel = AsyncChannel(self.connection, self.timeout)
        return self._channel

    def __call__(self, queue: str) -> str | None:
        """The exchange bound only to `queue`; None when the queue does not exist (the bind's 404). Raises
        RouteUnavailable with the broker's reply when it refuses the declare or the bind otherwise."""
        if queue not in self.by_queue:
            self.by_queue[queue] = self._make(queue)
        if queue in self.refused:
            raise RouteUnavailable(self.refused[queue])
        return self.by_queue[queue]

    def _make(self, queue: str) -> str | None:
        from dlxtool.broker.channel import ChannelClosed

        name = self._name(queue)
        # Listed before the declare: a declare-ok lost with the channel may still have created it
        # (deleting an exchange that does not exist is a no-op).
        self.declared.append(name)
        step = "declare"
        try:
            self._ch().call("exchange_declare", name, exchange_type="fanout", durable=False, auto_delete=False)
            step = "bind"
            self._ch().call("queue_bind", queue, name, routing_key="")
        except ChannelClosed as exc:  # the broker closed the channel; _ch() opens a new one for the next queue
            said = self._channel.closed_reason if self._channel is not None else None
            said = said or exc.message
            if step == "bind" and exc.reply_code == 404:  # NOT_FOUND
                return None  # the queue is missing: its messages stay where they are
            if step == "bind" and exc.reply_code == 405:  # RESOURCE_LOCKED: another connection's exclusive queue
                self.refused[queue] = (f"{queue} is an exclusive queue of another connection: no other connection may "
                                       f"bind to it or publish into it ({said})")
                return None
            what = "declare the temporary exchange" if step == "declare" else "bind the temporary exchange"
            self.refused[queue] = (f"{REFUSED} {what} that keeps the routing key ({said}); "
                                   "--default-exchange publishes without one")
            return None
        return name

    def _name(self, queue: str) -> str:
        """Unique per queue (a counter), readable where it fits: a shared, truncated name would bind two
        long-named queues to one fanout exchange and copy every message to both."""
        prefix = f"{TEMPORARY_PREFIX}{self.purpose}.{self._tag}.{len(self.declared)}."
        room = MAX_EXCHANGE_NAME - len(prefix.encode())
        return prefix + queue.encode()[:room].decode("utf-8", "ignore")

    def delete_on(self, publisher: Publisher) -> None:
        """Delete them on the channel that published through them, right after the last publish (the broker
        handles a channel's methods in order, so every publish is routed first) and while the run's own stop
        handling is in force: nothing then comes between the run and its summary. delete_all then has
        nothing left to do."""
        channel = publisher.channel
        for name in dict.fromkeys(self.declared):
            channel.call("exchange_delete", name)
        self.declared.clear()

    def delete_all(self) -> None:
        if not self.declared:
            return  # nothing declared, or delete_on sent the deletes: the connection's close ends the channel
        for name in dict.fromkeys(self.declared):
            with contextlib.suppress(Exception):  # best effort; the name says what it was
                self._ch().call("exchange_delete", name)
        if self._channel is not None:
            self._channel.close()
