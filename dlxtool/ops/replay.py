"""Replay: send dead letters back to the queue each one failed in, history reset, nothing lost.

Built on the one-pass engine (dlxtool.ops.engine): this module decides, per message, where it goes,
through which exchange and with which headers, and holds replay's workflow and refusals (`run`): the
stream and tail-republish refusals, the plan (refused on a quorum queue with a delivery limit), the
confirmation, the run. The CLI parses, calls and renders.

Where: its origin, read by the conventions as `history` reads it (dlxtool.conventions.explain, with the
broker's own conventions from the config and `origin_from`): x-death's (dlxtool.deaths.find_origin; a
message that only waited out TTLs is followed through its wait queue's dead-letter route,
dlxtool.ops.routes), or a framework's (Spring, NServiceBus, MassTransit, rascal, a team's headers); or
`to_queue`. An origin that is an exchange + routing key is published there (dlxtool.ops.exchange_routes).

How (the route, per target queue):
  * default: the ORIGINAL routing key (from an earlier provenance header, else the origin's x-death
    entry), through a temporary fanout exchange bound only to that queue. Fanout ignores the key, so it
    reaches exactly that queue, and consumers that dispatch on the key, a dead-letter exchange that
    routes on it and an application's own retry ladder see what they saw the first time.
  * `route="default-exchange"` (opt-in): the default exchange, routing key = the queue name.
  Either way the key the message arrives with is checked against the target's dead-letter exchange
  (dlxtool.ops.routes.Routes): where its next dead-lettering would be dropped, it stays in the DLQ with
  the reason (unless `allow_dlx_drop`).

Headers: the death history and retry counters are removed (RabbitMQ 3.x keeps a client-sent x-death
and would keep counting; the reset is the point), with the failure headers of every convention that
explained the message (Explanation.reset: left in place, a framework's stale failure would still name
the origin after the next broker death), and a compact provenance header is added:

    dlxtool-replay = {from, at, id, count, exchange, routing-key[, expiration], deaths[, reset][, filters], src}

`exchange`, `routing-key` and `expiration` are the first origin's: a second replay reads them from the
first one's header (its x-death then names a temporary exchange, long deleted). `expiration` is the
message's per-message TTL, which RabbitMQ moves into x-death's original-expiration: restored on the
replayed message unless `drop_expiration`.

`id` is unique per publish: two dead letters with the same body and death summary replayed in the same
second would otherwise be byte-identical publishes, and a basic.return could not say which one came back.

`count` also drives the loop guard `max_replays`.

`src` names the delivery the copy was made from (`source_fingerprint`: 16 hex digits of a hash of its
body and encoded properties, its death history included). A kill -9 between a confirm and the source's
ack leaves a copy at the origin while its source stays in the DLQ; when the two meet again (the copy
dies again and lands beside its source, or a rerun republishes the source next to the copy), `src`
pairs them: `history` reports them as copies, and `--max-replays` counts the pair as the one message it
is (`Lineage`).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from dlxtool.amqp_values import RawValue
from dlxtool.broker.queues import exchange_exists
from dlxtool.conventions import (
    BUILT_IN,
    X_DEATH,
    Convention,
    Explanation,
    Message,
    Route,
    carries_any,
    explain,
    fast_path_triggers,
    reset_body_retries,
    reset_failure_headers,
    used_body_retries,
)
from dlxtool.deaths import (
    FAILURE_REASONS,
    HISTORY_HEADERS,
    Death,
    DeathHistory,
    find_origin,
    is_celery_task,
    parse_history,
    reset_history,
    summarize,
    waited_only,
)
from dlxtool.deaths import Origin as DeathOrigin
from dlxtool.errors import RefusedError
from dlxtool.ops.capacity import Capacity, Rooms, full_reason
from dlxtool.ops.engine import Action, Decision, TransferOptions, TransferResult
from dlxtool.ops.exchange_routes import ExchangeTargets, Reach
from dlxtool.ops.provenance import (  # re-exported: replay's names for them
    COPY_LEFT,
    PROVENANCE_HEADER,
    CopyGuard,
    Origin,
    Pairs,
    provenance_src,
    record_fingerprint,
    source_fingerprint,  # noqa: F401 - re-exported
)
from dlxtool.ops.routes import (  # the routes of replay, load and purge --move-to
    DEFAULT_EXCHANGE,  # noqa: F401 - re-exported: replay's name for it
    MAX_EXCHANGE_NAME,
    ORIGINAL_KEY,
    TEMPORARY_PREFIX,
    Resolved,
    Router,
    Routes,
    TemporaryExchanges,
    nothing_routed,
    route_refusal,
)
from dlxtool.ops.session import Reporter
from dlxtool.record import MessageRecord
from dlxtool.selection import Selection

NO_ORIGIN = "no origin in the death history"


@dataclass
class ReplaySettings:
    source: str
    selection: Selection = field(default_factory=Selection)
    to_queue: str | None = None
    keep_history: bool = False
    reset_headers: tuple[str, ...] = ()
    max_replays: int | None = None
    default_exchange: bool = False   # opt-in: routing key = queue name (see the module docstring)
    drop_expiration: bool = False    # do not restore a per-message TTL from x-death original-expiration
    allow_displace: bool = False     # replay into a full drop-head origin anyway (it pushes out its head)
    allow_dlx_drop: bool = False     # replay where the origin's dead-letter exchange would drop the key (or unchecked)
    reset_body_retries: bool = False  # opt-in body rewrite: Dramatiq's options.retries back to 0
    # Where origins are read from (dlxtool.conventions): the built-in conventions and the broker's own from
    # the config, as `history` reads them; origin_from forces one (--origin-from CONVENTION).
    conventions: tuple[Convention, ...] = BUILT_IN
    origin_from: str | None = None
    allow_fanout: bool = False       # an exchange origin that reaches several queues: publish anyway (copies)


def provenance(headers: dict[str, Any] | None) -> dict[str, Any] | None:
    """An earlier replay's `dlxtool-replay` header (a table), or None."""
    prov = (headers or {}).get(PROVENANCE_HEADER)
    return prov if isinstance(prov, dict) else None


