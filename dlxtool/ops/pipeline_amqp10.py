"""run_move over AMQP 1.0 (`--protocol 1.0`, RabbitMQ 4.x): the same MovePolicy, the same MoveRun, with the 1.0 mover
(dlxtool.ops.engine_amqp10) in place of the 0.9.1 engine. Callers that let the session choose (replay, move) call
run_move_over: a session whose `protocol` is "1.0" runs here, any other on dlxtool.ops.pipeline.run_move.

What it shares with the 0.9.1 pipeline: the temporary exchanges that keep a message's routing key (made over 0.9.1,
sent to over 1.0 as /exchanges/NAME/KEY), the destinations' room (read again as the run starts, asked per message),
the MoveRun with its routes, filled queues and depths. What it does not do yet, refused before anything is read
(`check_amqp10`) rather than half done: a broker without AMQP 1.0 facts (3.x: exit 2), a stream source (exit 2), a
source whose give-backs would spend delivery attempts (a quorum queue on 4.0–4.2, or one whose type the management
API cannot tell there: exit 6).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dlxtool.broker import queues
from dlxtool.broker.queues import now
from dlxtool.errors import NotFoundError, RefusedError, UsageError
from dlxtool.ops import pipeline
from dlxtool.ops.pipeline import MovePolicy, MoveRun, Prepared, admitting, exchanges_of, finished, run_pass
from dlxtool.ops.transfer_settings import PassControl, RunHooks, TransferOptions

if TYPE_CHECKING:
    from dlxtool.broker.amqp10.outcomes import DeliveryState
    from dlxtool.broker.management import QueueInfo
    from dlxtool.broker.versions import Version
    from dlxtool.ops.record_source import RecordFile
    from dlxtool.ops.session import MoveSession, Session


def run_move_over(session: MoveSession, policy: MovePolicy, options: TransferOptions,
                  prepared: Prepared | None = None, control: PassControl | None = None,
                  records: RecordFile | None = None) -> MoveRun:
    """run_move over the session's protocol (MoveSession.protocol: --protocol, DLXTOOL_PROTOCOL); `records`: the
    source is that file of records (load)."""
    if session.protocol == "1.0":
        if records is not None:
            return run_from_file_amqp10(session, policy, options, records)
        return run_move_amqp10(session, policy, options, prepared, control)
    # looked up now: what a test wraps is what runs
    return pipeline.run_move(session, policy, options, prepared, control, records)


def run_from_file_amqp10(session: MoveSession, policy: MovePolicy, options: TransferOptions,
                         records: RecordFile) -> MoveRun:
    """Run `policy` over a file of records over AMQP 1.0 (dlxtool.ops.file_pass_amqp10), sent on a connection of
    its own; the temporary exchanges and the queue checks over 0.9.1."""
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.ops.file_pass_amqp10 import Amqp10FilePass

    to = session.to
    require_amqp10(to)
    assert to.profile is not None  # require_amqp10
    hooks = admitting(session, policy, RunHooks())
    exchanges = exchanges_of(session, policy)
    sender = open_connection(to.profile)
    try:
        result = run_pass(policy, exchanges, lambda decide: Amqp10FilePass(
            sender, to.conn, records, decide, options=options, hooks=hooks, timeout=to.timeout).run())
    finally:
        sender.close()
    return finished(session, policy, result, exchanges, from_queue=False)


def run_move_amqp10(session: MoveSession, policy: MovePolicy, options: TransferOptions,
                    prepared: Prepared | None = None, control: PassControl | None = None) -> MoveRun:
    """Run `policy` over its source on `session`, over AMQP 1.0 (the module docstring), with a guarded replay's
    `control` for this pass (the brake's stop; the canary's pick, read_at_most and pace)."""
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.ops.engine_amqp10 import Amqp10Transfer

    prepared = prepared or Prepared()
    source, to = session.source, session.to
    give_back = check_amqp10(session, policy.source, prepared.info)
    hooks = admitting(session, policy, RunHooks(report=prepared.report, size_hint=None))
    counted = now(source.conn, policy.source, source.timeout)
    if counted is None:
        raise NotFoundError(f"queue {policy.source!r} not found in vhost {source.vhost!r}")
    assert source.profile is not None and to.profile is not None  # check_amqp10
    exchanges = exchanges_of(session, policy)
    reader = open_connection(source.profile)
    try:
        # sends on a connection of their own: a resource alarm that holds back publishers leaves the reader's
        # settlements and give-backs flowing (as the 0.9.1 pipeline keeps publishing off the consuming connection)
        sender = open_connection(to.profile)
    except BaseException:
        reader.close()
        raise
    try:
        result = run_pass(policy, exchanges, lambda decide: Amqp10Transfer(
            reader, policy.source, decide, snapshot=counted.ready, give_back=give_back, send_conn=sender,
            options=replace(options, limit=policy.limit), hooks=hooks, control=control, timeout=source.timeout,
            exists=lambda q: queues.exists(to.conn, q, to.timeout)).run())
    finally:
        sender.close()
        reader.close()
    return finished(session, policy, result, exchanges)


def check_amqp10(session: MoveSession, queue: str, info: QueueInfo | None) -> DeliveryState:
    """Refuse what the 1.0 path cannot honour yet (the module docstring), before anything is read; the outcome that
    gives a message back to `queue` without spending a delivery attempt."""
    from dlxtool.broker import versions
    from dlxtool.broker.amqp10 import outcomes

    for side in {id(s): s for s in (session.source, session.to)}.values():
        require_amqp10(side)
    if info is not None and info.type == "stream":
        raise UsageError(f"{queue!r} is a stream: --protocol 1.0 moves messages from classic and quorum queues",
                         hint="--protocol 0-9-1 (or leave --protocol out: auto moves over 0.9.1 there)")
    version = _version(session.source)
    refusal = give_back_refusal(queue, version, info.type if info is not None else None)
    if refusal is not None:
        raise refusal
    how = versions.amqp10_peek_give_back(version)
    return outcomes.MODIFY_UNCOUNTED if how == "modified" else outcomes.RELEASE


def give_back_refusal(queue: str, version: Version | None, queue_type: str | None) -> RefusedError | None:
    """Why a move over AMQP 1.0 from `queue` (of `queue_type`: None or "unknown" where the management API cannot
    tell) is refused on this broker: every AMQP 1.0 give-back of a quorum queue's message counts a delivery attempt
    on 4.0–4.2, and a move gives back what stays (None: it is not refused). replay --edit asks it before the editor
    opens, the run again before anything is read."""
    from dlxtool.broker import versions

    if versions.amqp10_peek_give_back(version) is not None or queue_type == "classic":
        return None
    kind = "a quorum queue" if queue_type not in (None, "unknown") else "a queue whose type the management API " \
        "cannot tell"
    return RefusedError(f"{queue!r} is {kind}, and on RabbitMQ {version} every AMQP 1.0 give-back of a quorum "
                        "queue's message counts a delivery attempt: the messages a run over 1.0 leaves (not selected, "
                        "or refused by their destination) would each spend one",
                        hint="--protocol 0-9-1: over 0.9.1 what stays is republished to the DLQ's tail instead; "
                             "nothing was changed")


def _version(side: Session) -> Version | None:
    from dlxtool.broker import versions

    return versions.server_version(side.conn)


def require_amqp10(side: Session) -> None:
    """Refuse a broker this run cannot use AMQP 1.0 with (3.x, no profile to connect with, no python-qpid-proton):
    exit 2, before anything is read or published (load --protocol 1.0 asks it too)."""
    from dlxtool.broker import versions
    from dlxtool.broker.amqp10 import INSTALL_HINT, available

    version = versions.server_version(side.conn)
    if not versions.speaks_amqp10(version):
        raise UsageError(f"--protocol 1.0 moves messages on RabbitMQ 4.x; broker {side.broker or 'of this run'!r} is "
                         f"{version or 'of an unknown version'}",
                         hint="--protocol 0-9-1 (or leave --protocol out: auto moves over 0.9.1 there)")
    if side.profile is None:
        raise UsageError("--protocol 1.0 needs a broker profile to open its AMQP 1.0 connections")
    if not available():
        from dlxtool.broker.amqp10.connection import Amqp10Unavailable

        raise Amqp10Unavailable("--protocol 1.0 needs python-qpid-proton, which is not installed", hint=INSTALL_HINT)
