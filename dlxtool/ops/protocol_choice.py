"""--protocol auto, the default of replay and move (issue 39: "where the broker speaks AMQP 1.0, dlxtool moves
messages over AMQP 1.0, so that an AMQP 1.0 message is replayed exactly as it was").

Neither protocol moves every message whole (dlxtool.ops.conversion_check): RabbitMQ converts an AMQP 1.0 message
for a 0.9.1 reader (subject, to, several data sections, milliseconds, types lost) and a 0.9.1 message for a 1.0
reader (its table and array headers lost). So auto judges the messages the run would take, as the check already
does for 0.9.1, and moves over the protocol that keeps them whole:

  * nothing would be lost over 0.9.1 (a 3.x broker, a queue of 0.9.1 messages, a DLQ of 1.0 messages that the
    conversion keeps): 0.9.1, as before — the path with every feature and the fast path;
  * messages published over AMQP 1.0 would lose data over 0.9.1, the 1.0 path can take this queue (RabbitMQ 4.x,
    python-qpid-proton, not a stream, not a quorum DLQ on 4.0–4.2: dlxtool.ops.pipeline_amqp10.check_amqp10) and
    none of the messages it would take loses anything over 1.0: 1.0, said before the question;
  * otherwise the 0.9.1 check stands (refused by default, exit 6), naming why 1.0 was not taken and, for a queue
    holding both kinds, what 1.0 would lose too.

The choice is made before anything moves, from reads made under peek's rules (no attempt spent where the version
allows), and never changes a run that an explicit --protocol asked for."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from dlxtool.errors import DlxtoolError

if TYPE_CHECKING:
    from dlxtool.broker.management import QueueInfo
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.ops.conversion_check import ConversionCheck
    from dlxtool.ops.session import MoveSession
    from dlxtool.record import MessageRecord

# judges the messages a run would take for a move over 1.0, from the head as the 0.9.1 check read it over 0.9.1 and
# over 1.0 where it kept those reads (None: it reads what it needs itself)
JudgeOver10 = Callable[["list[MessageRecord] | None", "list[MessageRecord] | None"], "ConversionCheck | None"]


class Judge(Protocol):
    """A command's conversion check of the messages its run would take, for a move over `over` (from the reads of
    the other direction's check, where it kept them): dlxtool.ops.conversion_check.check_conversion, bound to what
    the command takes."""

    def __call__(self, over: WireProtocol, read_091: list[MessageRecord] | None = None,
                 read_10: list[MessageRecord] | None = None, /) -> ConversionCheck | None: ...


def judge(session: MoveSession, queue: str, info: QueueInfo | None, judged: Judge, *,
          auto: bool) -> ConversionCheck | None:
    """The check to say (and refuse on) before a run from `queue` is asked: over the session's protocol, and with
    `auto` (no --protocol given) the protocol chosen by it (`choose`: session.protocol set to 1.0 where that keeps the
    messages whole)."""
    check = judged(session.protocol)
    if not auto:
        return check
    return choose(session, queue, info, check, lambda read_091, read_10: judged("1.0", read_091, read_10))


def amqp10_blocker(session: MoveSession, queue: str, info: QueueInfo | None) -> str | None:
    """Why a move from `queue` over AMQP 1.0 cannot be made on this session (None: it can), in the words the 1.0
    path would refuse it with."""
    from dlxtool.ops.pipeline_amqp10 import check_amqp10

    try:
        check_amqp10(session, queue, info)
    except DlxtoolError as refused:
        return refused.message
    return None


def choose(session: MoveSession, queue: str, info: QueueInfo | None, over_091: ConversionCheck | None,
           over_10: JudgeOver10) -> ConversionCheck | None:
    """The check to say (and refuse on) of a run whose protocol auto chooses, from the 0.9.1 check `over_091`;
    `over_10` judges the same messages for a move over 1.0, from the 0.9.1 check's read where it kept one (else it
    may read the head once more), asked only where 1.0 would keep what 0.9.1 loses. Where 1.0 is chosen,
    `session.protocol` is set to it and the 1.0 check is returned, `chosen`, with the 0.9.1 one as its `other`."""
    if over_091 is None or over_091.auto:  # decided already (Replay.plan, where its 0.9.1 read was closed)
        return over_091
    over_091.auto = True
    read_091, read_10 = over_091.records_091, over_091.records_10
    over_091.records_091 = over_091.records_10 = None  # not held past the choice
    if not over_091.losing:
        return over_091
    blocked = amqp10_blocker(session, queue, info)
    if blocked is None and over_091.decimal_at is not None:  # seen by the 0.9.1 read: no 1.0 read goes near it
        blocked = (f"a message published over AMQP 0.9.1 with a decimal header (#{over_091.decimal_at}) ends the "
                   "AMQP 1.0 session it is delivered to")
    if blocked is not None:
        over_091.amqp10_blocked = blocked
        return over_091
    return settle(session, over_091, over_10(read_091, read_10))


def settle(session: MoveSession, over_091: ConversionCheck, over_10: ConversionCheck | None, *,
           because: str | None = None) -> ConversionCheck:
    """Both directions judged (the 1.0 path can take this queue): 1.0 where it loses nothing of what it judged and
    judged everything the run takes — `session.protocol` set to it, the 1.0 check returned `chosen` (`because`:
    why, where the 0.9.1 check alone does not say it) — else the 0.9.1 check, which refuses, saying why not 1.0.
    Not judged whole is not chosen: a 0.9.1 message there would lose its table headers without a word (safe by
    default; --protocol 1.0 takes that risk knowingly)."""
    over_091.auto = True
    session.protocol = "0-9-1"
    if over_10 is None:
        return over_091
    over_10.auto = True
    if over_10.losing:
        over_091.other = over_10
        return over_091
    if over_10.unchecked:
        over_091.amqp10_unjudged = over_10.unchecked
        return over_091
    if over_091.sampled or over_10.sampled:  # the run goes on past what was read: those are judged by no one
        over_091.amqp10_unjudged = ("the queue holds more messages than the check read (--max-unacked, config "
                                    "dump_unacked_limit): those after them are judged by no one")
        return over_091
    over_10.chosen, over_10.other, over_10.chosen_because = True, over_091, because
    over_10.sampled = over_10.sampled or over_091.sampled
    session.protocol = "1.0"
    return over_10
