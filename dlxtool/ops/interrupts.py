"""Stop signals, handled in this one place: Ctrl-C (SIGINT) becomes a clean stop of a run.

`sigint_as_stop`: while a run (the engine, load) goes on, Ctrl-C sets an Event its loop checks, so pika
is never interrupted half-way through a frame; a second Ctrl-C raises KeyboardInterrupt (give up waiting).
`summary_before_ctrl_c`: from a run's start to the end of its summary, a Ctrl-C only takes note.
`ignore_ctrl_c_from_now_on`: once a command's exit status is settled, Ctrl-C cannot change it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from dlxtool.errors import Interrupted


@contextmanager
def sigint_as_stop(stop: threading.Event, enabled: bool = True) -> Iterator[None]:
    """Ctrl-C sets `stop`, which the caller's loop checks, so pika is never interrupted half-way through
    a frame. A second Ctrl-C gives up waiting (KeyboardInterrupt; unacked messages return anyway)."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(_sig: int, _frame: Any) -> None:
        if stop.is_set():
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


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
        self._handler.enter_context(sigint_as_stop(self.pressed))  # the engine's own handler nests inside

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self._handler.close()
        if exc_type is None and self.pressed.is_set():
            raise Interrupted("interrupted as the run ended; its summary is complete")


def ignore_ctrl_c_from_now_on() -> None:
    """The command is over, its output and exit status settled: a Ctrl-C while Python shuts down (after
    it restored SIGINT's default action) would kill the process and turn that status into 'killed by
    SIGINT' (seen by the fault matrix as a return code of -2 after a complete summary)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
