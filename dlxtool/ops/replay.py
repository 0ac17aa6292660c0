"""Replay: send dead letters back to the queue each one failed in, history reset, nothing lost.

The workflow and its refusals (`run`): the stream and tail-republish refusals, the plan (`plan_for`: the first
messages read as `peek` reads them, under the same rules), the confirmation, the run on the one-pass engine
(dlxtool.ops.engine).
Where each message goes, how and with which headers is decided in one place, dlxtool.ops.replay_decision
(and applied on the bytes by dlxtool.ops.replay_raw); the CLI parses, calls and renders.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dlxtool.broker import queues, versions
from dlxtool.broker.connection import close_quietly, connect
from dlxtool.broker.queues import exchange_exists, now
from dlxtool.conventions import Route, check_origin_from
from dlxtool.errors import ConnectError, DlxtoolError, RefusedError, UndeliverableError
from dlxtool.message_ids import message_name
from dlxtool.ops.actions import Action
from dlxtool.ops.alarms import check_alarms
from dlxtool.ops.capacity import Capacity, Rooms, full_reason, rooms
from dlxtool.ops.conversion_check import ConversionCheck, check_conversion, judge_whole, roles
from dlxtool.ops.exchange_routes import ExchangeTargets, Reach
from dlxtool.ops.pipeline import MoveRun, Prepared, run_move
from dlxtool.ops.provenance import PROVENANCE_HEADER as PROVENANCE_HEADER
from dlxtool.ops.replay_address import WaitQueues
from dlxtool.ops.replay_checks import (
    check_publish_rights,
    check_target_management,
    check_to_queue,
    impersonator,
    queue_info,
    refuse_unchecked_routes,
    refuse_unread_dlq_limits,
)
from dlxtool.ops.replay_decision import (  # the decision's names, as replay's
    NO_ORIGIN as NO_ORIGIN,
)
from dlxtool.ops.replay_decision import ReplayDecider, exchange_targets_for
from dlxtool.ops.replay_decision import ReplaySettings as ReplaySettings
from dlxtool.ops.replay_decision import replay_headers as replay_headers
from dlxtool.ops.routes import (  # the routes of replay, load and purge --move-to
    DEFAULT_EXCHANGE as DEFAULT_EXCHANGE,
)
from dlxtool.ops.routes import (
    ORIGINAL_KEY,
    Router,
    Routes,
    TemporaryExchanges,
)
from dlxtool.ops.session import MoveSession, Reporter, Session
from dlxtool.ops.session import MoveSession as ReplaySession  # replay's name for it (the CLI's too)
from dlxtool.ops.transfer_result import TransferResult
from dlxtool.ops.transfer_settings import PassControl, TransferOptions
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.management import ManagementClient
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.ops.actions import Decider
    from dlxtool.ops.capacity import Admit
    from dlxtool.ops.peek import ReadOptions
    from dlxtool.poison_memo import QueueMemo

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
    conventions: dict[str, int] = field(default_factory=dict[str, int])  # convention that named the origin -> messages
    labels: dict[str, str] = field(default_factory=dict[str, str])       # convention -> "Spring headers"
    reaches: list[str] | None = None  # an exchange origin: the queues it reaches (None: unknown)
    # The names (dlxtool.message_ids.message_name) of the messages it would get, in queue order; those that would
    # stay because it is full (the last would_stay_full) are in the plan's stay_ids
    message_ids: list[str] = field(default_factory=list[str])

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
                "route_text": self.route_text(), "reaches": self.reaches, "message_ids": self.message_ids}


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
    celery_tasks: int = 0       # Celery tasks to replay to a queue: through the default exchange (Routes.by_queue_name)
    # why -> the names of the messages that would stay
    stay_ids: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    # The positions and names of the messages the replay would move (the conversion check judges those)
    moving_positions: set[int] = field(default_factory=set[int])
    # the plan's, until checked
    records_read: list[MessageRecord] = field(default_factory=list[MessageRecord], repr=False)
    # What RabbitMQ's conversion to 0.9.1 would lose of them (dlxtool.ops.conversion_check; None: a 3.x broker)
    conversion: ConversionCheck | None = None

    @property
    def moving_ids(self) -> list[str]:
        """The names of every message the replay would move (of those looked at), origin by origin (not to an origin
        that does not exist: those stay)."""
        return [name for o in self.origins if o.exists is not False for name in o.message_ids]

    @property
    def sampled(self) -> bool:
        """The counts are of the first `looked_at` messages, not of all `snapshot` (the queue's depth)."""
        return self.looked_at < self.snapshot

    @property
    def nothing_to_do(self) -> str | None:
        """Why a replay as planned would do nothing (an empty DLQ; a selection that selects none of it, all of it
        read), or None."""
        if not self.snapshot:
            return f"{self.source!r} has no ready message"
        if not self.origins and not self.sampled and set(self.stay) == {"not selected"}:
            return f"the selection selects none of the {self.looked_at} messages in {self.source!r}"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "snapshot": self.snapshot, "looked_at": self.looked_at,
            "sampled": self.sampled, "queue_depth": self.snapshot,
            "origins": [o.to_json() for o in self.origins],
            "stay": dict(self.stay), "dramatiq_retries_used": self.used_body_retries,
            "origin_conflicts": self.origin_conflicts, "celery_tasks": self.celery_tasks,
            # every message looked at, by name: what would be replayed (also per origin) and what would stay, why
            "message_ids": self.moving_ids, "stay_message_ids": self.stay_ids,
            "conversion_losses": self.conversion.to_json() if self.conversion is not None else None,
        }

    @property
    def route_notes(self) -> list[str]:
        """What the routes of this plan's origins change for consumers (shown under the plan), one sentence per kind
        of origin present: queues, exchanges, Celery tasks."""
        queues = any(o.origin_route is None or o.origin_route.queue is not None for o in self.origins)
        notes: list[str] = []
        if queues and self.default_exchange:
            notes.append("--default-exchange: replayed messages arrive with exchange \"\" and routing key = the queue "
                         "name, not the key they were published with; consumers and retry ladders that route on the "
                         "key see the queue name, and a queue whose dead-letter exchange would not route it keeps its "
                         "messages in the DLQ")
        elif queues:
            notes.append("to a queue, each message keeps its original routing key and reaches only that queue, "
                         "through a temporary fanout exchange of dlxtool's bound only to it (dlxtool.replay.…, deleted "
                         "at the end; the provenance header keeps the original exchange)")
        if any(o.origin_route is not None and o.origin_route.queue is None for o in self.origins):
            notes.append("to an exchange, each message is published to it with its routing key, and reaches the "
                         "queues its bindings route that key to (listed above)")
        if self.celery_tasks and not self.default_exchange:
            notes.append(f"{self.celery_tasks} Celery task(s) go through the default exchange (routing key = queue "
                         "name): Celery sends a retry to the exchange a task came from")
        return notes


