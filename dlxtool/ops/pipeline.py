"""How messages move from one queue to others, written once (issue 36): every command that moves messages is a
`MovePolicy`, and `run_move` runs it.

A policy holds what is its own: the queue it reads (`source`), how each message is decided (`decider`: the
engine's per-message Decision, with its optional fast form on the bytes, `.raw`), where a move may go (`admit`:
the destinations' room, each queue an exchange route reaches included), the routes in words for the summary,
the queues it filled, and the words of its result. It checks what it must before anything is read (replay's
checks: dlxtool.ops.replay_checks; move's: dlxtool.ops.move) and hands over what they found (`Prepared`).

run_move holds what every move shares:

  * the publishing connections: never the one the source is consumed on, so that a resource alarm (which blocks
    the connections that publish) leaves the consumer's acks and give-backs flowing;
  * the temporary exchanges that keep each message's routing key (dlxtool.ops.routes.TemporaryExchanges): made as
    destinations come up, deleted by the caller once the summary is out (`MoveRun.clean_up`), or at once if the
    run fails;
  * what stays: held and given back in place while nothing moved, where that costs nothing (a classic source: a
    run that moves nothing changes nothing), else republished to the source's tail; held where the tail cannot
    take it (`Prepared.keep_refused`);
  * the destinations' room (dlxtool.ops.capacity.Rooms): read again as the run starts (a plan's figures are as
    old as the user's reading of it), counted down per publish and read again when it runs out; a nack from a
    reject-publish-dlx destination counted as a possible duplicate;
  * the byte budget's first guess (the source's average body, dlxtool.budget);
  * the engine pass (dlxtool.ops.engine.Transfer) with settlement, and the depths after the run, counted by the
    broker;
  * the typed result (`MoveRun`) and its outcome (dlxtool.ops.outcomes).

A source may be a file of records instead of a queue (load: `records`, dlxtool.ops.record_source): the file pass
(dlxtool.ops.file_pass) runs in place of the engine, under the same decisions, room, exchanges and result.

Not through it, on purpose: a plain `purge` (no selection, no --backup, no --move-to) is the broker's own queue.purge
(dlxtool.ops.purge): one method, no message read, decided or published — nothing a policy would decide.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from dlxtool.broker.connection import close_quietly, connect
from dlxtool.budget import average_body
from dlxtool.ops.engine import Transfer
from dlxtool.ops.file_pass import FilePass
from dlxtool.ops.outcomes import depths_now, transfer_outcome
from dlxtool.ops.routes import TemporaryExchanges
from dlxtool.ops.transfer_result import TransferResult
from dlxtool.ops.transfer_settings import PassControl, RunHooks, TransferOptions

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.management import QueueInfo
    from dlxtool.message_ids import MessageIds
    from dlxtool.ops.actions import Decider
    from dlxtool.ops.capacity import Admit, Rooms
    from dlxtool.ops.record_source import RecordFile
    from dlxtool.ops.session import MoveSession, Reporter
    from dlxtool.outcome import Outcome


class MovePolicy(Protocol):
    """What one command decides; run_move does the rest (the module docstring)."""

    @property
    def source(self) -> str: ...            # the queue read

    @property
    def what(self) -> str: ...              # "replay", "move": the outcome's words ("replay stopped …")

    @property
    def nothing(self) -> str: ...           # "nothing replayed": a run that moved nothing

    @property
    def temporary_exchanges(self) -> bool: ...  # moves keep their routing key through temporary exchanges

    @property
    def limit(self) -> int | None: ...      # at most this many selected messages

    @property
    def publishes(self) -> bool: ...        # it may publish (moves, or stays republished to the tail)

    @property
    def saved(self) -> str | None: ...      # the file the records go to (said in the outcome), if any

    def decider(self, exchanges: TemporaryExchanges | None) -> Decider:
        """The run's per-message decision (with `.raw`, its fast form, where it has one); `exchanges`: the run's
        temporary exchanges on the destinations' broker (None: on the default exchange)."""
        ...

    def admit(self, rooms: Rooms) -> Admit:
        """Whether a move may go now, by the destinations' room (Rooms.admit, or more for exchange routes)."""
        ...

    def describe(self, target: str) -> str:
        """How the messages moved to `target` were published, in words (the summary's route column)."""
        ...

    def filled(self, result: TransferResult) -> list[str]:
        """The queues the run moved messages into (their depths are counted after the run)."""
        ...

    def notes(self) -> list[str]:
        """What the operator should know of how the decisions went (TransferResult.notes)."""
        ...


