"""Resource alarms, named before anything moves: a memory or disk alarm on any node of a cluster blocks every
publishing connection of that cluster (RabbitMQ stops reading from them), so a command that would publish is
refused while one is in effect (exit 7: not now), with the alarm and the node named and what helps."""

from __future__ import annotations

from dlxtool.errors import UnavailableError
from dlxtool.ops.session import Reporter, Session


def check_alarms(target: Session, report: Reporter, what: str) -> None:
    """Before anything is read: a memory or disk alarm on any node of the broker messages go to blocks every
    publishing connection of its cluster — refused (exit 7, unavailable now), the alarm named. Where the API does
    not say (no monitoring tag), that is said, and a connection.blocked during the run is what stops it."""
    alarms, why = target.management.alarms() if target.management is not None else (
        None, f"no management API: {target.management_error or 'not asked'}")
    if alarms is None:
        report.info(f"alarm state of {target.broker} unknown ({why}): a resource alarm would show as the broker "
                    "blocking publishing")
        return
    if alarms:
        raise UnavailableError(
            f"nothing can be {what} now: {'; '.join(alarms)} — RabbitMQ blocks every publishing connection of the "
            "cluster until it clears; nothing was read or changed",
            hint="free memory or disk (consuming is not blocked: `dlxtool dump --remove` or `purge --backup` of a big "
                 "queue), or wait for the alarm to clear; `rabbitmqctl status` shows the watermarks")
