"""Load: publish message records (dump, purge --backup, replay --save files) back to a broker.

Each record goes to its own queue (the record's `queue`) or to `to_queue`, mandatory and with publisher
confirms, through the engine's pipelined publisher (publish_records, below). As replay does
(dlxtool.ops.replay.Routes), it keeps the record's routing key — the one its queue's consumers saw, or with
`reset_history` the original one the provenance header records — through a temporary fanout exchange
bound only to the target queue; `default_exchange` publishes with routing key = the queue name instead,
and a target whose dead-letter exchange would not route that key gets none of its records (failed, with
the reason: the next dead-lettering would drop them). A record is counted
as loaded only on a clean confirm; returned (no such queue), nacked (queue full) and lost (the
connection died before the answer — maybe published) records are reported and can be written to a
"failed" file to load again.

The file is read twice: once to check every record (a bad line stops the load before anything is
published, naming FILE:LINE) and count them per queue, once to publish. A record cut short (a
backup interrupted mid-write: a last line without a newline, or a torn record merged with the next one
on a line by an older dlxtool's append) is reported with its FILE:LINE and skipped: its message was
never acked away. The result counts them (`skipped_torn`) so the CLI can fail unless told they are fine.

What a record cannot carry back: the original exchange (the delivery shows the temporary exchange, or
"" with `default_exchange`), `redelivered`, and the queue position (records are published in file order).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import IO, TYPE_CHECKING, Any, TypeVar

from dlxtool.amqp10_view import LOSS_KINDS, loss_kinds
from dlxtool.amqp_values import rabbitmq_refuses
from dlxtool.broker.channel import IDLE_WAIT
from dlxtool.broker.connection import blocked
from dlxtool.broker.publisher import PublishAnswer, Publisher
from dlxtool.broker.queues import did_you_mean, names_in
from dlxtool.broker.wire.frames import EncodeError, basic_properties, encode_for_publish
from dlxtool.budget import PrefetchWindow
from dlxtool.deaths import HISTORY_HEADERS
from dlxtool.errors import UnavailableError, UsageError
from dlxtool.json_shapes import is_object
from dlxtool.message_ids import MessageIds
from dlxtool.ops import capacity
from dlxtool.ops.alarms import check_alarms
from dlxtool.ops.conversion_check import EXAMPLES, ConversionCheck
from dlxtool.ops.engine import describe_error
from dlxtool.ops.interrupts import sigint_as_stop, signals_as_stop
from dlxtool.ops.outcomes import counted, refusal
from dlxtool.ops.record_files import Sink, iter_records
from dlxtool.ops.routes import Routes, TemporaryExchanges, usable_router
from dlxtool.ops.stay import Stay, Why, answers
from dlxtool.ops.transfer_result import Progress
from dlxtool.outcome import OK, Outcome, Status
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.management import ManagementClient
    from dlxtool.broker.pika_types import BasicProperties
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.ops.capacity import Capacity, Rooms
    from dlxtool.ops.routes import Routes
    from dlxtool.ops.session import Reporter, Session
    from dlxtool.ops.transfer_result import TransferResult

Opener = Callable[[], IO[bytes]]
Token = TypeVar("Token")  # what publish_records hands back with each outcome: the caller's own (load's: target, record)


@dataclass
class LoadSettings:
    name: str                           # the file's name, for messages and the provenance header
    to_queue: str | None = None
    reset_history: bool = False         # replay's count reset (dlxtool.ops.replay.replay_headers)
    reset_names: tuple[str, ...] = ()   # extra retry headers to remove with reset_history
    window: int = 1000
    allow_displace: bool = False        # load into a full drop-head queue anyway (it pushes out its head)
    default_exchange: bool = False      # routing key = queue name (opt-in), instead of the record's own
    allow_dlx_drop: bool = False        # publish where the queue's dead-letter exchange would drop the key
    max_bytes: int | None = None        # the byte budget: publish while the bodies in flight fit (dlxtool.budget)
    # --reencode: record, FILE:LINE -> the record to publish (dlxtool.editing.reencode.Reencoder: a changed
    # `decoded` re-encoded into its body); applied to each record as it is read, in both passes
    reencode: Callable[[MessageRecord, str], MessageRecord] | None = None
    # "1.0": publish over AMQP 1.0 (RabbitMQ 4.x) each record's whole AMQP 1.0 message (its `amqp10`: dump --protocol
    # 1.0 wrote it) as a replay over 1.0 sends one (dlxtool.ops.load_amqp10); "0-9-1": each record's 0.9.1 view
    protocol: WireProtocol = "0-9-1"


@dataclass
class LoadPlan:
    records: int = 0
    targets: Counter[str] = field(default_factory=Counter[str])   # queue -> records
    torn: list[str] = field(default_factory=list[str])             # FILE:LINE of each record cut short
    exists: dict[str, bool] = field(default_factory=dict[str, bool])     # queue -> exists (run/dry run)
    rooms: dict[str, Capacity] = field(default_factory=dict[str, "Capacity"])  # queue -> its room at the start
    allow_displace: bool = False
    # (queue, routing key published with) -> records
    keys: Counter[tuple[str, str]] = field(default_factory=Counter[tuple[str, str]])
    routes: dict[str, str] = field(default_factory=dict[str, str])      # queue -> its route in words (or why none)
    unsafe: Counter[str] = field(default_factory=Counter[str])     # why records would not be published -> records
    unsafe_by_queue: Counter[str] = field(default_factory=Counter[str])  # queue -> records its route holds back
    amqp10: int = 0  # records that hold a whole AMQP 1.0 message (their `amqp10` field)
    without_amqp10: list[str] = field(default_factory=list[str])  # FILE:LINE of the first records that do not
    without_amqp10_total: int = 0
    # over 0.9.1: what of the AMQP 1.0 messages the records hold publishing their 0.9.1 view would not carry
    losses: ConversionCheck | None = None
    protocol: WireProtocol = "0-9-1"  # what the load publishes over
    protocol_by: str = "option"  # "auto": --protocol auto chose it (dlxtool.cli.load)

    def would_load(self, queue: str) -> int:
        """Records for `queue` whose route is safe and that fit its room by count (the byte room depends on each
        body)."""
        cap = self.rooms.get(queue)
        n = self.targets[queue] - self.unsafe_by_queue[queue]
        if cap is None or not cap.guarded or self.allow_displace or cap.room is None:
            return n
        return min(n, cap.room)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"records": self.records, "targets": dict(self.targets), "protocol": self.protocol,
                               "protocol_by": self.protocol_by,
                               "torn_last_line": self.torn[-1] if self.torn else None, "torn": self.torn,
                               "skipped_torn": len(self.torn)}
        if self.exists:
            out["exists"] = self.exists
        if self.rooms:
            out["rooms"] = {q: {**c.to_json(), "would_load": self.would_load(q)} for q, c in self.rooms.items()}
        if self.routes:
            out["routes"] = self.routes
            out["unsafe"] = dict(self.unsafe)
        if self.amqp10:
            out["amqp10_records"] = self.amqp10
        if self.losses is not None and self.losses.judged:
            out["conversion_losses"] = self.losses.to_json()
        return out

    def check_routes(self, routes: Routes) -> None:
        """Each target's route and each (target, routing key)'s dead-letter check (dlxtool.ops.routes.Routes),
        for the plan: what the run would hold back, and why."""
        for (queue, key), n in sorted(self.keys.items()):
            if self.exists.get(queue) is not False:
                route = routes.with_key(queue, key)
                if isinstance(route, str):
                    self.unsafe[route] += n
                    self.unsafe_by_queue[queue] += n
        self.routes = {q: routes.describe(q) for q in sorted(self.targets) if self.exists.get(q) is not False}


@dataclass
class LoadResult:
    file: str
    records: int
    published: Counter[str] = field(default_factory=Counter[str])  # queue -> confirmed
    failed: Counter[Why] = field(default_factory=Counter[Why])     # "queue: why" -> records
    lost: int = 0              # no answer before the connection ended: maybe published (possible duplicates)
    not_sent: int = 0          # never published (stopped by an error or Ctrl-C)
    skipped_torn: int = 0      # records cut short in the file (their messages were never acked away)
    stayed_full: Counter[str] = field(default_factory=Counter[str])  # queue -> records not published: it was full
    routes: dict[str, str] = field(default_factory=dict[str, str])      # queue -> how its records were published
    interrupted: bool = False
    error: str | None = None
    unavailable: bool = False  # the error: the broker blocked publishing (a resource alarm), not a lost connection
    elapsed: float = 0.0
    ids: MessageIds = field(default_factory=MessageIds)  # the message ids of the records published (the journal's)

    @property
    def published_total(self) -> int:
        return sum(self.published.values())

    @property
    def failed_total(self) -> int:
        return sum(self.failed.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file, "records": self.records, "published": dict(self.published),
            "published_total": self.published_total, "failed": dict(self.failed),
            "failed_total": self.failed_total, "possible_duplicates": self.lost, "not_sent": self.not_sent,
            "skipped_torn": self.skipped_torn, "stayed_full": dict(self.stayed_full), "routes": self.routes,
            "interrupted": self.interrupted, "error": self.error, "elapsed_s": round(self.elapsed, 3),
        }


def records_of(stream: IO[bytes], settings: LoadSettings,
               torn: Callable[[str, int], None]) -> Iterator[tuple[str, MessageRecord]]:
    """The file's records (dlxtool.ops.record_files.iter_records), each re-encoded where settings.reencode says."""
    records = iter_records(stream, settings.name, torn)
    reencode = settings.reencode
    if reencode is None:
        return records
    return ((where, reencode(record, where)) for where, record in records)


