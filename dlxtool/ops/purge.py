"""Purge: plain `queue.purge`, or the reading modes on the one-pass engine (dlxtool.ops.engine).

Reading modes — `--backup FILE`, any selection filter or `--limit`, `--move-to QUEUE`, and `dump --remove`
— consume the queue once (the messages present at the start) and settle each message one way:

- selected, no --move-to: REMOVE — its record is written to the backup (if any) and flushed + fsynced,
  then the message is acked. A crash or a cut before the ack leaves it in the queue (maybe also in the
  file: at-least-once, counted as a possible duplicate).
- selected, --move-to: MOVE — published unchanged (body, properties, headers, routing key: through a
  temporary exchange bound only to that queue; `default_exchange`: routing key = its name), mandatory and
  confirmed; acked only after a clean confirm. Returned (target deleted) or nacked (target full)
  messages stay in the source. A target with a length limit and overflow drop-head / reject-publish-dlx
  takes only what fits (dlxtool.ops.capacity): the rest stays in the source, "full" in the summary,
  unless allow_displace. A message whose routing key the target's dead-letter exchange would route to no
  queue (its next rejection there would drop it) stays, with the reason, unless allow_dlx_drop
  (dlxtool.ops.routes.Routes).
- not selected: KEEP — stays, relative order kept (the engine republishes it to the tail and then acks
  it: memory bounded, no delivery attempt used on quorum queues; see the engine's notes).

Over AMQP 1.0 (`Purge(protocol="1.0")`, RabbitMQ 4.x) the same PurgePolicy runs on the 1.0 mover
(dlxtool.ops.pipeline_amqp10.run_move_over): each REMOVE's record holds the message whole (`amqp10`) and is flushed
before the delivery is settled `accepted`; a KEEP is held and given back in place, not republished to the tail.

Quorum queues: acks and republishes use no delivery attempt, so the reading modes are safe with a
delivery limit. Only messages delivered to us beyond the start snapshot (published during the run) are
given back, which is one attempt each (on 3.x without a limit: to the back); `requeued` counts them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlxtool.broker import queues, versions
from dlxtool.broker.management import ManagementClient, QueueInfo, sampled_text
from dlxtool.errors import DlxtoolError, ManagementMismatch, QueueNotFound, RefusedError, UnavailableError, UsageError
from dlxtool.message_ids import MessageIds, message_name
from dlxtool.ops import capacity
from dlxtool.ops.actions import Action, Decision
from dlxtool.ops.alarms import check_alarms
from dlxtool.ops.held import HELD_HINT, held_elsewhere, reclaim_dead_runs
from dlxtool.ops.outcomes import depths_now, transfer_outcome
from dlxtool.ops.routes import Router, Routes, route_hint, usable_router
from dlxtool.ops.session import MoveSession, Session
from dlxtool.outcome import OK, Outcome
from dlxtool.record import MessageRecord
from dlxtool.selection import Selection

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.pika_types import BlockingChannel
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.ops.actions import Decider, RawDecide
    from dlxtool.ops.capacity import Admit, Capacity, Rooms
    from dlxtool.ops.pipeline import MoveRun
    from dlxtool.ops.record_files import Sink
    from dlxtool.ops.routes import TemporaryExchanges
    from dlxtool.ops.session import Reporter, Session
    from dlxtool.ops.transfer_result import Progress, TransferResult
    from dlxtool.ops.transfer_settings import TransferOptions


@dataclass
class QueueState:
    name: str
    type: str | None  # None when the management API could not tell
    ready: int
    unacked: int | None
    consumers: int
    note: str | None = None  # e.g. which check could not be made
    tail_republish_risk: str | None = None  # see QueueInfo.tail_republish_risk
    limits_unknown: str | None = None  # why its limits could not be read (None: read, tail_republish_risk holds)
    info: QueueInfo | None = field(default=None, repr=False)  # the management API's view, when it answered

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.name, "type": self.type, "ready": self.ready, "unacked": self.unacked,
                "consumers": self.consumers}


def queue_state(channel: BlockingChannel, mgmt: ManagementClient | None, vhost: str, queue: str) -> QueueState:
    """Ready and consumer counts from the broker itself (a passive declare is exact and current);
    type and unacked from the management API, whose figures are sampled every few seconds."""
    counted = queues.counts(channel, queue, vhost, mgmt)
    note, unknown = None, None
    qtype, unacked, risk, info = None, None, None, None
    if mgmt is None:
        note, unknown = "no management API: queue type and unacked count unknown", "no management API"
    else:
        try:
            info = mgmt.queue(vhost, queue)
            qtype, unacked = info.type, info.messages_unacked if info.figures_known else None  # no figures: unknown
            risk = info.tail_republish_risk
        except ManagementMismatch:
            raise  # another broker's API: no decision on its data
        except DlxtoolError as exc:
            note = f"check not made: {exc.message}: queue type and unacked count unknown"
            unknown = exc.message
    if info is not None and (unreachable := queues.without_majority(info)) is not None:
        raise unreachable
    return QueueState(queue, qtype, counted.ready, unacked, counted.consumers, note, risk, unknown, info)


def check_tail_republish(risk: str | None) -> None:
    """Refuse a run that keeps messages by republishing them when the queue would drop its head."""
    if risk:
        raise RefusedError(risk, hint="lift the length limit for the run, or set overflow to reject-publish "
                                      "(a kept message that does not fit is then held and given back)")


def check_keep_by_republish(queue: str, risk: str | None, limits_unknown: str | None, *,
                            allow_displace: bool = False) -> None:
    """For a run that keeps messages by republishing them to `queue`'s tail (selective purge, replay):
    refuse (RefusedError, exit 6) when its limits say that would push unread ones out (`risk`, from
    QueueInfo.tail_republish_risk), and — safe by default — when its limits could not be read at all
    (`limits_unknown`: why): it may be a length-limited drop-head queue. `allow_displace` accepts the
    unknown (the user knows the queue); a known risk has no such flag: lift the limit for the run."""
    check_tail_republish(risk)
    if limits_unknown is not None and not allow_displace:
        raise RefusedError(f"limits of {queue!r} unknown ({limits_unknown}): keeping messages means republishing "
                           "them to its tail, which a length-limited drop-head queue would answer by pushing "
                           "out its head",
                           hint="make the management API reachable (--management-url), or --allow-displace if "
                                "the queue has no length limit with overflow drop-head/reject-publish-dlx")


def check_purgeable(state: QueueState, what: str = "purged") -> None:
    if state.type == "stream":
        raise RefusedError(f"{state.name!r} is a stream: streams cannot be {what}",
                           hint="streams are trimmed by retention (x-max-length-bytes, x-max-age); "
                                "`dlxtool dump` reads one without removing anything")


def purge(channel: BlockingChannel, queue: str) -> int:
    """queue.purge: removes ready messages only; returns how many the broker says it removed."""
    removed: int = channel.queue_purge(queue).method.message_count
    return removed


# -- reading modes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PurgeSettings:
    queue: str
    selection: Selection = field(default_factory=Selection)
    move_to: str | None = None
    backup: str | None = None  # a file name, for summaries; the sink itself goes in TransferOptions
    allow_displace: bool = False  # --move-to a full drop-head queue: accept that it pushes out its head
    default_exchange: bool = False  # --move-to on the default exchange (routing key = its name)
    allow_dlx_drop: bool = False  # --move-to where its dead-letter exchange would drop the key (or unchecked)

    @property
    def reads_messages(self) -> bool:
        """Whether this purge must read messages one by one (else queue.purge does it in bulk)."""
        return bool(self.backup or self.move_to or self.selection.filters_anything
                    or self.selection.limit is not None)

    def check(self) -> None:
        if self.move_to is not None and self.move_to == self.queue:
            raise UsageError("--move-to names the queue being purged")

    def describe(self) -> dict[str, Any]:
        return {"filters": self.selection.describe(), "limit": self.selection.limit, "move_to": self.move_to,
                "backup": self.backup}

    def describe_text(self) -> str:
        """One line for the user: what this purge will do."""
        sel = self.selection
        which = "every message present now" if not sel.filters_anything else \
            "messages matching " + "; ".join(f"{k}={v}" for k, v in sel.describe().items())
        if sel.limit is not None:
            which += f" (the first {sel.limit})"
        action = f"move {which} to {self.move_to!r}" if self.move_to else f"remove {which}"
        if self.backup:
            action += f", records appended to {self.backup} before each ack"
        if sel.filters_anything:
            action += "; the others stay in order"
        return action


class PurgeDecider:
    """decide(record) for the engine: not selected → KEEP; selected → MOVE to move_to, else REMOVE.

    A moved message keeps its routing key: `routes(move_to)` (dlxtool.ops.routes.Routes) is a temporary fanout
    exchange bound only to move_to, so that a consumer of move_to, or its dead-letter exchange, sees the key it
    had (on the default exchange it would be move_to's name, which a direct or topic dead-letter exchange may
    route nowhere: the next dead-lettering would drop it). Each key is checked against move_to's dead-letter
    exchange: a message it would drop stays, with the reason."""

    raw: RawDecide | None = None  # no fast form: every message is decided whole

    def __init__(self, settings: PurgeSettings, *, routes: Routes | None = None) -> None:
        self.selection = settings.selection
        self.move_to = settings.move_to
        self.routes = routes if routes is not None else move_routes(settings, None)

    def __call__(self, record: MessageRecord) -> Decision:
        if not self.selection.matches(record):
            return Decision.keep()
        if self.move_to is None:
            return Decision(Action.REMOVE, "removed")
        # Parked unchanged: the engine publishes the source body and properties as they are.
        key = record.routing_key
        route = self.routes.with_key(self.move_to, key) if type(key) is str else self.routes.by_queue_name(self.move_to)
        if isinstance(route, str):
            return Decision.leave(route)
        exchange, keeps_key = route
        return Decision(Action.MOVE, self.move_to, exchange, key if keeps_key else self.move_to)


def move_routes(settings: PurgeSettings, exchanges: Callable[[str], str | None] | None,
                router: Router | None = None) -> Routes:
    """--move-to's route (dlxtool.ops.routes.Routes); `exchanges` None and not default_exchange: the plan's."""
    return Routes(settings.default_exchange, exchanges=exchanges or (lambda _q: "(temporary exchange)"),
                  router=router, allow_drop=settings.allow_dlx_drop)


class PurgePolicy:
    """A reading purge (and `dump --remove`) as a MovePolicy (dlxtool.ops.pipeline): the selected messages removed
    (written to the sink first, where there is one) or moved unchanged to --move-to (PurgeDecider), the others kept
    in order; --move-to's room guarded (Rooms.admit)."""

    nothing = "nothing moved"

    def __init__(self, settings: PurgeSettings, router: Router | None = None, *, what: str = "purge",
                 saved: str | None = None) -> None:
        self.settings, self.router, self.what, self.saved = settings, router, what, saved
        self.source = settings.queue
        self.temporary_exchanges = bool(settings.move_to) and not settings.default_exchange
        self.limit = settings.selection.limit
        self.publishes = bool(settings.move_to or settings.selection.filters_anything)
        self.routes = move_routes(settings, None, router)

    def decider(self, exchanges: TemporaryExchanges | None) -> Decider:
        self.routes = move_routes(self.settings, exchanges, self.router)
        return PurgeDecider(self.settings, routes=self.routes)

    def admit(self, rooms: Rooms) -> Admit:
        return rooms.admit

    def describe(self, target: str) -> str:
        return self.routes.describe(target)

    def filled(self, result: TransferResult) -> list[str]:
        return [self.settings.move_to] if self.settings.move_to else []

    def notes(self) -> list[str]:
        return []