def replay_count(headers: dict[str, Any] | None) -> int:
    """How many times dlxtool has replayed this message before (from its provenance header)."""
    prov = provenance(headers)
    if prov is not None:
        count = prov.get("count")
        try:
            return int((count.value if isinstance(count, RawValue) else count) or 0)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
            return 0
    return 0


class Lineage:
    """--max-replays over one run (Pairs): a copy a kill -9 left and its source are one message. Its count
    is the higher of the two, and once one of them is replayed the other stays (replaying both would make
    two copies again). It only ever keeps a message in the DLQ with its reason, never loses one."""

    def __init__(self) -> None:
        self.pairs = Pairs()

    def decide(self, fingerprint: str | None, origin: Origin | None, count: int, max_replays: int) -> str | None:
        """Why this delivery stays (None: replay it, and it is remembered as replayed)."""
        partners = self.pairs.partners(fingerprint, origin)
        if any(p["replayed"] for p in partners):
            self.pairs.add(fingerprint, origin, {"count": count, "replayed": False})
            return ("a copy of a message replayed in this run (left by an interrupted replay, or an identical "
                    "message): one of them is enough")
        paired = max([count, *(p["count"] for p in partners)])
        entry = {"count": paired, "replayed": paired < max_replays}
        self.pairs.add(fingerprint, origin, entry)
        for p in partners:
            p["count"] = max(p["count"], paired)
        if paired >= max_replays:
            extra = f", counting its copy left by an interrupted replay (own count {count})" if paired != count else ""
            return f"replayed {paired} times already (--max-replays {max_replays}){extra}"
        return None


@dataclass(frozen=True)
class Address:
    """What the message had when it entered its origin: exchange, routing key (None: not recorded) and
    per-message TTL (x-death original-expiration)."""

    exchange: str
    routing_key: str | None
    expiration: str | None = None


def original_address(history: DeathHistory, origin: str | None) -> Address:
    """From the origin's x-death entry: the failure there, else any death there, else x-first-death-exchange."""
    death = origin_death(history, origin)
    if death is not None:
        return Address(death.exchange or "", death.routing_keys[0] if death.routing_keys else None,
                       death.original_expiration)
    return Address(history.first.get("exchange", ""), None)


def origin_death(history: DeathHistory, origin: str | None) -> Death | None:
    """The x-death entry original_address reads: the failure in the origin, else any death there."""
    for reasons in (FAILURE_REASONS, None):
        for death in history.deaths:
            if death.queue == origin and (reasons is None or death.reason in reasons):
                return death
    return None


def _prov_text(prov: dict[str, Any], name: str) -> str | None:
    value = prov.get(name)
    if isinstance(value, RawValue):
        value = value.value
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def first_address(prov: dict[str, Any] | None, found: Address) -> Address:
    """An earlier replay recorded the first origin's address: it wins over what x-death says now (which
    names a temporary exchange, or the queue name after a default-exchange replay)."""
    if prov is None:
        return found
    exchange, key = _prov_text(prov, "exchange"), _prov_text(prov, "routing-key")
    if exchange is None and key is None:
        return found
    expiration = _prov_text(prov, "expiration")
    return Address(exchange if exchange is not None else found.exchange, key if key is not None else found.routing_key,
                   expiration if expiration is not None else found.expiration)


class WaitQueues:
    """Origins of messages that only waited out TTLs, followed through the wait queue's dead-letter route
    (management API), once per (wait queue, routing key)."""

    def __init__(self, router: Router | None, dlq: str) -> None:
        self.router = router
        self.dlq = dlq
        self._seen: dict[tuple[str, str | None], tuple[Resolved, Address | None]] = {}

    def __call__(self, queue: str, key: str | None) -> tuple[Resolved, Address | None]:
        found = self._seen.get((queue, key))
        if found is None:
            found = self._seen[(queue, key)] = self._resolve(queue, key)
        return found

    def _resolve(self, queue: str, key: str | None) -> tuple[Resolved, Address | None]:
        if self.router is None:
            return Resolved(None, f"only TTL expiries, from {queue!r}: telling a wait queue from the queue a message "
                                  "expired in needs the management API, which is not reachable"), None
        resolved = self.router.through_wait_queue(queue, key, self.dlq)
        if resolved.queue is None or resolved.queue == queue:
            return resolved, None
        info = self.router.queue(queue)
        fixed = info.dead_letter_routing_key if info is not None else None
        # It arrived in the processing queue through the wait queue's dead-letter exchange, with this key.
        return resolved, Address(str(info.dead_letter_exchange or "") if info is not None else "",
                                 str(fixed) if fixed is not None else key)


