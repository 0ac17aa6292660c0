"""Replay: send dead letters back to the queue each one failed in, history reset, nothing lost.

Built on the one-pass engine (dlxtool.ops.engine): this module only decides, per message, where it
goes and with which headers; the engine does the confirms, acks, ordering and fault handling.

Where: its origin (dlxtool.deaths.find_origin), or `to_queue`. How: the default exchange with routing
key = the queue name, so a fanout exchange cannot copy it to every bound queue. With
`keep_routing_key`, through a temporary fanout exchange bound only to that queue, so consumers see
the original routing key (and a direct/topic dead-letter exchange still routes the next failure).

Headers: the death history and retry counters are removed (RabbitMQ 3.x keeps a client-sent x-death
and would keep counting; the reset is the point), and a compact provenance header is added:

    dlxtool-replay = {from, at, id, count, exchange, routing-key, deaths[, reset][, filters], src}

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
from dlxtool.deaths import (
    DEFAULT_RETRY_HEADERS,
    FAILURE_REASONS,
    HISTORY_HEADERS,
    DeathHistory,
    find_origin,
    parse_history,
    reset_history,
    summarize,
)
from dlxtool.ops.capacity import Rooms, full_reason
from dlxtool.ops.engine import Action, Decision
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
    keep_routing_key: bool = False
    allow_displace: bool = False  # replay into a full drop-head origin anyway (it pushes out its head)


def replay_count(headers: dict[str, Any] | None) -> int:
    """How many times dlxtool has replayed this message before (from its provenance header)."""
    prov = (headers or {}).get(PROVENANCE_HEADER)
    if isinstance(prov, dict):
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


def original_address(history: DeathHistory, origin: str | None) -> tuple[str, str]:
    """(exchange, routing key) the message had when it entered its origin queue."""
    for death in history.deaths:
        if death.queue == origin and death.reason in FAILURE_REASONS:
            return death.exchange or "", death.routing_keys[0] if death.routing_keys else ""
    for death in history.deaths:
        if death.queue == origin:
            return death.exchange or "", death.routing_keys[0] if death.routing_keys else ""
    return history.first.get("exchange", ""), ""


class ReplayDecider:
    """decide(record) for the engine. `route_for(origin)` gives the exchange to publish through
    (default ""; the keep-routing-key mode passes a function that sets up the temporary exchange)."""

    def __init__(self, settings: ReplaySettings, *, route_for: Callable[[str], str | None] | None = None,
                 now: datetime | None = None) -> None:
        self.s = settings
        self.route_for = route_for
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
        from pika import BasicProperties

        self._properties = BasicProperties
        self.lineage = Lineage()
        self.raw = self._raw_decider()

    def _raw_decider(self) -> Callable[[str, bytes, bytes], Decision | None] | None:
        """decide(routing_key, encoded properties, body) on the bytes, for the engine's fast path, when the C
        accelerator is built and nothing here needs the decoded message (filters, routing through a
        temporary exchange). It answers None for any message it leaves to __call__."""
        rewrite = _accelerator()
        s = self.s
        if rewrite is None or self._selects or s.keep_routing_key:
            return None
        from dlxtool.broker.frames import encode_amqp_table

        # surrogatepass: a name from argv bytes that are not UTF-8 ('\udcff') matches no header in Python; its bytes
        # are not UTF-8 either, and a header the C path would remove under such a name sends it to __call__
        reset = tuple(n.encode("utf-8", "surrogatepass")
                      for n in (*DEFAULT_RETRY_HEADERS, *self._reset_names) if n not in HISTORY_HEADERS)
        history = tuple(n.encode() for n in HISTORY_HEADERS)
        head = encode_amqp_table({"from": s.source})[4:]
        tail = encode_amqp_table({"filters": self._filters_text})[4:] if self._filters_text else b""
        max_replays, to_queue, keep_history = s.max_replays, s.to_queue, s.keep_history
        fixed_at = None if self.now is None else calendar.timegm(self.now.utctimetuple())

        lineage = self.lineage

        def decide_raw(routing_key: str, props: bytes, body: bytes) -> Decision | None:
            if type(routing_key) is not str:  # not UTF-8: __call__ knows what to do with it
                return None
            fingerprint = source_fingerprint(props, body)
            out = rewrite(props, routing_key.encode(), history, reset, keep_history, head,
                          fixed_at if fixed_at is not None else int(time.time()), self._next_id().encode(),
                          tail + _SRC_ENTRY + fingerprint.encode())
            if out is None:
                return None
            origin, count, properties = out
            if max_replays is not None:
                why = lineage.decide(fingerprint, raw_provenance_src(props), count, max_replays)
                if why is not None:
                    return Decision.leave(why)
            target = to_queue or origin
            return Decision(Action.MOVE, target, "", target, properties)

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
        origin = find_origin(record.headers, history).queue
        target = s.to_queue or origin
        if not target:
            return Decision.leave(NO_ORIGIN)
        headers = replay_headers(record, source=s.source, history=history, origin=origin,
                                 reset_names=self._reset_names, keep_history=s.keep_history,
                                 filters=self._filters_text or None, now=self.now or self._stamp(), count=count,
                                 publish_id=self._next_id(), src=fingerprint)
        exchange, routing_key = "", target
        if s.keep_routing_key:
            routed = self.route_for(target) if self.route_for else None
            if routed is None:
                return Decision.leave(f"cannot bind a temporary exchange to {target!r} (queue missing?)")
            exchange, routing_key = routed, original_address(history, origin)[1] or record.routing_key
        published = MessageRecord(queue=target, body=record.body, exchange=exchange, routing_key=routing_key,
                                  properties=record.properties, headers=headers)
        # = published.pika_properties(), without copying the headers dict built just above
        properties = self._properties(headers=headers or None, **record.properties)
        return Decision(Action.MOVE, target, exchange, routing_key, properties, record.body, published)

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
    """dlxtool.broker._hotpath.replay_properties, or None where the C extension is not built (or is off)."""
    from dlxtool.broker import hotpath

    module = hotpath.load()
    return module.replay_properties if module else None


def replay_headers(record: MessageRecord, *, source: str, history: DeathHistory | None = None,
                   origin: str | None = None, reset_names: tuple[str, ...] = (), keep_history: bool = False,
                   filters: str | None = None, now: datetime | None = None,
                   count: int | None = None, publish_id: str | None = None,
                   src: str | None = None) -> dict[str, Any]:
    """The headers a replayed message is published with (replay, and `load --reset-history`): death
    history and retry counters removed unless keep_history, plus the provenance header.
    `count`: replay_count(record.headers) when the caller has it already; `src`: the source delivery's
    fingerprint (record_fingerprint), last in the provenance as the fast path writes it."""
    if history is None:
        history = parse_history(record.headers)
        origin = find_origin(record.headers, history).queue
    orig_exchange, orig_key = original_address(history, origin)
    if keep_history:
        headers, removed = dict(record.headers), dict[str, Any]()
    else:
        headers, removed = reset_history(record.headers, reset_names)
    headers.pop(PROVENANCE_HEADER, None)
    # Compact on purpose: it is encoded into every message (and pika's table codec is slow).
    provenance: dict[str, Any] = {
        "from": source,
        "at": now or datetime.now(UTC).replace(microsecond=0),
        "id": publish_id or uuid.uuid4().hex,
        "count": (replay_count(record.headers) if count is None else count) + 1,
        "exchange": orig_exchange,
        "routing-key": orig_key or record.routing_key,
        "deaths": summarize(history.deaths, limit=3),
    }
    retry = sorted(k for k in removed if k not in HISTORY_HEADERS)
    if retry:
        provenance["reset"] = ", ".join(f"{k}={_short(removed[k])}" for k in retry)
    if filters:
        provenance["filters"] = filters
    if src:
        provenance["src"] = src
    headers[PROVENANCE_HEADER] = provenance
    return headers


def _short(value: Any) -> str:
    if isinstance(value, RawValue):  # an L, a float …: what it means
        value = value.value
    text = value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)
    return text[:40]


class TemporaryExchanges:
    """keep-routing-key mode: one fanout exchange per target queue, bound only to it, deleted at the end.

    Fanout ignores the routing key, so the message keeps its original key yet reaches exactly one
    queue. Not auto-delete: deleting the queue mid-run must make publishes unroutable (returned),
    not make the exchange vanish (which would close the channel)."""

    def __init__(self, connection: Any, timeout: float = 30.0) -> None:
        self.connection = connection
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
        prefix = f"dlxtool.replay.{self._tag}.{len(self.declared)}."
        room = 255 - len(prefix.encode())
        return prefix + queue.encode()[:room].decode("utf-8", "ignore")

    def delete_all(self) -> None:
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
    warning: str | None = None
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

    @property
    def sampled(self) -> bool:
        """The counts are of the first `looked_at` messages, not of all `snapshot` (the queue's depth)."""
        return self.looked_at < self.snapshot

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "snapshot": self.snapshot, "looked_at": self.looked_at,
            "sampled": self.sampled, "queue_depth": self.snapshot,
            "origins": [{"queue": o.queue, "messages": o.messages, "exists": o.exists, "warning": o.warning,
                         "room": o.room, "would_stay_full": o.would_stay_full} for o in self.origins],
            "stay": dict(self.stay),
        }


