"""Stop signals, handled in this one place: SIGINT (Ctrl-C), SIGTERM (`kill`, `timeout`, `kubectl`, CI
cancellations) and SIGHUP (a dropped ssh session, a closed terminal) all stop a command the same way.

`catch_stop_signals`: for a whole command, SIGTERM and SIGHUP raise `StopSignal` (a KeyboardInterrupt) as
Ctrl-C does by default, so every path that gives messages back on Ctrl-C (peek's give-back, a connection
closed on the way out) does so on them too. Their default action killed the process on the spot: no
summary, and confirmed copies whose source was never acked stayed in both queues, silently.
`signals_as_stop`: while a run (the engine, load) goes on, a stop signal sets an Event its loop checks, so
pika is never interrupted half-way through a frame; a second one raises StopSignal at the next I/O call
(give up waiting), never between two steps of the bookkeeping.
`summary_before_ctrl_c`: from a run's start to the end of its summary, a stop signal only takes note.
`ignore_ctrl_c_from_now_on`: once a command's exit status is settled, no stop signal can change it.
`received()` / `describe()`: which signal came first (its exit code: dlxtool.cli.output.exit_status).
`FallbackStream`: when the terminal is gone (SIGHUP: writes fail with EIO, or EPIPE through ssh), what
could not be written — the summary included — goes to a file, `summary_file_dir()`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any

from dlxtool import secrets, signal_guard
from dlxtool.errors import Interrupted

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_WHAT = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "terminated (SIGTERM)",
         signal.SIGHUP: "hung up (SIGHUP)"}

_received: list[signal.Signals] = []  # stop signals seen by this process, in order


class StopSignal(KeyboardInterrupt):
    """A stop signal that ends a wait at once: Ctrl-C's KeyboardInterrupt, for SIGTERM and SIGHUP too."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signal.Signals(signum)


def received() -> signal.Signals | None:
    """The first stop signal this process received (it decides the exit status), or None."""
    return _received[0] if _received else None


def describe() -> str:
    """'interrupted (Ctrl-C)', 'terminated (SIGTERM)' or 'hung up (SIGHUP)': what stopped the command."""
    first = received()
    return _WHAT[first] if first is not None else "interrupted"


def forget_signals() -> None:
    """A command starts with no stop signal noted. In one process that runs several commands (the test
    suite's CliRunner, a program embedding dlxtool) an earlier command's Ctrl-C otherwise decided a later
    one's exit status and sent its output to the summary file."""
    _received.clear()


def _note(signum: int) -> signal.Signals:
    sig = signal.Signals(signum)
    _received.append(sig)
    return sig


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _take(sig: signal.Signals, previous: Any) -> bool:
    """SIGTERM or SIGHUP set to be ignored stays ignored (`nohup dlxtool …`: go on when the terminal goes);
    Ctrl-C is always ours, as it was (a shell starts background jobs with SIGINT ignored)."""
    return sig is signal.SIGINT or previous is not signal.SIG_IGN


@contextmanager
def catch_stop_signals() -> Iterator[None]:
    """For a whole command: SIGTERM and SIGHUP behave like Ctrl-C (StopSignal, a KeyboardInterrupt);
    Ctrl-C itself is noted (for its exit status) and raises as before."""
    if not _main_thread():
        yield
        return

    def handler(signum: int, _frame: Any) -> None:
        signal_guard.raise_or_hold(StopSignal(_note(signum)))  # not in the middle of a pika write

    signal_guard.reset()  # a new command: nothing held from an earlier one in this process
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        if _take(sig, previous[sig]):
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            if _hold_until_exit and _take(sig, old):
                signal.signal(sig, _note_only)
            elif old is not None:
                signal.signal(sig, old)


_hold_until_exit = False


def hold_stop_signals_until_exit() -> None:
    """For `main()`: leaving `catch_stop_signals`, a stop signal only takes note until
    `ignore_ctrl_c_from_now_on`. Restoring SIGTERM's default action there let a signal kill the process (-15)
    while the command's summary and exit status (143 after an interrupted run) were on their way out."""
    global _hold_until_exit
    _hold_until_exit = True


def _note_only(signum: int, _frame: Any) -> None:
    _note(signum)


@contextmanager
def signals_as_stop(stop: threading.Event, enabled: bool = True, *, second_raises: bool = True) -> Iterator[None]:
    """A stop signal sets `stop`, which the caller's loop checks, so pika is never interrupted half-way
    through a frame. A second one gives up waiting: StopSignal, raised by the next I/O call (unacked messages
    return anyway) and forgotten if the block ends first, unless `second_raises` is False: then every signal
    only sets `stop`."""
    if not enabled or not _main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    raised: list[StopSignal] = []

    def handler(signum: int, _frame: Any) -> None:
        sig = _note(signum)
        if stop.is_set() and second_raises:
            for s, old in previous.items():
                if old is not None:
                    signal.signal(s, old)
            # Raised by the next I/O call (a wait), not here: raised wherever the handler ran, it cut the
            # engine's bookkeeping in two (seen: a purge --backup's multiple-ack queued, its 200 records not
            # yet counted as unproven when the StopSignal hit: 200 duplicates, 0 reported).
            raised.append(StopSignal(sig))
            signal_guard.hold(raised[-1])
            return
        stop.set()

    for sig in STOP_SIGNALS:
        if _take(sig, previous[sig]):
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            if old is not None:
                signal.signal(sig, old)
        for exc in raised:  # the run is over: no wait left to give up (`stop` is set, the signal noted)
            signal_guard.drop(exc)


sigint_as_stop = signals_as_stop  # its name before SIGTERM and SIGHUP joined