class ReplayDecider:
    """decide(record) for the engine. `routes(target)` says how to publish to a target (Routes: `replay` and
    `plan` pass one); without one, the default exchange, unchecked (the engine's own tests).
    `wait_queues` follows TTL-only histories (WaitQueues); without one, they stay with the reason.
    `exchange_targets` checks exchange + routing key origins (without one: unresolved, they stay unless
    allow_displace)."""

    def __init__(self, settings: ReplaySettings, *, routes: Callable[[str], tuple[str, bool] | str] | None = None,
                 wait_queues: WaitQueues | None = None, now: datetime | None = None,
                 exchange_targets: ExchangeTargets | None = None) -> None:
        self.s = settings
        self.routes = routes or (lambda _target: ("", False))
        # Celery tasks: see Routes.by_queue_name
        self.by_queue_name = routes.by_queue_name if isinstance(routes, Routes) else self.routes
        # Messages the broker dead-lettered from their origin go back only while it still dead-letters
        self.died_there: Callable[[str], str | None] = routes.died_there if isinstance(routes, Routes) else \
            (lambda _target: None)
        self.wait_queues = wait_queues or WaitQueues(None, settings.source)
        self.exchange_targets = exchange_targets or exchange_targets_for(settings, None, None)
        # For the plan: per target (a queue, or an exchange route's Route.key()), which conventions named the
        # origins of its messages (__call__ only: the plan's survey reads decoded messages)
        self.origins_from: dict[str, Counter[str]] = {}
        self.conflicts = 0  # messages whose conventions named different origins (Explanation.conflict)
        self.labels = {c.name: c.label for c in settings.conventions}
        # Headers that may make a convention other than x-death explain a message: without any, x-death's
        # reading is the explanation, found without reading the message with every convention
        triggers = fast_path_triggers(settings.conventions)
        self._triggers = (frozenset(triggers[0]), triggers[1]) if triggers and settings.origin_from is None else None
        self.now = now
        self._filters = settings.selection.describe()
        self.filters_text = "; ".join(f"{k}={v}" for k, v in self._filters.items())
        self._reset_names = tuple(settings.reset_headers)
        self._stamp_second = -1
        self._stamp_value = datetime.now(UTC)
        self._run_id = uuid.uuid4().hex[:12]
        self._published = 0
        # Selection is frozen: with no criteria every record matches, so skip building the checks each time.
        self._selects = bool(settings.selection._checks())  # noqa: SLF001
        from dlxtool.broker.wire.frames import basic_properties

        self._properties = basic_properties
        self.lineage = Lineage()
        from dlxtool.broker.wire import codec

        # without --max-replays: the second of a pair a kill -9 left stays
        self.copies = CopyGuard(codec.current().bloom)
        self.raw = self._raw_decider()
        # The plan counts Dramatiq messages replayed with their retries used up (a JSON parse per such body,
        # so only there): replayed as they are, Dramatiq gives them no retry.
        self.count_used_body_retries = False
        self.used_body_retries = 0

    def _raw_decider(self) -> Callable[[str, bytes, bytes], Decision | None] | None:
        """decide(routing_key, encoded properties, body) on the bytes, for the engine's fast path
        (dlxtool.ops.replay_raw), when the C extension is the codec's and nothing here needs the decoded
        message (filters, another convention forced or one whose headers are not known). It answers None for
        any message it leaves to __call__."""
        c = _accelerator()
        s = self.s
        triggers = fast_path_triggers(s.conventions)
        if c is None or self._selects or s.origin_from not in (None, X_DEATH) or triggers is None:
            return None
        from dlxtool.ops.replay_raw import raw_decider

        return raw_decider(self, *c, triggers)

    def __call__(self, record: MessageRecord) -> Decision:
        s = self.s
        if self._selects and not s.selection.matches(record):
            return Decision.keep()
        count = replay_count(record.headers)
        fingerprint = record_fingerprint(record)
        if s.max_replays is not None:
            why = self.lineage.decide(fingerprint, provenance_src(record.headers), count, s.max_replays)
            if why is not None:
                return Decision.leave(why)
        elif self.copies.stays(fingerprint, provenance_src(record.headers)):
            return Decision.leave(COPY_LEFT)
        history = parse_history(record.headers)
        found = self._origin(record, history)
        if isinstance(found, str):
            return Decision.leave(found)
        explained, origin, address = found
        way = self._way(record, origin)
        if isinstance(way, str):
            return Decision.leave(way)
        if origin is not None and not s.to_queue and explained.origin_from == X_DEATH and waited_only(history) is None:
            gone = self.died_there(way[0])  # it failed there: the broker dead-lettered it from its origin
            if gone is not None:
                return Decision.leave(gone)
        target, exchange, keeps_key, fixed_key = way
        self.origins_from.setdefault(target, Counter())[explained.origin_from or ""] += 1
        address = first_address(provenance(record.headers), address)
        if s.drop_expiration and address.expiration is not None:  # dropped for good: not in the provenance either
            address = replace(address, expiration=None)
        headers = replay_headers(record, source=s.source, history=history, address=address,
                                 reset_names=self._reset_names, keep_history=s.keep_history,
                                 filters=self.filters_text or None, now=self.now or self._stamp(), count=count,
                                 publish_id=self.next_id(), src=fingerprint, conventions_reset=explained.reset)
        routing_key = fixed_key if fixed_key is not None else \
            (address.routing_key if address.routing_key is not None else record.routing_key) if keeps_key else target
        properties = dict(record.properties)
        if address.expiration is not None and not s.drop_expiration:
            properties["expiration"] = address.expiration  # the sender's TTL, which dead-lettering took off
        body = record.body
        if s.reset_body_retries:  # only on request: the body is the application's
            body = reset_body_retries(body) or body
        elif self.count_used_body_retries and used_body_retries(body) is not None:
            self.used_body_retries += 1
        published = MessageRecord(queue=target, body=body, exchange=exchange, routing_key=routing_key,
                                  properties=properties, headers=headers)
        # published's, without copying the headers dict built just above
        pika_properties = self._properties(properties, headers)
        return Decision(Action.MOVE, target, exchange, routing_key, pika_properties, body, published)

    def _way(self, record: MessageRecord, origin: Route | None) -> tuple[str, str, bool, str | None] | str:
        """(target, exchange, keeps the original routing key, fixed routing key) for a publish, or why it stays.
        The target is a queue, or an exchange origin's Route.key() (the group its messages are counted in)."""
        queue = self.s.to_queue or (origin.queue if origin is not None else None)
        if queue is not None:
            route = self.routes(queue)
            if not isinstance(route, str) and route[0] and is_celery_task(record.headers):
                route = self.by_queue_name(queue)  # its retries go where it was delivered from
            return route if isinstance(route, str) else (queue, route[0], route[1], None)
        assert origin is not None  # _origin gives none only with --to
        reach = self.exchange_targets(origin)  # dlxtool.ops.exchange_routes
        if reach.stay is not None:
            return reach.stay
        return origin.key(), str(origin.exchange), True, str(origin.routing_key)

    def _origin(self, record: MessageRecord, history: DeathHistory) -> tuple[Explanation, Route | None, Address] | str:
        """The message's origin as the conventions explain it (as `history` does), and the address it had there
        (the routing key a queue origin keeps); or why it stays. The origin is None only with --to."""
        s = self.s
        waited = waited_only(history)
        x_origin, address, resolved = None, None, None
        if waited is not None:
            resolved, address = self.wait_queues(waited.queue or "", waited.routing_keys[0] if waited.routing_keys
                                                 else None)
            x_origin = DeathOrigin(resolved.queue, resolved.why)
        headers = record.headers if isinstance(record.headers, dict) else {}
        if self._triggers is not None and not carries_any(headers, *self._triggers):
            explained = _x_death_only(headers, history, x_origin)
        else:
            explained = explain(Message(headers, record.body, record.queue, x_death_origin=x_origin, x_death=history),
                                s.conventions, origin_from=s.origin_from)
        origin = explained.origin
        self.conflicts += explained.conflict is not None
        if origin is not None and origin.exchange is not None:
            origin = _through_temporary(origin)
        if origin is None:
            if s.to_queue:
                return explained, None, original_address(history, None)
            if resolved is not None and resolved.queue is None and s.origin_from in (None, X_DEATH):
                return f"no origin: {resolved.why}"
            return f"no origin: {explained.origin_why}" if s.origin_from else NO_ORIGIN
        if explained.origin_from == X_DEATH:
            return explained, origin, address or original_address(history, origin.queue)
        if explained.received is not None:
            return explained, origin, Address(*explained.received)
        # Not recorded (NServiceBus, MassTransit): the key a send to the queue has, as their own retry tools send
        return explained, origin, Address("", origin.queue) if origin.queue is not None else \
            Address(str(origin.exchange), origin.routing_key)

    def next_id(self) -> str:
        self._published += 1
        return f"{self._run_id}-{self._published}"

    def _stamp(self) -> datetime:
        """Now, to the second (one datetime per second, not one per message)."""
        second = int(time.time())
        if second != self._stamp_second:
            self._stamp_second = second
            self._stamp_value = datetime.fromtimestamp(second, UTC)
        return self._stamp_value


