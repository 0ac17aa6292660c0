"""Record files, in one place: writing them (the engine's sink), checking and opening them, reading them.

Writing: `RecordSink` appends JSON Lines records and fsyncs them before the engine acks their messages
(`Sink` is what the engine needs of it; `SetAside` stands in for a sink whose flush failed). Checking and
opening: `check_record_file` refuses a FILE that cannot be written before anything is read, and
`open_record_sink` opens it for appending (never truncated; a record cut short at its end is cut off).
Reading: `iter_records` / `read_records` / `open_records` read JSON Lines (or a JSON array) of
MessageRecords, naming FILE:LINE in errors, and recognise torn records (`TornRecord`).
The record format itself (MessageRecord and its JSON codec) is dlxtool.record.

Records carry message bodies (customer data): a file dlxtool creates for them is its owner's only (PRIVATE_MODE,
0600, whatever the umask: `create_private`). A file that exists already keeps its mode when records are appended
to it; `open_to_others` says when that mode lets others read it, for a warning.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any, Protocol

import orjson

from dlxtool.errors import NotFoundError, UsageError
from dlxtool.json_shapes import is_array
from dlxtool.record import MessageRecord

# -- files only their owner may read ------------------------------------------------------------------

PRIVATE_MODE = 0o600


def create_private(path: str, flags: int) -> int:
    """os.open(path, flags | O_CREAT): a file it creates is PRIVATE_MODE whatever the umask (the umask can only
    take bits away: 0600 or narrower). One that exists keeps its mode."""
    return os.open(path, flags | os.O_CREAT, PRIVATE_MODE)


def open_to_others(fd: int) -> int | None:
    """The permission bits of the regular file open as `fd` when group or others may read or write it (records
    appended to it keep that mode), else None (a private file; a pipe, a terminal, a device)."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    return mode if stat.S_ISREG(st.st_mode) and mode & 0o066 else None


def open_to_others_note(name: str, mode: int) -> str:
    return (f"{name} may be read by others (mode {mode:04o}): the message bodies written to it keep that mode "
            f"(chmod 600 to keep them to its owner; a file dlxtool creates is 0600)")


# -- writing: the engine's sink ---------------------------------------------------------------------


class Sink(Protocol):
    """Where REMOVE (and, if given, MOVE) records go before the source ack: write, then flush. A flush that
    failed must fail again when called again (nothing written since may be acked); RecordSink also says
    which records it dropped (`failed`, `unsaved`), so that the engine can still settle the others."""

    def write(self, record: MessageRecord) -> None: ...

    def flush(self) -> None: ...


class RecordSink:
    """JSON Lines records appended to a binary file; flush() = write + os.fsync.

    Records are kept here until flush(), and a failed write or flush (a full disk) cuts the file back to
    where the last successful flush ended: no half-written record stays behind to merge with the next
    append. Give it an unbuffered stream (buffering=0) where possible, so no copy of a failed write is left
    in a Python buffer to be written on close.

    A failed flush is final: `failed` holds the error, every later flush() raises, and `unsaved` lists the
    records that flush dropped — their messages must not be acked (the engine keeps them in the source).
    `unsaved_may_be_written`: the file could not be cut back, so some of them may be in it after all."""

    def __init__(self, stream: IO[bytes], *, fsync: bool = True) -> None:
        self.stream = stream
        self.fsync = fsync
        self.written = 0
        self.failed: BaseException | None = None
        self.unsaved: list[MessageRecord] = []
        self.unsaved_may_be_written = False
        self._pending = bytearray()
        self._records: list[MessageRecord] = []  # those in _pending
        self._good = _end_offset(stream)  # where the last complete record ends on disk (None: not a file)

    def write(self, record: MessageRecord) -> None:
        self._pending += record.to_jsonl()
        self._records.append(record)
        self.written += 1

    def flush(self) -> None:
        if self.failed is not None:
            raise OSError(f"an earlier write to the record file failed ({self.failed})")
        if not self._pending:
            return
        try:
            _write_all(self.stream, bytes(self._pending))
            self.stream.flush()
            if self.fsync:
                _fsync(self.stream)
        except Exception as exc:
            # Their messages are not acked: the records go, the messages stay.
            self.failed = exc
            self.unsaved, self._records = self._records, []
            self._pending.clear()
            self.unsaved_may_be_written = not self._cut_back()
            raise
        self._pending.clear()
        self._records.clear()
        self._good = _end_offset(self.stream)

    def _cut_back(self) -> bool:
        if self._good is None:
            return False
        try:
            os.ftruncate(self.stream.fileno(), self._good)
        except (OSError, ValueError, AttributeError):
            return False
        return True