def scan(open_stream: Opener, settings: LoadSettings) -> LoadPlan:
    """Check every record (UsageError naming FILE:LINE) and count them per target queue; over 0.9.1, judge what of
    the AMQP 1.0 messages records hold would not survive (LoadPlan.losses)."""
    out = LoadPlan(protocol=settings.protocol)
    amqp10 = settings.protocol == "1.0"
    if not amqp10:
        out.losses = ConversionCheck(settings.name, exact=True, amqp10_path="--protocol 1.0", taking="load")
    with open_stream() as stream:
        for where, record in records_of(stream, settings, lambda where, _n: out.torn.append(where)):
            target = target_of(record, settings, where)
            out.targets[target] += 1
            out.records += 1
            if record.amqp10 is not None:
                out.amqp10 += 1
                if out.losses is not None:  # the 0.9.1 view is the broker's conversion (dlxtool.amqp10_view)
                    out.losses.add(out.records, loss_kinds(record.amqp10), LOSS_KINDS.__getitem__)
            elif amqp10:
                out.without_amqp10_total += 1
                if len(out.without_amqp10) < EXAMPLES:
                    out.without_amqp10.append(where)
            if amqp10 and record.amqp10 is None:
                continue  # refused as a whole (Load): no headers to work out
            headers = load_headers(record, settings)
            if not amqp10:
                _check_encodes(record, headers, where)
            out.keys[(target, target if settings.default_exchange else record_key(record, headers, settings))] += 1
    return out