def _x_death_only(headers: dict[str, Any], history: DeathHistory, x_origin: DeathOrigin | None) -> Explanation:
    """What explain() says of a message no convention but x-death (and the retry-header and body ones, which
    name no origin and reset nothing more) can read: x-death's origin."""
    origin = x_origin or find_origin(headers, history)
    if not origin.queue:
        return Explanation(None, None, None, "no convention names an origin")
    return Explanation(Route(queue=origin.queue), X_DEATH, X_DEATH, origin.why)


def _accelerator() -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]] | None:
    """The C extension's (scan_headers, splice_headers, fingerprint) (dlxtool.broker.wire._hotpath), or None where
    the codec is not `c` (the extension not built, or another codec chosen)."""
    from dlxtool.broker.wire import codec

    return codec.current().header_splice


def replay_headers(record: MessageRecord, *, source: str, history: DeathHistory | None = None,
                   origin: str | None = None, address: Address | None = None, reset_names: tuple[str, ...] = (),
                   keep_history: bool = False, filters: str | None = None, now: datetime | None = None,
                   count: int | None = None, publish_id: str | None = None,
                   src: str | None = None, conventions_reset: Sequence[str] = ()) -> dict[str, Any]:
    """The headers a replayed message is published with (replay, and `load --reset-history`): death
    history and retry counters removed unless keep_history, plus the provenance header.
    `count`: replay_count(record.headers) when the caller has it already; `address`: the original
    exchange, routing key and TTL when the caller has found them (else from the history here); `src`: the
    source delivery's fingerprint (record_fingerprint), last in the provenance as the fast path writes it;
    `conventions_reset`: the failure headers of the conventions that explained it (Explanation.reset),
    removed with the history and reported in the provenance's "reset" like the retry counters."""
    if history is None:
        history = parse_history(record.headers)
        origin = find_origin(record.headers, history).queue
    if address is None:
        address = first_address(provenance(record.headers), original_address(history, origin))
    if keep_history:
        headers, removed = dict(record.headers), dict[str, Any]()
    else:
        headers, removed = reset_history(record.headers, reset_names)
        removed.update(reset_failure_headers(headers, conventions_reset))
    headers.pop(PROVENANCE_HEADER, None)
    # Compact on purpose: it is encoded into every message (and pika's table codec is slow).
    prov: dict[str, Any] = {
        "from": source,
        "at": now or datetime.now(UTC).replace(microsecond=0),
        "id": publish_id or uuid.uuid4().hex,
        "count": (replay_count(record.headers) if count is None else count) + 1,
        "exchange": address.exchange,
        "routing-key": address.routing_key if address.routing_key is not None else record.routing_key,
    }
    if address.expiration is not None:
        prov["expiration"] = address.expiration
    prov["deaths"] = summarize(history.deaths, limit=3)
    retry = sorted(k for k in removed if k not in HISTORY_HEADERS)
    if retry:
        prov["reset"] = ", ".join(f"{k}={short_value(removed[k])}" for k in retry)
    if filters:
        prov["filters"] = filters
    if src:
        prov["src"] = src
    headers[PROVENANCE_HEADER] = prov
    return headers