def plan_from_survey(source: str, snapshot: int, looked_at: int, plan: Counter[tuple[str, str]]) -> ReplayPlan:
    origins = [OriginPlan(group, n) for (action, group), n in sorted(plan.items()) if action == Action.MOVE.value]
    stay: Counter[str] = Counter()
    for (action, group), n in plan.items():
        if action != Action.MOVE.value:
            stay[group] += n
    return ReplayPlan(source, snapshot, looked_at, origins, stay)


# -- the workflow --------------------------------------------------------------------------------------


class Replay:
    """A replay, prepared: the DLQ checked (it exists; not a stream; keeping messages by republishing them to
    its tail would not push out its head), the target's API asked once, the origins' capacity guard ready —
    nothing read yet. Then `plan()` (the dry run's, and what a confirmation shows) and `run(options)`.
    Notes and warnings go to `report` (stderr)."""

    def __init__(self, session: ReplaySession, settings: ReplaySettings, report: Reporter, *,
                 dry_run: bool = False) -> None:
        check_origin_from(settings.origin_from, settings.conventions)  # before anything is read
        if session.to.profile is not None:  # who publishes: a user_id property of another user is refused
            settings = replace(settings, publisher=session.to.profile.username, impersonator=impersonator(session.to))
        self.session, self.settings, self.report = session, settings, report
        self.info = queue_info(session.source, settings.source, report)
        if session.protocol == "1.0":  # what the 1.0 path cannot honour, refused before the plan reads anything
            from dlxtool.ops.pipeline_amqp10 import check_amqp10

            check_amqp10(session, settings.source, self.info)
        if settings.to_queue:
            check_to_queue(session, settings.to_queue)
        if self.info is None and not dry_run:
            refuse_unread_dlq_limits(session.source, settings)
        check_target_management(session, report)
        if self.info is None or self.info.messages_ready or self.info.messages_unacked:
            refuse_unchecked_routes(session, settings)
        check_alarms(session.to, report, "replayed")
        self.keep_refused = check_publish_rights(session, settings)
        if session.rooms is None:
            to = session.to
            session.rooms = rooms(to.conn, to.management, to.vhost, to.timeout,
                                  role="--to queue" if settings.to_queue else "origin",
                                  allow_displace=settings.allow_displace)

    def plan(self, read: ReadOptions | None = None, *, accept_conversion_loss: bool = False,
             amqp10_path: str | None = None, judge_conversion: bool = True, over: WireProtocol = "0-9-1",
             auto: bool = False) -> ReplayPlan:
        """What the replay would do, from the first messages, read as `peek` reads them (plan_for), and what
        RabbitMQ's conversion for the protocol it moves over (`over`) would lose of those it would move
        (dlxtool.ops.conversion_check); `auto`: choose the protocol by it afterwards (choose_protocol) — and where
        the read over 0.9.1 stops at a message RabbitMQ cannot convert for it, read the plan over 1.0 instead."""
        recall = self._recall() if auto and over == "0-9-1" else None
        forced = self._over_amqp10_remembered(recall) if recall is not None else None
        by_memo = forced is not None
        if forced is not None:
            over = "1.0"
        try:
            out = plan_for(self.session, self.settings, self.report, read)
        except UndeliverableError as stopped:
            if by_memo:  # over 1.0 (the memo): a decimal header ended it, which costs there too
                assert recall is not None
                recall.forget()  # the next plan reads over 0.9.1 first again, as without the memo
                raise
            if recall is not None:
                recall.remember(stopped.position)
            forced = self._over_amqp10_instead(stopped) if auto and over == "0-9-1" else None
            if forced is None:
                raise
            over = "1.0"
            out = plan_for(self.session, self.settings, self.report, read)
        if not out.moving_positions or not judge_conversion:
            if by_memo and not out.moving_positions and out.sampled:
                # nothing read here to judge the choice of 1.0 by, and the run goes past what was read: not moved
                # over 1.0 unjudged (over 0.9.1 it stops at that message, at its cost: said)
                self.session.protocol = "0-9-1"
                self.report.warn("the plan read over AMQP 1.0 holds nothing to replay, and the queue holds more: the "
                                 "run goes over AMQP 0.9.1 (--protocol auto), where it stops at the message this "
                                 "machine remembers at a delivery attempt's cost of it and those before it "
                                 "(--protocol 1.0 moves over 1.0 instead, unjudged)")
            out.records_read = []
            return out
        from dlxtool.ops.peek import ReadOptions

        out.conversion = check_conversion(
            self.session.source, self.settings.source, read or ReadOptions(max_unacked=self.session.plan_limit),
            include=self._taking(out), report=self.report,
            # the plan's own read is over the protocol the replay moves over
            read_091=None if over == "1.0" else out.records_read, read_10=out.records_read if over == "1.0" else None,
            accepted=accept_conversion_loss, amqp10_path=amqp10_path, over=over, limit=self.settings.selection.limit,
            keep_read=auto)
        if forced is not None and out.conversion is not None:  # both directions, from the plan's 1.0 read
            from dlxtool.ops.protocol_choice import settle

            out.conversion = settle(self.session, self._over_091_whole(out, accept_conversion_loss, amqp10_path),
                                    out.conversion, because=forced)
        out.records_read = []
        return out

    def _over_091_whole(self, out: ReplayPlan, accepted: bool, amqp10_path: str | None) -> ConversionCheck:
        """What a replay over 0.9.1 would lose of the messages the plan read over 1.0 (each whole)."""
        check = ConversionCheck(self.settings.source, accepted=accepted, amqp10_path=amqp10_path, sampled=out.sampled)
        classic = self.info is not None and self.info.type == "classic"
        judge_whole(check, out.records_read, roles(self._taking(out), self.settings.selection.limit, classic=classic),
                    poison=True)  # the plan's 0.9.1 read was closed at such a message
        return check

    def _recall(self) -> QueueMemo | None:
        """This machine's memo of the DLQ (dlxtool.ops.peek_past_poison.recall_for: 4.3, a quorum queue or one of
        a type not known)."""
        from dlxtool.ops.peek_past_poison import recall_for_queue

        source = self.session.source
        if source.profile is None:
            return None
        return recall_for_queue(source.profile, source.vhost, self.settings.source, self.info, source.conn)

    def _over_amqp10_remembered(self, recall: QueueMemo) -> str | None:
        """--protocol auto, a read from this machine met a message RabbitMQ cannot convert for 0.9.1 in this DLQ:
        why the plan is read over AMQP 1.0 straight away (`session.protocol` set), where the 1.0 path can take it —
        a 0.9.1 read would pay an attempt of it and of each message before it again. None: read as always."""
        from dlxtool.ops.peek_past_poison import remembered_words
        from dlxtool.ops.protocol_choice import amqp10_blocker

        sighting = recall.seen()
        if sighting is None:
            return None
        if self.settings.selection.sees_headers:  # over 1.0 a 0.9.1 message has no table headers to select by
            raise RefusedError(
                f"{remembered_words(sighting, self.settings.source)}: a read over AMQP 0.9.1 would spend a delivery "
                "attempt of it and of every message before it again, and over AMQP 1.0 the selection (it reads "
                "headers) would not see the table headers of messages published over 0.9.1; nothing was changed",
                hint="--protocol 0-9-1 reads and replays over 0.9.1 at that cost; --protocol 1.0 over 1.0, selecting "
                     "without those headers; or select by what 1.0 carries (--message-id, --routing-key …)")
        if amqp10_blocker(self.session, self.settings.source, self.info) is not None:
            return None
        self.session.protocol = "1.0"
        why = (f"{remembered_words(sighting, self.settings.source)}; a read over AMQP 0.9.1 would spend a delivery "
               "attempt of it and of every message before it again; over 1.0 it goes whole")
        self.report.info(f"reading the plan over AMQP 1.0 (--protocol auto): {why}")
        return why

    def _over_amqp10_instead(self, stopped: UndeliverableError) -> str | None:
        """--protocol auto, the plan's read over 0.9.1 stopped at a message RabbitMQ cannot convert for it: why the
        replay goes over AMQP 1.0 instead (`session.protocol` set), or None where the 1.0 path cannot take this DLQ
        (the error stands)."""
        from dlxtool.ops.protocol_choice import amqp10_blocker

        if amqp10_blocker(self.session, self.settings.source, self.info) is not None:
            return None
        self.session.protocol = "1.0"
        why = (f"the message at position {stopped.position} cannot be delivered over AMQP 0.9.1 (RabbitMQ cannot "
               "convert it: it closed the connection); over 1.0 it goes whole")
        self.report.warn(f"the plan's read over AMQP 0.9.1 stopped: {stopped.message}")  # what that cost, said
        self.report.info(f"reading the plan again over AMQP 1.0 (--protocol auto): {why}")
        return why

    def check_conversion(self, read: ReadOptions, *, accept_conversion_loss: bool = False,
                         amqp10_path: str | None = None, over: WireProtocol = "0-9-1",
                         plan: ReplayPlan | None = None, auto: bool = False,
                         read_091: list[MessageRecord] | None = None,
                         read_10: list[MessageRecord] | None = None) -> ConversionCheck | None:
        """The conversion check of the messages `plan` would move or, without a plan (--yes, --edit), of the
        selected messages at the head (what a plan's check judges, without the plan's decisions), for a move over
        `over`; `auto`: choose the protocol by it afterwards (choose_protocol); `read_091`: the head as the other
        direction's check read it over 0.9.1."""
        return check_conversion(self.session.source, self.settings.source, read,
                                include=self._taking(plan), report=self.report,
                                accepted=accept_conversion_loss, amqp10_path=amqp10_path, over=over,
                                limit=self.settings.selection.limit, keep_read=auto, read_091=read_091,
                                read_10=read_10)

    def choose_protocol(self, over_091: ConversionCheck | None, read: ReadOptions, *, plan: ReplayPlan | None = None,
                        accept_conversion_loss: bool = False,
                        amqp10_path: str | None = None) -> ConversionCheck | None:
        """--protocol auto (dlxtool.ops.protocol_choice): from the 0.9.1 check of the plan (or of the selection),
        the protocol this replay moves over — `session.protocol` — and the check to say."""
        from dlxtool.ops.protocol_choice import choose

        return choose(self.session, self.settings.source, self.info, over_091,
                      lambda read_091, read_10: self.check_conversion(
                          read, accept_conversion_loss=accept_conversion_loss, amqp10_path=amqp10_path, over="1.0",
                          plan=plan, read_091=read_091, read_10=read_10))

    def _taking(self, plan: ReplayPlan | None) -> Callable[[MessageRecord], bool]:
        """Whether the replay would take a message: one `plan` moves (by position or name), else one selected."""
        if plan is None:
            return self.settings.selection.matches
        names, positions = set(plan.moving_ids), plan.moving_positions
        return lambda r: r.position in positions or message_name(r) in names

    def run(self, options: TransferOptions, control: PassControl | None = None) -> MoveRun:
        """The pass itself: replay as a policy (ReplayPolicy) over the one move pipeline (dlxtool.ops.pipeline),
        with the user's `options` (sink, progress, prefetch …) and, for a guarded replay's pass, its `control`."""
        from dlxtool.ops.pipeline_amqp10 import run_move_over

        policy = ReplayPolicy(self.settings, self.session)
        prepared = Prepared(self.info, self.keep_refused, self.report)
        return run_move_over(self.session, policy, options, prepared, control)  # over the session's protocol


