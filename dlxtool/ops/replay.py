"""Replay: send dead letters back to the queue each one failed in, history reset, nothing lost.

Built on the one-pass engine (dlxtool.ops.engine): this module decides, per message, where it goes,
through which exchange and with which headers, and holds replay's workflow and refusals (`run`): the
stream and tail-republish refusals, the plan (refused on a quorum queue with a delivery limit), the
confirmation, the run. The CLI parses, calls and renders.

Where: its origin (dlxtool.deaths.find_origin; a message that only waited out TTLs is followed through
its wait queue's dead-letter route, dlxtool.ops.routes), or `to_queue`.

How (the route, per target queue):
  * default: the ORIGINAL routing key (from an earlier provenance header, else the origin's x-death
    entry), through a temporary fanout exchange bound only to that queue. Fanout ignores the key, so it
    reaches exactly that queue, and consumers that dispatch on the key, a dead-letter exchange that
    routes on it and an application's own retry ladder see what they saw the first time.
  * `route="default-exchange"` (opt-in): the default exchange, routing key = the queue name. Targets
    whose dead-letter exchange would not route that key (the next dead-lettering would drop the
    message) keep their messages in the DLQ, with the reason.

Headers: the death history and retry counters are removed (RabbitMQ 3.x keeps a client-sent x-death
and would keep counting; the reset is the point), and a compact provenance header is added:

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

import calendar
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dlxtool.amqp_values import RawValue
from dlxtool.conventions import reset_body_retries, used_body_retries
from dlxtool.deaths import (
    CELERY_MARKER,
    DEFAULT_RETRY_HEADERS,
    FAILURE_REASONS,
    HISTORY_HEADERS,
    DeathHistory,
    find_origin,
    is_celery_task,
    parse_history,
    reset_history,
    summarize,
    waited_only,
)
from dlxtool.errors import DlxtoolError, RefusedError
from dlxtool.ops.capacity import Rooms, full_reason, is_full_reason
from dlxtool.ops.engine import Action, Decision, TransferOptions, TransferResult
from dlxtool.ops.provenance import (  # re-exported: replay's names for them
    _SRC_ENTRY,
    PROVENANCE_HEADER,
    Origin,
    Pairs,
    provenance_src,
    raw_provenance_src,
    record_fingerprint,
    source_fingerprint,
)
from dlxtool.ops.routes import Resolved, Router
from dlxtool.ops.session import Reporter
from dlxtool.record import MessageRecord
from dlxtool.selection import Selection

NO_ORIGIN = "no origin in the death history"
ORIGINAL_KEY = "original routing key"       # through a temporary exchange bound only to the target
DEFAULT_EXCHANGE = "default exchange (routing key = queue name)"


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
    reset_body_retries: bool = False  # opt-in body rewrite: Dramatiq's options.retries back to 0


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
        except (TypeError, ValueError):
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
    for reasons in (FAILURE_REASONS, None):
        for death in history.deaths:
            if death.queue == origin and (reasons is None or death.reason in reasons):
                return Address(death.exchange or "", death.routing_keys[0] if death.routing_keys else None,
                               death.original_expiration)
    return Address(history.first.get("exchange", ""), None)


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


class Routes:
    """Per target queue, once: the exchange to publish through and whether the message keeps its original
    routing key, or why its messages stay in the DLQ.

    `exchanges(queue)` gives a temporary exchange bound only to `queue` (None: cannot bind); `router`
    (the target broker's management API, None when unreachable) checks the default-exchange route.
    Also load's routes (dlxtool.ops.load)."""

    def __init__(self, default_exchange: bool, *, exchanges: Callable[[str], str | None] | None,
                 router: Router | None) -> None:
        self.default_exchange = default_exchange
        self.exchanges = exchanges
        self.router = router
        self.routes: dict[str, tuple[str, bool] | str] = {}
        self._by_name: dict[str, tuple[str, bool] | str] = {}

    def __call__(self, target: str) -> tuple[str, bool] | str:
        route = self.routes.get(target)
        if route is None:
            route = self.routes[target] = self._decide(target)
        return route

    def describe(self, target: str) -> str:
        """The route in words (the plan, the summary), or why the target's messages stay."""
        route = self.routes.get(target)
        if isinstance(route, str):
            return route
        return DEFAULT_EXCHANGE if self.default_exchange else ORIGINAL_KEY

    def by_queue_name(self, target: str) -> tuple[str, bool] | str:
        """The default-exchange route (routing key = queue name), checked like --default-exchange, for
        messages whose consumer republishes to the exchange it received them from: Celery's Task.retry
        sends the retry to the delivery's exchange and key (celery/app/task.py, signature_from_request),
        which after a replay through a temporary exchange is deleted once the run ends, and the retry is
        lost. A delivery from the default exchange Celery retries by queue name instead."""
        route = self._by_name.get(target)
        if route is None:
            route = self._by_name[target] = self._default_exchange_route(target)
        return route

    def _decide(self, target: str) -> tuple[str, bool] | str:
        if not self.default_exchange:
            name = self.exchanges(target) if self.exchanges else None
            if name is None:
                return f"{target}: queue missing (no temporary exchange can be bound to it)"
            return name, True
        return self._default_exchange_route(target)

    def _default_exchange_route(self, target: str) -> tuple[str, bool] | str:
        if self.router is None:
            return (f"{target}: the default-exchange route needs the management API to check its dead-letter "
                    "exchange, and it is not reachable")
        try:
            drop = self.router.dead_letter_drop(target, target)
        except DlxtoolError as exc:
            return f"{target}: cannot check its dead-letter exchange ({exc.message})"
        if drop:
            return f"{target}: with the default exchange (routing key {target!r}), {drop}"
        return "", False


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
    `wait_queues` follows TTL-only histories (WaitQueues); without one, they stay with the reason."""

    def __init__(self, settings: ReplaySettings, *, routes: Callable[[str], tuple[str, bool] | str] | None = None,
                 wait_queues: WaitQueues | None = None, now: datetime | None = None) -> None:
        self.s = settings
        self.routes = routes or (lambda _target: ("", False))
        # Celery tasks: see Routes.by_queue_name
        self.by_queue_name = routes.by_queue_name if isinstance(routes, Routes) else self.routes
        self.wait_queues = wait_queues or WaitQueues(None, settings.source)
        self.now = now
        self._filters = settings.selection.describe()
        self._filters_text = "; ".join(f"{k}={v}" for k, v in self._filters.items())
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
        self.raw = self._raw_decider()
        # The plan counts Dramatiq messages replayed with their retries used up (a JSON parse per such body,
        # so only there): replayed as they are, Dramatiq gives them no retry.
        self.count_used_body_retries = False
        self.used_body_retries = 0

    def _raw_decider(self) -> Callable[[str, bytes, bytes], Decision | None] | None:
        """decide(routing_key, encoded properties, body) on the bytes, for the engine's fast path, when the C
        accelerator is built and nothing here needs the decoded message (filters). It answers None for any
        message it leaves to __call__ (the C answers None for what it does not handle: an earlier
        provenance header with a TTL, a TTL to restore, an origin not named by a failure …)."""
        rewrite = _accelerator()
        s = self.s
        if rewrite is None or self._selects:
            return None
        from dlxtool.broker.wire.frames import encode_amqp_table

        # surrogatepass: a name from argv bytes that are not UTF-8 ('\udcff') matches no header in Python; its bytes
        # are not UTF-8 either, and a header the C path would remove under such a name sends it to __call__
        reset = tuple(n.encode("utf-8", "surrogatepass")
                      for n in (*DEFAULT_RETRY_HEADERS, *self._reset_names) if n not in HISTORY_HEADERS)
        history = tuple(n.encode() for n in HISTORY_HEADERS)
        head = encode_amqp_table({"from": s.source})[4:]
        tail = encode_amqp_table({"filters": self._filters_text})[4:] if self._filters_text else b""
        max_replays, to_queue, keep_history = s.max_replays, s.to_queue, s.keep_history
        fixed_at = None if self.now is None else calendar.timegm(self.now.utctimetuple())
        routes = self.routes
        celery = CELERY_MARKER
        lineage = self.lineage
        # The C path never touches a body: a message whose body may be rewritten goes to __call__.
        body_reset = s.reset_body_retries

        def decide_raw(routing_key: str, props: bytes, body: bytes) -> Decision | None:
            if type(routing_key) is not str:  # not UTF-8: __call__ knows what to do with it
                return None
            if celery in props:  # maybe a Celery task: its `retries` is reset and its route chosen in Python
                return None
            if body_reset and body[:1] == b"{" and b'"actor_name"' in body:  # maybe Dramatiq: see __call__
                return None
            fingerprint = source_fingerprint(props, body)
            out = rewrite(props, routing_key.encode(), history, reset, keep_history, head,
                          fixed_at if fixed_at is not None else int(time.time()), self._next_id().encode(),
                          tail + _SRC_ENTRY + fingerprint.encode())
            if out is None:
                return None
            origin, count, properties, original_key = out
            if max_replays is not None:
                why = lineage.decide(fingerprint, raw_provenance_src(props), count, max_replays)
                if why is not None:
                    return Decision.leave(why)
            target = to_queue or origin
            route = routes(target)
            if isinstance(route, str):
                return Decision.leave(route)
            exchange, keeps_key = route
            return Decision(Action.MOVE, target, exchange, original_key if keeps_key else target, properties)

        return decide_raw

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
        history = parse_history(record.headers)
        waited = waited_only(history)
        if waited is not None:
            resolved, address = self.wait_queues(waited.queue or "", waited.routing_keys[0] if waited.routing_keys
                                                 else None)
            origin = resolved.queue
            if origin is None and not s.to_queue:
                return Decision.leave(f"no origin: {resolved.why}")
            if address is None:
                address = original_address(history, origin)
        else:
            origin = find_origin(record.headers, history).queue
            address = original_address(history, origin)
        target = s.to_queue or origin
        if not target:
            return Decision.leave(NO_ORIGIN)
        route = self.routes(target)
        if not isinstance(route, str) and route[0] and is_celery_task(record.headers):
            route = self.by_queue_name(target)  # its retries go where it was delivered from
        if isinstance(route, str):
            return Decision.leave(route)
        address = first_address(provenance(record.headers), address)
        headers = replay_headers(record, source=s.source, history=history, origin=origin, address=address,
                                 reset_names=self._reset_names, keep_history=s.keep_history,
                                 filters=self._filters_text or None, now=self.now or self._stamp(), count=count,
                                 publish_id=self._next_id(), src=fingerprint)
        exchange, keeps_key = route
        routing_key = (address.routing_key if address.routing_key is not None else record.routing_key) \
            if keeps_key else target
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

    def _next_id(self) -> str:
        self._published += 1
        return f"{self._run_id}-{self._published}"

    def _stamp(self) -> datetime:
        """Now, to the second (one datetime per second, not one per message)."""
        second = int(time.time())
        if second != self._stamp_second:
            self._stamp_second = second
            self._stamp_value = datetime.fromtimestamp(second, UTC)
        return self._stamp_value


def _accelerator() -> Callable[..., Any] | None:
    """The C header rewrite (dlxtool.broker.wire._hotpath.replay_properties), or None where the codec is not
    `c` (the extension not built, or another codec chosen)."""
    from dlxtool.broker.wire import codec

    return codec.current().replay_rewrite


def replay_headers(record: MessageRecord, *, source: str, history: DeathHistory | None = None,
                   origin: str | None = None, address: Address | None = None, reset_names: tuple[str, ...] = (),
                   keep_history: bool = False, filters: str | None = None, now: datetime | None = None,
                   count: int | None = None, publish_id: str | None = None,
                   src: str | None = None) -> dict[str, Any]:
    """The headers a replayed message is published with (replay, and `load --reset-history`): death
    history and retry counters removed unless keep_history, plus the provenance header.
    `count`: replay_count(record.headers) when the caller has it already; `address`: the original
    exchange, routing key and TTL when the caller has found them (else from the history here); `src`: the
    source delivery's fingerprint (record_fingerprint), last in the provenance as the fast path writes it."""
    if history is None:
        history = parse_history(record.headers)
        origin = find_origin(record.headers, history).queue
    if address is None:
        address = first_address(provenance(record.headers), original_address(history, origin))
    if keep_history:
        headers, removed = dict(record.headers), dict[str, Any]()
    else:
        headers, removed = reset_history(record.headers, reset_names)
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
        prov["reset"] = ", ".join(f"{k}={_short(removed[k])}" for k in retry)
    if filters:
        prov["filters"] = filters
    if src:
        prov["src"] = src
    headers[PROVENANCE_HEADER] = prov
    return headers


def _short(value: Any) -> str:
    if isinstance(value, RawValue):  # an L, a float …: what it means
        value = value.value
    text = value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)
    return text[:40]