def _check_encodes(record: MessageRecord, headers: dict[str, Any], where: str) -> None:
    """Refuse a file with a record AMQP cannot carry before anything is published (frame size is checked
    per message at publish time: it depends on the connection)."""
    refused = rabbitmq_refuses(headers)
    if refused is not None:
        raise UsageError(f"{where}: header {refused!r} holds an AMQP short-int of kind 'U', which RabbitMQ does "
                         "not accept: publishing it would make the broker close the connection",
                         hint="RabbitMQ's short-int is kind 's' (the same two bytes): re-encode that $amqp value "
                              "with 's', or remove the header")
    try:
        encode_for_publish(basic_properties(record.properties, headers), 0)
    except EncodeError as exc:
        raise UsageError(f"{where}: {exc}") from None


def target_of(record: MessageRecord, settings: LoadSettings, where: str) -> str:
    target = settings.to_queue or record.queue
    if not target:
        raise UsageError(f"{where}: the record names no queue", hint="give --to QUEUE")
    return target


def load(conn: AmqpConnection, open_stream: Opener, settings: LoadSettings, *, total: int = 0,
         progress: Callable[[Progress], None] | None = None, failed: Sink | None = None,
         timeout: float = 30.0, handle_sigint: bool = True, rooms: Rooms | None = None,
         management: ManagementClient | None = None, vhost: str = "/") -> LoadResult:
    """Publish the records; each failed (returned/nacked/lost/not sent) record goes to `failed` if given.
    With `rooms`, a record whose queue has no room left (drop-head would push out its head) is not published:
    it fails with that reason (and goes to `failed`); so does a record whose route is not safe (the queue is
    missing, or its dead-letter exchange would route the key it is published with — its own, or the queue name
    with default_exchange — to no queue: `management` checks that, None = not reachable: nothing goes unless
    settings.allow_dlx_drop; dlxtool.ops.routes.Routes). The temporary exchanges are deleted on the
    publishing channel right after the last publish (no round trip, and ordered after the publishes): work
    between the run and its summary would let a second stop signal cut the summary off."""
    exchanges = None if settings.default_exchange else TemporaryExchanges(conn, timeout, "load")
    routes = load_routes(settings, exchanges, management, vhost)
    try:
        result = _load(conn, open_stream, settings, routes, total=total, progress=progress, failed=failed,
                       timeout=timeout, handle_sigint=handle_sigint, rooms=rooms,
                       before_flush=exchanges.delete_on if exchanges is not None else None)
        result.routes = {q: routes.describe(q) for q in sorted(result.published)}
        return result
    finally:
        if exchanges is not None:
            exchanges.delete_all()  # only what delete_on did not send (a run that stopped on an error)