class ReplayPolicy:
    """Replay as a MovePolicy (dlxtool.ops.pipeline): each dead letter to its origin as ReplayDecider decides it,
    through the origins' routes (Routes: a temporary exchange per origin that keeps the routing key, or the
    default exchange; each key checked against the origin's dead-letter exchange); an exchange origin is admitted
    only where every queue it reaches has room (ExchangeTargets.admit)."""

    what, nothing, publishes, saved = "replay", "nothing replayed", True, None

    def __init__(self, settings: ReplaySettings, session: ReplaySession | None = None, *,
                 routes: Routes | None = None) -> None:
        self.settings = settings
        self.source = settings.source
        self.temporary_exchanges = not settings.default_exchange
        # --edit: the messages shown are the selection; the read may end once all of them were met
        self.limit = len(settings.edits) if settings.edits is not None else settings.selection.limit
        if session is not None:
            self.routes = routes or _routes(session, settings)
            self.targets = _exchange_targets(session, settings)
            self.waits = WaitQueues(_wait_router(session.source), settings.source)
        else:  # a bare connection (the ops layer's tests): nothing asked of a management API
            self.routes = routes or Routes(settings.default_exchange, exchanges=None, router=None,
                                           allow_drop=settings.allow_dlx_drop)
            self.targets = exchange_targets_for(settings, None, None)
            self.waits = WaitQueues(None, settings.source)
        self._decider: ReplayDecider | None = None
        self.reply_queue_exists = _reply_queues(session) if session is not None else None

    def decider(self, exchanges: TemporaryExchanges | None) -> Decider:
        self.routes.exchanges = exchanges
        self._decider = ReplayDecider(self.settings, routes=self.routes, wait_queues=self.waits,
                                      exchange_targets=self.targets,
                                      reply_queue_exists=self.reply_queue_exists)
        return self.routes.checked(self._decider)

    def admit(self, rooms: Rooms) -> Admit:
        return self.targets.admit(rooms)

    def describe(self, target: str) -> str:
        return self.targets.describe(target) or self.routes.describe(target)

    def filled(self, result: TransferResult) -> list[str]:
        return _moved_to(result, self.targets)

    def notes(self) -> list[str]:
        return self._decider.notes() if self._decider is not None else []