@dataclass(frozen=True)
class Prepared:
    """What the policy's checks found before anything was read: the source queue's facts (None: the management
    API could not say), why what stays cannot be republished to the source's tail (None: it can), where notes go."""

    info: QueueInfo | None = None
    keep_refused: str | None = None
    report: Reporter | None = None


@dataclass
class MoveRun:
    """A finished run: the engine's result, each destination's route in words, the depths after it (counted by
    the broker), the queues it filled; `clean_up` deletes the temporary exchanges (the caller calls it once the
    summary is out: a stop signal during a clean-up before it would cut the summary off)."""

    result: TransferResult
    what: str = "move"
    nothing: str = "nothing moved"
    saved: str | None = None  # the file that holds the records written so far
    routes: dict[str, str] = field(default_factory=dict[str, str])
    clean_up: Callable[[], None] = field(default=lambda: None, repr=False)
    depths: dict[str, dict[str, int]] = field(default_factory=dict[str, dict[str, int]])
    filled: list[str] = field(default_factory=list[str])

    @property
    def ids(self) -> MessageIds:
        """The message ids of what the run moved or removed (the journal's)."""
        return self.result.ids

    def outcome(self) -> Outcome:
        """Done; partial (exit 5); refused (6) when nothing moved because of where it was to go; interrupted;
        stopped by the broker or an error (dlxtool.ops.outcomes)."""
        return transfer_outcome(self.result, self.what, saved=self.saved, nothing=self.nothing)


def run_move(session: MoveSession, policy: MovePolicy, options: TransferOptions,
             prepared: Prepared | None = None, control: PassControl | None = None,
             records: RecordFile | None = None) -> MoveRun:
    """Run `policy` over its source on `session` with the user's run `options` (prefetch, window, rate, sink,
    progress, byte budget) and, for a guarded replay's pass, its `control` (dlxtool.ops.canary): the module
    docstring says what it owns. Over AMQP 0.9.1; a caller that lets the session choose the protocol calls
    dlxtool.ops.pipeline_amqp10.run_move_over. `records`: the source is that file of records, not a queue (load)."""
    if records is not None:
        return run_from_file(session, policy, options, records)
    prepared = prepared or Prepared()
    source = session.source
    info = prepared.info
    hooks = admitting(session, policy, RunHooks(
        hold_stays=info is not None and info.type == "classic", keep_refused=prepared.keep_refused,
        report=prepared.report, size_hint=_average_body(info)))
    exchanges = exchanges_of(session, policy)
    limit = policy.limit
    if limit is not None:  # deliveries beyond the limit would only be given back (a delivery attempt each: quorum)
        options = replace(options, prefetch=max(1, min(options.prefetch, limit)))
    publishing = _publishing_connections(session) if policy.publishes else _Publishing(session.target_conn, None)
    try:
        result = run_pass(policy, exchanges, lambda decide: Transfer(
            source.conn, policy.source, decide, target_conn=publishing.target, keep_conn=publishing.keep,
            options=replace(options, limit=limit), hooks=hooks, control=control, timeout=source.timeout).run())
    finally:
        publishing.close()
    return finished(session, policy, result, exchanges)