def load_routes(settings: LoadSettings, exchanges: Callable[[str], str | None] | None,
                management: ManagementClient | None, vhost: str) -> Routes:
    return Routes(settings.default_exchange, exchanges=exchanges, router=usable_router(management, vhost),
                  allow_drop=settings.allow_dlx_drop)


def _load(conn: AmqpConnection, open_stream: Opener, settings: LoadSettings, routes: Routes, *, total: int,
          progress: Callable[[Progress], None] | None, failed: Sink | None, timeout: float,
          handle_sigint: bool, rooms: Rooms | None,
          before_flush: Callable[[Publisher], None] | None = None) -> LoadResult:
    result = LoadResult(settings.name, total)
    stop = threading.Event()
    started = time.monotonic()
    inflight: dict[int, MessageRecord] = {}  # yielded to the publisher, not settled yet
    taken = 0  # records read from the file so far (where a give-up resumes reading it)
    last_report = 0.0

    def report(final: bool = False) -> None:
        nonlocal last_report
        now = time.monotonic()
        if progress is not None and (final or now - last_report >= 0.2):
            last_report = now
            done = result.published_total + result.failed_total
            progress(Progress(total, done, result.published_total, now - started))

    with open_stream() as stream, sigint_as_stop(stop, handle_sigint):
        def torn(_where: str, _skipped: int) -> None:
            result.skipped_torn += 1

        records = records_of(stream, settings, torn)

        def items() -> Iterator[tuple[str, str, bytes, BasicProperties, tuple[str, MessageRecord]]]:
            nonlocal taken
            for where, record in records:
                # In `inflight` before anything else: read from the file, it is either settled or, if we
                # stop now, reported as not sent (and written to --failed) — never silently skipped.
                inflight[id(record)] = record
                taken += 1
                if stop.is_set():
                    return
                target = target_of(record, settings, where)
                headers = load_headers(record, settings)
                route = routes.with_key(target, record_key(record, headers, settings))
                if isinstance(route, Why):  # not published: it fails with the reason, the others go on
                    del inflight[id(record)]
                    fail_record(result, target, route, record, failed)
                    continue
                why = rooms.admit(target, len(record.body), len(inflight) - 1) if rooms is not None else None
                if why is not None:
                    del inflight[id(record)]
                    result.stayed_full[target] += 1
                    result.failed[why] += 1
                    if failed is not None:
                        failed.write(record)
                    continue
                exchange, keeps_key = route
                key = record_key(record, headers, settings) if keeps_key else target
                yield exchange, key, record.body, basic_properties(record.properties, dict(headers)), (target, record)

        try:
            for (target, record), outcome, detail in publish_records(conn, items(), window=settings.window,
                                                                      timeout=timeout, before_flush=before_flush,
                                                                      max_bytes=settings.max_bytes):
                del inflight[id(record)]
                _count(result, target, outcome, detail, record, failed)
                report()
        except Exception as exc:  # noqa: BLE001 - connection lost: report what was and was not published
            result.error = describe_error(exc)
            result.unavailable = isinstance(exc, UnavailableError)
        except KeyboardInterrupt:  # a second stop signal: no more waiting for confirms, account for the rest
            stop.set()
            _give_up(result, inflight, settings, failed)
            records = records_after(open_stream, settings, taken)  # the signal may have ended `records`
        result.interrupted = stop.is_set() and result.error is None
        # Never published: the one the error hit on its way out, and the rest of the file. Writing them to
        # --failed takes a while (a large file): a signal now (the second one) only takes note of itself.
        with signals_as_stop(threading.Event(), handle_sigint):
            for record in [*inflight.values(), *(r for _w, r in records)]:
                result.not_sent += 1
                if failed is not None:
                    failed.write(record)
    if failed is not None:
        failed.flush()
    result.elapsed = time.monotonic() - started
    report(final=True)
    return result


