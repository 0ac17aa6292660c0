"""A read that does not stop at a message AMQP 0.9.1 cannot be given (issue 39: "never let one poison message lock
a DLQ").

RabbitMQ 4.x closes a 0.9.1 connection it is delivering an AMQP 1.0 message to whose application properties hold a
char or a uuid (541 INTERNAL_ERROR, mc_amqpl:to_091; dlxtool.broker.versions.char_uuid_poison_091). A 0.9.1 read
(dlxtool.ops.peek.QueueReader) stops there and names the message by its position. With --protocol auto (the default
of peek, history and dump) the queue is then read again from the head over AMQP 1.0, which the broker can give that
message, under the 1.0 peek's own rules and checks (dlxtool.ops.peek_amqp10: an outcome that spends no attempt where
the version has one, else refused unless --spend-attempts), and that read is what is shown, whole: the broker's
close of the first read may have moved what it held (on a quorum queue, behind a block of returned messages at the
head), so the two reads' positions cannot be spliced. The first read's records are kept until the second has read
(both in memory for that moment: each within the read's bounds) and are shown where the second cannot be made, fails,
or stops earlier than the first (a message 1.0 cannot be given: a 0.9.1 decimal header).

Where the broker's close of that first read costs something — a quorum queue on a version where a lost connection
counts a delivery attempt of every message it held (4.3) — the first run pays it once, and every run after it would
pay again, toward the delivery limit at which the broker drops the message and the healthy ones before it. So the
stop is remembered (`recall`: dlxtool.poison_memo, this machine's memo of the queue), and a later auto read of that
queue goes straight over AMQP 1.0, which gives such a message back without a cost (4.3: `released`), and shows that
read; no 0.9.1 read is made. Only where it read the whole queue without meeting one is the memo let go of and the
0.9.1 read made as always. A direct read that a decimal header ended before any such message is kept as the second
read of the 0.9.1 read that follows (never a third read). Where the position of such a message cannot be known
without delivering it, this is the least a read can spend: once per machine, not once per run.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING

from dlxtool import waits
from dlxtool.errors import DlxtoolError, UndeliverableError

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.management import QueueInfo
    from dlxtool.broker.versions import Version
    from dlxtool.config import BrokerProfile
    from dlxtool.ops.peek import Coverage, QueueFacts, QueueReader, ReadOptions
    from dlxtool.ops.peek_amqp10 import Amqp10QueueReader
    from dlxtool.ops.session import Reporter
    from dlxtool.poison_memo import QueueMemo, Sighting
    from dlxtool.record import MessageRecord

# Opens the read over AMQP 1.0: its reader and the notes of its checks (dlxtool.ops.peek_amqp10.read_on_over_amqp10).
OpenRead = Callable[[], "tuple[Amqp10QueueReader, list[str]]"]
# How long the second read waits for the queue to hold again what the first read's closed connection held
# (wait_until_back): the broker puts it back in milliseconds; more means messages went elsewhere meanwhile.
BACK_WAIT_SECONDS = 2.0
BACK_POLL_SECONDS = 0.01
# A read over 1.0 made and not yet shown: the reader, the notes of its checks, its first batch and the rest
_Made = tuple["Amqp10QueueReader", list[str], "list[MessageRecord] | None",
              Generator[list["MessageRecord"], None, None]]


def recall_for(profile: BrokerProfile, vhost: str, queue: str, *, quorum: bool,
               version: Version | None) -> QueueMemo | None:
    """This machine's memo of `queue` (dlxtool.poison_memo), where a 0.9.1 read's stop at a message it cannot be
    given costs attempts and a 1.0 read gives messages back without one: a quorum queue (or one whose type could not
    be told: `quorum`) on 4.3. None elsewhere: there the 0.9.1 read costs nothing and shows every header, so it goes
    first as always."""
    from dlxtool.broker import versions

    if not (quorum and version is not None and versions.char_uuid_poison_091(version)
            and versions.quorum_give_back_counts(version, "lost")
            and versions.amqp10_peek_give_back(version) is not None):
        return None
    from dlxtool.poison_memo import PoisonMemo, QueueMemo, memo_key, memo_path

    key = memo_key([(node.host, node.port) for node in profile.nodes], vhost, queue)
    return QueueMemo(PoisonMemo(memo_path(profile.env)), key, str(version))


def recall_for_queue(profile: BrokerProfile, vhost: str, queue: str, info: QueueInfo | None,
                     conn: AmqpConnection) -> QueueMemo | None:
    """recall_for a queue known by its management API row (`info`; None: its type not known, read as quorum) on the
    broker of `conn` (its version, from connection.start)."""
    from dlxtool.broker import versions

    quorum = info is None or info.type in ("quorum", "unknown")
    return recall_for(profile, vhost, queue, quorum=quorum, version=versions.server_version(conn))


def remembered_words(sighting: Sighting, queue: str) -> str:
    """The memo's sighting, said: where and when a read from this machine met such a message."""
    return (f"a read from this machine found a message AMQP 0.9.1 cannot be given (an AMQP 1.0 message whose "
            f"application properties hold a char or a uuid) at position {sighting.position} of {queue!r} on "
            f"{sighting.at} (remembered for 12 hours in $XDG_STATE_HOME/dlxtool/poison-091.json, "
            "~/.local/state/dlxtool/ by default: delete it to forget)")


