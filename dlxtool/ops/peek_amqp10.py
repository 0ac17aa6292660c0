"""Reading a queue with peek semantics over AMQP 1.0 (RabbitMQ 4.x): `peek`, `history`, `dump --protocol 1.0`.

The same reader and the same rules as the 0.9.1 path (dlxtool.ops.peek.QueueReader: bounded holding, the order
kept, refusals where a read would reorder or spend attempts), with AMQP 1.0 underneath:

- the messages are taken by an AMQP 1.0 receiver (dlxtool.broker.amqp10.links.HeadReader), credit granted by us and
  drained, never more than the read wants; each stays unsettled (held) until the give-back;
- the give-back is the outcome the version's table names for a peek (versions.amqp10_peek_give_back): `released`
  on 4.3 (no delivery attempt, the message keeps its place), an uncounted `modified` where released would count;
  on 4.0 every outcome counts, so a quorum queue with a limit is refused unless --spend-attempts, as over 0.9.1;
- every message is held whole, with every section and type (MessageRecord.amqp10): nothing of RabbitMQ's 0.9.1
  conversion applies, and a message 0.9.1 cannot be given (4.3's char/uuid application properties) reads fine.

The facts (type, limit, counts) come from the same 0.9.1 connection and management API as before: a passive declare
takes nothing from the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dlxtool.ops.peek import QueueFacts, QueueReader, ReadOptions, no_decode
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from dlxtool.broker.amqp10.connection import Amqp10Connection
    from dlxtool.broker.amqp10.links import Delivery, HeadReader
    from dlxtool.broker.connection import AmqpConnection


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
        self.head: HeadReader = HeadReader(conn, queue_address(facts.name), give_back=self.give_back)
        self._buffer: list[Delivery] = []

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
            if self.head.exhausted and self.read:
                self.reached_end = True
                return None
            self._buffer = self.head.read(self._chunk())
            if not self._buffer:
                self.reached_end = True
                return None
        delivery = self._buffer.pop(0)
        record = MessageRecord.from_amqp10(self.facts.name, delivery.raw, position=self.read)
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


def prepare_read_amqp10(conn: AmqpConnection, amqp10: Amqp10Connection, profile: Any, name: str, opts: ReadOptions, *,
                        management: Callable[[], Any],
                        decode: Callable[[MessageRecord], dict[str, Any] | None] = no_decode,
                        ) -> tuple[QueueReader, list[str]]:
    """prepare_read for AMQP 1.0: facts over the 0.9.1 connection `conn` (passive declare, management API), the
    checks under the 1.0 give-back's costs, and a reader on `amqp10`."""
    from dlxtool.errors import UsageError
    from dlxtool.ops.peek import check_read, queue_facts

    channel = conn.channel()
    facts = queue_facts(profile, name, management=management, channel=channel, conn=conn)
    if facts.type == "stream":
        raise UsageError(f"{name!r} is a stream: --protocol 1.0 reads classic and quorum queues",
                         hint="read a stream with --protocol 0-9-1 (nothing is held or changed there)")
    notes = check_read(facts, opts)
    return Amqp10QueueReader(amqp10, facts, opts, decode), notes
