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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from dlxtool.errors import DlxtoolError, UndeliverableError

if TYPE_CHECKING:
    from dlxtool.ops.peek import Coverage, QueueFacts, QueueReader, ReadOptions
    from dlxtool.ops.session import Reporter
    from dlxtool.record import MessageRecord

# Opens the second read: its reader and the notes of its checks (dlxtool.ops.peek_amqp10.prepare_read_amqp10).
OpenRead = Callable[[], "tuple[QueueReader, list[str]]"]


class PastPoison:
    """The first read over 0.9.1 and, where it stopped at a message 0.9.1 cannot be given, a second read of the queue
    over AMQP 1.0, shown instead (the module docstring). Read as a QueueReader is: `batches()`, then `tell(report)`."""

    def __init__(self, first: QueueReader, over_amqp10: OpenRead) -> None:
        self.first = first
        self.second: QueueReader | None = None  # the read shown: made, and it got further than the first
        self._open = over_amqp10
        self.not_read_on: str | None = None     # why the second read is not shown (refused, failed, stopped earlier)
        self.at: int | None = None              # the position the first read stopped at

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
        first = list(self.first.batches())
        self.at = self.first.undeliverable
        second = self._read_on() if self.at is not None else None
        if second is None:
            yield from first
            return
        del first  # the second read is shown: the queue from the head, whole
        yield from second

    def _read_on(self) -> list[list[MessageRecord]] | None:
        """The second read's batches, or None (why: `not_read_on`) where the first read's records are to be shown."""
        try:
            reader, notes = self._open()
            batches = list(reader.batches())  # the whole read is made (and given back) before its first batch
        except DlxtoolError as exc:  # refused by its checks (attempts it would spend), or the 1.0 connection failed
            self.not_read_on = f"it could not be read over AMQP 1.0 instead: {exc}"
            return None
        self.first.notes.extend(notes)
        stop = reader.undeliverable
        if stop is not None and self.at is not None and stop <= self.at:
            self.not_read_on = (f"read over AMQP 1.0 instead, the queue stopped earlier, at position {stop}: "
                                f"{reader.stopped_early}")
            return None
        self.second = reader
        return batches

    def records(self) -> Iterator[MessageRecord]:
        for batch in self.batches():
            yield from batch

    def coverage(self) -> Coverage:
        return self.shown_by.coverage()

    def tell(self, report: Reporter) -> None:
        """The first read's notes; its stop at the message as a warning where the second read is shown (and that
        read's outcome), else the first read's end (exit 5) with why the second is not shown."""
        second = self.second
        if second is None:
            if self.not_read_on is not None:
                report.warn(f"the read over AMQP 0.9.1 stopped at position {self.at}; {self.not_read_on}")
            self.first.tell(report)
            return
        from dlxtool.broker import versions

        for note in self.first.outcome().notes:  # its error is the stop at `at`, said here instead
            report.info(note)
        facts, at = self.facts, self.at
        counted = facts.reads_as_quorum and versions.quorum_give_back_counts(facts.version, "lost")
        cost = (f"; the broker's close of that read counted a delivery attempt of it and of the {at} message(s) held "
                f"before it (RabbitMQ {facts.version}, a quorum queue), and every run over 0.9.1 spends another: read "
                "this queue with --protocol 1.0" if counted else
                "; the messages held went back in place with the connection (no attempt spent)")
        report.warn(f"the message at position {at} of {facts.name!r} cannot be delivered over AMQP 0.9.1 "
                    f"({self.first.stopped_early}): the queue was read again from the head over AMQP 1.0 "
                    f"(--protocol auto), and that read is what is shown{cost}")
        stop = second.undeliverable
        if stop is None:
            second.tell(report)
            return
        # it got further, and stopped too: its own end would advise the read that stopped first
        outcome = second.outcome()
        for note in outcome.notes:
            report.info(note)
        for warning in outcome.warnings:
            report.warn(warning)
        raise UndeliverableError(
            f"the message at position {stop} of {facts.name!r} cannot be delivered over AMQP 1.0 either "
            f"({second.stopped_early}); showed the {second.shown} message(s) before it, read over AMQP 1.0",
            position=stop,
            hint=f"over AMQP 0.9.1 a read stops at position {at}, over 1.0 at {stop}: `dlxtool dump {facts.name} "
                 f"--remove -n {stop} --protocol 1.0 -o FILE` takes the {stop} before it into a file (`dlxtool load "
                 "FILE` puts them back), and the rest then reads over 0.9.1")