class PastPoison:
    """The first read over 0.9.1 and, where it stopped at a message 0.9.1 cannot be given, a second read of the queue
    over AMQP 1.0, shown instead (the module docstring). Read as a QueueReader is: `batches()`, then `tell(report)`.

    A QueueReader makes its whole read (and gives the messages back) before its first batch, and decodes each batch
    as it is yielded: so each read's first batch says where it stopped, and only the batches of the read shown are
    decoded and yielded, one at a time (the records of the other are let go of)."""

    def __init__(self, first: QueueReader, over_amqp10: OpenRead, recall: QueueMemo | None = None,
                 until_back: Callable[[], object] | None = None) -> None:
        self.first = first
        self._until_back = until_back  # before the second read: the first's held messages back (wait_until_back)
        self.recall = recall  # this machine's memo of the queue, where a 0.9.1 read's stop costs attempts
        self.sighting: Sighting | None = None  # what the memo held when the read began
        self.direct = False     # the read shown went straight over 1.0 (the memo): no 0.9.1 read was made
        self.gone = False       # a direct read found the queue (read whole) without such a message: memo let go of
        self._made: _Made | None = None  # a direct read a decimal header ended first: the second read, if one is due
        self.made_unshown: QueueReader | None = None  # that read, where no second read was due: what it did, said
        self.not_read_directly: str | None = None  # why the direct read could not be made (the 0.9.1 read went on)
        self.remembered = False  # the memo took this read's stop (so the next auto read goes straight over 1.0)
        self.second: QueueReader | None = None   # the read shown: made, and it got further than the first
        self.shorter: QueueReader | None = None  # a second read that stopped no further than the first (not shown)
        self._open = over_amqp10
        self.not_read_on: str | None = None      # why the second read could not be made, or failed
        self.at: int | None = None               # the position the first read stopped at

    @property
    def shown_by(self) -> QueueReader:
        return self.second or self.first

    @property
    def facts(self) -> QueueFacts:
        return self.first.facts

    @property
    def opts(self) -> ReadOptions:
        return self.shown_by.opts

    @property
    def read(self) -> int:
        return self.shown_by.read

    @property
    def hidden(self) -> int:
        return self.shown_by.hidden

    @property
    def shown(self) -> int:
        return self.shown_by.shown

    def batches(self) -> Iterator[list[MessageRecord]]:
        self.sighting = self.recall.seen() if self.recall is not None else None
        if self.sighting is not None:
            direct = self._read_directly()
            if direct is not None:
                yield from direct
                return
        first = self.first.batches()
        head = next(first, None)  # the whole first read is made by now
        self.at = self.first.undeliverable
        if self.at is not None and self.recall is not None:
            self.remembered = self.recall.remember(self.at)
        if self._made is not None and self.at is None:  # no second read due: the direct read's end is said (tell)
            self._made[3].close()
            self.made_unshown = self._made[0]
        if self.at is not None:
            second = self._read_on(self.at)
            if second is not None:
                first.close()  # its records are let go of: the second read is the queue from the head, whole
                yield from second
                return
        if head is not None:
            yield head
            yield from first

    def _read_on(self, at: int) -> Generator[list[MessageRecord], None, None] | None:
        """The second read's batches (made, not yet decoded), or None where the first read is to be shown."""
        if self._made is not None:  # made first (the memo), ended by a decimal header: not made again
            reader, notes, head, batches = self._made
        else:
            if self._until_back is not None:
                self._until_back()
            try:
                reader, notes = self._open()
                batches = reader.batches()
                head = next(batches, None)  # the whole read is made (and given back) by now
            except DlxtoolError as exc:  # refused by its checks (attempts it would spend), or the connection failed
                self.not_read_on = f"it could not be read over AMQP 1.0 instead: {exc.message}"
                return None
        self.first.notes.extend(notes)
        stop = reader.undeliverable
        if (stop is not None and stop <= at) or (reader.stopped_early is not None and reader.read <= at):
            batches.close()
            self.shorter = reader
            return None
        self.second = reader
        return _chained(head, batches)

    def _read_directly(self) -> Generator[list[MessageRecord], None, None] | None:
        """The read straight over 1.0 of a queue the memo names: its batches where it is the read shown — it met
        such a message, or stopped before reaching the end (what it read, no 0.9.1 read made) — else None: the 0.9.1
        read is made (the direct read could not be made; it read the whole queue and met none: the memo is let go of;
        a decimal header ended it first: kept as the second read)."""
        assert self.recall is not None
        try:
            reader, notes = self._open()
            reader.watch_poison_091 = True
            batches = reader.batches()
            head = next(batches, None)  # the whole read is made (and given back) by now
        except DlxtoolError as exc:
            self.not_read_directly = exc.message
            return None
        found = reader.poison_091
        if found is None and reader.undeliverable is not None:
            # A decimal header ended it before such a message: going straight over 1.0 costs here too, so the memo
            # is let go of (the 0.9.1 read that follows takes it again where it stops at such a message)
            self.recall.forget()
            self._made = (reader, notes, head, batches)
            return None
        if found is None and reader.reached_end and reader.stopped_early is None:
            batches.close()
            self.recall.forget()
            self.gone = True
            return None
        if found is not None:
            self.remembered = self.recall.remember(found)
        reader.notes.extend(notes)
        self.second, self.at, self.direct = reader, found, True
        return _chained(head, batches)

    def records(self) -> Iterator[MessageRecord]:
        for batch in self.batches():
            yield from batch

    def coverage(self) -> Coverage:
        return self.shown_by.coverage()

    def tell(self, report: Reporter) -> None:
        """The first read's notes; its stop at the message as a warning where the second read is shown (and that
        read's outcome), else the first read's end (exit 5) with why the second is not shown."""
        second = self.second
        if self.not_read_directly is not None and self.sighting is not None:
            report.warn(f"{remembered_words(self.sighting, self.facts.name)}, but the queue could not be read over "
                        f"AMQP 1.0 first ({self.not_read_directly}): it was read over AMQP 0.9.1 as always, which "
                        "costs an attempt of each message held where it reaches that message")
        if self.made_unshown is not None:  # it ended at a decimal header; the 0.9.1 read went further and is shown
            self._say_outcome(self.made_unshown, report)
        if second is None:
            if self.gone and self.sighting is not None:
                report.info(f"the message AMQP 0.9.1 cannot be given that a read from this machine found in "
                            f"{self.facts.name!r} ({self.sighting.at}, position {self.sighting.position}) is gone: "
                            "read over AMQP 1.0 whole, the queue held none, so it was read over 0.9.1 as always")
            self._first_stands(report)
            return
        if self.direct:
            self._directly(second, report)
            return
        from dlxtool.broker import versions

        self.first.outcome().say(report)  # its error is the stop at `at`, said here instead
        facts, at = self.facts, self.at
        counted = facts.reads_as_quorum and versions.quorum_give_back_counts(facts.version, "lost")
        cost = (f"; the broker's close of that read counted a delivery attempt of it and of the {at} message(s) held "
                f"before it (RabbitMQ {facts.version}, a quorum queue), and every run over 0.9.1 spends another"
                + ("; this machine remembers it, so the next --protocol auto read of "
                   "the queue from here goes straight over AMQP 1.0: from elsewhere, read it with --protocol 1.0"
                   if self.remembered else ": read this queue with --protocol 1.0")
                if counted else
                "; the messages held went back in place with the connection (no attempt spent)")
        report.warn(f"the message at position {at} of {facts.name!r} cannot be delivered over AMQP 0.9.1 "
                    f"({self.first.stopped_early}): the queue was read again from the head over AMQP 1.0 "
                    f"(--protocol auto), and that read is what is shown (RabbitMQ gives AMQP 1.0 readers no table or "
                    f"array header of a message published over 0.9.1: --protocol 0-9-1 shows those, up to position "
                    f"{at}){cost}")
        stop = second.undeliverable
        if stop is None:
            second.tell(report)
            return
        # it got further, and stopped too: its own end would advise the read that stopped first
        self._say_outcome(second, report)
        raise UndeliverableError(
            f"the message at position {stop} of {facts.name!r} cannot be delivered over AMQP 1.0 either "
            f"({second.stopped_early}); showed the {second.shown} message(s) before it, read over AMQP 1.0",
            position=stop, hint=_way_past(facts.name, stop, "1.0"))

    def _directly(self, second: QueueReader, report: Reporter) -> None:
        """The read straight over 1.0 is shown: why (the memo), that no attempt was spent, what 1.0 does not show;
        then that read's end."""
        from dlxtool.broker import versions

        facts, sighting = self.facts, self.sighting
        assert sighting is not None
        where = (f"the message at position {self.at} of {facts.name!r} cannot be delivered over AMQP 0.9.1 (an AMQP "
                 f"1.0 message whose application properties hold a char or a uuid), as a read from this machine "
                 f"found on {sighting.at}" if self.at is not None else
                 f"a read from this machine found a message AMQP 0.9.1 cannot be given at position "
                 f"{sighting.position} of {facts.name!r} on {sighting.at} (this read did not reach it)")
        counted = versions.quorum_give_back_counts(facts.version, "lost")
        cost = ("RabbitMQ's close of a 0.9.1 read at such a message counts a delivery attempt of it and of every "
                f"message held before it on this quorum queue (RabbitMQ {facts.version})" if counted else
                "a 0.9.1 read stops at such a message")
        headers = f"up to position {self.at}" if self.at is not None else "of what it reaches"
        spent = ("no delivery attempt spent" if second.undeliverable is None else
                 "none spent by that (what the 1.0 read's own end cost is said below)")
        report.warn(f"{where}: so the queue was read over AMQP 1.0 from the head (--protocol auto) and no 0.9.1 read "
                    f"was made, {spent} ({cost}). RabbitMQ gives AMQP 1.0 readers no table or array "
                    f"header of a message published over 0.9.1: --protocol 0-9-1 shows those, {headers}, at that "
                    "cost")
        if second.undeliverable is None:
            second.tell(report)
            return
        self._say_outcome(second, report)
        stop = second.undeliverable
        raise UndeliverableError(
            f"the message at position {stop} of {facts.name!r} cannot be delivered over AMQP 1.0 "
            f"({second.stopped_early}); showed the {second.shown} message(s) before it, read over AMQP 1.0",
            position=stop, hint=_way_past(facts.name, stop, "1.0"))

    def _first_stands(self, report: Reporter) -> None:
        """The first read is shown: its end (exit 5), with why the second read is not; where the second stopped no
        further, what that read did (and cost) and a way past both stops instead of the advice to read over 1.0."""
        if self.not_read_on is not None and self.at is not None:
            report.warn(f"the read over AMQP 0.9.1 stopped at position {self.at}; {self.not_read_on}")
        shorter = self.shorter
        if shorter is None:
            self.first.tell(report)
            return
        self._say_outcome(shorter, report)
        outcome = self.first.outcome()
        outcome.say(report)
        error = outcome.error
        assert isinstance(error, UndeliverableError) and self.at is not None
        where = shorter.undeliverable if shorter.undeliverable is not None else shorter.read
        raise UndeliverableError(
            f"{error.message}; read again over AMQP 1.0 (--protocol auto), the queue stopped earlier, at position "
            f"{where} ({shorter.stopped_early}), so the read over 0.9.1 is shown", position=self.at,
            hint=_way_past(self.facts.name, self.at, "0-9-1"))

    @staticmethod
    def _say_outcome(reader: QueueReader, report: Reporter) -> None:
        """A read's notes, warnings and, where it ends in an error, that error's words as a warning (what it did to
        the queue and what it cost: the caller raises its own end)."""
        outcome = reader.outcome()
        outcome.say(report)
        if outcome.error is not None:
            report.warn(f"the read over AMQP {reader.opts.protocol}: {outcome.error.message}")