def _give_up(result: LoadResult, inflight: dict[int, MessageRecord], settings: LoadSettings,
             failed: Sink | None) -> None:
    """Stopped by a second signal while records were in flight: each may be at the broker (published, its
    confirm not waited for) — counted as a possible duplicate, written to --failed (loading that file again
    may duplicate it, never lose it)."""
    for record in inflight.values():
        target = settings.to_queue or record.queue or "?"
        result.lost += 1
        result.failed[Why(f"{target}: lost — stopped before its confirm (maybe published)", Stay.UNCONFIRMED)] += 1
        if failed is not None:
            failed.write(record)
    inflight.clear()


def records_after(open_stream: Opener, settings: LoadSettings, taken: int) -> Iterator[tuple[str, MessageRecord]]:
    """The file's records after the first `taken`, read afresh (torn records were counted on the way)."""
    with open_stream() as stream:
        for n, item in enumerate(records_of(stream, settings, lambda _w, _n: None)):
            if n >= taken:
                yield item


def load_headers(record: MessageRecord, settings: LoadSettings) -> dict[str, Any]:
    """The headers a record is published with: as recorded; with --reset-history, replay's reset and provenance.
    Over AMQP 1.0 (settings.protocol) always without the death history and with the provenance, as a replay over 1.0
    sends a message (dlxtool.ops.amqp10_outgoing): a client's x-opt-deaths is no death history to the broker, and
    would read as one to every reader after it; the provenance keeps what it said (its deaths, its origin)."""
    amqp10 = settings.protocol == "1.0"
    if not settings.reset_history and not amqp10:
        return record.headers
    from dlxtool.ops.replay_decision import replay_headers

    headers = replay_headers(record, source=f"file {settings.name}", reset_names=settings.reset_names,
                             keep_history=not settings.reset_history)
    # 1.0 without the reset: only the death history and the broker's delivery counters go (retry counters stay)
    if not settings.reset_history:
        for name in HISTORY_HEADERS:
            headers.pop(name, None)
    return headers


def record_key(record: MessageRecord, headers: dict[str, Any], settings: LoadSettings) -> str:
    """The record's routing key; after a count reset, the original one its provenance header records."""
    from dlxtool.ops.provenance import PROVENANCE_HEADER

    prov = headers.get(PROVENANCE_HEADER) if settings.reset_history else None
    key = prov.get("routing-key") if is_object(prov) else None
    return key if isinstance(key, str) else record.routing_key


def fail_record(result: LoadResult, target: str, why: Why, record: MessageRecord, failed: Sink | None) -> None:
    result.failed[why.prefixed(f"{target}: ")] += 1
    if failed is not None:
        failed.write(record)


def _count(result: LoadResult, target: str, outcome: PublishAnswer, detail: str | None, record: MessageRecord,
           failed: Sink | None) -> None:
    if outcome is PublishAnswer.CONFIRMED:
        result.published[target] += 1
        message_id = record.properties.get("message_id")
        result.ids.add(message_id if isinstance(message_id, str) else None)
        return
    if outcome is PublishAnswer.LOST:
        result.lost += 1
    result.failed[Why(f"{target}: {outcome.value} — {detail}", answers().get(outcome, Stay.NOT_SENT))] += 1
    if failed is not None:
        failed.write(record)