def plan_from_survey(source: str, snapshot: int, looked_at: int, plan: Counter[tuple[str, str]]) -> ReplayPlan:
    origins = [OriginPlan(group, n) for (action, group), n in sorted(plan.items()) if action == Action.MOVE.value]
    stay: Counter[str] = Counter()
    for (action, group), n in plan.items():
        if action != Action.MOVE.value:
            stay[group] += n
    return ReplayPlan(source, snapshot, looked_at, origins, stay)


def dlx_warning(mgmt: Any, vhost: str, queue: str) -> str | None:
    """Warn when the queue's dead-letter exchange would not route a message whose routing key is now
    the queue name (DESIGN: the next dead-lettering of a replayed message could be silently dropped)."""
    from dlxtool.errors import DlxtoolError

    try:
        info = mgmt.queue(vhost, queue)
        dlx = info.dead_letter_exchange
        if dlx is None or info.dead_letter_routing_key:
            return None  # no DLX, or its routing key is fixed: the new key does not matter
        if dlx == "":
            return None if _queue_exists(mgmt, vhost, queue) else f"dead-letter exchange \"\" has no queue {queue!r}"
        from urllib.parse import quote

        ex = mgmt.get(f"exchanges/{quote(vhost, safe='')}/{quote(dlx, safe='')}")
        kind = ex.get("type")
        if kind == "fanout":
            return None
        bindings = mgmt.get(f"exchanges/{quote(vhost, safe='')}/{quote(dlx, safe='')}/bindings/source")
        keys = [b.get("routing_key", "") for b in bindings]
        if kind == "direct" and queue not in keys:
            return (f"its dead-letter exchange {dlx!r} (direct) has no binding for routing key {queue!r}: the "
                    "next dead-lettering of a replayed message would be dropped — consider --keep-routing-key")
        if kind == "topic" and not any(topic_matches(k, queue) for k in keys):
            return (f"its dead-letter exchange {dlx!r} (topic) does not route routing key {queue!r}: the next "
                    "dead-lettering of a replayed message would be dropped — consider --keep-routing-key")
        if kind not in ("direct", "topic"):
            return None
        return None
    except DlxtoolError:
        return None