def short_value(value: Any) -> str:
    """A removed retry counter's value as the provenance's "reset" shows it."""
    if isinstance(value, RawValue):  # an L, a float …: what it means
        value = value.value
    text = value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)
    return text[:40]


def _through_temporary(origin: Route) -> Route:
    """An exchange origin that is one of our temporary exchanges (a framework recorded the exchange a replay
    delivered through: Spring's x-original-exchange) is deleted by now; it was bound only to the queue its
    name ends with (TemporaryExchanges._name), which is the origin. A name cut at 255 bytes may have lost the
    end of the queue's name: left as it is (the exchange does not exist: the message stays, with the reason)."""
    name = str(origin.exchange)
    parts = name.split(".", 4)
    if (len(parts) == 5 and name.startswith(TEMPORARY_PREFIX) and parts[1] in ("replay", "load", "purge", "keep")
            and parts[3].isdigit() and parts[4] and len(name.encode()) < MAX_EXCHANGE_NAME):
        return Route(queue=parts[4])
    return origin


# -- plan (dry run) ---------------------------------------------------------------------------------


@dataclass
class OriginPlan:
    queue: str                     # the queue, or an exchange origin's "exchange → routing key" (Route.key)
    messages: int
    exists: bool | None = None
    route: str = ORIGINAL_KEY
    room: str | None = None        # capacity.Capacity.describe(): "room 0 (max-length 3, drop-head; …)"
    would_stay_full: int = 0       # of `messages`, how many do not fit the origin's room (by count)
    full_reason: str | None = None  # why those stay: "origin full (drop-head would push out its head): q"
    origin_route: Route | None = None  # where it is published: a queue, or an exchange + routing key
    conventions: dict[str, int] = field(default_factory=dict)  # convention that named the origin -> messages
    labels: dict[str, str] = field(default_factory=dict)       # convention -> "Spring headers"
    reaches: list[str] | None = None  # an exchange origin: the queues it reaches (None: unknown)

    @property
    def convention(self) -> str | None:
        """The convention that named the origin of most of its messages."""
        named = {c: n for c, n in self.conventions.items() if c}  # "": no origin (--to)
        return max(named, key=lambda c: named[c]) if named else None

    def route_text(self) -> str:
        """The route with the conventions it comes from: "exchange orders.ex, routing key order.created, from
        Spring headers", "original routing key, from NServiceBus headers (2), x-death (1)"."""
        named = {c: n for c, n in self.conventions.items() if c}
        if not named:
            return self.route
        labels = [self.labels.get(c, c) for c in named]
        if len(named) > 1:
            labels = [f"{self.labels.get(c, c)} ({n})" for c, n in sorted(named.items(), key=lambda i: -i[1])]
        return f"{self.route}, from {', '.join(labels)}"

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "messages": self.messages, "exists": self.exists, "route": self.route,
                "room": self.room, "would_stay_full": self.would_stay_full,
                "origin_route": self.origin_route.to_json() if self.origin_route else None,
                "convention": self.convention or None, "conventions": {c: n for c, n in self.conventions.items() if c},
                "route_text": self.route_text(), "reaches": self.reaches}