class TemporaryExchanges:
    """The original-key route: one fanout exchange per target queue, bound only to it, deleted at the end.

    Fanout ignores the routing key, so the message keeps its original key yet reaches exactly one
    queue. Not auto-delete: deleting the queue mid-run must make publishes unroutable (returned),
    not make the exchange vanish (which would close the channel)."""

    def __init__(self, connection: Any, timeout: float = 30.0, purpose: str = "replay") -> None:
        self.connection = connection
        self.purpose = purpose  # in the names: dlxtool.replay.…, dlxtool.load.…, dlxtool.purge.…
        self.timeout = timeout
        self.by_queue: dict[str, str | None] = {}  # routing: None = no exchange bound to that queue
        self.declared: list[str] = []              # every exchange that may exist: all deleted at the end
        self._tag = uuid.uuid4().hex[:8]
        self._channel: Any = None

    def _ch(self) -> Any:
        from dlxtool.broker.channel import AsyncChannel

        if self._channel is None or not self._channel.is_open:
            self._channel = AsyncChannel(self.connection, self.timeout)
        return self._channel

    def __call__(self, queue: str) -> str | None:
        if queue not in self.by_queue:
            name = self._name(queue)
            # Listed before the declare: a declare-ok lost with the channel may still have created it
            # (deleting an exchange that does not exist is a no-op).
            self.declared.append(name)
            try:
                self._ch().call("exchange_declare", name, exchange_type="fanout", durable=False, auto_delete=False)
                self._ch().call("queue_bind", queue, name, routing_key="")
            except Exception:  # noqa: BLE001 - the queue is missing: its messages stay in the DLQ
                # A failed bind (404) closed the channel; _ch() opens a new one for the next queue.
                self.by_queue[queue] = None
            else:
                self.by_queue[queue] = name
        return self.by_queue[queue]

    def _name(self, queue: str) -> str:
        """Unique per queue (a counter), readable where it fits: a shared, truncated name would bind two
        long-named queues to one fanout exchange and copy every message to both."""
        prefix = f"dlxtool.{self.purpose}.{self._tag}.{len(self.declared)}."
        room = 255 - len(prefix.encode())
        return prefix + queue.encode()[:room].decode("utf-8", "ignore")

    def delete_on(self, publisher: Any) -> None:
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