def publish_records(conn: AmqpConnection, items: Iterable[tuple[str, str, bytes, BasicProperties, Token]], *,
                    window: int = 1000, timeout: float = 30.0, before_flush: Callable[[Publisher], None] | None = None,
                    max_bytes: int | None = None) -> Iterator[tuple[Token, PublishAnswer, str | None]]:
    """For `load`: publish (exchange, routing_key, body, properties, token) with a window of confirms,
    yielding each (token, outcome, detail) as it settles. A seam, not used by replay itself.

    `max_bytes`: publish only while the bodies awaiting a confirm fit in it, each counted twice (its record is held
    until it settles, and its frames until they are written: PrefetchWindow.COPIES); one is always let through."""
    pub = Publisher(conn, window=window, timeout=timeout)
    blocked_since: list[float] = []
    in_flight: dict[int, int] = {}  # id(token) -> its body's size, until it settles
    held = 0

    def settled() -> Iterator[tuple[Token, PublishAnswer, str | None]]:
        nonlocal held
        for token, outcome, detail in pub.take_settled():
            held -= in_flight.pop(id(token), 0)
            yield token, outcome, detail

    def fits(size: int) -> bool:
        return max_bytes is None or not held or held + PrefetchWindow.COPIES * size <= max_bytes

    def still_blocked() -> None:
        """A blocked connection (a resource alarm) is waited on for `timeout` at most."""
        why = blocked(conn)
        if why is None:
            blocked_since.clear()
        elif not blocked_since:
            blocked_since.append(time.monotonic())
        elif time.monotonic() - blocked_since[0] >= timeout:
            raise UnavailableError(f"the broker blocked publishing ({why}: a resource alarm)")

    try:
        for exchange, routing_key, body, props, token in items:
            while not pub.has_room() or not fits(len(body)):
                pub.pump(IDLE_WAIT)
                still_blocked()
                yield from settled()
            try:
                pub.publish(exchange, routing_key, body, props, token)
            except EncodeError as exc:  # nothing sent: this record fails, the others go on
                yield token, PublishAnswer.REFUSED, str(exc)
                continue
            in_flight[id(token)] = PrefetchWindow.COPIES * len(body)
            held += in_flight[id(token)]
            pub.pump(0)
            still_blocked()
            yield from settled()
        if before_flush is not None:
            before_flush(pub)
        yield from pub.flush(timeout)
    except Exception as exc:
        # The connection died: what was in flight may or may not be at the broker. Report it as LOST
        # (so the caller can count possible duplicates) before the error goes on.
        pub.abandon(f"connection lost before the confirm ({describe_error(exc)})")
        yield from pub.take_settled()
        raise
    finally:
        pub.close()


# -- the workflow: checks, plan, run, and what its result means -------------------------------------------