@dataclass
class ReplayPlan:
    source: str
    snapshot: int
    looked_at: int
    origins: list[OriginPlan]
    stay: Counter[str]
    default_exchange: bool = False
    used_body_retries: int = 0  # Dramatiq messages to replay whose body says their retries are used up
    origin_conflicts: int = 0   # messages whose conventions named different origins: the most recent failure won

    @property
    def sampled(self) -> bool:
        """The counts are of the first `looked_at` messages, not of all `snapshot` (the queue's depth)."""
        return self.looked_at < self.snapshot

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "snapshot": self.snapshot, "looked_at": self.looked_at,
            "sampled": self.sampled, "queue_depth": self.snapshot,
            "origins": [o.to_json() for o in self.origins],
            "stay": dict(self.stay), "dramatiq_retries_used": self.used_body_retries,
            "origin_conflicts": self.origin_conflicts,
        }

    @property
    def route_note(self) -> str:
        """What the chosen route changes for consumers (shown under the plan)."""
        if self.default_exchange:
            return ("--default-exchange: replayed messages arrive with exchange \"\" and routing key = the queue "
                    "name, not the key they were published with; consumers and retry ladders that route on the key "
                    "see the queue name, and a queue whose dead-letter exchange would not route it keeps its "
                    "messages in the DLQ")
        return ("each message keeps its original routing key and reaches only its origin (a temporary fanout "
                "exchange bound only to it, deleted at the end); Celery tasks go through the default exchange "
                "(routing key = queue name): Celery sends a retry to the exchange a task came from")


def plan_from_survey(source: str, snapshot: int, looked_at: int, plan: Counter[tuple[str, str]]) -> ReplayPlan:
    origins = [OriginPlan(group, n) for (action, group), n in sorted(plan.items()) if action == Action.MOVE.value]
    stay: Counter[str] = Counter()
    for (action, group), n in plan.items():
        if action != Action.MOVE.value:
            stay[group] += n
    return ReplayPlan(source, snapshot, looked_at, origins, stay)


# -- the workflow --------------------------------------------------------------------------------------


@dataclass
class ReplaySession:
    """What a replay talks to. `management`/`target_management`: clients of the source and target brokers'
    management API, or None when it cannot be reached (`management_error` says why)."""

    conn: Any
    target_conn: Any | None = None
    management: Any | None = None
    target_management: Any | None = None
    vhost: str = "/"
    target_vhost: str = "/"
    timeout: float = 30.0
    plan_limit: int = 10_000                       # messages a plan may hold unacked
    management_error: str | None = None
    probe_type: Callable[[str], str] | None = None  # classic/quorum/stream over AMQP when the API is unreachable
    rooms: Rooms | None = None                      # the origins' capacity guard (dlxtool.ops.capacity)


@dataclass
class ReplayRun:
    plan: ReplayPlan | None = None
    result: TransferResult | None = None
    routes: dict[str, str] = field(default_factory=dict)  # target -> how its messages were published
    refused: bool = False  # nothing moved, and everything selected stayed because its route was not safe
    # Deletes the temporary exchanges: the caller calls it once the summary is out (a stop signal during a
    # clean-up before it would cut the summary off).
    clean_up: Callable[[], None] = field(default=lambda: None, repr=False)

    def refusal(self) -> RefusedError | None:
        """Exit 6 when the run moved nothing because no route could be made safe (exit 5 when some moved). A
        run where every message stayed because its origin is full is refused by dlxtool.ops.capacity."""
        if not self.refused or self.result is None:
            return None
        return route_refusal("nothing replayed", self.result.left,
                             f"every message is still in {self.result.source}")


def run(session: ReplaySession, settings: ReplaySettings, *, dry_run: bool = False,
        confirm: Callable[[ReplayPlan], None] | None = None, report: Reporter | None = None,
        start: Callable[[], TransferOptions] | None = None) -> ReplayRun:
    """Replay's workflow: check the DLQ (stream, tail-republish risk); make a plan on `dry_run` or when there
    is a `confirm` (None = --yes: no plan; refused on a quorum queue with a delivery limit, as reading counts
    a delivery attempt) and hand it to `confirm` (shows it, and asks unless dry_run; raises to abort); stop
    there on `dry_run`; else `start()` (the engine's options: sink, progress) and the pass itself. `report`
    gets notes and warnings for the operator (stderr)."""
    from dlxtool.conventions import check_origin_from

    report = report or _Silent()
    check_origin_from(settings.origin_from, settings.conventions)  # before anything is read
    info = _queue_info(session, settings.source, report)
    if info is None and not dry_run:
        _refuse_unread_dlq_limits(session, settings)
    _check_target_management(session, report)
    if session.rooms is None:
        from dlxtool.ops.capacity import rooms

        session.rooms = rooms(session.target_conn or session.conn, session.target_management, session.target_vhost,
                              session.timeout, role="--to queue" if settings.to_queue else "origin",
                              allow_displace=settings.allow_displace)
    out = ReplayRun()
    if dry_run or confirm is not None:
        out.plan = plan_for(session, settings, info, report)
        if confirm is not None:
            confirm(out.plan)
        if dry_run:
            return out
    options = start() if start is not None else TransferOptions()
    routes = _routes(session, settings)
    targets = _exchange_targets(session, settings)
    waits = WaitQueues(_router(session.management, session.vhost), settings.source)
    exchanges = None if settings.default_exchange else \
        TemporaryExchanges(session.target_conn or session.conn, session.timeout)
    try:
        out.result = replay(session.conn, settings, options, target_conn=session.target_conn,
                            timeout=session.timeout, routes=routes, rooms=session.rooms, wait_queues=waits,
                            exchanges=exchanges, exchange_targets=targets)
    except BaseException:
        if exchanges is not None:
            exchanges.delete_all()
        raise
    if exchanges is not None:
        out.clean_up = exchanges.delete_all
    out.routes = {t: targets.describe(t) or routes.describe(t) for t in sorted(out.result.moved)}
    r = out.result
    out.refused = (nothing_routed(r.moved_total, r.left, routes.unsafe | targets.stays())
                   and not r.error and not r.interrupted)
    return out