# -- plan (dry run) ---------------------------------------------------------------------------------


@dataclass
class OriginPlan:
    queue: str
    messages: int
    exists: bool | None = None
    route: str = ORIGINAL_KEY
    room: str | None = None        # capacity.Capacity.describe(): "room 0 (max-length 3, drop-head; …)"
    would_stay_full: int = 0       # of `messages`, how many do not fit the origin's room (by count)
    full_reason: str | None = None  # why those stay: "origin full (drop-head would push out its head): q"


@dataclass
class ReplayPlan:
    source: str
    snapshot: int
    looked_at: int
    origins: list[OriginPlan]
    stay: Counter[str]
    default_exchange: bool = False
    used_body_retries: int = 0  # Dramatiq messages to replay whose body says their retries are used up

    @property
    def sampled(self) -> bool:
        """The counts are of the first `looked_at` messages, not of all `snapshot` (the queue's depth)."""
        return self.looked_at < self.snapshot

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "snapshot": self.snapshot, "looked_at": self.looked_at,
            "sampled": self.sampled, "queue_depth": self.snapshot,
            "origins": [{"queue": o.queue, "messages": o.messages, "exists": o.exists, "route": o.route,
                         "room": o.room, "would_stay_full": o.would_stay_full} for o in self.origins],
            "stay": dict(self.stay), "dramatiq_retries_used": self.used_body_retries,
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
        return RefusedError("nothing replayed, no route is safe: " + ", ".join(
            f"{why} ({n})" for why, n in sorted(self.result.left.items())) + f"; every message is still in "
            f"{self.result.source}", hint="fix the cause named above (create the queue, or drop --default-exchange "
                                         "to keep the original routing key; --allow-displace for a full origin)")


