"""Errors raised by the dlxtool core, each carrying its Status (dlxtool.outcome).

The core never imports click: it raises these, and `dlxtool.cli` turns them into one line on stderr
and the exit code of their status (dlxtool.cli.output.exit_status; the table is in the README).
"""

from __future__ import annotations

from dlxtool.outcome import Outcome, Status


class DlxtoolError(Exception):
    """Base class: `message` says what went wrong, `hint` what to do about it."""

    status: Status = Status.ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"

    def outcome(self) -> Outcome:
        return Outcome(self.status, self.message, self.hint)


class UsageError(DlxtoolError):
    """Bad input from the command line or the environment."""

    status = Status.USAGE


class ConfigError(UsageError):
    """The config file (or a secret it points at) is wrong."""


class ConnectError(DlxtoolError):
    """A broker or its management API cannot be reached or refuses our credentials."""

    status = Status.CONNECT


class AccessRefused(ConnectError):
    """The broker knows the user and refuses what it asked for: a vhost it has no permissions on (AMQP), an API
    request its tags do not allow (401 "Not monitor user", 403). The hint says what to grant. Callers that must tell
    a refusal from a broker not reached (a vhost that exists, an API that answered) catch this class, never the
    words of the message."""


class ManagementMismatch(ConnectError):
    """The management API answers for another broker than the one the AMQP connection reached: none of its
    data (queue type, arguments, policies, limits, counts) may be used."""


class NotFoundError(DlxtoolError):
    """A queue, broker profile or file does not exist."""

    status = Status.NOT_FOUND


class QueueNotFound(NotFoundError):
    """A queue that does not exist in a vhost. The CLI adds the names of that vhost's queues closest to it, where the
    management API can list them ("did you mean 'invoices.dlq'?")."""

    def __init__(self, queue: str, vhost: str, message: str | None = None, *, hint: str | None = None,
                 suggest: bool = True) -> None:
        super().__init__(message or f"queue {queue!r} not found in vhost {vhost!r}",
                         hint=hint or "list queues with `dlxtool queues`")
        self.queue = queue
        self.vhost = vhost
        self.suggest = suggest  # False: in another broker than the selected one (whose names the CLI would offer)


class VhostNotFound(NotFoundError):
    """A vhost the broker does not have. `profile` (dlxtool.config.BrokerProfile) is the broker asked: the CLI adds
    the names of its vhosts closest to the one not found, each proven to exist there over AMQP ("did you mean
    'shop'?")."""

    def __init__(self, vhost: str, message: str, *, hint: str | None = None, profile: object = None) -> None:
        super().__init__(message, hint=hint)
        self.vhost = vhost
        self.profile = profile


class PartialError(DlxtoolError):
    """Some messages were left behind or failed; the summary says which."""

    status = Status.PARTIAL


class UndeliverableError(PartialError):
    """A read stopped at a message the broker cannot convert for the protocol it read over (it closed the connection
    or session): `position` in the queue's head. Over the other protocol that message reads whole (replay's
    --protocol auto reads its plan over 1.0 where 0.9.1 stopped so)."""

    def __init__(self, message: str, *, position: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.position = position


class RefusedError(DlxtoolError):
    """Refused because doing it could lose, reorder or dead-letter messages."""

    status = Status.REFUSED


class QueueLocked(RefusedError):
    """A queue exclusive to another connection (405 RESOURCE_LOCKED): nothing was read or changed. The CLI adds which
    connection owns it, where the management API says."""

    def __init__(self, queue: str, vhost: str) -> None:
        super().__init__(f"queue {queue!r} is exclusive to another connection; no other connection can read or purge "
                         "it: nothing was read or changed", hint="it goes away with the connection that owns it")
        self.queue = queue
        self.vhost = vhost


class UnavailableError(DlxtoolError):
    """Not now: what is asked for exists but cannot be reached at the moment — a queue whose node is down, a
    resource alarm that blocks publishing, a connection the broker blocked. Nothing is lost; try again later."""

    status = Status.UNAVAILABLE


class Interrupted(DlxtoolError):
    """Stopped by a stop signal (Ctrl-C, SIGTERM, SIGHUP); what was done so far has been reported.
    The CLI exits with the code of the signal that came (dlxtool.cli.output.exit_status)."""

    status = Status.INTERRUPTED
