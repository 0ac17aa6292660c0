"""Load: publish message records (dump, purge --backup, replay --save files) back to a broker — a MovePolicy
(LoadPolicy) that the pipeline runs over the file (dlxtool.ops.pipeline.run_move with `records`: the file pass,
dlxtool.ops.file_pass over 0.9.1, dlxtool.ops.file_pass_amqp10 over 1.0).

Each record goes to its own queue (the record's `queue`) or to `to_queue`, mandatory and with publisher
confirms (over 1.0: the broker's `accepted`). As replay does (dlxtool.ops.routes.Routes), it keeps the record's
routing key — the one its queue's consumers saw, or with `reset_history` the original one the provenance header
records — through a temporary fanout exchange bound only to the target queue; `default_exchange` publishes with
routing key = the queue name instead, and a target whose dead-letter exchange would not route that key gets none
of its records (failed, with the reason: the next dead-lettering would drop them). A record is counted as loaded
only on a clean confirm; returned (no such queue), nacked (queue full) and lost (the connection died before the
answer — maybe published) records are reported and can be written to a "failed" file to load again.

The file is read twice: once to check every record (a bad line stops the load before anything is
published, naming FILE:LINE) and count them per queue, once to publish. A record cut short (a
backup interrupted mid-write: a last line without a newline, or a torn record merged with the next one
on a line by an older dlxtool's append) is reported with its FILE:LINE and skipped: its message was
never acked away. The result counts them (`skipped_torn`) so the CLI can fail unless told they are fine.

What a record cannot carry back: the original exchange (the delivery shows the temporary exchange, or
"" with `default_exchange`), `redelivered`, and the queue position (records are published in file order).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dlxtool.amqp10_view import LOSS_KINDS, loss_kinds
from dlxtool.amqp_values import rabbitmq_refuses
from dlxtool.broker.queues import did_you_mean, names_in
from dlxtool.broker.wire.frames import EncodeError, basic_properties, encode_for_publish
from dlxtool.deaths import HISTORY_HEADERS
from dlxtool.errors import UsageError
from dlxtool.json_shapes import is_object
from dlxtool.ops import capacity
from dlxtool.ops.actions import Action, Decider, Deciding, Decision
from dlxtool.ops.alarms import check_alarms
from dlxtool.ops.conversion_check import EXAMPLES, ConversionCheck
from dlxtool.ops.outcomes import counted, refusal
from dlxtool.ops.record_source import Opener, RecordFile, read_records
from dlxtool.ops.routes import Routes, TemporaryExchanges, usable_router
from dlxtool.ops.session import MoveSession
from dlxtool.ops.stay import Why
from dlxtool.ops.transfer_settings import TransferOptions
from dlxtool.outcome import OK, Outcome, Status

if TYPE_CHECKING:
    from dlxtool.broker.management import ManagementClient
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.message_ids import MessageIds
    from dlxtool.ops.capacity import Admit, Capacity, Rooms
    from dlxtool.ops.pipeline import MoveRun
    from dlxtool.ops.record_files import Sink
    from dlxtool.ops.session import Reporter, Session
    from dlxtool.ops.transfer_result import Progress, TransferResult
    from dlxtool.record import MessageRecord

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


class LoadPolicy:
    """A load as a MovePolicy (dlxtool.ops.pipeline) over a file of records (dlxtool.ops.record_source): each record
    goes to its own queue (or --to) by its route (dlxtool.ops.routes.Routes: a temporary exchange that keeps its routing
    key, or the default exchange), with the headers load_headers gives it; a record whose route is not safe stays,
    with the reason. The destinations' room admits each (Rooms.admit); the queues it refused for want of room are
    counted there (`stayed_full`)."""

    what, nothing, limit, publishes = "load", "nothing loaded", None, True

    def __init__(self, settings: LoadSettings, management: ManagementClient | None, vhost: str,
                 failed_file: str | None = None) -> None:
        self.settings, self.management, self.vhost = settings, management, vhost
        self.source = settings.name
        self.saved = failed_file
        self.temporary_exchanges = not settings.default_exchange
        self.routes = load_routes(settings, None, management, vhost)
        self.rooms: Rooms | None = None

    def decider(self, exchanges: TemporaryExchanges | None) -> Decider:
        settings = self.settings
        routes = self.routes = load_routes(settings, exchanges, self.management, self.vhost)
        over091 = settings.protocol != "1.0"

        def decide(record: MessageRecord) -> Decision:
            target = settings.to_queue or record.queue  # the file's check (scan) refused a record naming none
            headers = load_headers(record, settings)
            key = record_key(record, headers, settings)
            route = routes.with_key(target, key)
            if isinstance(route, Why):
                return Decision.leave(route.prefixed(f"{target}: "))
            exchange, keeps_key = route
            if over091:
                return Decision(Action.MOVE, target, exchange, key if keeps_key else target,
                                properties=basic_properties(record.properties, dict(headers)))
            # over 1.0 the record's whole message goes, with these headers (dlxtool.ops.amqp10_outgoing)
            return Decision(Action.MOVE, target, exchange, key if keeps_key else target,
                            record=replace(record, headers=headers))

        return Deciding(decide)

    def admit(self, rooms: Rooms) -> Admit:
        self.rooms = rooms
        return rooms.admit

    def describe(self, target: str) -> str:
        return self.routes.describe(target)

    def filled(self, result: TransferResult) -> list[str]:
        return sorted(q for q, n in result.moved.items() if n)

    def notes(self) -> list[str]:
        return []

    @property
    def stayed_full(self) -> dict[str, int]:
        """queue -> records not published because it had no room (Rooms.admit refused them)."""
        return dict(self.rooms.refused) if self.rooms is not None else {}


def scan(open_stream: Opener, settings: LoadSettings) -> LoadPlan:
    """Check every record (UsageError naming FILE:LINE) and count them per target queue; over 0.9.1, judge what of
    the AMQP 1.0 messages records hold would not survive (LoadPlan.losses)."""
    out = LoadPlan(protocol=settings.protocol)
    amqp10 = settings.protocol == "1.0"
    if not amqp10:
        out.losses = ConversionCheck(settings.name, exact=True, amqp10_path="--protocol 1.0", taking="load")
    with open_stream() as stream:
        for where, record in read_records(stream, settings.name, lambda where, _n: out.torn.append(where),
                                          settings.reencode):
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


def load_routes(settings: LoadSettings, exchanges: Callable[[str], str | None] | None,
                management: ManagementClient | None, vhost: str) -> Routes:
    return Routes(settings.default_exchange, exchanges=exchanges, router=usable_router(management, vhost),
                  allow_drop=settings.allow_dlx_drop)


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
            failed_file: str | None = None, allow_torn: bool = False, handle_sigint: bool = True) -> LoadRun:
        """Publish the records; those that are not published go to `failed` (--failed FILE2's record file)."""
        return load_records(self.session, self.open_stream, self.settings, total=self.plan.records,
                            progress=progress, failed=failed, failed_file=failed_file, allow_torn=allow_torn,
                            handle_sigint=handle_sigint, rooms=self.rooms)


def load_records(session: Session, open_stream: Opener, settings: LoadSettings, *, total: int,
                 progress: Callable[[Progress], None] | None = None, failed: Sink | None = None,
                 failed_file: str | None = None, allow_torn: bool = False, handle_sigint: bool = True,
                 rooms: Rooms | None = None) -> LoadRun:
    """Publish the records of the file over settings.protocol: LoadPolicy run by the pipeline over the file
    (dlxtool.ops.pipeline_amqp10.run_move_over with `records`). With `rooms` (the plan's), a record whose queue has
    no room left is not published; each record that is not published goes to `failed`."""
    from dlxtool.ops.pipeline_amqp10 import run_move_over

    records = RecordFile(settings.name, open_stream, total, settings.reencode, failed)
    policy = LoadPolicy(settings, session.management, session.vhost, failed_file)
    options = TransferOptions(window=settings.window, max_bytes=settings.max_bytes, progress=progress,
                              handle_sigint=handle_sigint, settle_timeout=session.timeout)
    run = run_move_over(MoveSession(session, rooms=rooms, protocol=settings.protocol), policy, options,
                        records=records)
    return LoadRun(run, records, policy.stayed_full, failed_file, allow_torn)


@dataclass
class LoadRun:
    """A finished load as every command that moves messages ends (dlxtool.cli.moving.run_moving): the pipeline's
    MoveRun over the file (its result counts records: moved = published, left = failed, unprocessed = not sent), the
    records met cut short, and its own outcome (load_outcome: what was not loaded is in the --failed file, not in a
    queue)."""

    run: MoveRun
    records: RecordFile
    stayed_full: dict[str, int] = field(default_factory=dict[str, int])
    failed_file: str | None = None
    allow_torn: bool = False

    @property
    def result(self) -> TransferResult:
        return self.run.result

    @property
    def ids(self) -> MessageIds:
        return self.run.ids

    @property
    def filled(self) -> list[str]:
        return self.run.filled

    @property
    def published_total(self) -> int:
        return self.result.moved_total

    @property
    def failed_total(self) -> int:
        return self.result.left_total

    @property
    def not_sent(self) -> int:
        return self.result.unprocessed

    @property
    def lost(self) -> int:
        """Records that had no answer before the run ended: maybe published (possible duplicates)."""
        return self.result.possible_duplicates

    def clean_up(self) -> None:
        """The temporary exchanges go once the summary is out."""
        self.run.clean_up()

    def outcome(self) -> Outcome:
        return load_outcome(self.result, self.records.torn, self.failed_file, self.allow_torn)

    def to_json(self) -> dict[str, Any]:
        result = self.result
        return {
            "file": result.source, "records": result.snapshot, "published": dict(result.moved),
            "published_total": self.published_total, "failed": dict(result.left),
            "failed_total": self.failed_total, "possible_duplicates": self.lost, "not_sent": self.not_sent,
            "skipped_torn": self.records.torn, "stayed_full": self.stayed_full, "routes": self.run.routes,
            "interrupted": result.interrupted, "error": result.error, "elapsed_s": round(result.elapsed, 3),
            "depths_after": self.run.depths,
        }


def _plan_exchange(_queue: str) -> str:
    return "(temporary exchange)"  # the plan declares none


def load_outcome(result: TransferResult, torn: int, failed_file: str | None, allow_torn: bool) -> Outcome:
    """The end of a load (its result counts records: LoadRun): stopped by the connection, interrupted, refused
    (nothing fit, or no route was safe), partial (records not loaded, or `torn` ones skipped without --allow-torn),
    or done."""
    again = (f"; they are in {failed_file}: `dlxtool load {failed_file}` loads them again" if failed_file
             else "; --failed FILE2 would collect them to load again")
    lost, published = result.possible_duplicates, result.moved_total
    dups = (f"; {lost} record(s) had no answer and may have been published (loading them again may duplicate them)"
            if lost else "")
    if result.error:
        return Outcome(Status.UNAVAILABLE if result.unavailable else Status.CONNECT,
                       f"load stopped: {result.error}; {published} of {result.snapshot} "
                       f"records published, {result.unprocessed} not sent" + again + dups)
    if result.interrupted:
        return Outcome(Status.INTERRUPTED, f"load interrupted: {published} of {result.snapshot} records "
                       f"published, {result.unprocessed} not sent" + again + dups)
    refused = refusal(published, result.left, nothing="nothing loaded", still="no record was published")
    if refused is not None:
        return replace(refused, message=refused.message + again)
    if result.left_total:
        return Outcome(Status.PARTIAL, f"{result.left_total} of {result.snapshot} record(s) not loaded: "
                       f"{counted(result.left)}" + again + dups)
    if torn and not allow_torn:
        return Outcome(Status.PARTIAL, f"{torn} record(s) in {result.source} were cut short and skipped "
                       "(named above); their messages were never acked away by the writer",
                       "--allow-torn accepts that (exit 0)")
    return OK