def run(session: ReplaySession, settings: ReplaySettings, *, dry_run: bool = False,
        confirm: Callable[[ReplayPlan], None] | None = None, report: Reporter | None = None,
        start: Callable[[], TransferOptions] | None = None) -> ReplayRun:
    """Replay's workflow: check the DLQ (stream, tail-republish risk); make a plan on `dry_run` or when there
    is a `confirm` (None = --yes: no plan; refused on a quorum queue with a delivery limit, as reading counts
    a delivery attempt) and hand it to `confirm` (shows it, and asks unless dry_run; raises to abort); stop
    there on `dry_run`; else `start()` (the engine's options: sink, progress) and the pass itself. `report`
    gets notes and warnings for the operator (stderr)."""
    report = report or _Silent()
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
    waits = WaitQueues(_router(session.management, session.vhost), settings.source)
    exchanges = None if settings.default_exchange else \
        TemporaryExchanges(session.target_conn or session.conn, session.timeout)
    try:
        out.result = replay(session.conn, settings, options, target_conn=session.target_conn,
                            timeout=session.timeout, routes=routes, rooms=session.rooms, wait_queues=waits,
                            exchanges=exchanges)
    except BaseException:
        if exchanges is not None:
            exchanges.delete_all()
        raise
    if exchanges is not None:
        out.clean_up = exchanges.delete_all
    out.routes = {t: routes.describe(t) for t in sorted(out.result.moved)}
    unsafe = {r for r in routes.routes.values() if isinstance(r, str)}
    r = out.result
    route_or_full = all(why in unsafe or is_full_reason(why) for why in r.left)
    out.refused = bool(not r.moved_total and r.left and not r.error and not r.interrupted and route_or_full
                       and set(r.left) & unsafe)
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
    from dlxtool.errors import ConnectError

    channel = session.conn.channel()
    queues.counts(channel, dlq, session.vhost)  # a missing DLQ is "not found" (4), API or no API
    channel.close()
    if session.management is not None:
        try:
            info = session.management.queue(session.vhost, dlq)
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
        report.warn(f"cannot reach the target broker's management API ({exc.message}): routes are not checked there")


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
                  timeout=session.timeout, rooms=session.rooms,
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
                  router=_router(session.target_management, session.target_vhost))


