"""Reading a queue with peek semantics over AMQP 1.0 (RabbitMQ 4.x): `peek`, `history`, `dump --protocol 1.0`.

The same reader and the same rules as the 0.9.1 path (dlxtool.ops.peek.QueueReader: bounded holding, the order
kept, refusals where a read would reorder or spend attempts), with AMQP 1.0 underneath:

- the messages are taken by an AMQP 1.0 receiver (dlxtool.broker.amqp10.links.HeadReader), credit granted by us and
  drained, never more than the read wants; each stays unsettled (held) until the give-back;
- the give-back is the outcome the version's table names for a peek (versions.amqp10_peek_give_back): `released`
  on 4.3 (no delivery attempt, the message keeps its place), an uncounted `modified` where released would count;
  on 4.0 every outcome counts, so a quorum queue with a limit is refused unless --spend-attempts, as over 0.9.1;
- every message is held whole, with every section and type (MessageRecord.amqp10): nothing of RabbitMQ's 0.9.1
  conversion applies, and a message 0.9.1 cannot be given (4.3's char/uuid application properties) reads fine;
- a stream is read from --offset (dlxtool.broker.amqp10.links.StreamReader: RabbitMQ's rabbitmq:stream-offset-spec
  filter) until -n or --wait seconds without a message, each accepted as it is read: a stream keeps it, nothing is
  held.

The facts (type, limit, counts) come from the same 0.9.1 connection and management API as before: a passive declare
takes nothing from the queue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dlxtool.amqp10_message import Amqp10Error
from dlxtool.errors import DlxtoolError, PartialError, UndeliverableError
from dlxtool.ops.peek import QueueFacts, QueueReader, ReadOptions, check_read, no_decode, queue_facts
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from dlxtool.broker.amqp10.connection import Amqp10Connection
    from dlxtool.broker.amqp10.links import Delivery, HeadReader
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.management import ManagementClient
    from dlxtool.config import BrokerProfile


class Amqp10QueueReader(QueueReader):
    """QueueReader over an AMQP 1.0 receiver. The 0.9.1 `channel` is not used for reading."""

    def __init__(self, conn: Amqp10Connection, facts: QueueFacts, opts: ReadOptions,
                 decode: Callable[[MessageRecord], dict[str, Any] | None] = no_decode) -> None:
        from dlxtool.broker import versions
        from dlxtool.broker.amqp10 import outcomes
        from dlxtool.broker.amqp10.addresses import queue_address
        from dlxtool.broker.amqp10.links import HeadReader

        super().__init__(None, facts, opts, decode)
        how = versions.amqp10_peek_give_back(facts.version)
        # where every outcome counts (4.0), `released` is as good as any: the checks have accepted the cost
        self.give_back = outcomes.MODIFY_UNCOUNTED if how == "modified" else outcomes.RELEASE
        self.conn = conn
        self._buffer: list[Delivery] = []
        # Set by a read of dlxtool.ops.peek_past_poison that looks for it: the position of the first message the
        # broker could not give to an AMQP 0.9.1 reader (a char or uuid application property), once read
        self.watch_poison_091 = False
        self.poison_091: int | None = None
        if facts.type == "stream":  # read from its offset by _stream_batches: nothing is held
            return
        self.head: HeadReader = HeadReader(conn, queue_address(facts.name), give_back=self.give_back)

    def _chunk(self) -> int:
        """How many to ask for next: what the read still wants, never past --max-unacked; one at a time where each
        costs an attempt (the read may have to stop at any message)."""
        room = self.opts.max_unacked - self.read
        if self._counts_attempts() or self.opts.select is not None:
            return max(1, min(room, 1 if self._counts_attempts() else 50))
        wanted = room if self.opts.count is None else self.opts.count - self.read
        return max(1, min(wanted, room, 500))

    def _get(self) -> MessageRecord | None:
        if not self._buffer:
            if self.undeliverable is not None:  # the session ended at it: nothing more to read
                return None
            if self.head.exhausted and self.read:
                self.reached_end = True
                return None
            try:
                self._buffer = self.head.read(self._chunk())
            except DlxtoolError as exc:
                if not self._undeliverable(exc):
                    raise
                # the messages that arrived whole before it are shown (the ended session gave them back)
                self._buffer = self.head.arrived()
                if not self._buffer:
                    return None
            if not self._buffer:
                self.reached_end = True
                return None
        delivery = self._buffer.pop(0)
        try:
            record = MessageRecord.from_amqp10(self.facts.name, delivery.raw, position=self.read)
        except Amqp10Error as exc:  # hostile bytes (e.g. nested past the depth cap): said, then given back
            raise PartialError(f"the message at position {self.read} of {self.facts.name!r} cannot be read as AMQP "
                               f"1.0: {exc}; it and the messages read before it are given back",
                               hint="read the queue over AMQP 0.9.1 (leave --protocol out)") from None
        if self.watch_poison_091 and self.poison_091 is None and _poison_091(record):
            self.poison_091 = self.read
        self.read += 1
        return record

    def _undeliverable(self, exc: BaseException) -> bool:
        """The broker ended the session while converting the next message for AMQP 1.0: on a version where a 0.9.1
        message with a decimal header cannot be converted (versions.decimal_poison_amqp10), that message cannot be
        delivered over 1.0. Recorded (its position: the next after every delivery that arrived), not raised."""
        from dlxtool.broker import versions

        said = str(exc)
        if not (versions.decimal_poison_amqp10(self.facts.version) and "from_091" in said and "decimal" in said):
            return False
        self.undeliverable = len(self.head.events.complete)
        self.connection_lost = True
        self.stopped_early = (f"RabbitMQ {self.facts.version} ended the AMQP 1.0 session while converting it "
                              "(internal-error, mc_amqpl:from_091): a message published over AMQP 0.9.1 with a "
                              "decimal header")
        return True

    def _undeliverable_error(self) -> UndeliverableError:
        """Exit 5: what was shown is right; the message at `undeliverable` cannot be read over 1.0, and the lost
        session gave back what was held (counted on quorum queues where the table says a lost connection counts)."""
        from dlxtool.broker import versions

        counted = self.facts.reads_as_quorum and "lost" in (versions.behaviour(self.facts.version).amqp10_counted
                                                             or ())
        cost = (f"; the lost session gave back the messages held, and on RabbitMQ {self.facts.version} that counts a "
                "delivery attempt of each on a quorum queue: running this again over 1.0 spends one more each time"
                if counted else "; the messages held went back in place when the session ended")
        assert self.undeliverable is not None
        return UndeliverableError(
            f"the message at position {self.undeliverable} of {self.facts.name!r} cannot be delivered over AMQP 1.0: "
            f"{self.stopped_early}{cost}. Showed the {self.shown} message(s) before it", position=self.undeliverable,
            hint="do not run this again over 1.0; read the queue over AMQP 0.9.1 (leave --protocol out), which "
                 "reads that message whole")

    def _stream_batches(self) -> Iterator[list[MessageRecord]]:
        """A stream from --offset (default first), as the 0.9.1 read does it: batches of what the selection
        selects, until -n or until the stream is quiet for --wait seconds; every message whole (amqp10)."""
        from dlxtool.broker.amqp10.addresses import queue_address
        from dlxtool.broker.amqp10.links import StreamReader

        wanted = self.opts.count if self.opts.select is None else None  # a selection: how many to read is unknown
        chunk = max(1, min(wanted or self.opts.batch_size, self.opts.batch_size))
        reader = StreamReader(self.conn, queue_address(self.facts.name),
                              offset="first" if self.opts.offset is None else self.opts.offset)
        try:
            stopped = False  # by -n, the byte budget: the stream may hold more (the read is a sample)
            while not stopped:
                ask = chunk if wanted is None else min(chunk, wanted - self.read)
                deliveries = reader.read(ask, quiet=self.opts.stream_wait)
                batch: list[MessageRecord] = []
                for delivery in deliveries:
                    record = self._stream_amqp10_record(delivery)
                    if self.opts.select is None and self._passes_budget(len(record.body), record.position,
                                                                         self.shown):
                        self.hidden += 1  # delivered, not shown: nothing is held on a stream, the read ends here
                        stopped = True
                        break
                    if self._selects(record):
                        if self.opts.select is not None and self._passes_budget(len(record.body), record.position,
                                                                                 self.shown):
                            self.hidden += 1  # selected, but past the budget: the read ends here
                            stopped = True
                            break
                        self.bytes_shown += len(record.body)
                        batch.append(record)
                    if not self._want_more():
                        stopped = True
                        break
                if batch:
                    yield batch
                if len(deliveries) < ask and not stopped:
                    self.reached_end = True  # quiet for --wait seconds: the stream had no more
                    break
        finally:
            reader.close()

    def _stream_amqp10_record(self, delivery: Delivery) -> MessageRecord:
        try:
            record = MessageRecord.from_amqp10(self.facts.name, delivery.raw, position=self.read)
        except Amqp10Error as exc:  # hostile bytes: said; a stream keeps it (nothing was taken)
            raise PartialError(f"the message at position {self.read} of the stream {self.facts.name!r} cannot be "
                               f"read as AMQP 1.0: {exc}; the messages before it were shown",
                               hint="read the stream over AMQP 0.9.1 (leave --protocol out)") from None
        record.decoded = self.decode(record)  # nothing is held on a stream: decoding here costs the broker nothing
        self._decoded.add(record.position)
        self.read += 1
        return record

    def _give_back(self) -> None:
        """Every held delivery settled with the give-back outcome, in the order delivered; Ctrl-C meanwhile waits
        for it (a settlement cut short would leave them to the link's detach)."""
        interrupted: BaseException | None = None
        while True:
            try:
                self.head.close()
                break
            except KeyboardInterrupt as exc:
                interrupted = exc
        if interrupted is not None:
            raise interrupted


def _poison_091(record: MessageRecord) -> bool:
    """Whether the broker could not give this message (read over 1.0) to an AMQP 0.9.1 reader: it would close that
    reader's connection (dlxtool.broker.versions.char_uuid_poison_091, asked by the caller)."""
    from dlxtool.amqp10_view import loss_kinds

    msg = record.amqp10
    return msg is not None and any(kind == "unconvertible" for kind, _ in loss_kinds(msg, poison_091=True))


def prepare_read_amqp10(conn: AmqpConnection, amqp10: Amqp10Connection, profile: BrokerProfile, name: str,
                        opts: ReadOptions, *, management: Callable[[], ManagementClient],
                        decode: Callable[[MessageRecord], dict[str, Any] | None] = no_decode,
                        ) -> tuple[QueueReader, list[str]]:
    """prepare_read for AMQP 1.0: facts over the 0.9.1 connection `conn` (passive declare, management API), the
    checks under the 1.0 give-back's costs, and a reader on `amqp10`."""
    channel = conn.channel()
    facts = queue_facts(profile, name, management=management, channel=channel, conn=conn)
    notes = check_read(facts, opts)
    return Amqp10QueueReader(amqp10, facts, opts, decode), notes


def read_on_over_amqp10(first: QueueReader, amqp10: Callable[[], Amqp10Connection],
                        ) -> tuple[Amqp10QueueReader, list[str]]:
    """The second read of dlxtool.ops.peek_past_poison: from the head over AMQP 1.0 (on a connection `amqp10` opens:
    the broker closed the first read's), with the first read's facts (the queue's type and limit do not change between
    the two) and options, under the 1.0 peek's checks (refused where its give-back would spend attempts the user did
    not accept)."""
    opts = replace(first.opts, protocol="1.0")
    notes = check_read(first.facts, opts)
    return Amqp10QueueReader(amqp10(), first.facts, opts, first.decode), notes
