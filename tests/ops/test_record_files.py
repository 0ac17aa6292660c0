"""RecordSink and the record files it appends to, when the disk fills up mid-record (no tmpfs needed:
a file object whose writes fail with ENOSPC after a given number of bytes)."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import pytest

from dlxtool.cli.app import App
from dlxtool.cli.moving import record_file
from dlxtool.errors import UsageError
from dlxtool.ops.record_files import RecordSink, read_records
from dlxtool.record import MessageRecord


class FullDisk(io.RawIOBase):
    """A real file whose writes stop with ENOSPC once `room` more bytes have been written (the bytes that
    fit are written first, as a kernel does)."""

    def __init__(self, path: Path, room: int) -> None:
        self.f = open(path, "ab", buffering=0)  # noqa: SIM115 - closed by close()
        self.room = room

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.f.fileno()

    def write(self, data) -> int:  # type: ignore[override]
        data = bytes(data)
        if len(data) > self.room:
            self.f.write(data[:self.room])
            self.room = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.f.write(data)

    def close(self) -> None:
        self.f.close()
        super().close()


def rec(i: int) -> MessageRecord:
    return MessageRecord(queue="p1", body=f"message-{i}".encode() * 20, headers={"i": i})


def bodies(path: Path) -> list[bytes]:
    with open(path, "rb") as f:
        return [r.body for r in read_records(f, str(path))]


def test_a_write_cut_by_a_full_disk_is_cut_back_and_the_next_append_reads_cleanly(tmp_path) -> None:
    path = tmp_path / "b.jsonl"
    first = len(rec(0).to_jsonl()) + len(rec(1).to_jsonl())
    disk = FullDisk(path, room=first + 30)  # room for two records and 30 bytes of the third
    sink = RecordSink(disk)
    sink.write(rec(0))
    sink.write(rec(1))
    sink.flush()
    sink.write(rec(2))
    sink.write(rec(3))
    with pytest.raises(OSError):
        sink.flush()  # the transfer stops here: messages 2 and 3 are not acked
    disk.close()
    assert path.read_bytes().endswith(b"\n")
    # Space freed; the next --backup appends to the same file.
    with record_file(App(err=io.StringIO()), str(path)) as again:
        again.write(rec(2))
        again.write(rec(3))
        again.flush()
    assert bodies(path) == [rec(i).body for i in range(4)]


def test_appending_to_a_file_that_ends_in_a_torn_record_cuts_it_off_and_says_so(tmp_path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_bytes(rec(0).to_jsonl() + rec(1).to_jsonl()[:40])  # a writer stopped mid-record (older dlxtool)
    err = io.StringIO()
    with record_file(App(err=err), str(path)) as sink:
        sink.write(rec(2))
        sink.flush()
    assert bodies(path) == [rec(0).body, rec(2).body]
    assert "ended in a record cut short" in err.getvalue() and "removed those 40 bytes" in err.getvalue()


def test_appending_to_a_valid_file_without_a_final_newline_keeps_its_last_record(tmp_path) -> None:
    path = tmp_path / "hand.jsonl"
    path.write_bytes(rec(0).to_jsonl() + rec(1).to_jsonl().rstrip(b"\n"))
    with record_file(App(err=io.StringIO()), str(path)) as sink:
        sink.write(rec(2))
        sink.flush()
    assert bodies(path) == [rec(0).body, rec(1).body, rec(2).body]


def test_a_torn_record_merged_mid_file_is_named_and_skipped_only_when_allowed(tmp_path) -> None:
    """A file an older dlxtool appended to after a cut: `{"queu{"queue":"p1",...}` in the middle."""
    data = rec(0).to_jsonl() + rec(1).to_jsonl()[:6] + rec(2).to_jsonl() + rec(3).to_jsonl()
    with pytest.raises(UsageError, match=r"b\.jsonl:2: invalid JSON: a record cut short \(6 bytes\)"):
        list(read_records(io.BytesIO(data), "b.jsonl"))
    torn: list[tuple[str, int]] = []
    got = [r.body for r in read_records(io.BytesIO(data), "b.jsonl", lambda where, n: torn.append((where, n)))]
    assert got == [rec(0).body, rec(2).body, rec(3).body]  # the complete record after the torn one is kept
    assert torn == [("b.jsonl:2", 6)]
