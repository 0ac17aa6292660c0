"""A read that does not stop at a message AMQP 0.9.1 cannot be given (issue 39: "never let one poison message lock
a DLQ").

RabbitMQ 4.x closes a 0.9.1 connection it is delivering an AMQP 1.0 message to whose application properties hold a
char or a uuid (541 INTERNAL_ERROR, mc_amqpl:to_091; dlxtool.broker.versions.char_uuid_poison_091). A 0.9.1 read
(dlxtool.ops.peek.QueueReader) stops there and names the message by its position. With --protocol auto (the default
of peek, history and dump) the read goes on over AMQP 1.0, which the broker can give that message: a second read
from the head (a queue has no other way to reach a later message), under the 1.0 peek's own rules and checks
(dlxtool.ops.peek_amqp10: an outcome that spends no attempt where the version has one, else refused unless
--spend-attempts), of which only the messages from that position on are shown: those before it were shown by the
first read. Between the two reads another consumer may take or add messages at the head; the second read's
positions are then not the first's (said with the result).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from dlxtool.errors import DlxtoolError

if TYPE_CHECKING:
    from dlxtool.ops.peek import Coverage, QueueFacts, QueueReader, ReadOptions
    from dlxtool.ops.session import Reporter
    from dlxtool.record import MessageRecord

# Opens the second read: its reader and the notes of its checks (dlxtool.ops.peek_amqp10.prepare_read_amqp10).
OpenRead = Callable[[], "tuple[QueueReader, list[str]]"]


class PastPoison:
    """The first read over 0.9.1 and, where it stopped at a message 0.9.1 cannot be given, the rest over AMQP 1.0 (the
    module docstring). Read as a QueueReader is: `batches()`, then `tell(report)`."""

    def __init__(self, first: QueueReader, over_amqp10: OpenRead) -> None:
        self.first = first
        self.second: QueueReader | None = None
        self._open = over_amqp10
        self.refused: DlxtoolError | None = None  # why the second read could not be made
        self.at: int | None = None                # the position the first read stopped at
        self.again = 0                            # messages the second read met again before `at` (not shown)

    @property
    def facts(self) -> QueueFacts:
        return self.first.facts

    @property
    def opts(self) -> ReadOptions:
        return self.first.opts

    @property
    def read(self) -> int:
        """Messages looked at from the head: the second read's where there is one (it read from the head again)."""
        return (self.second or self.first).read

    @property
    def hidden(self) -> int:
        return (self.second or self.first).hidden

    @property
    def shown(self) -> int:
        return self.first.shown + (self.second.shown - self.again if self.second is not None else 0)

    def batches(self) -> Iterator[list[MessageRecord]]:
        yield from self.first.batches()
        at = self.first.undeliverable
        if at is None:
            return
        self.at = at
        try:
            self.second, notes = self._open()
        except DlxtoolError as exc:  # its checks refused it (attempts it would spend): the first read's end stands
            self.refused = exc
            return
        self.first.notes.extend(notes)
        for batch in self.second.batches():
            rest = [r for r in batch if r.position >= at]
            self.again += len(batch) - len(rest)
            if rest:
                yield rest

    def records(self) -> Iterator[MessageRecord]:
        for batch in self.batches():
            yield from batch

    def coverage(self) -> Coverage:
        return (self.second or self.first).coverage()

    def tell(self, report: Reporter) -> None:
        """The first read's notes and warnings; its stop at the message as a warning where the second read went on
        (and that read's own outcome, raised as usual), else raised, with why the second read was not made."""
        second = self.second
        if second is None:
            if self.refused is not None:
                report.warn(f"the rest could not be read over AMQP 1.0 either: {self.refused}")
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
                    f"({self.first.stopped_early}): the messages from position {at} on were read again from the "
                    "head over AMQP 1.0 and shown from there (--protocol auto; a consumer that took or added messages "
                    f"at the head between the two reads would shift those positions){cost}")
        second.tell(report)
