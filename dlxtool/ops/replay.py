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
  * `route="default-exchange"` (opt-in): the default exchange, routing key = the queue name.
  Either way the key the message arrives with is checked against the target's dead-letter exchange
  (dlxtool.ops.routes.Routes): where its next dead-lettering would be dropped, it stays in the DLQ with
  the reason (unless `allow_dlx_drop`).

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
from dlxtool.errors import RefusedError
from dlxtool.ops.capacity import Rooms, full_reason
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
from dlxtool.ops.routes import (  # the routes of replay, load and purge --move-to
    DEFAULT_EXCHANGE,  # noqa: F401 - re-exported: replay's name for it
    ORIGINAL_KEY,
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
        from pika import BasicProperties

        self._properties = BasicProperties
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
        # = published.pika_properties(), without copying the headers dict built just above
        pika_properties = self._properties(headers=headers or None, **properties)
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
    """dlxtool.broker._hotpath.replay_properties, or None where the C extension is not built (or is off)."""
    from dlxtool.broker import hotpath

    module = hotpath.load()
    return module.replay_properties if module else None


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
    r = out.result
    out.refused = nothing_routed(r.moved_total, r.left, routes.unsafe) and not r.error and not r.interrupted
    return out


class _Silent:
    def info(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass


def _queue_info(session: ReplaySession, dlq: str, report: Reporter) -> Any:
    """The DLQ's type and limits from the management API (None when unreachable); refuses a stream and a
    drop-head length limit (keeping messages republishes them to the tail)."""
    from dlxtool.errors import ConnectError
    from dlxtool.ops.purge import passive_declare

    channel = session.conn.channel()
    passive_declare(channel, dlq, session.vhost)  # a missing DLQ is "not found" (4), API or no API
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
    from dlxtool.ops.purge import check_keep_by_republish, passive_declare

    channel = session.conn.channel()
    try:
        ready = int(passive_declare(channel, settings.source, session.vhost).message_count)
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
                  router=_router(session.target_management, session.target_vhost), allow_drop=settings.allow_dlx_drop)


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

    routes = routes or Routes(settings.default_exchange, exchanges=None, router=None,
                              allow_drop=settings.allow_dlx_drop)
    owned = exchanges is None
    if owned and not settings.default_exchange:
        exchanges = TemporaryExchanges(target_conn or source_conn, timeout)
    routes.exchanges = exchanges
    decider = ReplayDecider(settings, routes=routes, wait_queues=wait_queues)
    options.limit = settings.selection.limit
    try:
        return Transfer(source_conn, settings.source, routes.checked(decider), target_conn=target_conn, options=options,
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
    routes = Routes(settings.default_exchange, exchanges=lambda _q: "(temporary exchange)", router=router,
                    allow_drop=settings.allow_dlx_drop)
    decider = ReplayDecider(settings, routes=routes, wait_queues=WaitQueues(wait_router, settings.source))
    decider.count_used_body_retries = True
    result = survey(source_conn, settings.source, routes.checked(decider), max_messages=max_messages,
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
    from dlxtool.broker.channel import AsyncChannel, ChannelClosed

    channel = AsyncChannel(conn, timeout)
    try:
        channel.call("queue_declare", queue, passive=True)
        return True
    except ChannelClosed:
        return False
    finally:
        channel.close()
