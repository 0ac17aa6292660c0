"""What RabbitMQ does that dlxtool's safety depends on, and where it differs by version: one table, each fact
proven against every broker the suite starts (tests/broker/test_versions.py).

A fact is keyed by the broker's version from the AMQP server properties (dlxtool.broker.connection.ServerInfo)
where it changed between versions; a fact that holds on every version the suite runs is a plain constant."""

from __future__ import annotations

import re

# basic.publish's `expiration` (a per-message TTL in ms, as text): RabbitMQ takes an optional sign and ASCII digits
# whose value is at most ten years; anything else closes the channel (406 PRECONDITION_FAILED - invalid
# expiration). Measured on 3.10.8 and 4.0.5: 315360000000 taken, 315360000001 refused, "-0" and "+5" taken,
# " 5", "1.5" and "" refused.
MAX_EXPIRATION_MS = 315_360_000_000
_EXPIRATION = re.compile(r"[+-]?[0-9]+")


def expiration_taken(value: str) -> bool:
    """Whether RabbitMQ takes `value` as a message's expiration property."""
    return _EXPIRATION.fullmatch(value) is not None and 0 <= int(value) <= MAX_EXPIRATION_MS


# A quorum queue whose consumer's node was killed (kill -9) keeps the messages that consumer had taken checked out
# ("unacked", held by a consumer the management API no longer names), also once the node is back: measured on a
# 3.10.8 cluster, 290 held for more than two minutes after the node returned; moving the leader
# (rabbit_quorum_queue:transfer_leadership) gave them back at once. Said by replay when it finds them
# (dlxtool.ops.busy.held_elsewhere), with that remedy. Not yet measured on 4.x.
QUORUM_KEEPS_A_LOST_CONSUMERS_MESSAGES = ("3.10",)