class summary_before_ctrl_c:  # used like a function
    """From the engine's start to the end of its summary, a stop signal never cuts the summary off.

    The engine turns a stop signal into a clean stop while it runs and gives the handler back when it
    returns; a signal just after that (the run had just ended) raised KeyboardInterrupt before the summary
    was printed: exit 130 without the JSON a script reads `possible_duplicates` from (the fault matrix saw
    it: dump --remove, Ctrl-C near the end). `arm()` right before the engine starts (a signal at the
    confirmation prompt still aborts at once) makes every stop signal only take note; leaving the block,
    once the summary and the run's own exit status are through, a noted signal exits 130/143/129.

    While the engine runs, its own handler nests inside this one: there a second signal stops the waiting
    for confirms at once, and the engine still ends in its summary. Outside it (the run just ended, its
    summary on the way) a second signal has nothing left to cut short but the summary: it only takes note
    too (seen under load: SIGHUP as a load finished, a second one 5 ms later, and no summary anywhere)."""

    def __init__(self) -> None:
        self.pressed = threading.Event()
        self._handler = ExitStack()

    def __enter__(self) -> summary_before_ctrl_c:
        return self

    def arm(self) -> None:
        # The engine's own handler nests inside.
        self._handler.enter_context(signals_as_stop(self.pressed, second_raises=False))

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self._handler.close()
        if exc_type is None and self.pressed.is_set():
            raise Interrupted(f"{describe()} as the run ended; its summary is complete")


def ignore_ctrl_c_from_now_on() -> None:
    """The command is over, its output and exit status settled: a stop signal while Python shuts down
    (after it restored SIGINT's default action) would kill the process and turn that status into 'killed
    by SIGINT' (seen by the fault matrix as a return code of -2 after a complete summary)."""
    if _main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


# -- when the terminal is gone ------------------------------------------------------------------------

_GONE = (errno.EIO, errno.EPIPE, errno.ENXIO, errno.EBADF)


def summary_file_dir(env: Any = None) -> Path:
    """Where output that could not be shown is saved: $XDG_STATE_HOME/dlxtool (~/.local/state/dlxtool)."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "dlxtool"


class _SummaryFile:
    """One file per process, created at the first write that could not reach its stream."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._file: IO[str] | None = None

    def write(self, text: str) -> None:
        if self._file is None:
            self._file = self._open()
            if self._file is None:
                return
        with contextlib.suppress(OSError, ValueError):
            self._file.write(text)
            self._file.flush()

    def _open(self) -> IO[str] | None:
        name = f"summary-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}Z-{os.getpid()}.log"
        for folder in (summary_file_dir(), Path.cwd()):  # the working dir if the state dir cannot be made
            try:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                # 0600: it may hold message data, like the records a dump writes
                fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                handle = os.fdopen(fd, "w", encoding="utf-8")
            except OSError:
                continue
            self.path = folder / name
            command = secrets.scrub(" ".join(sys.argv[1:]))  # --url may carry a password
            handle.write(f"# dlxtool {command}\n# pid {os.getpid()}, "
                         f"{describe() if received() else 'no stop signal'}; output its terminal could not "
                         "take:\n")
            return handle
        return None


summary_file = _SummaryFile()


class FallbackStream:
    """A text stream that, once a write to it fails because the terminal or the reader is gone, writes to
    `summary_file` instead. `always`: stderr diverts at any such failure; stdout only after a stop signal
    (a reader that goes away otherwise, `| head`, ends the command quietly as before). While it may divert,
    each write is flushed at once, so that what fails is what goes to the file."""

    def __init__(self, stream: IO[str], *, always: bool) -> None:
        self._stream = stream
        # A terminal that hangs up fails our writes with EIO, sometimes before its SIGHUP reaches us (seen:
        # the summary lost with an internal error as the run ended): on a terminal, divert at once.
        self._always = always or _is_terminal(stream)
        self.diverted = False

    def may_divert(self) -> bool:
        """A failed write may now mean the terminal is gone: it is one, or a stop signal came."""
        return self._always or received() is not None

    def write(self, text: str) -> int:
        if not self.diverted:
            try:
                written = self._stream.write(text)
                if self.may_divert():
                    self._stream.flush()
                return written
            except (OSError, ValueError) as exc:
                if not self.gone(exc):
                    raise
                self.diverted = True
        if not text.startswith("\r"):  # a progress bar's redraw means nothing in a file
            summary_file.write(text)
        return len(text)

    def flush(self) -> None:
        if self.diverted:
            return
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            if not self.gone(exc):
                raise
            self.diverted = True

    def gone(self, exc: BaseException) -> bool:
        """`exc`, from a write or flush, says the stream is gone (divert to the summary file), not a bug."""
        if not self.may_divert():
            return False
        return isinstance(exc, ValueError) or getattr(exc, "errno", None) in _GONE

    def isatty(self) -> bool:
        return not self.diverted and self._stream.isatty()

    @property
    def buffer(self) -> _FallbackBuffer | None:
        """The byte stream under it (dlxtool.render writes JSON bytes there), diverting the same way."""
        raw = getattr(self._stream, "buffer", None)
        return None if raw is None else _FallbackBuffer(self, raw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (OSError, ValueError, AttributeError):
        return False


class _FallbackBuffer:
    def __init__(self, text: FallbackStream, raw: Any) -> None:
        self._text, self._raw = text, raw

    def write(self, data: bytes) -> int:
        if not self._text.diverted:
            try:
                written: int = self._raw.write(data)
                if self._text.may_divert():
                    self._raw.flush()
                return written
            except (OSError, ValueError) as exc:
                if not self._text.gone(exc):
                    raise
                self._text.diverted = True
        summary_file.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        if not self._text.diverted:
            self._text.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)