def _queue_exists(mgmt: Any, vhost: str, queue: str) -> bool:
    from dlxtool.errors import NotFoundError

    try:
        mgmt.queue(vhost, queue)
        return True
    except NotFoundError:
        return False


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


# -- running -----------------------------------------------------------------------------------------


def replay(source_conn: Any, settings: ReplaySettings, options: Any, *, target_conn: Any | None = None,
           timeout: float = 30.0, rooms: Rooms | None = None) -> Any:
    """Run the replay pass; returns the engine's TransferResult. With `rooms` (dlxtool.ops.capacity), a
    message whose origin has no room left stays in the DLQ: "origin full (drop-head would push out its head)"."""
    from dlxtool.ops.engine import Transfer

    if rooms is not None:
        rooms.forget()  # the plan's figures are as old as the user's reading of it
        options.admit = rooms.admit

    exchanges = TemporaryExchanges(target_conn or source_conn, timeout) if settings.keep_routing_key else None
    decider = ReplayDecider(settings, route_for=exchanges)
    options.limit = settings.selection.limit
    try:
        return Transfer(source_conn, settings.source, decider, target_conn=target_conn, options=options,
                        timeout=timeout).run()
    finally:
        if exchanges is not None:
            exchanges.delete_all()


def plan(source_conn: Any, settings: ReplaySettings, *, max_messages: int, target_conn: Any | None = None,
         timeout: float = 30.0, rooms: Rooms | None = None) -> ReplayPlan:
    """What a replay would do, from the first max_messages messages (given back in order afterwards);
    with `rooms`, each origin's room and how many of its messages would stay because it is full."""
    from dlxtool.ops.survey import survey

    decider = ReplayDecider(settings, route_for=lambda _queue: "(temporary exchange)")
    result = survey(source_conn, settings.source, decider, max_messages=max_messages,
                    limit=settings.selection.limit, timeout=timeout)
    out = plan_from_survey(settings.source, result.snapshot, result.looked_at, result.plan)
    for origin in out.origins:
        origin.exists = queue_exists(target_conn or source_conn, origin.queue, timeout)
        if rooms is not None and origin.exists:
            cap = rooms.capacity(origin.queue)
            origin.room = cap.describe()
            if cap.guarded and not rooms.allow_displace and cap.room is not None:
                origin.would_stay_full = max(0, origin.messages - cap.room)
                origin.full_reason = full_reason(rooms.role, cap)
    return out


def queue_exists(conn: Any, queue: str, timeout: float = 30.0) -> bool:
    """Passive declare on a throwaway channel (a missing queue closes the channel it is asked on)."""
    from dlxtool.broker.channel import AsyncChannel, ChannelClosed

    channel = AsyncChannel(conn, timeout)
    try:
        channel.call("queue_declare", queue, passive=True)
        return True
    except ChannelClosed:
        return False
    finally:
        channel.close()
