"""Where a dead letter came from and how often dlxtool replayed it — what replay's decision reads
(dlxtool.ops.replay_decision) and `history` shows.

  * the provenance header an earlier replay wrote (`provenance`), its count (`trusted_count`: a count dlxtool never
    writes is not trusted) and the pairs a kill -9 left (`Lineage`, for --max-replays);
  * the `Address` a message had when it entered its origin (exchange, routing key, per-message TTL), from x-death
    or from an earlier replay's provenance (`first_address`);
  * the origins of messages that only waited out TTLs, through a wait queue's dead-letter route (`WaitQueues`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlxtool.amqp_values import RawValue
from dlxtool.deaths import FAILURE_REASONS, Death, DeathHistory
from dlxtool.json_shapes import is_object
from dlxtool.ops.provenance import PROVENANCE_HEADER, CopySource, Pairs
from dlxtool.ops.routes import Resolved, Router
from dlxtool.ops.stay import Stay, Why


def provenance(headers: dict[str, Any] | None) -> dict[str, Any] | None:
    """An earlier replay's `dlxtool-replay` header (a table), or None."""
    prov = (headers or {}).get(PROVENANCE_HEADER)
    return prov if is_object(prov) else None


MAX_TRUSTED_COUNT = 1_000_000  # more replays of one message than anyone runs: not a count dlxtool wrote


def replay_count(headers: dict[str, Any] | None) -> int:
    """How many times dlxtool has replayed this message before (from its provenance header); 0 where the count is
    not one dlxtool writes (trusted_count says so)."""
    return trusted_count(headers)[0]


def trusted_count(headers: dict[str, Any] | None) -> tuple[int, str | None]:
    """(replay_count, None), or (0, the recorded value) where a provenance header carries a count dlxtool never
    writes — negative, past MAX_TRUSTED_COUNT, not a number: forged or corrupt, so not trusted by the loop guard."""
    prov = provenance(headers)
    if prov is None or prov.get("count") is None:
        return 0, None
    raw = prov.get("count")
    value: Any = raw.value if isinstance(raw, RawValue) else raw
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        return 0, repr(value)[:40]
    # pyright takes a float and an int for types that never compare equal; 2.0 == 2, so this is a real test
    if count < 0 or count > MAX_TRUSTED_COUNT or (isinstance(value, float) and value != count):  # pyright: ignore[reportUnnecessaryComparison]
        return 0, repr(value)[:40]
    return count, None


class Lineage:
    """--max-replays over one run (Pairs): a copy a kill -9 left and its source are one message. Its count
    is the higher of the two, and once one of them is replayed the other stays (replaying both would make
    two copies again). It only ever keeps a message in the DLQ with its reason, never loses one."""

    def __init__(self) -> None:
        self.pairs = Pairs()

    def decide(self, fingerprint: str | None, origin: CopySource | None, count: int, max_replays: int) -> Why | None:
        """Why this delivery stays (None: replay it, and it is remembered as replayed)."""
        partners = self.pairs.partners(fingerprint, origin)
        if any(p["replayed"] for p in partners):
            self.pairs.add(fingerprint, origin, {"count": count, "replayed": False})
            return Why("a copy of a message replayed in this run (left by an interrupted replay, or an identical "
                       "message): one of them is enough", Stay.LOOP_GUARD)
        paired = max([count, *(p["count"] for p in partners)])
        entry = {"count": paired, "replayed": paired < max_replays}
        self.pairs.add(fingerprint, origin, entry)
        for p in partners:
            p["count"] = max(p["count"], paired)
        if paired >= max_replays:
            extra = f", counting its copy left by an interrupted replay (own count {count})" if paired != count else ""
            return Why(f"replayed {paired} times already (--max-replays {max_replays}){extra}", Stay.LOOP_GUARD)
        return None


@dataclass(frozen=True)
class Address:
    """What the message had when it entered its origin: exchange, routing key and per-message TTL (x-death
    original-expiration). The routing key is `routing_key`, else the first routing key of x-death's entry
    `death` (an index into DeathHistory.deaths: which entry, not its keys, is the decision), else not recorded
    (the delivery's is used)."""

    exchange: str
    routing_key: str | None
    expiration: str | None = None
    death: int | None = None


def original_address(history: DeathHistory, origin: str | None) -> Address:
    """From the origin's x-death entry: the failure there, else any death there, else x-first-death-exchange."""
    death = origin_death(history, origin)
    if death is not None:
        at = next(i for i, d in enumerate(history.deaths) if d is death)
        return Address(death.exchange or "", None, death.original_expiration, at)
    return Address(history.first.get("exchange", ""), None)


def first_key(history: DeathHistory, address: Address) -> str | None:
    """The routing key of `address` read from the death history (None: not recorded)."""
    if address.routing_key is not None or address.death is None:
        return address.routing_key
    keys = history.deaths[address.death].routing_keys
    return keys[0] if keys else None


def origin_death(history: DeathHistory, origin: str | None) -> Death | None:
    """The x-death entry original_address reads: the failure in the origin, else any death there."""
    for reasons in (FAILURE_REASONS, None):
        for death in history.deaths:
            if death.queue == origin and (reasons is None or death.reason in reasons):
                return death
    return None


def _prov_text(prov: dict[str, Any], name: str) -> str | None:
    value = prov.get(name)
    if isinstance(value, RawValue):
        value = value.value
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def first_address(prov: dict[str, Any] | None, found: Address) -> Address:
    """An earlier replay recorded the first origin's address: it wins over what x-death says now (which
    names a temporary exchange, or the queue name after a default-exchange replay)."""
    if prov is None:
        return found
    exchange, key = _prov_text(prov, "exchange"), _prov_text(prov, "routing-key")
    if exchange is None and key is None:
        return found
    expiration = _prov_text(prov, "expiration")
    return Address(exchange if exchange is not None else found.exchange, key if key is not None else found.routing_key,
                   expiration if expiration is not None else found.expiration, found.death)


class WaitQueues:
    """Origins of messages that only waited out TTLs, followed through the wait queue's dead-letter route
    (management API), once per (wait queue, routing key)."""

    def __init__(self, router: Router | None, dlq: str) -> None:
        self.router = router
        self.dlq = dlq
        self._seen: dict[tuple[str, str | None], tuple[Resolved, Address | None]] = {}

    def __call__(self, queue: str, key: str | None) -> tuple[Resolved, Address | None]:
        found = self._seen.get((queue, key))
        if found is None:
            found = self._seen[(queue, key)] = self._resolve(queue, key)
        return found

    def _resolve(self, queue: str, key: str | None) -> tuple[Resolved, Address | None]:
        if self.router is None:
            return Resolved(None, f"only TTL expiries, from {queue!r}: telling a wait queue from the queue a message "
                                  "expired in needs the management API, which is not reachable"), None
        resolved = self.router.through_wait_queue(queue, key, self.dlq)
        if resolved.queue is None or resolved.queue == queue:
            return resolved, None
        info = self.router.queue(queue)
        fixed = info.dead_letter_routing_key if info is not None else None
        # It arrived in the processing queue through the wait queue's dead-letter exchange, with this key.
        return resolved, Address(str(info.dead_letter_exchange or "") if info is not None else "",
                                 str(fixed) if fixed is not None else key)
