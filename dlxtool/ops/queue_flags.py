"""Trouble flags for queues, from what the management API reports (pure: no I/O, unit-tested on fake rows).

The API gives queue depths, consumer counts, settings (arguments + policy) and message rates
averaged over the last statistics interval (`collect_statistics_interval`, 5 s by default). It has no
per-message delivery counts and no reject counter, so some flags are heuristics; their thresholds
are the constants below and are printed in `dlxtool queues --help` (keep the two in step).

Where the API keeps no statistics (RabbitMQ 4.3 with `management_metrics_collection` denied: rows have settings
only; dlxtool.broker.versions.METRICS_FEATURE), or a queue has not had its first sample yet, the flags that need
counts or rates are not silently absent: each one that could apply is listed in `cannot_tell`, with why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dlxtool.broker.management import default_delivery_limit, queue_info
from dlxtool.json_shapes import is_array, is_mapping
from dlxtool.ops.dead_letter_roles import Listings, assign

# dlq and wait are the queue's role (dlxtool.ops.dead_letter_roles), shown among the flags
FLAGS = ("unavailable", "dlq", "wait", "clogged", "no-consumer", "no-dlx", "at-limit")

# A rate at or above this (events/s) counts as "happening": one event per 10 s. The API's rates are
# averages over the last 5 s sample, so one redelivery in that window already reads 0.2/s.
MIN_RATE = 0.1
# clogged: acks "near zero" means fewer than one ack per 10 redeliveries.
CLOG_ACK_RATIO = 0.1
# no-dlx: consumers that ack less than half of what they are given are rejecting (or nacking) it.
REJECT_ACK_RATIO = 0.5
# at-limit: estimated deliveries per message reach half the delivery limit (and at least 2).
AT_LIMIT_FRACTION = 0.5
# RabbitMQ 4.0+ gives quorum queues a delivery limit of 20 when none is set (-1 means unlimited).


@dataclass(frozen=True)
class Rates:
    """Messages per second over the last statistics interval; 0 when the API reports nothing."""

    publish: float = 0.0
    deliver: float = 0.0  # every delivery and basic.get, first or not, acked or auto-acked
    ack: float = 0.0
    redeliver: float = 0.0
    no_ack: float = 0.0  # deliveries/gets in auto-ack mode: they can never be acked
    get: float = 0.0  # basic.get in manual-ack mode: peeks (dlxtool's, the UI's "Get messages") among them

    @property
    def acked_deliveries(self) -> float:
        """Deliveries a consumer is expected to ack (manual-ack mode). Not basic.get: a peek (dlxtool's,
        or "Get messages" in the management UI) takes a message and gives it back, never acks it."""
        return max(self.deliver - self.no_ack - self.get, 0.0)

    @property
    def consumer_redeliver(self) -> float:
        """Redeliveries that were not basic.gets. A message peeked again is redelivered to the peek, and
        the API does not say to whom a redelivery went: discount one per get (at most what peeks cause)."""
        return max(self.redeliver - self.get, 0.0)

    def to_json(self) -> dict[str, float]:
        return {"publish": self.publish, "deliver": self.deliver, "ack": self.ack, "redeliver": self.redeliver}

    @classmethod
    def from_message_stats(cls, stats: Mapping[str, Any] | None) -> Rates:
        if not stats:  # a queue nothing went through since its statistics began: most of a big vhost's
            return NO_RATES

        def rate(key: str) -> float:
            details = stats.get(f"{key}_details")
            value = details.get("rate") if is_mapping(details) else None
            return float(value) if isinstance(value, int | float) else 0.0

        return cls(publish=rate("publish"), deliver=rate("deliver_get"), ack=rate("ack"),
                   redeliver=rate("redeliver"), no_ack=rate("deliver_no_ack") + rate("get_no_ack"),
                   get=rate("get"))


NO_RATES = Rates()  # frozen: one for every queue without message stats


@dataclass
class QueueRow:
    """One queue as `dlxtool queues` shows it: the facts, the settings in effect, the flags and why."""

    broker: str
    vhost: str
    queue: str
    type: str
    ready: int
    unacked: int
    consumers: int
    rates: Rates
    dead_letter_exchange: str | None
    dead_letter_routing_key: str | None
    dead_letter_source: dict[str, str]  # setting -> "arguments" | "policy"
    delivery_limit: int | None
    message_ttl: int | None
    policy: str | None
    flags: dict[str, str] = field(default_factory=dict[str, str])  # flag -> reason, in FLAGS order
    figures_known: bool = True  # the API gave counts and rates (not: statistics off, or no sample yet)
    cannot_tell: dict[str, str] = field(default_factory=dict[str, str])  # flag -> why it cannot be told, in FLAGS order
    node: str | None = None   # the node it lives on (a quorum queue: its leader, as the API last knew it)
    state: str | None = None  # the API's: running, down (its node is), minority …
    node_down: bool = False   # its node is not running (the cluster's node list: survey_broker)
    unlisted: bool = False    # left out of the API's listing, found in the vhost's definitions (a node down)
    members: int | None = None  # a quorum queue's members, and how many of them are online (the API's lists)
    online: int | None = None
    role: str | None = None         # dlq | wait | None, from the topology (dlxtool.ops.dead_letter_roles)
    role_reason: str | None = None
    consumer_deliveries: int = 0    # messages consumers took since its statistics began (not basic.get)

    @property
    def messages(self) -> int:
        return self.ready + self.unacked

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.broker, self.vhost, self.queue)

    def to_json(self) -> dict[str, Any]:
        known = self.figures_known  # without figures: null, not a 0 that claims to know
        return {
            "broker": self.broker, "vhost": self.vhost, "queue": self.queue, "type": self.type,
            "ready": self.ready if known else None, "unacked": self.unacked if known else None,
            "messages": self.messages if known else None, "consumers": self.consumers if known else None,
            "rates": self.rates.to_json() if known else None,
            "dead_letter_exchange": self.dead_letter_exchange,
            "dead_letter_routing_key": self.dead_letter_routing_key,
            "dead_letter_source": self.dead_letter_source,
            "delivery_limit": self.delivery_limit, "message_ttl": self.message_ttl, "policy": self.policy,
            "node": self.node, "state": self.state, "members": self.members, "online": self.online,
            "role": self.role, "role_reason": self.role_reason,
            "flags": list(self.flags), "reasons": dict(self.flags),
            "figures_known": self.figures_known, "cannot_tell": dict(self.cannot_tell),
            # counts, consumers and rates: the API's last statistics sample, up to one interval old (no time per queue)
            "figures_from": FIGURES_FROM if known else None,
        }


def row_from_api(broker: str, raw: Mapping[str, Any], *, broker_version: str | None = None) -> QueueRow:
    """A QueueRow from one item of GET /api/queues (arguments win over policy, setting by setting)."""
    if not raw.get("arguments") and not raw.get("effective_policy_definition"):
        return _row_without_settings(broker, raw, broker_version)
    return _row_with_settings(broker, raw, broker_version)


def _row_with_settings(broker: str, raw: Mapping[str, Any], broker_version: str | None) -> QueueRow:
    info = queue_info(dict(raw), broker_version)
    sources = {key: src for key in ("exchange", "routing-key")
               if (src := info.setting_source(f"dead-letter-{key}")) is not None}
    return QueueRow(
        broker=broker, vhost=info.vhost, queue=info.name, type=info.type,
        ready=info.messages_ready, unacked=info.messages_unacked, consumers=info.consumers,
        rates=Rates.from_message_stats(raw.get("message_stats")),
        consumer_deliveries=consumer_deliveries(raw.get("message_stats")),
        dead_letter_exchange=_text(info.dead_letter_exchange),
        dead_letter_routing_key=_text(info.dead_letter_routing_key),
        dead_letter_source={k.replace("-", "_"): v for k, v in sources.items()},
        delivery_limit=info.delivery_limit,
        message_ttl=_int(info.setting("message-ttl")),
        policy=info.policy,
        figures_known=info.figures_known,
        node=_text(raw.get("leader") or raw.get("node")), state=_text(raw.get("state")),
        members=_count(raw.get("members")), online=_count(raw.get("online")),
    )


def _row_without_settings(broker: str, raw: Mapping[str, Any], broker_version: str | None) -> QueueRow:
    """row_from_api for a queue with no arguments and no policy in effect (most queues of a big vhost): the same
    row without resolving settings there are none of (QueueInfo), at a third of the cost."""
    kind = raw.get("type", "classic")
    return QueueRow(
        broker=broker, vhost=raw.get("vhost", "/"), queue=raw["name"], type=kind,
        ready=int(raw.get("messages_ready") or 0), unacked=int(raw.get("messages_unacknowledged") or 0),
        consumers=int(raw.get("consumers") or 0), rates=Rates.from_message_stats(raw.get("message_stats")),
        consumer_deliveries=consumer_deliveries(raw.get("message_stats")),
        dead_letter_exchange=None, dead_letter_routing_key=None, dead_letter_source={},
        delivery_limit=default_delivery_limit(broker_version) if kind == "quorum" else None,
        message_ttl=None, policy=raw.get("policy") or None,
        figures_known="messages_unacknowledged" in raw,  # as QueueInfo.figures_known
        node=_text(raw.get("leader") or raw.get("node")), state=_text(raw.get("state")),
        members=_count(raw.get("members")), online=_count(raw.get("online")),
    )


def _count(listed: object) -> int | None:
    """The length of a list the API gives (a quorum queue's members, online), None where it gives none."""
    return len(listed) if is_array(listed) else None


def consumer_deliveries(stats: Mapping[str, Any] | None) -> int:
    """Messages consumers took from the queue since its statistics began (acked or not; basic.gets — peeks — are
    not counted): 0 for a queue nothing was delivered from."""
    if not stats:
        return 0
    return sum(int(v) for k in ("deliver", "deliver_no_ack")
               if isinstance(v := stats.get(k), int | float) and not isinstance(v, bool))


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


# -- the flags ------------------------------------------------------------------------------------------


def flag_rows(rows: list[QueueRow], listings_of: Callable[[str], Listings] | None = None) -> list[QueueRow]:
    """Set `role` (dlxtool.ops.dead_letter_roles: from the topology, `listings_of(vhost)`) and `flags` on every row
    (rows of one broker: dead-letter routing does not cross brokers)."""
    assign(rows, listings_of or (lambda _vhost: Listings()))
    for row in rows:
        row.flags = queue_flags(row)
        if "unavailable" not in row.flags:  # its node down: that is what it is, not flags that cannot be told
            row.cannot_tell = flags_not_told(row)
    return rows


FIGURES_FROM = "management-api-sample"  # QueueRow.to_json: where ready/unacked/consumers/rates come from
NO_FIGURES_WHY = "statistics are off: management_metrics_collection denied, or the queue is seconds old"
NO_FIGURES = f"the management API has no counts or rates for it ({NO_FIGURES_WHY})"


def flags_not_told(row: QueueRow) -> dict[str, str]:
    """flag -> why it cannot be told, for a row without figures: every flag that needs counts or rates and that its
    settings do not already rule out (`dlq` needs neither: it is always told)."""
    if row.figures_known or row.type == "stream":
        return {}
    out: dict[str, str] = {"clogged": f"needs redelivery and ack rates: {NO_FIGURES}"}
    if row.role is None:  # DLQs and retry stages are meant to have none
        out["no-consumer"] = f"needs the ready and consumer counts: {NO_FIGURES}"
    if row.dead_letter_exchange is None:
        out["no-dlx"] = f"needs consumers and their ack rates: {NO_FIGURES}"
    if row.type == "quorum" and row.delivery_limit is not None:
        out["at-limit"] = f"needs the redelivery rate: {NO_FIGURES}"
    return {name: out[name] for name in FLAGS if name in out}


def queue_flags(row: QueueRow) -> dict[str, str]:
    """flag -> reason for one queue (its role, set before: flag_rows, among them)."""
    flags: dict[str, str] = {}
    r = row.rates
    if row.state == "down" or row.node_down:
        flags["unavailable"] = (f"its node {row.node or '(one of those down)'} is down: its depth is unknown; its "
                                "messages are not lost, but cannot be reached until the node is back"
                                + ("; not in the API's queue listing, found in the vhost's definitions"
                                   if row.unlisted else ""))
    elif row.type == "quorum" and row.members and row.online is not None and row.online * 2 <= row.members:
        # Measured on the 3.10.8 cluster with 2 of 3 members stopped: the API still says "running" and names the
        # old leader; a passive declare answers, a basic.get times out (541 {timeout, …}).
        flags["unavailable"] = (f"only {row.online} of its {row.members} members online: no majority, so it cannot "
                                "be read or written until one is back; its messages are not lost")
    if row.role is not None and row.role_reason is not None:
        flags[row.role] = row.role_reason
    if row.type == "stream":  # streams keep messages for every reader and never dead-letter
        return flags
    looping = r.consumer_redeliver
    if row.consumers and row.messages and looping >= MIN_RATE and r.ack <= CLOG_ACK_RATIO * looping:
        flags["clogged"] = (f"{format_rate(looping)}/s redelivered, {format_rate(r.ack)}/s acked with "
                            f"{row.consumers} consumer(s): a message is rejected with requeue in a loop")
    if row.ready and not row.consumers and row.role is None:
        flags["no-consumer"] = f"{row.ready} message(s) ready and no consumer"
    if row.dead_letter_exchange is None and row.consumers:  # without consumers only peeks take and give back
        reason = _rejecting(r)
        if reason:
            flags["no-dlx"] = f"no dead-letter exchange and {reason}"
    limit_reason = _near_limit(row)
    if limit_reason:
        flags["at-limit"] = limit_reason
    if len(flags) < 2:  # already in FLAGS order (most queues of a big vhost have none)
        return flags
    return {name: flags[name] for name in FLAGS if name in flags}


def _rejecting(r: Rates) -> str | None:
    """Signs that consumers reject: requeued redeliveries, or manual-ack deliveries mostly not acked
    (basic.gets discounted: peeks give messages back, which is not a consumer's reject)."""
    if r.consumer_redeliver >= MIN_RATE:
        return (f"consumers reject with requeue ({format_rate(r.consumer_redeliver)}/s redelivered): "
                "the rejects loop")
    given = r.acked_deliveries
    if given >= MIN_RATE and r.ack < REJECT_ACK_RATIO * given:
        return (f"consumers ack {format_rate(r.ack)}/s of {format_rate(given)}/s delivered: "
                "the rest is rejected and dropped")
    return None


def deliveries_per_message(r: Rates) -> float:
    """Mean deliveries per message from the rates: each message is delivered once, then redelivered."""
    first = r.deliver - r.consumer_redeliver
    return math.inf if first <= 0 else r.deliver / first


def _near_limit(row: QueueRow) -> str | None:
    """Quorum queues count every return. The API has no per-message delivery counts (and reading
    x-delivery-count would itself be a delivery), so estimate from the rates how many deliveries a
    message gets, and compare it with the limit."""
    limit = row.delivery_limit
    r = row.rates
    # Peeks' basic.gets discounted: a peek's redeliveries are no consumer's (a DLQ peeked again and again read
    # "every delivery is a redelivery (158/s)"; issue 35), and on 4.3 a peek's give-back spends no attempt.
    looping = r.consumer_redeliver
    if row.type != "quorum" or limit is None or not row.messages or looping < MIN_RATE:
        return None
    estimate = deliveries_per_message(r)
    if estimate < max(2.0, AT_LIMIT_FRACTION * limit):
        return None
    shown = "every delivery is a redelivery" if math.isinf(estimate) else f"~{estimate:.1f} deliveries per message"
    return f"{shown} ({format_rate(looping)}/s redelivered to consumers) against a delivery limit of {limit}"


def format_rate(value: float) -> str:
    """A rate for people: whole numbers from 10/s, then one decimal, two below 1/s (no trailing zeros)."""
    if value >= 10:
        return f"{value:.0f}"
    return f"{value:.{1 if value >= 1 else 2}f}".rstrip("0").rstrip(".") or "0"