def _moved_to(result: TransferResult, targets: ExchangeTargets) -> list[str]:
    """The queues a run moved messages into: its queue targets, and those its exchange targets reach."""
    queues: list[str] = []
    for group in sorted(result.moved):
        reach = targets.reaches.get(group)
        queues += [group] if reach is None else list(reach.queues or ())
    return queues


def plan_for(session: ReplaySession, settings: ReplaySettings, report: Reporter,
             read: ReadOptions | None = None) -> ReplayPlan:
    """The plan, from the first messages of the DLQ read as `peek` reads them (dlxtool.ops.peek: the same rules and
    refusals for every queue type and broker version, the same flags in `read`: --spend-attempts, --allow-reorder,
    --max-unacked), at most `read.max_unacked` of them (default: the session's plan_limit)."""
    from dlxtool.ops.peek import ReadOptions, prepare_read

    source, to = session.source, session.to
    opts = read or ReadOptions(max_unacked=session.plan_limit)
    opts = replace(opts, count=opts.max_unacked)  # a sample: what one read may hold
    if source.profile is None:
        raise ConnectError("no broker profile to read the plan with")

    def management() -> ManagementClient:
        if source.management is None:
            raise ConnectError(source.management_error or "no management API")
        return source.management

    amqp10 = own = None
    try:
        if session.protocol == "1.0":  # read as the run reads: whole, over AMQP 1.0 (dlxtool.ops.peek_amqp10)
            from dlxtool.broker.amqp10.connection import open_connection
            from dlxtool.ops.peek_amqp10 import prepare_read_amqp10

            opts = replace(opts, protocol="1.0")
            amqp10 = open_connection(source.profile)
            reader, notes = prepare_read_amqp10(source.conn, amqp10, source.profile, settings.source, opts,
                                                management=management)
        else:
            own = _poisonable_read_connection(source)
            reader, notes = prepare_read(own or source.conn, source.profile, settings.source, opts,
                                         management=management)
    except RefusedError as exc:
        _close_quietly(own)
        if amqp10 is not None:
            amqp10.close()
        raise RefusedError(f"showing a plan reads the first messages as `peek` does, which is refused here: "
                           f"{exc.message}",
                           hint=f"{exc.hint + '; or ' if exc.hint else ''}--yes replays without a plan (a replay "
                                "settles what it reads: it gives nothing back)") from None
    except BaseException:
        _close_quietly(own)
        if amqp10 is not None:
            amqp10.close()
        raise
    try:
        for missing in reader.facts.missing_checks:
            report.warn(f"check not made: {missing}")
        for note in notes:
            report.info(note)
        records = list(reader.records())
        reader.tell(report)
    finally:
        _close_quietly(own)
        if amqp10 is not None:
            amqp10.close()
    out = plan(records, reader.facts.ready or len(records), settings, conn=session.target_conn or source.conn,
               timeout=source.timeout, rooms=session.rooms, exchange_targets=_exchange_targets(session, settings),
               router=_router(to.management, to.vhost), wait_router=_wait_router(source))
    out.records_read = records  # judged by their signs where the conversion check cannot read over AMQP 1.0
    return out


