"""CLI glue shared by the commands on the one-pass engine (replay, purge's reading modes, dump --remove,
load): a progress bar on a terminal, one mapping from a run's result to the exit status, and Ctrl-C held
back until the run's summary is out."""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import click

from dlxtool.cli.app import App, _isatty
from dlxtool.errors import ConnectError, Interrupted, PartialError, UsageError


class progress_bar:  # noqa: N801 - used like a function
    """A click progress bar on stderr when it is a terminal; otherwise nothing (the context value is None).

    Called with an engine `Progress` (total, done, elapsed)."""

    def __init__(self, app: App, label: str) -> None:
        self.app = app
        self.label = label
        self.bar: Any = None
        self.shown = 0

    def __enter__(self) -> progress_bar | None:
        return self if _isatty(self.app.stderr) else None

    def __call__(self, progress: Any) -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=max(progress.total, 1), file=self.app.stderr, show_eta=True,
                                         show_pos=True, label=self.label)
            self.bar.__enter__()
        rate = progress.done / progress.elapsed if progress.elapsed > 0 else 0
        self.bar.label = f"{self.label} ({rate:,.0f}/s)"
        self.bar.update(progress.done - self.shown)
        self.shown = progress.done

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


class summary_before_ctrl_c:  # noqa: N801 - used like a function
    """From the engine's start to the end of its summary, Ctrl-C never cuts the summary off.

    The engine turns Ctrl-C into a clean stop while it runs and gives the handler back when it returns;
    a Ctrl-C just after that (the run had just ended) raised KeyboardInterrupt before the summary was
    printed: exit 130 without the JSON a script reads `possible_duplicates` from (the fault matrix saw
    it: dump --remove, Ctrl-C near the end). `arm()` right before the engine starts (Ctrl-C at the
    confirmation prompt still aborts at once) makes Ctrl-C only take note; leaving the block, once the
    summary and the run's own exit status are through, a noted Ctrl-C exits 130. A second Ctrl-C still
    interrupts at once."""

    def __init__(self) -> None:
        self.pressed = threading.Event()
        self._handler = ExitStack()

    def __enter__(self) -> summary_before_ctrl_c:
        return self

    def arm(self) -> None:
        from dlxtool.ops.transfer import sigint_as_stop

        self._handler.enter_context(sigint_as_stop(self.pressed))  # the engine's own handler nests inside

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self._handler.close()
        if exc_type is None and self.pressed.is_set():
            raise Interrupted("interrupted as the run ended; its summary is complete")


def exit_for(result: Any, what: str, *, saved: str | None = None) -> None:
    """Exit 3 when the connection was lost, 130 on Ctrl-C, 5 when messages were left for a reason other
    than the selection. `result` is a dlxtool.ops.transfer.TransferResult; `saved` names the file that
    holds the records written so far."""
    dups = f"; {result.possible_duplicates} message(s) may now exist twice" if result.possible_duplicates else ""
    kept = f"; records written so far are in {saved}" if saved else ""
    if result.error and not getattr(result, "connection_lost", True):
        raise PartialError(f"{what} stopped by an error: {result.error}; messages not yet settled are still in "
                           f"{result.source}{kept}{dups}", hint="fix the cause (disk space, file permissions …) "
                           "and run the same command again")
    if result.error:
        raise ConnectError(f"{what} stopped: {result.error}; nothing was lost — unfinished messages are "
                           f"still in {result.source}{kept}{dups}", hint="run the same command again to continue")
    if result.interrupted:
        raise Interrupted(f"{what} interrupted; the rest is still in {result.source}{kept}{dups}")
    if result.left_total:
        raise PartialError(f"{result.left_total} message(s) left in {result.source}: "
                           + ", ".join(f"{why} ({n})" for why, n in sorted(result.left.items())))


RECORD_FILE_HINT = "give a FILE in a directory that exists and that you may write to; nothing was done yet"


def cannot_write(path: str, exc: OSError) -> UsageError:
    """The one error for a record file that cannot be written (the wording of `dump -o`)."""
    return UsageError(f"cannot write {path}: {exc.strerror or exc}", hint=RECORD_FILE_HINT)


def check_record_file(app: App, path: str | None) -> None:
    """Refuse a record FILE (--save, --backup, dump --remove -o, --failed) that cannot be written, before
    any plan, question or read: finding out once the run starts is after a plan has read (and, on a
    quorum queue, spent a delivery attempt of) the messages. Nothing is created here; record_file opens
    it when the run starts."""
    if path is None or path == "-":
        out = app.stdout
        if not _regular_file(getattr(out, "buffer", out)):
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


@contextmanager
def record_file(app: App, path: str | None) -> Iterator[Any]:
    """A RecordSink for --backup / dump --remove / --failed / --save: FILE opened for APPENDING (it may
    already hold the only copy of messages: never truncated, except for a record cut short at its end), or
    stdout when it is redirected to a regular file."""
    from dlxtool.ops.transfer import RecordSink
    from dlxtool.record import repair_torn_tail

    if path is None or path == "-":
        out = app.stdout
        stream = getattr(out, "buffer", out)
        if not _regular_file(stream):
            raise _stdout_not_a_file()
        stream.flush()
        with open(stream.fileno(), "ab", buffering=0, closefd=False) as raw:  # no buffer to write a failed record
            yield RecordSink(raw)
        return
    try:
        # Unbuffered: after a failed write (a full disk) no Python buffer writes the rest of it on close.
        stream = open(path, "a+b", buffering=0)  # noqa: SIM115 - closed below
        repaired = repair_torn_tail(stream.fileno()) if _regular_file(stream) else None
        size = os.fstat(stream.fileno()).st_size
    except OSError as exc:
        raise cannot_write(path, exc) from None
    if repaired and repaired[0] == "cut":
        app.warn(f"{path} ended in a record cut short (a write stopped mid-record, e.g. a full disk): removed "
                 f"those {repaired[1]} bytes before appending; dlxtool acks a message only after its record "
                 "is complete on disk, so that message was not taken away")
    elif repaired:
        app.info(f"{path} did not end in a newline: added one before appending")
    if size:
        app.info(f"{path} already holds {size} bytes: appending to it")
    try:
        yield RecordSink(stream)
    finally:
        try:
            stream.close()
        except OSError as exc:
            # Not raised: it would hide the run's summary. Each record was flushed and fsynced before the
            # ack of its message, so nothing the run took away depends on this close.
            app.warn(f"closing {path} failed ({exc.strerror or exc}); every record of a message taken away "
                     "had been written and fsynced before that message was acked")


def _regular_file(stream: Any) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


def result_rows(result: Any, *, moved: str, kept: str, removed: tuple[str, str] | None = None) -> list[list[Any]]:
    """Table rows of a TransferResult: moved per target, removed, kept per reason, LEFT, not reached."""
    rows: list[list[Any]] = [[moved, q, n] for q, n in sorted(result.moved.items())]
    if removed is not None and result.removed:
        rows.append([removed[0], removed[1], result.removed])
    rows += [[kept, why, n] for why, n in sorted(result.kept.items())]
    rows += [["LEFT", why, n] for why, n in sorted(result.left.items())]
    if result.unprocessed:
        rows.append(["not reached", "", result.unprocessed])
    return rows


def duplicates_note(result: Any) -> str:
    return f"; {result.possible_duplicates} possible duplicate(s)" if result.possible_duplicates else ""
