"""`dlxtool move SRC DST`: messages from one queue to another, unchanged, on one broker or two — a MovePolicy
(QueueMove) over the one move pipeline (dlxtool.ops.pipeline.run_move), which does everything else: publishing
connection, temporary exchanges, what stays, the destination's room, depths, the result.

Each message keeps its routing key (through a temporary exchange bound only to DST, or with --default-exchange
the key DST's name) and goes only where DST's dead-letter exchange would route that key at its next failure
(dlxtool.ops.routes.Routes); what does not fit in DST (a length limit that would push out its head) stays, as do
the messages the selection does not select, in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dlxtool.errors import QueueNotFound, UsageError
from dlxtool.ops.actions import Action, Decision
from dlxtool.ops.routes import Router, Routes, usable_router
from dlxtool.ops.stay import Why
from dlxtool.selection import Selection

if TYPE_CHECKING:
    from dlxtool.ops.actions import Decider, RawDecide
    from dlxtool.ops.capacity import Admit, Rooms
    from dlxtool.ops.pipeline import Prepared
    from dlxtool.ops.routes import TemporaryExchanges
    from dlxtool.ops.session import MoveSession, Reporter
    from dlxtool.ops.transfer_result import TransferResult
    from dlxtool.record import MessageRecord


@dataclass(frozen=True)
class MoveSettings:
    source: str
    destination: str
    selection: Selection = field(default_factory=Selection)
    default_exchange: bool = False  # publish on the default exchange (routing key = DST's name)
    allow_dlx_drop: bool = False    # move where DST's dead-letter exchange would drop the key (or unchecked)
    allow_displace: bool = False    # move into a full drop-head DST anyway (it pushes out its head)


class MoveDecider:
    """decide(record): not selected → KEEP; selected → MOVE to `destination`, unchanged, keeping its routing key
    where its route does (`routes`), or LEAVE with the route's reason (DST's dead-letter exchange would drop
    the key)."""

    raw: RawDecide | None = None  # no fast form: every message is decided whole

    def __init__(self, selection: Selection, destination: str, routes: Routes) -> None:
        self.selection, self.destination, self.routes = selection, destination, routes

    def __call__(self, record: MessageRecord) -> Decision:
        if not self.selection.matches(record):
            return Decision.keep()
        return self.move(record)

    def move(self, record: MessageRecord) -> Decision:
        key = record.routing_key
        to = self.destination
        route = self.routes.with_key(to, key) if type(key) is str else self.routes.by_queue_name(to)
        if isinstance(route, Why):
            return Decision.leave(route)
        exchange, keeps_key = route
        return Decision(Action.MOVE, to, exchange, key if keeps_key else to)


class QueueMove:
    """`dlxtool move` as a MovePolicy (dlxtool.ops.pipeline)."""

    what, nothing, saved, publishes = "move", "nothing moved", None, True

    def __init__(self, settings: MoveSettings, router: Router | None) -> None:
        self.settings, self.router = settings, router
        self.source = settings.source
        self.temporary_exchanges = not settings.default_exchange
        self.limit = settings.selection.limit
        self.routes = self._routes(None)

    def _routes(self, exchanges: TemporaryExchanges | None) -> Routes:
        return Routes(self.settings.default_exchange, exchanges=exchanges, router=self.router,
                      allow_drop=self.settings.allow_dlx_drop)

    def decider(self, exchanges: TemporaryExchanges | None) -> Decider:
        self.routes = self._routes(exchanges)
        return MoveDecider(self.settings.selection, self.settings.destination, self.routes)

    def admit(self, rooms: Rooms) -> Admit:
        return rooms.admit

    def describe(self, target: str) -> str:
        return self.routes.describe(target)

    def filled(self, result: TransferResult) -> list[str]:
        return [self.settings.destination] if result.moved else []

    def notes(self) -> list[str]:
        return []


def prepare(session: MoveSession, settings: MoveSettings, report: Reporter) -> tuple[QueueMove, Prepared]:
    """Before anything is read, each refusal changing nothing: SRC is a queue messages can be taken from (not a
    stream; exit 4 when missing), DST exists (exit 4), keeping messages by republishing them to SRC's tail would not
    push out its head, no alarm blocks publishing (exit 7), this user may publish the way the move will (exit 6).
    The policy, and what the checks found for the run."""
    from dlxtool.broker import queues
    from dlxtool.ops.alarms import check_alarms
    from dlxtool.ops.capacity import rooms
    from dlxtool.ops.pipeline import Prepared
    from dlxtool.ops.publish_rights import refuse_without_publish_rights
    from dlxtool.ops.purge import check_keep_by_republish, check_purgeable, queue_state

    source, to = session.source, session.to
    if settings.source == settings.destination and session.target is None:
        raise UsageError("SRC and DST are the same queue", hint="name another queue, or --target-broker")
    state = queue_state(source.conn.channel(), source.management, source.vhost, settings.source)
    if state.note:
        report.warn(state.note)
    check_purgeable(state, "moved from")
    if settings.selection.filters_anything:  # the others stay by being republished to SRC's tail
        check_keep_by_republish(settings.source, state.tail_republish_risk, state.limits_unknown)
    try:
        queues.counts(to.conn.channel(), settings.destination, to.vhost)
    except QueueNotFound as exc:
        where = f" on {to.broker!r}" if session.target is not None else ""
        raise QueueNotFound(settings.destination, to.vhost, f"destination queue {settings.destination!r} not found in "
                            f"vhost {to.vhost!r}{where}", hint=exc.hint) from None
    check_alarms(to, report, "moved")
    refuse_without_publish_rights(to, default_exchange=settings.default_exchange, nothing="nothing can be moved")
    session.rooms = rooms(to.conn, to.management, to.vhost, to.timeout, role="destination",
                          allow_displace=settings.allow_displace)
    policy = QueueMove(settings, usable_router(to.management, to.vhost))
    return policy, Prepared(state.info, None, report)
