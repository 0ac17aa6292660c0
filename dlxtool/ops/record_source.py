"""A move whose source is a file of message records, not a queue (load: dump, purge --backup, replay --save files).

The pipeline (dlxtool.ops.pipeline.run_move) reads it instead of consuming a queue: each record is decided by the
policy as a delivery would be, and the file pass (dlxtool.ops.file_pass, dlxtool.ops.file_pass_amqp10) publishes the
MOVEs. What a queue source gives back, a file source writes to its `failed` sink (--failed FILE2): every record that
stays, fails, has no answer or is never sent goes there, so that nothing read from the file is silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from dlxtool.ops.record_files import iter_records

if TYPE_CHECKING:
    from dlxtool.ops.record_files import Sink
    from dlxtool.record import MessageRecord

Opener = Callable[[], IO[bytes]]
# --reencode: record, FILE:LINE -> the record to publish (dlxtool.editing.reencode.Reencoder)
Reencode = Callable[["MessageRecord", str], "MessageRecord"]
Records = Iterator[tuple[str, "MessageRecord"]]  # (FILE:LINE, record)


def read_records(stream: IO[bytes], name: str, torn: Callable[[str, int], None],
                 reencode: Reencode | None = None) -> Records:
    """The records of `stream` (dlxtool.ops.record_files.iter_records: `torn` is told of each cut short), each
    re-encoded where `reencode` says."""
    records = iter_records(stream, name, torn)
    if reencode is None:
        return records
    return ((where, reencode(record, where)) for where, record in records)


@dataclass
class RecordFile:
    """A file of records as a move's source: `total` records (the plan's count), read once through by the pass
    (`reading`); what stays goes to `failed` (`stays`); `torn` counts the records met cut short on the way."""

    name: str                       # the file's name, for messages (the result's `source`)
    open_stream: Opener             # opens it afresh (read once to plan, once to publish)
    total: int
    reencode: Reencode | None = None
    failed: Sink | None = None      # --failed FILE2: where the records that are not published go
    torn: int = 0

    @contextmanager
    def reading(self) -> Generator[Records]:
        """The records, read from a fresh opening of the file; each torn one counted."""
        def count(_where: str, _skipped: int) -> None:
            self.torn += 1

        with self.open_stream() as stream:
            yield read_records(stream, self.name, count, self.reencode)

    def after(self, taken: int) -> Iterator[MessageRecord]:
        """The records after the first `taken`, read afresh (a second stop signal may have ended the first read;
        its torn records were counted already)."""
        with self.open_stream() as stream:
            for n, (_where, record) in enumerate(read_records(stream, self.name, lambda _w, _n: None,
                                                              self.reencode)):
                if n >= taken:
                    yield record

    def stays(self, record: MessageRecord) -> None:
        """A record that is not published (or maybe not: no answer) goes to --failed, where there is one."""
        if self.failed is not None:
            self.failed.write(record)

    def flush(self) -> None:
        if self.failed is not None:
            self.failed.flush()