def run_from_file(session: MoveSession, policy: MovePolicy, options: TransferOptions, records: RecordFile) -> MoveRun:
    """Run `policy` over a file of records (dlxtool.ops.record_source) over AMQP 0.9.1: the file pass
    (dlxtool.ops.file_pass) in place of the queue engine. What stays goes to the file's --failed. It publishes on a
    connection of its own, as every move does: a resource alarm blocks that one, and the session's stays free for
    the depths after the run and the temporary exchanges' deletion."""
    to = session.to
    hooks = admitting(session, policy, RunHooks())
    exchanges = exchanges_of(session, policy)
    publishing = connect(to.profile) if to.profile is not None else None  # None: a caller with a connection only
    try:
        result = run_pass(policy, exchanges, lambda decide: FilePass(
            publishing or to.conn, records, decide, options=options, hooks=hooks, timeout=to.timeout).run())
    finally:
        if publishing is not None:
            close_quietly(publishing)  # a blocked one is dropped, not waited on
    return finished(session, policy, result, exchanges, from_queue=False)


def admitting(session: MoveSession, policy: MovePolicy, hooks: RunHooks) -> RunHooks:
    """`hooks` with the policy's admission over the destinations' room, read again now: the plan's figures are as
    old as the user's reading of it."""
    rooms = session.rooms
    if rooms is None:
        return hooks
    rooms.forget()
    return replace(hooks, admit=policy.admit(rooms), nack_copies=rooms.nack_copies, nack_cause=rooms.nack_cause)


def exchanges_of(session: MoveSession, policy: MovePolicy) -> TemporaryExchanges | None:
    """The run's temporary exchanges (made over 0.9.1 on the destination's broker), where the policy keeps routing
    keys through them."""
    to = session.to
    return TemporaryExchanges(to.conn, to.timeout, policy.what.split()[0]) if policy.temporary_exchanges else None


def run_pass(policy: MovePolicy, exchanges: TemporaryExchanges | None,
             engine: Callable[[Decider], TransferResult]) -> TransferResult:
    """One engine pass of `policy` (either protocol's engine, started by `engine` with the policy's decider) with the
    policy's notes; the temporary exchanges deleted at once if it fails (a finished run's go with its summary)."""
    try:
        result = engine(policy.decider(exchanges))
        result.notes.extend(policy.notes())
    except BaseException:
        if exchanges is not None:
            exchanges.delete_all()
        raise
    return result


def finished(session: MoveSession, policy: MovePolicy, result: TransferResult,
             exchanges: TemporaryExchanges | None, *, from_queue: bool = True) -> MoveRun:
    """The MoveRun of a finished pass (over either protocol): its routes in words, the queues it filled and the
    depths after it, counted by the broker (the source's too where it is a queue: `from_queue`)."""
    source, to = session.source, session.to
    out = MoveRun(result, policy.what, policy.nothing, policy.saved)
    if exchanges is not None:  # first: whatever fails below, the caller's clean-up still deletes them
        out.clean_up = exchanges.delete_all
    out.routes = {t: policy.describe(t) for t in sorted(result.moved)}
    out.filled = policy.filled(result)
    out.depths = depths_now([(source.conn, [policy.source] if from_queue else []), (to.conn, out.filled)],
                            source.timeout)
    return out


def _average_body(info: QueueInfo | None) -> int | None:
    return average_body(info.raw) if info is not None else None


@dataclass
class _Publishing:
    """The connections a run publishes on: never the one it consumes on (the module docstring)."""

    target: AmqpConnection | None  # moves (None: the source connection, where no profile can open another)
    keep: AmqpConnection | None    # stays, republished to the source's tail (None: the source connection)
    opened: tuple[AmqpConnection, ...] = ()

    def close(self) -> None:
        for conn in self.opened:
            close_quietly(conn)  # a blocked one is dropped, not waited on


def _publishing_connections(session: MoveSession) -> _Publishing:
    source = session.source
    if source.profile is None:  # a caller with a connection only (tests of the ops layer)
        return _Publishing(session.target_conn, None)
    keep = connect(source.profile)
    if session.target is not None:
        return _Publishing(session.target.conn, keep, (keep,))
    return _Publishing(keep, keep, (keep,))