def _poisonable_read_connection(source: Session) -> AmqpConnection | None:
    """Where RabbitMQ closes the 0.9.1 connection a message it cannot convert is delivered to (4.x: an AMQP 1.0
    message with a char or uuid application property), the plan reads on a connection of its own: the session's
    stays open for what follows (--protocol auto then reads the plan over 1.0: Replay.plan). None: read on the
    session's."""
    if source.profile is None or not versions.char_uuid_poison_091(versions.server_version(source.conn)):
        return None
    conn: AmqpConnection = connect(source.profile)
    return conn


def _close_quietly(conn: AmqpConnection | None) -> None:
    if conn is not None:
        close_quietly(conn)


def _router(mgmt: ManagementClient | None, vhost: str) -> Router | None:
    return Router(mgmt, vhost) if mgmt is not None else None


def _wait_router(source: Session) -> Router | None:
    """The router that follows wait queues back (WaitQueues): whether one is consumed decides an origin, so its
    consumer count comes from the broker now (a passive declare), not the API's sample of up to 5 s ago."""
    if source.management is None:
        return None

    def consumers_now(queue: str) -> int | None:
        counted = now(source.conn, queue, source.timeout)
        return None if counted is None else counted.consumers

    return Router(source.management, source.vhost, consumers_now)


