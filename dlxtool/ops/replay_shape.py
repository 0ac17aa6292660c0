"""What replay does with every dead letter of one shape (dlxtool.ops.replay_decision.ReplayDecider.shape), apart
from the decider: the fast path on the bytes (dlxtool.ops.replay_raw) applies a Shape without needing the decider's
module, nor the decider this one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlxtool.conventions import Route
from dlxtool.ops.provenance import shape_entries
from dlxtool.ops.replay_address import Address
from dlxtool.ops.stay import Why


@dataclass(frozen=True, slots=True)
class Shape:
    """What replay does with every dead letter of one shape (ReplayDecider.shape), before the per-message steps.

    `stay`: why they stay in the DLQ (no origin …), said after the loop guard. Else they go to `target` (a queue,
    or an exchange origin's Route.key(), the group their count is kept under): through the route of `queue`
    (`--to`, or a queue origin; None for an exchange origin, published to `exchange_origin` with its key).
    The routing key the message had at its first origin — kept where the route keeps the key, and recorded in
    the provenance — is `kept_key(...)`: the decision says where it comes from (`address`), not what it is, so
    that dead letters that differ only by their routing keys share one shape. `died_there`: the broker
    dead-lettered them from that origin, so it must still dead-letter (Routes.died_there). `address.expiration`:
    the per-message TTL to restore. `reset`: the provenance's text of the retry counters removed;
    `failure_headers`: the conventions' headers a reset removes. `exact`: decided from what a fast path reads
    (x-death, an earlier provenance, the retry counters) alone — no x-first-death-*, wait-queue route or other
    convention was needed; only then may it be cached by those."""

    count: int
    stay: Why | None = None
    target: str = ""
    queue: str | None = None
    exchange_origin: Route | None = None
    address: Address = Address("", None)
    died_there: bool = False
    deaths: str = ""
    reset: str | None = None
    failure_headers: tuple[str, ...] = ()
    convention: str = ""
    conflict: bool = False
    exact: bool = False
    ignored_expiration: str | None = None  # a recorded TTL RabbitMQ would refuse: not restored, and said
    untrusted_count: str | None = None     # a recorded replay count dlxtool never writes (count is 0 then)

    @property
    def expiration(self) -> str | None:
        return self.address.expiration

    @property
    def fast(self) -> bool:
        """Whether the fast path may apply this shape to the bytes (dlxtool.ops.replay_raw): decided from what it
        reads alone (`exact`), to a queue, nothing for __call__ to say (why it stays, a TTL to restore or one
        ignored, a replay count not trusted)."""
        return (self.exact and self.stay is None and self.expiration is None and self.queue is not None
                and self.ignored_expiration is None and self.untrusted_count is None)

    @property
    def key_death(self) -> int | None:
        """The x-death entry whose first routing key kept_key reads (None: it reads none)."""
        return self.address.death if self.address.routing_key is None else None

    def kept_key(self, first: str | None, delivery_key: Any) -> Any:
        """The key the message had at its first origin: recorded (an earlier provenance, a convention), else
        `first` (the first routing key of x-death's entry key_death, None without one), else the delivery's."""
        if self.address.routing_key is not None:
            return self.address.routing_key
        return first if first is not None else delivery_key

    def entries(self, key: Any) -> dict[str, Any]:
        """The provenance's shared entries (ProvenanceWriter) for messages that keep `key` (kept_key)."""
        return shape_entries(self.count + 1, self.address.exchange, key, self.address.expiration, self.deaths,
                             self.reset)
