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

import signal
import sys
import threading
from collections.abc import Generator
from contextlib import ExitStack, contextmanager
from types import FrameType

from dlxtool import signal_guard
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


def _take(sig: signal.Signals, previous: object) -> bool:
    """SIGTERM or SIGHUP set to be ignored stays ignored (`nohup dlxtool …`: go on when the terminal goes);
    Ctrl-C is always ours, as it was (a shell starts background jobs with SIGINT ignored)."""
    return sig is signal.SIGINT or previous is not signal.SIG_IGN


@contextmanager
def catch_stop_signals() -> Generator[None]:
    """For a whole command: SIGTERM and SIGHUP behave like Ctrl-C (StopSignal, a KeyboardInterrupt);
    Ctrl-C itself is noted (for its exit status) and raises as before."""
    if not _main_thread():
        yield
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        signal_guard.raise_or_hold(StopSignal(_note(signum)))  # not in the middle of a pika write

    signal_guard.reset()  # a new command: nothing held from an earlier one in this process
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        if _take(sig, previous[sig]):
            signal.signal(sig, handler)
    try:
        came = take_startup_signal()
        if came is not None:  # during start-up (dlxtool.entry): the command ends before it begins
            raise StopSignal(came)
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


def take_startup_signal() -> signal.Signals | None:
    """The first stop signal that came during start-up, before the command could handle it (dlxtool.entry noted it),
    noted as received (it decides the exit status); taken once. None when none came."""
    entry = sys.modules.get("dlxtool.entry")
    noted: list[int] = getattr(entry, "STARTUP_SIGNALS", [])
    first = noted[0] if noted else None
    noted.clear()
    return None if first is None else _note(first)


def _note_only(signum: int, _frame: FrameType | None) -> None:
    _note(signum)


@contextmanager
def signals_as_stop(stop: threading.Event, enabled: bool = True, *, second_raises: bool = True) -> Generator[None]:
    """A stop signal sets `stop`, which the caller's loop checks, so pika is never interrupted half-way
    through a frame. A second one gives up waiting: StopSignal, raised by the next I/O call (unacked messages
    return anyway) and forgotten if the block ends first, unless `second_raises` is False: then every signal
    only sets `stop`."""
    if not enabled or not _main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    raised: list[StopSignal] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
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

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
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