def run_reading_purge(conn: AmqpConnection, settings: PurgeSettings, options: TransferOptions, *,
                      timeout: float = 30.0, router: Router | None = None) -> TransferResult:
    """One reading purge on a bare connection (the ops layer's tests; `Purge` checks and prepares first): the
    engine's TransferResult. `router`: the management API's routing answers, for --move-to's dead-letter checks
    (None: they cannot be made: nothing moves unless allow_dlx_drop)."""
    from dlxtool.ops.pipeline import run_move

    run = run_move(MoveSession(Session(conn, "/", "", timeout)), PurgePolicy(settings, router), options)
    run.clean_up()
    return run.result


@dataclass
class PurgePlan:
    """What a reading purge would do, from the first `looked_at` messages (read with peek semantics)."""

    looked_at: int = 0
    actions: Counter[str] = field(default_factory=Counter[str])  # remove | move | keep | leave
    stay: Counter[str] = field(default_factory=Counter[str])     # why selected messages would stay (leave)
    # The names (dlxtool.message_ids.message_name) of the messages it would remove or move, in queue order, and of
    # the selected ones that would stay, by why
    names: list[str] = field(default_factory=list[str])
    stay_names: dict[str, list[str]] = field(default_factory=dict[str, list[str]])

    def to_json(self) -> dict[str, Any]:
        return {"looked_at": self.looked_at, "would_remove": self.actions["remove"],
                "would_move": self.actions["move"], "would_keep": self.actions["keep"],
                "would_stay": self.actions["leave"], "stay": dict(self.stay),
                "message_ids": self.names, "stay_message_ids": self.stay_names}