class SetAside:
    """Stands in for a RecordSink whose flush failed, while the engine settles what is in flight: records
    written to it are not saved (their messages stay in the source)."""

    def __init__(self, failed: object) -> None:  # the sink whose flush failed (its unsaved records)
        self.may_be_written = bool(getattr(failed, "unsaved_may_be_written", True))
        self._records = {id(r): r for r in getattr(failed, "unsaved", ())}

    def holds(self, record: MessageRecord | None) -> bool:
        return record is not None and self._records.get(id(record)) is record

    def write(self, record: MessageRecord) -> None:
        self._records[id(record)] = record

    def flush(self) -> None:
        pass


def _write_all(stream: IO[bytes], data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = stream.write(view)
        # buffered streams write it all (or raise); a raw one in non-blocking mode may return None (typeshed: int)
        if n is None or n >= len(view):  # pyright: ignore[reportUnnecessaryComparison]
            return
        view = view[n:]  # a raw file may write part of it


def _fsync(stream: IO[bytes]) -> None:
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return  # an in-memory stream
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: a pipe or a terminal, nothing to sync
            raise


def _end_offset(stream: IO[bytes]) -> int | None:
    try:
        return os.fstat(stream.fileno()).st_size if stat.S_ISREG(os.fstat(stream.fileno()).st_mode) else None
    except (OSError, ValueError, AttributeError):
        return None


# -- reading -------------------------------------------------------------------------------------------


class TornRecord(UsageError):
    """A record cut short: a writer stopped mid-record (a crash, a full disk). Its message was never acked
    away (records are written, flushed and fsynced before the ack), so it is still in its queue."""


TornHandler = Callable[[str, int], None]
# Every record dlxtool writes starts like this (MessageRecord.to_json's first key): where a torn record
# was followed by a complete one on the same line (an append after a cut, before dlxtool repaired such
# files), the complete one starts at one of these.
_RECORD_START = b'{"queue":'


def read_records(stream: IO[bytes], name: str = "<stdin>", on_torn: TornHandler | None = None,
                 ) -> Iterator[MessageRecord]:
    """Records from JSON Lines (or one JSON array, as `peek --format json` writes)."""
    for _where, record in iter_records(stream, name, on_torn):
        yield record


def iter_records(stream: IO[bytes], name: str = "<stdin>", on_torn: TornHandler | None = None,
                 ) -> Iterator[tuple[str, MessageRecord]]:
    """(where, record) pairs, where = "FILE:LINE" (JSON Lines) or "FILE: record N" (a JSON array).

    A torn record — a last line without a newline that is not valid JSON, or a line that is a cut-short
    record followed by a complete one — raises TornRecord (a UsageError naming FILE:LINE) after the
    complete records before it; with `on_torn`, it is called (where, bytes skipped) instead and reading
    goes on (with the complete record that followed the torn one on its line, if any)."""
    lines = enumerate(stream, start=1)
    for lineno, line in lines:
        if not line.strip():
            continue
        if line.lstrip().startswith(b"["):
            yield from _read_array(line + b"".join(rest for _, rest in lines), name)
            return
        where = f"{name}:{lineno}"
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            torn = _torn(line)
            if torn is None:
                _loads(line, where)  # raises the UsageError naming FILE:LINE
                raise
            skipped, data = torn
            if on_torn is None:
                raise TornRecord(f"{where}: invalid JSON: a record cut short ({skipped} bytes): a writer "
                                 "stopped mid-record", hint="its message was not acked away: it is still in its queue; "
                                 "--allow-torn skips it and reads the rest") from None
            on_torn(where, skipped)
            if data is None:
                continue
        yield where, MessageRecord.from_json(data, where)


def _torn(line: bytes) -> tuple[int, Any] | None:
    """(bytes of the torn record, the complete record after it on the line or None), or None when the line
    is plain invalid JSON rather than a record cut short."""
    start = line.find(_RECORD_START, 1)
    while start > 0:
        try:
            return start, orjson.loads(line[start:])
        except orjson.JSONDecodeError:
            start = line.find(_RECORD_START, start + 1)
    if not line.endswith(b"\n"):
        return len(line), None
    return None


def repair_torn_tail(fd: int) -> tuple[str, int] | None:
    """Before appending to a record file: if it does not end in a newline, make it. A tail that is not
    valid JSON (a record cut short by a crash or a full disk) is cut off — its message was never acked
    away — so that the next record does not merge with it into one invalid line mid-file; a valid one
    (a hand-written file without a final newline) gets its newline. Returns ("cut", bytes removed),
    ("newline", 0) or None when nothing was needed."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return None
    start = size
    while start > 0:  # back to just after the last newline
        chunk_start = max(0, start - 65536)
        chunk = os.pread(fd, start - chunk_start, chunk_start)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            start = chunk_start + nl + 1
            break
        start = chunk_start
    tail = os.pread(fd, size - start, start)
    try:
        orjson.loads(tail)
    except orjson.JSONDecodeError:
        os.ftruncate(fd, start)
        return "cut", size - start
    os.write(fd, b"\n")  # the file is opened for appending: this goes to the end
    return "newline", 0


def _read_array(data: bytes, name: str) -> Iterator[tuple[str, MessageRecord]]:
    items = _loads(data, name)
    if not is_array(items):
        raise UsageError(f"{name}: expected a JSON array of message records")
    for i, item in enumerate(items):
        yield f"{name}: record {i + 1}", MessageRecord.from_json(item, f"{name}: record {i + 1}")


def _loads(data: bytes, where: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{where}: invalid JSON: {exc}",
                         hint="expected JSON Lines of message records (as dlxtool dump writes)") from None


def open_records(name: str, stdin: IO[bytes], on_torn: TornHandler | None = None) -> Iterator[MessageRecord]:
    """Records from a file name, or `-` for stdin; file errors become clear dlxtool errors."""
    if name == "-":
        yield from read_records(stdin, "<stdin>", on_torn)
        return
    with open_record_file(name) as stream:
        yield from read_records(stream, name, on_torn)


def open_record_file(name: str) -> IO[bytes]:
    """A record file opened for reading (binary); errors opening it become clear dlxtool errors."""
    try:
        return open(name, "rb")  # the caller closes it
    except FileNotFoundError:
        raise NotFoundError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{name} is a directory, not a file of message records") from None
    except OSError as exc:
        raise UsageError(f"{name}: cannot open: {exc.strerror}") from None


def write_records(records: Iterable[MessageRecord], stream: IO[bytes]) -> int:
    n = 0
    for record in records:
        stream.write(record.to_jsonl())
        n += 1
    return n


# -- checking and opening a FILE to append records to ----------------------------------------------


RECORD_FILE_HINT = "give a FILE in a directory that exists and that you may write to; nothing was done yet"


def cannot_write(path: str, exc: OSError) -> UsageError:
    """The one error for a record file that cannot be written (the wording of `dump -o`)."""
    return UsageError(f"cannot write {path}: {exc.strerror or exc}", hint=RECORD_FILE_HINT)


def check_record_file(path: str | None, stdout: IO[str]) -> None:
    """Refuse a record FILE (--save, --backup, dump --remove -o, --failed) that cannot be written, before
    any plan, question or read: finding out once the run starts is after a plan has read (and, on a
    quorum queue, spent a delivery attempt of) the messages. Nothing is created here; open_record_sink
    opens it when the run starts. `path` None or "-": `stdout`, which must be a regular file."""
    if path is None or path == "-":
        if not _regular_file(getattr(stdout, "buffer", stdout)):
            raise _stdout_not_a_file()
        return
    problem = _unwritable(path)
    if problem is not None:
        raise cannot_write(path, problem)


def _stdout_not_a_file() -> UsageError:
    return UsageError("records of removed messages need a file: stdout is a terminal or a pipe, whose reader may "
                      "drop them (| head) after their messages are acked away",
                      hint="give -o FILE (or redirect stdout to a file: > FILE)")


def _unwritable(path: str) -> OSError | None:
    """Why `open(path, "a+b")` would fail (None: it should work), without creating anything."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        parent = os.path.dirname(os.path.abspath(path))
        try:
            if not stat.S_ISDIR(os.stat(parent).st_mode):
                return OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        except OSError as exc:
            return exc
        return None if os.access(parent, os.W_OK | os.X_OK) else OSError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:  # ENOTDIR (a file on the way), EACCES, ELOOP …
        return exc
    if stat.S_ISDIR(st.st_mode):
        return OSError(errno.EISDIR, os.strerror(errno.EISDIR))
    return None if os.access(path, os.W_OK) else OSError(errno.EACCES, os.strerror(errno.EACCES))


Say = Callable[[str], None]


@contextmanager
def open_record_sink(path: str | None, stdout: IO[str], *, warn: Say, info: Say) -> Generator[RecordSink]:
    """A RecordSink for --backup / dump --remove / --failed / --save: FILE opened for APPENDING (it may
    already hold the only copy of messages: never truncated, except for a record cut short at its end), or
    `stdout` when it is redirected to a regular file. What it repaired or appends to is told to warn/info."""
    if path is None or path == "-":
        out = stdout
        stream: IO[bytes] | IO[str] = getattr(out, "buffer", out)  # the bytes under the text, where it has them
        if not _regular_file(stream):
            raise _stdout_not_a_file()
        stream.flush()
        mode = open_to_others(stream.fileno())
        if mode is not None:  # the shell made it (> FILE), with the umask's mode
            warn(open_to_others_note("stdout's file", mode))
        with open(stream.fileno(), "ab", buffering=0, closefd=False) as raw:  # no buffer to write a failed record
            yield RecordSink(raw)
        return
    try:
        # Unbuffered: after a failed write (a full disk) no Python buffer writes the rest of it on close.
        # Created 0600 (its owner's only); appended to as it is.
        stream = open(create_private(path, os.O_RDWR | os.O_APPEND), "a+b", buffering=0)  # noqa: SIM115 - closed below
        repaired = repair_torn_tail(stream.fileno()) if _regular_file(stream) else None
        size = os.fstat(stream.fileno()).st_size
        mode = open_to_others(stream.fileno())
    except OSError as exc:
        raise cannot_write(path, exc) from None
    if mode is not None:
        warn(open_to_others_note(path, mode))
    if repaired and repaired[0] == "cut":
        warn(f"{path} ended in a record cut short (a write stopped mid-record, e.g. a full disk): removed "
                 f"those {repaired[1]} bytes before appending; dlxtool acks a message only after its record "
                 "is complete on disk, so that message was not taken away")
    elif repaired:
        info(f"{path} did not end in a newline: added one before appending")
    if size:
        info(f"{path} already holds {size} bytes: appending to it")
    try:
        yield RecordSink(stream)
    finally:
        try:
            stream.close()
        except OSError as exc:
            # Not raised: it would hide the run's summary. Each record was flushed and fsynced before the
            # ack of its message, so nothing the run took away depends on this close.
            warn(f"closing {path} failed ({exc.strerror or exc}); every record of a message taken away "
                     "had been written and fsynced before that message was acked")


def _regular_file(stream: IO[bytes] | IO[str]) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False