def _routes(session: ReplaySession, settings: ReplaySettings) -> Routes:
    to = session.to
    return Routes(settings.default_exchange, exchanges=None, router=_router(to.management, to.vhost),
                  allow_drop=settings.allow_dlx_drop)


def _reply_queues(session: ReplaySession) -> Callable[[str], bool | None]:
    """Whether a request's reply queue exists now on the broker its replies go to (the destinations'): a passive
    declare; None where the broker does not say."""
    to = session.to
    return _bounded_lookups(lambda name: queue_exists(to.conn, name, to.timeout))


# Distinct reply queues looked up in one run at most (a passive declare each, inside the run): an RPC DLQ can hold one
# server-named reply queue per caller; past this many, the rest are "cannot tell" (they go, as without the check).
MAX_REPLY_LOOKUPS = 100


def _bounded_lookups(exists: Callable[[str], bool]) -> Callable[[str], bool | None]:
    asked = 0

    def bounded(name: str) -> bool | None:
        nonlocal asked
        if asked >= MAX_REPLY_LOOKUPS:
            return None
        asked += 1
        try:
            return exists(name)
        except DlxtoolError:
            return None

    return bounded


def _exchange_targets(session: ReplaySession, settings: ReplaySettings) -> ExchangeTargets:
    to = session.to
    return exchange_targets_for(settings, _router(to.management, to.vhost),
                                lambda exchange: exchange_exists(to.conn, exchange, to.timeout))