def plan(records: Iterable[MessageRecord], settings: PurgeSettings, routes: Routes | None = None) -> PurgePlan:
    """Apply the decider to records (from a peek), honouring --limit the way the engine does."""
    decide = PurgeDecider(settings, routes=routes)
    limit = settings.selection.limit
    out = PurgePlan()
    selected = 0
    for record in records:
        out.looked_at += 1
        if limit is not None and selected >= limit:
            out.actions["keep"] += 1
            continue
        decision = decide(record)
        selected += decision.action is not Action.KEEP
        out.actions[decision.action.value] += 1
        if decision.action is Action.LEAVE:
            out.stay[decision.group] += 1
            out.stay_names.setdefault(decision.group, []).append(message_name(record))
        elif decision.action is not Action.KEEP:
            out.names.append(message_name(record))
    return out


# -- the workflow: checks, plan, confirmation, run -----------------------------------------------------


@dataclass
class PurgeReport:
    """What `run` did (or, with dry_run, would do); the CLI renders it and maps it to the exit status."""

    state: QueueState
    settings: PurgeSettings
    dry_run: bool
    mode: str = ""                                   # describe_text(), reading modes only
    purged: int | None = None                        # plain queue.purge
    plan: dict[str, Any] | None = None               # dry run figures
    result: TransferResult | None = None
    room: Capacity | None = None                     # --move-to's queue at the start
    rooms: dict[str, Any] | None = None              # --move-to's admissions during the run
    route: str | None = None                         # --move-to's route in words (or why none)
    depths: dict[str, dict[str, int]] | None = None  # after the run, from the broker (ops.outcomes.depths_now)
    what: str = "purge"                              # the outcome's words: "purge stopped …", "dump --remove …"
    # what RabbitMQ's conversion to 0.9.1 would lose (dlxtool.ops.conversion_check.ConversionCheck.to_json), where
    # it was judged
    conversion: dict[str, Any] | None = None
    # deletes the run's temporary exchanges: called by the caller once the summary is out (MoveRun.clean_up)
    clean_up: Callable[[], None] = field(default=lambda: None, repr=False)

    @property
    def reads_messages(self) -> bool:
        return self.settings.reads_messages

    @property
    def ids(self) -> MessageIds | None:
        """The message ids of what the run moved or removed (None: a plain queue.purge names none)."""
        return self.result.ids if self.result is not None else None

    @property
    def filled(self) -> list[str]:
        """The queues the run moved messages into (--move-to's, where it moved any)."""
        moved: dict[str, int] = self.result.moved if self.result is not None else {}
        return [q for q in (self.settings.move_to,) if q and moved.get(q)]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.state.to_json()}
        if self.reads_messages:
            out.update(self.settings.describe())
        if self.room is not None:
            out["room"] = self.room.to_json()
        if self.plan is not None:
            out.update(self.plan)
        if self.purged is not None:
            out["purged"] = self.purged
        if self.result is not None:
            out.update(self.result.to_json())
        if self.rooms is not None:
            out["rooms"] = self.rooms
        if self.route is not None:
            out["routes"] = {self.settings.move_to: self.route}
        if self.depths is not None:
            out["depths_after"] = self.depths
        if self.conversion is not None:
            out["conversion_losses"] = self.conversion
        out["dry_run"] = self.dry_run
        return out

    def outcome(self) -> Outcome:
        """Done (a plain purge, a dry run), or the run's end (dlxtool.ops.outcomes: refused when nothing moved
        because no route was safe or --move-to is full)."""
        if self.result is None:
            return OK
        return transfer_outcome(self.result, self.what, saved=self.settings.backup)


