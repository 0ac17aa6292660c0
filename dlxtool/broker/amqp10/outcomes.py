"""AMQP 1.0 outcomes as values (DeliveryState: the spec calls them delivery states), for both directions.

Receiving (settling what a queue delivered):
  accept          the message is done: the queue removes it
  release         "not processed": back to the queue; what it costs on each version is in dlxtool.broker.versions
  modify          released with changes: delivery_failed (counts a delivery attempt), undeliverable_here (RabbitMQ:
                  dead-letter it), annotations (x-opt-* merged into the message, quorum queues only)
  reject          "invalid": RabbitMQ dead-letters it (or drops it where the queue has no dead-letter exchange)

Sending (what the broker said about a message it was given; the 1.0 form of publisher confirms + mandatory):
  accepted        routed to at least one queue and taken (a confirm)
  released        routed to no queue (RabbitMQ 4.x: the unroutable case, like basic.return with mandatory)
  rejected        refused (e.g. a full queue with overflow reject-publish; 4.3 says why in the condition)
  modified        not sent by RabbitMQ for publishes; taken as "not taken"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from dlxtool.amqp10_message import Typed

Kind = Literal["accepted", "rejected", "released", "modified"]


@dataclass(frozen=True)
class DeliveryState:
    kind: Kind
    delivery_failed: bool = False      # modified only
    undeliverable_here: bool = False   # modified only
    annotations: tuple[tuple[str, Typed], ...] = field(default=())  # modified only: x-opt-* names and values
    condition: str = ""                # rejected: the broker's error condition and description, when it gave one

    @property
    def taken(self) -> bool:
        """For a send: the broker took the message (the only outcome after which the source may be removed)."""
        return self.kind == "accepted"

    def describe(self) -> str:
        if self.kind == "modified":
            flags = [n for n, on in (("delivery-failed", self.delivery_failed),
                                     ("undeliverable-here", self.undeliverable_here)) if on]
            return "modified" + (f" ({', '.join(flags)})" if flags else "")
        return self.kind + (f": {self.condition}" if self.condition else "")


ACCEPT = DeliveryState("accepted")
REJECT = DeliveryState("rejected")
RELEASE = DeliveryState("released")
# modified without delivery-failed: "not processed, do not count it" (the give-back a peek uses where released counts)
MODIFY_UNCOUNTED = DeliveryState("modified")


def modify(*, delivery_failed: bool = False, undeliverable_here: bool = False,
           annotations: dict[str, Typed] | None = None) -> DeliveryState:
    return DeliveryState("modified", delivery_failed, undeliverable_here, tuple((annotations or {}).items()))