# -- running -----------------------------------------------------------------------------------------


def replay(source_conn: AmqpConnection, settings: ReplaySettings, options: TransferOptions, *,
           target_conn: AmqpConnection | None = None, timeout: float = 30.0, routes: Routes | None = None,
           rooms: Rooms | None = None) -> TransferResult:
    """The replay pass on bare connections (the ops layer's tests; `Replay` checks and prepares first): the engine's
    TransferResult. Without `routes`, nothing is asked of a management API; with `rooms`, a message whose origin has
    no room left stays in the DLQ."""
    session = MoveSession(Session(source_conn, "/", "", timeout),
                          Session(target_conn, "/", "", timeout) if target_conn is not None else None, rooms=rooms)
    run = run_move(session, ReplayPolicy(settings, routes=routes), options)
    run.clean_up()
    return run.result


def plan(records: Iterable[MessageRecord], snapshot: int, settings: ReplaySettings, *, conn: AmqpConnection,
         timeout: float = 30.0, rooms: Rooms | None = None, router: Router | None = None,
         wait_router: Router | None = None, exchange_targets: ExchangeTargets | None = None) -> ReplayPlan:
    """What a replay would do with `records` (the first messages of a DLQ of `snapshot`, read and given back), as the
    engine would (--limit included). No temporary exchange is declared; a target that does not exist on `conn`'s
    broker is shown as such (`exists`). With `rooms`, each origin's room and how many of its messages would stay
    because it is full."""
    routes = Routes(settings.default_exchange, exchanges=lambda _q: "(temporary exchange)", router=router,
                    allow_drop=settings.allow_dlx_drop)
    targets = exchange_targets or exchange_targets_for(settings, router,
                                                       lambda exchange: exchange_exists(conn, exchange, timeout))
    decider = ReplayDecider(settings, routes=routes, wait_queues=WaitQueues(wait_router, settings.source),
                            exchange_targets=targets,
                            reply_queue_exists=_bounded_lookups(lambda name: queue_exists(conn, name, timeout)))
    decider.count_used_body_retries = True
    decide = routes.checked(decider)
    counted: Counter[tuple[str, str]] = Counter()
    names: dict[tuple[str, str], list[str]] = {}
    looked_at = selected = 0
    moving: set[int] = set()
    limit = settings.selection.limit
    for record in records:
        looked_at += 1
        name = message_name(record)  # before the decision: an --edit changes the message, not its name
        if limit is not None and selected >= limit:  # as the engine does: the rest stays where it is
            counted[(Action.KEEP.value, "beyond --limit")] += 1
            names.setdefault((Action.KEEP.value, "beyond --limit"), []).append(name)
            continue
        d = decide(record)
        selected += d.action is not Action.KEEP
        if d.action is Action.MOVE:
            moving.add(record.position)
        counted[(d.action.value, d.group)] += 1
        names.setdefault((d.action.value, d.group), []).append(name)
    out = plan_from_survey(settings.source, max(snapshot, looked_at), looked_at, counted)
    for (action, group), listed in names.items():
        if action != Action.MOVE.value:
            out.stay_ids.setdefault(group, []).extend(listed)
    out.default_exchange = settings.default_exchange
    out.moving_positions = moving
    out.used_body_retries = decider.used_body_retries
    out.origin_conflicts = decider.conflicts
    out.celery_tasks = decider.celery_tasks
    for origin in out.origins:
        origin.message_ids = names.get((Action.MOVE.value, origin.queue), [])
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
    for origin in out.origins:  # what does not fit stays: the last ones, as the run admits them in queue order
        if origin.exists is False:
            out.stay_ids.setdefault(f"queue {origin.queue!r} does not exist", []).extend(origin.message_ids)
        elif origin.would_stay_full and origin.full_reason:
            fits = len(origin.message_ids) - origin.would_stay_full
            out.stay_ids.setdefault(origin.full_reason, []).extend(origin.message_ids[fits:])
            origin.message_ids = origin.message_ids[:fits]
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


def queue_exists(conn: AmqpConnection, queue: str, timeout: float = 30.0) -> bool:
    """Passive declare on a throwaway channel (a missing queue closes the channel it is asked on)."""
    return queues.exists(conn, queue, timeout)