def _chained(head: list[MessageRecord] | None, rest: Iterator[list[MessageRecord]]
             ) -> Generator[list[MessageRecord], None, None]:
    if head is not None:
        yield head
    yield from rest


def _way_past(queue: str, stop: int, over: str) -> str:
    """The way past a message neither protocol reads: the messages before the stop of the read over `over`, read
    whole over it, out into a file."""
    from shlex import quote

    other = "1.0" if over == "0-9-1" else "0-9-1"
    return (f"neither protocol reads past both messages: `dlxtool dump {quote(queue)} --remove -n {stop} --protocol "
            f"{over} -o FILE` takes the {stop} before the one AMQP {over} stops at into a file (`dlxtool load FILE` "
            f"puts them back), and the rest then reads over {other} (add your --broker/--vhost)")


def wait_until_back(profile: BrokerProfile, facts: QueueFacts) -> bool:
    """Before the second read: until a passive declare (on a connection of its own: the broker closed the first
    read's) counts as many ready messages as the first read found (`facts.ready`), for at most BACK_WAIT_SECONDS.
    The broker puts back what a closed connection held asynchronously: a read from the head that starts before it has
    (seen on 4.0.5: the 1.0 read met the message after the one the first read stopped at, first) starts past them, and
    says the queue stopped earlier than it does. True once the count is back; False where it was not by the bound
    (another consumer took messages meanwhile: the read goes on) or could not be asked (the read that follows says
    what is wrong with the connection)."""
    from dlxtool.broker import queues
    from dlxtool.broker.connection import close_quietly, connect, is_connection_failure

    if facts.ready is None or facts.type == "stream":
        return False
    try:
        conn = connect(profile)
    except DlxtoolError:
        return False
    wait = waits.Wait(f"{facts.name!r} to hold again what the 0.9.1 read's closed connection held", BACK_WAIT_SECONDS,
                      BACK_POLL_SECONDS)
    try:
        channel = conn.channel()
        while queues.declare(channel, facts.name).ready < facts.ready:
            if not wait.pause():
                return False
        return True
    except Exception as exc:
        if not is_connection_failure(exc):
            raise
        return False  # the queue's refusal or a lost connection: the read that follows meets it too
    finally:
        close_quietly(conn)