class Load:
    """A load, prepared: the whole file checked, then each target queue (exists? room? a safe route?) — the
    plan, said on `report`. Refused (exit 6) here, before anything is published (unless a dry run), when no
    target queue has room (drop-head or reject-publish-dlx at its limit); a queue with some room takes what
    fits, the rest fails with the reason. Then `run(...)`."""

    def __init__(self, session: Session, open_stream: Opener, settings: LoadSettings, report: Reporter, *,
                 dry_run: bool, scanned: LoadPlan | None = None) -> None:
        """`scanned`: the file's scan for these settings, made already (--protocol auto's choice: dlxtool.cli.load)."""
        self.session, self.open_stream, self.settings = session, open_stream, settings
        plan = self.plan = scanned if scanned is not None and scanned.protocol == settings.protocol else \
            scan(open_stream, settings)
        self.check_file(plan)  # before the plan's questions to the broker
        for where in plan.torn:
            report.warn(f"{where}: a record cut short (a writer stopped mid-record): skipped; its message was not "
                        "acked away by the writer, it is still in its queue")
        rooms = self.rooms = capacity.rooms(session.conn, session.management, session.vhost, session.timeout,
                                            role="queue", allow_displace=settings.allow_displace)
        plan.allow_displace = settings.allow_displace
        for queue in sorted(plan.targets):
            cap = rooms.capacity(queue)
            plan.exists[queue] = cap.note != "queue missing"
            if not plan.exists[queue]:
                said = did_you_mean(queue, names_in(session.management, session.vhost))
                report.warn(f"queue {queue!r} not found in vhost {session.vhost!r} on broker {session.broker}"
                            + (f" ({said})" if said else "") + f": its {plan.targets[queue]} record(s) will not be "
                            "published and count as failed")
                continue
            plan.rooms[queue] = cap
            if cap.guarded or not cap.known:
                report.info(f"{queue}: {cap.describe()}")
        plan.check_routes(load_routes(settings, None if settings.default_exchange else _plan_exchange,
                                      session.management, session.vhost))
        for why, n in sorted(plan.unsafe.items()):
            report.warn(f"{why}: {n} record(s) would not be published")
        if not dry_run and plan.records:
            from dlxtool.ops.publish_rights import refuse_without_publish_rights

            # before anything is published (issue 28): the route's permission, asked of the broker
            refuse_without_publish_rights(session, default_exchange=settings.default_exchange,
                                          nothing="nothing loaded")
            check_alarms(session, report, "loaded")
        if not dry_run:
            capacity.refuse_when_no_room([rooms.capacity(q) for q in sorted(plan.targets)], "queue",
                                         settings.allow_displace)

    def check_file(self, plan: LoadPlan) -> None:
        """What the file asks of this broker, refused before anything else is asked (the AMQP 1.0 load's: a 3.x broker,
        records without `amqp10`; dlxtool.ops.load_amqp10.Amqp10Load)."""

    def run(self, *, progress: Callable[[Progress], None] | None = None, failed: Sink | None = None,
            handle_sigint: bool = True) -> LoadResult:
        """Publish the records; those that fail go to `failed` (--failed FILE2's record file)."""
        session = self.session
        return load(session.conn, self.open_stream, self.settings, total=self.plan.records, progress=progress,
                    failed=failed, timeout=session.timeout, handle_sigint=handle_sigint, rooms=self.rooms,
                    management=session.management, vhost=session.vhost)


@dataclass
class LoadRun:
    """A finished load as every command that moves messages ends (dlxtool.cli.moving.run_moving): records published
    from a file, so no engine pass (`result` None) and nothing to clean up; its outcome is load_outcome's."""

    load: LoadResult
    failed_file: str | None = None
    allow_torn: bool = False
    result: TransferResult | None = None

    @property
    def ids(self) -> MessageIds:
        return self.load.ids

    @property
    def filled(self) -> list[str]:
        return sorted(q for q, n in self.load.published.items() if n)

    def clean_up(self) -> None:
        """Nothing to delete: the temporary exchanges of a load are gone when it returns."""

    def outcome(self) -> Outcome:
        return load_outcome(self.load, self.failed_file, self.allow_torn)


def _plan_exchange(_queue: str) -> str:
    return "(temporary exchange)"  # the plan declares none


def load_outcome(result: LoadResult, failed_file: str | None, allow_torn: bool) -> Outcome:
    """The end of a load: stopped by the connection, interrupted, refused (nothing fit, or no route was safe),
    partial (records not loaded, or torn ones skipped without --allow-torn), or done."""
    again = (f"; they are in {failed_file}: `dlxtool load {failed_file}` loads them again" if failed_file
             else "; --failed FILE2 would collect them to load again")
    dups = (f"; {result.lost} record(s) had no answer and may have been published (loading them again may "
            "duplicate them)" if result.lost else "")
    if result.error:
        return Outcome(Status.UNAVAILABLE if result.unavailable else Status.CONNECT,
                       f"load stopped: {result.error}; {result.published_total} of {result.records} "
                       f"records published, {result.not_sent} not sent" + again + dups)
    if result.interrupted:
        return Outcome(Status.INTERRUPTED, f"load interrupted: {result.published_total} of {result.records} records "
                       f"published, {result.not_sent} not sent" + again + dups)
    refused = refusal(result.published_total, result.failed, nothing="nothing loaded", still="no record was published")
    if refused is not None:
        return replace(refused, message=refused.message + again)
    if result.failed_total:
        return Outcome(Status.PARTIAL, f"{result.failed_total} of {result.records} record(s) not loaded: "
                       f"{counted(result.failed)}" + again + dups)
    if result.skipped_torn and not allow_torn:
        return Outcome(Status.PARTIAL, f"{result.skipped_torn} record(s) in {result.file} were cut short and skipped "
                       "(named above); their messages were never acked away by the writer",
                       "--allow-torn accepts that (exit 0)")
    return OK
