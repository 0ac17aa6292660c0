"""How a command ended, as the core says it: a Status and, where it is not plain success, one line of why.

Every workflow in dlxtool.ops returns its result with an `outcome()` (Outcome), and every DlxtoolError carries
its Status: the CLI turns a Status into an exit code in one function (dlxtool.cli.output.exit_status), so
that a status and its number are decided in one place, documented in the README's exit-code table."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Status(enum.Enum):
    OK = "ok"
    ERROR = "error"              # a local failure (a file, a bug)
    USAGE = "usage"              # bad option, config file or input file
    CONNECT = "connect"          # cannot connect or authenticate; an API that answers for another broker
    NOT_FOUND = "not_found"      # vhost, queue, broker profile, file
    PARTIAL = "partial"          # some messages were left behind or failed; the summary says which
    REFUSED = "refused"          # refused before anything changed (safety, a missing permission), or not confirmed
    UNAVAILABLE = "unavailable"  # not now: a node down, a resource alarm, a blocked connection; try again later
    STOPPED = "stopped"          # a guard stopped the run (replay's canary or brake): nothing more moved
    INTERRUPTED = "interrupted"  # a stop signal (which one decides the exit code), after a summary


@dataclass(frozen=True)
class Outcome:
    """A run's end: `status`, and for anything but OK a `message` (one line: what happened, where the
    messages are) with a `hint` (what to do)."""

    status: Status = Status.OK
    message: str = ""
    hint: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


OK = Outcome()