# -- running -----------------------------------------------------------------------------------------


def replay(source_conn: Any, settings: ReplaySettings, options: Any, *, target_conn: Any | None = None,
           timeout: float = 30.0, routes: Routes | None = None, wait_queues: WaitQueues | None = None,
           rooms: Rooms | None = None, exchanges: TemporaryExchanges | None = None) -> Any:
    """Run the replay pass; returns the engine's TransferResult. The original-key route's temporary
    exchanges are declared as targets come up and all deleted at the end. With `rooms`
    (dlxtool.ops.capacity), a message whose origin has no room left stays in the DLQ: "origin full
    (drop-head would push out its head)". `exchanges` given: the caller deletes them."""
    from dlxtool.ops.engine import Transfer

    if rooms is not None:
        rooms.forget()  # the plan's figures are as old as the user's reading of it
        options.admit = rooms.admit

    routes = routes or Routes(settings.default_exchange, exchanges=None, router=None)
    owned = exchanges is None
    if owned and not settings.default_exchange:
        exchanges = TemporaryExchanges(target_conn or source_conn, timeout)
    routes.exchanges = exchanges
    decider = ReplayDecider(settings, routes=routes, wait_queues=wait_queues)
    options.limit = settings.selection.limit
    try:
        return Transfer(source_conn, settings.source, decider, target_conn=target_conn, options=options,
                        timeout=timeout).run()
    finally:
        if owned and exchanges is not None:
            exchanges.delete_all()


def plan(source_conn: Any, settings: ReplaySettings, *, max_messages: int, target_conn: Any | None = None,
         timeout: float = 30.0, rooms: Rooms | None = None, router: Router | None = None,
         wait_router: Router | None = None) -> ReplayPlan:
    """What a replay would do, from the first max_messages messages (given back in order afterwards).
    No temporary exchange is declared; a target that does not exist is shown as such (`exists`). With
    `rooms`, each origin's room and how many of its messages would stay because it is full."""
    from dlxtool.ops.survey import survey

    conn = target_conn or source_conn
    routes = Routes(settings.default_exchange, exchanges=lambda _q: "(temporary exchange)", router=router)
    decider = ReplayDecider(settings, routes=routes, wait_queues=WaitQueues(wait_router, settings.source))
    decider.count_used_body_retries = True
    result = survey(source_conn, settings.source, decider, max_messages=max_messages,
                    limit=settings.selection.limit, timeout=timeout)
    out = plan_from_survey(settings.source, result.snapshot, result.looked_at, result.plan)
    out.default_exchange = settings.default_exchange
    out.used_body_retries = decider.used_body_retries
    for origin in out.origins:
        origin.exists = queue_exists(conn, origin.queue, timeout)
        origin.route = routes.describe(origin.queue)
        if rooms is not None and origin.exists:
            cap = rooms.capacity(origin.queue)
            origin.room = cap.describe()
            if cap.guarded and not rooms.allow_displace and cap.room is not None:
                origin.would_stay_full = max(0, origin.messages - cap.room)
                origin.full_reason = full_reason(rooms.role, cap)
    return out


def queue_exists(conn: Any, queue: str, timeout: float = 30.0) -> bool:
    """Passive declare on a throwaway channel (a missing queue closes the channel it is asked on)."""
    from dlxtool.broker import queues

    return queues.exists(conn, queue, timeout)