class _Silent:
    def info(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass


def _queue_info(session: ReplaySession, dlq: str, report: Reporter) -> Any:
    """The DLQ's type and limits from the management API (None when unreachable); refuses a stream and a
    drop-head length limit (keeping messages republishes them to the tail)."""
    from dlxtool.broker import queues
    from dlxtool.errors import ConnectError, ManagementMismatch

    channel = session.conn.channel()
    queues.counts(channel, dlq, session.vhost)  # a missing DLQ is "not found" (4), API or no API
    channel.close()
    if session.management is not None:
        try:
            info = session.management.queue(session.vhost, dlq)
        except ManagementMismatch:
            raise  # another broker's API: exit 3, as when the first proof finds it
        except ConnectError as exc:
            session.management, session.management_error = None, exc.message
    if session.management is None:
        report.warn(f"check not made: {session.management_error or 'no management API'}: type and limits of "
                    f"{dlq!r} unknown")
        return None
    if info.type == "stream":
        raise RefusedError(f"{dlq!r} is a stream: messages cannot be removed from it, so it cannot be replayed",
                           hint="consume it with a stream consumer and publish with `dlxtool load`")
    from dlxtool.ops.purge import check_tail_republish

    check_tail_republish(info.tail_republish_risk)
    return info


def _refuse_unread_dlq_limits(session: ReplaySession, settings: ReplaySettings) -> None:
    """Messages that stay are republished to the DLQ's tail; with its limits unread (no management API) it
    may be a full drop-head queue that would push out its head for each of them. Refused (exit 6) before
    anything is read, unless --allow-displace; an empty DLQ has nothing to keep."""
    from dlxtool.broker import queues
    from dlxtool.ops.purge import check_keep_by_republish

    channel = session.conn.channel()
    try:
        ready = queues.counts(channel, settings.source, session.vhost).ready
    finally:
        channel.close()
    if ready:
        check_keep_by_republish(settings.source, None, session.management_error or "no management API",
                                allow_displace=settings.allow_displace)


def _check_target_management(session: ReplaySession, report: Reporter) -> None:
    """Another broker's management API is asked once here: unreachable, it is not asked per target later."""
    from dlxtool.errors import ConnectError

    if session.target_conn is None:
        session.target_management = session.management
        return
    if session.target_management is None:
        return
    try:
        session.target_management.overview(columns=["rabbitmq_version"])
    except ConnectError as exc:
        session.target_management = None
        report.warn(f"cannot reach the target broker's management API ({exc.message}): the origins' dead-letter "
                    "routes cannot be checked there, so nothing goes there unless --allow-dlx-drop")


def plan_for(session: ReplaySession, settings: ReplaySettings, info: Any, report: Reporter) -> ReplayPlan:
    """The plan, refused where reading (and giving back) counts a delivery attempt against a limit."""
    qtype = info.type if info is not None else (session.probe_type(settings.source) if session.probe_type else None)
    if qtype == "quorum" and (info is None or info.delivery_limit is not None):
        limit = "an unknown delivery-limit (management API not reachable)" if info is None else \
            f"delivery-limit {info.delivery_limit}"
        raise RefusedError(
            f"{settings.source!r} is a quorum queue with {limit}: showing a plan "
            "means reading and returning messages, which counts as a delivery attempt and can dead-letter them",
            hint="pass --yes to replay without a plan (replay itself never returns messages it has read)")
    result = plan(session.conn, settings, max_messages=session.plan_limit, target_conn=session.target_conn,
                  timeout=session.timeout, rooms=session.rooms, exchange_targets=_exchange_targets(session, settings),
                  router=_router(session.target_management, session.target_vhost),
                  wait_router=_router(session.management, session.vhost))
    if qtype == "quorum" and result.looked_at:
        report.info(f"the plan read {result.looked_at} messages and gave them back in place, in order; on a quorum "
               "queue each of them now counts one more delivery attempt (x-delivery-count; no limit is set)")
    return result


def _router(mgmt: Any | None, vhost: str) -> Router | None:
    return Router(mgmt, vhost) if mgmt is not None else None


def _routes(session: ReplaySession, settings: ReplaySettings) -> Routes:
    return Routes(settings.default_exchange, exchanges=None,
                  router=_router(session.target_management, session.target_vhost), allow_drop=settings.allow_dlx_drop)


def _exchange_targets(session: ReplaySession, settings: ReplaySettings) -> ExchangeTargets:
    conn = session.target_conn or session.conn
    return exchange_targets_for(settings, _router(session.target_management, session.target_vhost),
                                lambda exchange: exchange_exists(conn, exchange, session.timeout))


def exchange_targets_for(settings: ReplaySettings, router: Router | None,
                         exists: Callable[[str], bool] | None) -> ExchangeTargets:
    """Exchange origins, with the run's own overrides (the same as for queue origins)."""
    return ExchangeTargets(router, exists, allow_displace=settings.allow_displace, allow_fanout=settings.allow_fanout,
                           allow_dlx_drop=settings.allow_dlx_drop)


# -- running -----------------------------------------------------------------------------------------


def replay(source_conn: Any, settings: ReplaySettings, options: Any, *, target_conn: Any | None = None,
           timeout: float = 30.0, routes: Routes | None = None, wait_queues: WaitQueues | None = None,
           rooms: Rooms | None = None, exchanges: TemporaryExchanges | None = None,
           exchange_targets: ExchangeTargets | None = None) -> Any:
    """Run the replay pass; returns the engine's TransferResult. The original-key route's temporary
    exchanges are declared as targets come up and all deleted at the end. With `rooms`
    (dlxtool.ops.capacity), a message whose origin has no room left stays in the DLQ: "origin full
    (drop-head would push out its head)". `exchanges` given: the caller deletes them."""
    from dlxtool.ops.engine import Transfer

    if rooms is not None:
        rooms.forget()  # the plan's figures are as old as the user's reading of it
        options.admit = rooms.admit
        options.nack_copies = rooms.nack_copies

    routes = routes or Routes(settings.default_exchange, exchanges=None, router=None,
                              allow_drop=settings.allow_dlx_drop)
    owned = exchanges is None
    if owned and not settings.default_exchange:
        exchanges = TemporaryExchanges(target_conn or source_conn, timeout)
    routes.exchanges = exchanges
    decider = ReplayDecider(settings, routes=routes, wait_queues=wait_queues, exchange_targets=exchange_targets)
    if rooms is not None:
        decider.exchange_targets.guard(options, rooms)  # the queues an exchange origin reaches
    options.limit = settings.selection.limit
    try:
        return Transfer(source_conn, settings.source, routes.checked(decider), target_conn=target_conn, options=options,
                        timeout=timeout).run()
    finally:
        if owned and exchanges is not None:
            exchanges.delete_all()


def plan(source_conn: Any, settings: ReplaySettings, *, max_messages: int, target_conn: Any | None = None,
         timeout: float = 30.0, rooms: Rooms | None = None, router: Router | None = None,
         wait_router: Router | None = None, exchange_targets: ExchangeTargets | None = None) -> ReplayPlan:
    """What a replay would do, from the first max_messages messages (given back in order afterwards).
    No temporary exchange is declared; a target that does not exist is shown as such (`exists`). With
    `rooms`, each origin's room and how many of its messages would stay because it is full."""
    from dlxtool.ops.survey import survey

    conn = target_conn or source_conn
    routes = Routes(settings.default_exchange, exchanges=lambda _q: "(temporary exchange)", router=router,
                    allow_drop=settings.allow_dlx_drop)
    targets = exchange_targets or exchange_targets_for(settings, router,
                                                       lambda exchange: exchange_exists(conn, exchange, timeout))
    decider = ReplayDecider(settings, routes=routes, wait_queues=WaitQueues(wait_router, settings.source),
                            exchange_targets=targets)
    decider.count_used_body_retries = True
    result = survey(source_conn, settings.source, routes.checked(decider), max_messages=max_messages,
                    limit=settings.selection.limit, timeout=timeout)
    out = plan_from_survey(settings.source, result.snapshot, result.looked_at, result.plan)
    out.default_exchange = settings.default_exchange
    out.used_body_retries = decider.used_body_retries
    out.origin_conflicts = decider.conflicts
    for origin in out.origins:
        origin.conventions = dict(decider.origins_from.get(origin.queue, {}))
        origin.labels = {c: decider.labels.get(c, c) for c in origin.conventions if c}
        reach = None if settings.to_queue else targets.reaches.get(origin.queue)
        if reach is not None:
            _plan_exchange(origin, reach, rooms)
            continue
        origin.origin_route = Route(queue=origin.queue)
        origin.exists = queue_exists(conn, origin.queue, timeout)
        origin.route = routes.describe(origin.queue)
        if rooms is not None and origin.exists:
            cap = rooms.capacity(origin.queue)
            origin.room = cap.describe()
            if cap.guarded and not rooms.allow_displace and cap.room is not None:
                origin.would_stay_full = max(0, origin.messages - cap.room)
                origin.full_reason = full_reason(rooms.role, cap)
    return out


def _plan_exchange(origin: OriginPlan, reach: Reach, rooms: Rooms | None) -> None:
    """An exchange origin's plan: the queues it reaches, their room; a message goes only where all have room."""
    origin.exists = True  # checked before any message was planned to go there
    origin.origin_route = reach.route
    origin.route = reach.route.describe()
    origin.reaches = list(reach.queues) if reach.queues is not None else None
    if rooms is None or reach.queues is None:
        origin.room = reach.note
        return
    caps = [rooms.capacity(q) for q in reach.queues]
    origin.room = "; ".join(f"{c.queue}: {c.describe()}" for c in caps)
    guarded = [c for c in caps if c.guarded and c.room is not None]
    if guarded and not rooms.allow_displace:
        tightest: Capacity = min(guarded, key=lambda c: c.room or 0)
        origin.would_stay_full = max(0, origin.messages - (tightest.room or 0))
        origin.full_reason = full_reason(rooms.role, tightest)


def queue_exists(conn: Any, queue: str, timeout: float = 30.0) -> bool:
    """Passive declare on a throwaway channel (a missing queue closes the channel it is asked on)."""
    from dlxtool.broker import queues

    return queues.exists(conn, queue, timeout)
