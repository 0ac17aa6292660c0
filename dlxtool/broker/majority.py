"""A Khepri cluster without its majority (RabbitMQ 4.x): what the broker says then, and the error dlxtool says it
with. Apart from dlxtool.broker.queues (which asks the API before a change) so that the connection's error reading
(dlxtool.broker.connection) can use it without the two modules needing each other."""

from __future__ import annotations

from dlxtool.errors import UnavailableError

METADATA_TIMEOUT = "metadata store operation timed out"
LOST_MAJORITY_HINT = ("run it again once a majority of the cluster's nodes is back (`rabbitmqctl cluster_status`); "
                      "until then no queue, binding or connection's exclusive queue can be declared or deleted")


def lost_majority(running: int | None = None, total: int | None = None, down: list[str] | None = None,
                  said: str | None = None) -> UnavailableError:
    """The cluster has lost its majority: its metadata store (Khepri) takes no change — said with the nodes where
    known, what the broker said where it did."""
    counted = f"Khepri: {running} of {total} nodes" if running is not None and total else "Khepri"
    where = f" ({', '.join(down)} down)" if down else ""
    return UnavailableError(f"the cluster has lost its majority ({counted}){where}: its metadata store takes no change "
                            "now, so nothing can be read or moved; messages are not lost, nothing was read or changed"
                            + (f" (the broker said: {said})" if said else ""), hint=LOST_MAJORITY_HINT)
