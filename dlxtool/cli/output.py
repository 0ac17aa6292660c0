"""The one place a command's end becomes what the shell sees: an Outcome (or a DlxtoolError's) → one line on
stderr and an exit code. The exit-code table of the README is EXIT_CODES and the stop signals' codes."""

from __future__ import annotations

import signal
from enum import IntEnum

from dlxtool.outcome import Outcome, Status


class ExitStatus(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    CONNECT = 3
    NOT_FOUND = 4
    PARTIAL = 5
    REFUSED = 6
    UNAVAILABLE = 7    # not now: a node down, a resource alarm, a blocked connection (try again later)
    STOPPED = 8        # replay's canary or brake stopped the run: nothing more moved (the summary says what did)
    HANGUP = 129       # SIGHUP: the terminal or ssh session went away (128 + 1)
    INTERRUPTED = 130  # SIGINT: Ctrl-C (128 + 2)
    TERMINATED = 143   # SIGTERM: kill, timeout, kubectl, CI cancellation (128 + 15)


EXIT_CODES: dict[Status, ExitStatus] = {
    Status.OK: ExitStatus.OK,
    Status.ERROR: ExitStatus.ERROR,
    Status.USAGE: ExitStatus.USAGE,
    Status.CONNECT: ExitStatus.CONNECT,
    Status.NOT_FOUND: ExitStatus.NOT_FOUND,
    Status.PARTIAL: ExitStatus.PARTIAL,
    Status.REFUSED: ExitStatus.REFUSED,
    Status.UNAVAILABLE: ExitStatus.UNAVAILABLE,
    Status.STOPPED: ExitStatus.STOPPED,
}
SIGNAL_CODES: dict[signal.Signals, ExitStatus] = {
    signal.SIGINT: ExitStatus.INTERRUPTED, signal.SIGTERM: ExitStatus.TERMINATED, signal.SIGHUP: ExitStatus.HANGUP,
}


def exit_status(status: Status, stopped_by: signal.Signals | None = None) -> ExitStatus:
    """The exit code of `status`; for INTERRUPTED, of the stop signal that came first (Ctrl-C without one)."""
    if status is Status.INTERRUPTED:
        return SIGNAL_CODES.get(stopped_by, ExitStatus.INTERRUPTED) if stopped_by else ExitStatus.INTERRUPTED
    return EXIT_CODES[status]


def exit_code_of(outcome: Outcome, stopped_by: signal.Signals | None = None) -> int:
    return int(exit_status(outcome.status, stopped_by))