@dataclass(frozen=True)
class PurgeWords:
    """How a purge speaks of itself: `purge`, or `dump --remove` (a purge --backup whose records are dump's)."""

    verb: str = "purge"        # "purge stopped …" (the outcome), the journal's command
    past: str = "purged"       # "streams cannot be purged"
    nothing: str = "nothing to purge"
    busy: str = "read"         # "… cannot be read by another connection" (dlxtool.ops.busy)
    # A purge refuses what it could not run safely even on an empty queue (the operator learns it now: tests/cli/
    # test_errors.py); `dump --remove` of an empty queue has always been "nothing to take", exit 0.
    checks_when_empty: bool = True


DRAIN_WORDS = PurgeWords("dump --remove", "drained (--remove)", "nothing to take", "drained (--remove)",
                         checks_when_empty=False)


class Purge:
    """A purge, prepared: the queue's state read (a stream refused), the notes said, and for the reading modes
    --move-to's queue found with its room, and — unless a dry run — every refusal made before anything is read
    (a drop-head source when messages are kept by republishing them; no room at all; no safe route). Then
    `plan(records)` (dry run: `records` peeked by the caller, `peek_count` of them, where the filters need
    them) or, once the caller has asked `question`, `run(sink, progress)`."""

    def __init__(self, session: Session, settings: PurgeSettings, report: Reporter, *, dry_run: bool,
                 words: PurgeWords = PurgeWords(), protocol: WireProtocol = "0-9-1") -> None:
        settings.check()
        self.session, self.settings, self.report, self.words = session, settings, report, words
        # what the reading modes read and move over: "1.0" (RabbitMQ 4.x) runs the same PurgePolicy on the AMQP 1.0
        # mover (dlxtool.ops.pipeline_amqp10); a plain purge reads nothing (one queue.purge either way)
        self.protocol: WireProtocol = protocol if settings.reads_messages else "0-9-1"
        self.channel = session.conn.channel()
        state = queue_state(self.channel, session.management, session.vhost, settings.queue)
        if state.consumers and reclaim_dead_runs(session.management, session.vhost, report, session.timeout):
            state = queue_state(self.channel, session.management, session.vhost, settings.queue)
        if state.note:
            report.warn(state.note)
        check_purgeable(state, words.past)
        held = held_elsewhere(state.info, session.management, state.ready, state.consumers)
        if held is not None and not state.ready:  # not "nothing to purge": they are there, held
            raise UnavailableError(f"{words.nothing} now: {held}", hint=HELD_HINT)
        if held is not None:
            report.warn(held)
        unacked = "unknown" if state.unacked is None else state.unacked
        # ready and consumers counted by the broker now; unacked only the API has: its sample, up to 5 s old
        sampled = (f"; unacked: {sampled_text(state.info)}" if state.unacked is not None and state.info is not None
                   else "")
        report.info(f"{settings.queue}: {state.ready} ready, {unacked} unacked, {state.consumers} consumers "
                    f"(broker {session.broker}, vhost {session.vhost}"
                    + (f", {state.type} queue" if state.type else "") + f"{sampled})")
        report.info(f"note: messages held unacked by consumers ({unacked}) are not {words.past}; they come back "
                    "if those consumers reject them or disconnect")
        self.out = PurgeReport(state, settings, dry_run, what=words.verb)
        self.rooms: Rooms | None = None
        self.router: Router | None = None
        self.keep_refused: str | None = None  # why kept messages cannot go to the tail: held in place instead
        if settings.reads_messages:
            self._prepare_reading(dry_run)

    @property
    def question(self) -> str:
        """What to confirm before `run`."""
        s, state = self.settings, self.out.state
        if not s.reads_messages:
            return f"Purge {state.ready} ready messages from {s.queue!r} on {self.session.broker}?"
        return f"{self.out.mode[0].upper()}{self.out.mode[1:]} — queue {s.queue!r} on {self.session.broker}?"

    @property
    def nothing_to_do(self) -> str | None:
        """Why this purge would change nothing, known before anything is read (the queue has no ready message), or
        None."""
        if not self.out.state.ready:
            return f"{self.settings.queue!r} has no ready message"
        return None

    def preview(self, records: Iterable[MessageRecord]) -> tuple[PurgePlan, str | None]:
        """What the run would do with `records` (the first messages, peeked by the caller: peek_count of them), and
        why it would change nothing when they are the whole queue and the selection selects none of them."""
        result = plan(records, self.settings, move_routes(self.settings, None, self.router))
        selected = result.looked_at - result.actions["keep"]
        if not selected and result.looked_at >= self.out.state.ready:
            return result, f"the selection selects none of the {result.looked_at} messages in {self.settings.queue!r}"
        return result, None

    def peek_count(self, bound: int) -> int:
        """How many records `plan` wants to look at (peeked with peek's safety rules by the caller): none
        unless filters decide message by message."""
        if not (self.settings.reads_messages and self.settings.selection.filters_anything):
            return 0
        return max(1, min(self.out.state.ready, bound))

    def plan(self, records: Iterable[MessageRecord] | None = None) -> PurgeReport:
        """The dry run: what would be purged, moved, kept (from `records` where peek_count asked for them)."""
        out = self.out
        if not self.settings.reads_messages:
            out.plan = {"purged": 0, "would_purge": out.state.ready, "message_ids": None}  # nothing read: no names
        else:
            out.plan = _dry_run_plan(self.settings, out, records, self.report, self.router)
        return out

    def run(self, sink: Sink | None = None, progress: Callable[[Progress], None] | None = None, *,
            max_bytes: int | None = None) -> PurgeReport:
        """The purge itself: queue.purge, or the reading pass with `sink` (--backup's record file) written before
        each ack, holding at most about `max_bytes` of messages at once (dlxtool.budget)."""
        settings, out, session = self.settings, self.out, self.session
        if not settings.reads_messages:
            out.purged = purge(self.channel, settings.queue)
            out.depths = depths_now([(session.conn, [settings.queue])], session.timeout)
            return out
        from dlxtool.ops.pipeline import Prepared
        from dlxtool.ops.pipeline_amqp10 import run_move_over
        from dlxtool.ops.transfer_settings import TransferOptions

        policy = PurgePolicy(settings, self.router, what=self.words.verb, saved=settings.backup)
        run = run_move_over(MoveSession(session, rooms=self.rooms, protocol=self.protocol), policy,
                            TransferOptions(sink=sink, progress=progress, max_bytes=max_bytes),
                            Prepared(out.state.info, self.keep_refused, self.report))
        out.clean_up = run.clean_up
        try:
            self._after_run(run, policy)
        except BaseException:
            run.clean_up()  # the caller never gets the report: the temporary exchanges go now
            raise
        return out

    def _after_run(self, run: MoveRun, policy: PurgePolicy) -> None:
        """The report's figures from a finished run: result, rooms, route, depths (and a quorum give-back said)."""
        settings, out, session = self.settings, self.out, self.session
        out.result = run.result
        if self.rooms is not None:
            out.rooms = self.rooms.to_json()
        if settings.move_to:
            out.route = run.routes.get(settings.move_to) or policy.describe(settings.move_to)
        # (over AMQP 1.0 the give-back is the outcome that spends no attempt: dlxtool.ops.pipeline_amqp10.check_amqp10)
        if out.result.requeued and out.state.type == "quorum" and self.protocol != "1.0" and \
                versions.quorum_give_back_counts(
                versions.server_version(session.conn), "cancel"):  # the engine gives back by cancel + close
            self.report.warn(f"{out.result.requeued} message(s) delivered beyond the start snapshot were given back: "
                             "on a quorum queue that used one delivery attempt each")
        out.depths = run.depths

    def _prepare_reading(self, dry_run: bool) -> None:
        from dlxtool.ops.busy import check_not_busy

        session, settings, out, report = self.session, self.settings, self.out, self.report
        if self.protocol == "1.0":  # what the 1.0 path cannot do (3.x: exit 2), refused before anything is read
            from dlxtool.ops.pipeline_amqp10 import check_amqp10

            check_amqp10(MoveSession(session, protocol="1.0"), settings.queue, out.state.info)
        competing = check_not_busy(out.state.info, session.management, self.words.busy, out.state.consumers)
        if competing is not None:
            report.warn(competing)
        if settings.move_to:
            self.rooms = capacity.rooms(session.conn, session.management, session.vhost, session.timeout,
                                        role="--move-to queue", allow_displace=settings.allow_displace)
            out.room = self.rooms.capacity(settings.move_to)
            if out.room.note == "queue missing":
                raise QueueNotFound(settings.move_to, session.vhost,
                                    f"--move-to queue {settings.move_to!r} not found in vhost {session.vhost!r}",
                                    hint="declare it first (with the arguments your parking queues use)")
            report.info(f"{settings.move_to}: {out.room.describe()}")
            self.router = usable_router(session.management, session.vhost)
        out.mode = settings.describe_text()
        report.info(f"mode: {out.mode}")
        if dry_run or (not out.state.ready and not self.words.checks_when_empty):
            return  # (dump --remove: no ready message, nothing_to_do says so)
        if (settings.move_to or settings.selection.filters_anything) and self.protocol != "1.0":
            # Non-matching (or returned) messages are kept by republishing them to the tail (over AMQP 1.0 they are
            # held and given back in place instead: nothing is republished).
            check_keep_by_republish(settings.queue, out.state.tail_republish_risk, out.state.limits_unknown,
                                    allow_displace=settings.allow_displace)
        if self.rooms is not None and out.room is not None:
            capacity.refuse_when_no_room([out.room], self.rooms.role, settings.allow_displace)
        _refuse_unsafe_route(settings, self.router)
        if settings.move_to and out.state.ready:
            # Before the publish-rights probe: it publishes, and a connection that publishes during an alarm is
            # blocked (issue 35: 'no reply to channel.open' instead of the alarm named)
            check_alarms(session, report, f"moved to {settings.move_to!r}")
        if out.state.ready:
            self._check_publish_rights()

    def _check_publish_rights(self) -> None:
        """Before anything is read (issue 28): refused where this user may not publish to --move-to by its route;
        where messages not selected stay by republishing them to the tail and the user may not publish there, a
        classic queue holds them and gives them back in place instead, any other type is refused."""
        from dlxtool.broker.permissions import probe_write
        from dlxtool.ops.publish_rights import refuse_without_publish_rights, user_words

        session, settings, state = self.session, self.settings, self.out.state
        if settings.move_to:
            refuse_without_publish_rights(session, default_exchange=settings.default_exchange,
                                          nothing=f"nothing moved to {settings.move_to!r}")
        if not (settings.move_to or settings.selection.filters_anything or settings.selection.limit is not None):
            return  # everything read is removed (a --backup run): nothing stays by being republished
        if self.protocol == "1.0":
            return  # over AMQP 1.0 what stays is held and given back in place: nothing is republished
        said = probe_write(session.conn, "", session.timeout)
        if said is None:
            return
        words = (f"cannot be republished to the tail of {settings.queue!r}: {user_words(session)} may not publish "
                 f"there (the broker said: {said})")
        if state.type != "classic":
            raise RefusedError(f"nothing {self.words.past}: messages that are not selected (or come back) stay by "
                               f"being republished to the queue's tail, and they {words}",
                               hint="the user needs write permission on amq.default in this vhost")
        self.keep_refused = words
        self.report.info(f"messages that stay {words}: they are held and given back in place instead")


