"""Errors raised by the dlxtool core, each carrying the exit status the CLI returns for it.

The core never imports click: it raises these, and `dlxtool.cli` turns them into one line on stderr
and the exit status below (the table is documented in the README).
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    OK = 0
    ERROR = 1
    USAGE = 2
    CONNECT = 3
    NOT_FOUND = 4
    PARTIAL = 5
    REFUSED = 6
    HANGUP = 129       # SIGHUP: the terminal or ssh session went away (128 + 1)
    INTERRUPTED = 130  # SIGINT: Ctrl-C (128 + 2)
    TERMINATED = 143   # SIGTERM: kill, timeout, kubectl, CI cancellation (128 + 15)


class DlxtoolError(Exception):
    """Base class: `message` says what went wrong, `hint` what to do about it."""

    exit_status: ExitStatus = ExitStatus.ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(DlxtoolError):
    """Bad input from the command line or the environment."""

    exit_status = ExitStatus.USAGE


class ConfigError(UsageError):
    """The config file (or a secret it points at) is wrong."""


class ConnectError(DlxtoolError):
    """A broker or its management API cannot be reached or refuses our credentials."""

    exit_status = ExitStatus.CONNECT


class ManagementMismatch(ConnectError):
    """The management API answers for another broker than the one the AMQP connection reached: none of its
    data (queue type, arguments, policies, limits, counts) may be used."""


class NotFoundError(DlxtoolError):
    """A queue, broker profile or file does not exist."""

    exit_status = ExitStatus.NOT_FOUND


class PartialError(DlxtoolError):
    """Some messages were left behind or failed; the summary says which."""

    exit_status = ExitStatus.PARTIAL


class RefusedError(DlxtoolError):
    """Refused because doing it could lose, reorder or dead-letter messages."""

    exit_status = ExitStatus.REFUSED


class Interrupted(DlxtoolError):
    """Stopped by a stop signal (Ctrl-C, SIGTERM, SIGHUP); what was done so far has been reported.
    The CLI exits with the status of the signal that came (dlxtool.ops.interrupts.exit_status)."""

    exit_status = ExitStatus.INTERRUPTED