def _refuse_unsafe_route(settings: PurgeSettings, router: Router | None) -> None:
    """Before anything is read: refused (exit 6) when no message could go to --move-to whatever its routing key
    (its route is not safe, or cannot be checked without the management API)."""
    stays = move_routes(settings, None, router).for_every_key(settings.move_to) if settings.move_to else None
    if stays is not None:
        raise RefusedError(f"nothing would be moved: {stays}", hint=route_hint([stays.kind]))


def _dry_run_plan(settings: PurgeSettings, out: PurgeReport, records: Iterable[MessageRecord] | None,
                  report: Reporter, router: Router | None) -> dict[str, Any]:
    ready = out.state.ready
    routes = move_routes(settings, None, router)
    if not settings.selection.filters_anything or records is None:
        # No per-message decision: the counts say it all, and nothing needs to be peeked (each message's routing
        # key is checked against --move-to's dead-letter exchange as the run reads it).
        n = ready if settings.selection.limit is None else min(ready, settings.selection.limit)
        figures: dict[str, Any] = {"looked_at": 0, "would_remove": 0 if settings.move_to else n,
                                   "would_move": n if settings.move_to else 0, "would_keep": ready - n,
                                   "would_stay": 0, "stay": {},
                                   # nothing read, so no names (a whole-queue purge takes whatever is there)
                                   "message_ids": None, "stay_message_ids": {}}
        stays = routes.for_every_key(settings.move_to) if settings.move_to else None
        if stays is not None:
            figures.update(would_move=0, would_stay=n, stay={stays: n})
        elif settings.move_to and routes(settings.move_to)[1] and not settings.allow_dlx_drop:
            report.info(f"each message's routing key is checked against {settings.move_to}'s dead-letter exchange as "
                        "the run reads it: one that it would route to no queue stays")
    else:
        result = plan(records, settings, routes)
        figures = {**result.to_json(), "sampled": result.looked_at < ready}
        if figures["sampled"]:
            report.warn(f"looked at the first {result.looked_at} of {ready} messages only (a peek holds what it "
                        "reads unacked; raise --max-unacked to look further)")
    figures.setdefault("sampled", False)  # counts alone (nothing peeked) cover the whole queue
    if settings.move_to:
        routes(settings.move_to)
        out.route = routes.describe(settings.move_to)
    figures["queue_depth"] = ready
    room = out.room
    if room is not None and room.guarded and not settings.allow_displace and room.room is not None:
        # By count only: the byte room depends on each body, known when the run reads it.
        fits = min(figures["would_move"], room.room)
        figures["would_stay_full"] = figures["would_move"] - fits
        figures["would_move"] = fits
        if figures["message_ids"] is not None and figures["would_stay_full"]:  # the last ones stay, as the run admits
            stays = figures["message_ids"][fits:]
            figures["message_ids"] = figures["message_ids"][:fits]
            figures["stay_message_ids"] = {**figures["stay_message_ids"], f"{settings.move_to} is full": stays}
    return figures
