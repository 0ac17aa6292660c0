"""Death history of messages, one by one or grouped by failure signature ("what fills my DLQ?")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dlxtool.conventions import BUILT_IN, Convention, Explanation, Message, Route, explain
from dlxtool.deaths import Death, MessageHistory, Origin, iso, message_history
from dlxtool.errors import DlxtoolError, ManagementMismatch
from dlxtool.failures import FailureKey, failure_key
from dlxtool.json_shapes import is_object
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from dlxtool.ops.routes import Management


@dataclass
class Entry:
    record: MessageRecord
    history: MessageHistory   # the x-death reading (deaths, companions, counters)
    explained: Explanation    # which convention explains it: origin, error, attempts
    copy_of: int | None = None  # position of the message this one is a copy of (mark_copies)

    @property
    def own_headers(self) -> tuple[str, ...]:
        """Without an origin: the headers it carries beyond RabbitMQ's and dlxtool's, where its maker may have
        written where it failed (dlxtool.convention_hints); () when a convention names its origin."""
        from dlxtool.convention_hints import own_headers

        return () if self.explained.origin is not None else own_headers(self.record.headers)

    @property
    def type(self) -> str | None:
        """The message type when known: the AMQP `type` property, else the decoded protobuf type."""
        if self.record.properties.get("type"):
            return str(self.record.properties["type"])
        if self.record.decoded and self.record.decoded.get("type"):
            return str(self.record.decoded["type"])
        return None

    def to_json(self) -> dict[str, Any]:
        from dlxtool.message_ids import fingerprint_name
        from dlxtool.ops.provenance import replayed

        props = self.record.properties
        x = self.explained
        return {"queue": self.record.queue, "position": self.record.position,
                "message_id": props.get("message_id"), "fingerprint": fingerprint_name(self.record), "type": self.type,
                "routing_key": self.record.routing_key, **self.history.to_json(),
                # origin/origin_why/error now say what the explaining convention found (x-death's as before)
                "origin": x.origin.queue if x.origin else None, "origin_why": x.origin_why, "error": x.error,
                **x.to_json(), "unexplained_headers": list(self.own_headers), "replayed": replayed(self.record.headers),
                "copy_of": self.copy_of}


def shown_exchange(name: str | None, headers: object) -> str:
    """An exchange as a person reads it: one of dlxtool's temporary exchanges (long deleted; in a delivery or an
    x-death after a replay) as the exchange it stood for, which the provenance header recorded — "orders (dlxtool
    replay)" —, or as the queue a kept message went back to; "(default)" for the default exchange."""
    from dlxtool.ops.provenance import replayed
    from dlxtool.ops.routes import temporary_exchange

    named = temporary_exchange(name) if name else None
    if named is None:
        return name or "(default)"
    if named.purpose == "keep":  # a message that stayed during a run, republished to its queue's tail
        return f"(dlxtool: kept in {named.queue or 'its queue'})"
    recorded = (replayed(headers if is_object(headers) else None) or {}).get("exchange")
    original = recorded if isinstance(recorded, str) and temporary_exchange(recorded) is None else None
    shown = "?" if original is None else original or "(default)"
    return f"{shown} (dlxtool {named.purpose})"


def needs_decoded_type(record: MessageRecord) -> bool:
    """Whether a history of `record` uses its decoded body: for the type only (Entry.type), and only when
    the AMQP `type` property does not name it. A read for history decodes no other body (no protobuf loaded
    for typed messages)."""
    return not record.properties.get("type")


def entries(records: Iterable[MessageRecord], error_headers: Iterable[str] = (),
            known: Sequence[Convention] = BUILT_IN, origin_from: str | None = None,
            through: Callable[[Death], Origin] | None = None,
            delivery_limit: Callable[[str], int | None] | None = None) -> Iterable[Entry]:
    """`through`: origins of TTL-only histories, followed through the wait queue (wait_queue_origins);
    `delivery_limit`: a queue's delivery limit, for the attempts of a delivery_limit death (delivery_limits)."""
    names = tuple(error_headers)
    for record in records:
        headers = record.headers if is_object(record.headers) else {}
        history = message_history(record.headers, error_headers=names, through=through)
        explained = explain(Message(headers, record.body, record.queue, x_death_origin=history.origin,
                                     x_death=history.history, delivery_limit=delivery_limit), known,
                            origin_from=origin_from, error_headers=names)
        yield Entry(record, history, explained)


def wait_queue_origins(mgmt: Management, vhost: str, dlq: str,
                       consumers_now: Callable[[str], int | None] | None = None) -> Callable[[Death], Origin]:
    """through() for `entries`: a message that only waited out TTLs has as origin the queue its last wait
    queue sends it back to (management API: that queue's dead-letter exchange and bindings), as replay
    sends it; "no origin" with the reason when that cannot be told — never the wait queue itself.
    `consumers_now`: a queue's consumer count from the broker (passive declare), where that decides."""
    from dlxtool.ops.replay_address import WaitQueues
    from dlxtool.ops.routes import Router

    waits = WaitQueues(Router(mgmt, vhost, consumers_now), dlq)

    def through(death: Death) -> Origin:
        resolved, _address = waits(death.queue or "", death.routing_keys[0] if death.routing_keys else None)
        return Origin(resolved.queue, resolved.why)

    return through


def delivery_limits(mgmt: Management, vhost: str) -> Callable[[str], int | None]:
    """delivery_limit for `entries`: each queue's limit in effect now (arguments, policy, the version's default),
    asked once per queue; None for a queue that is gone, not a quorum queue, or an API that cannot answer."""
    known: dict[str, int | None] = {}

    def limit(queue: str) -> int | None:
        if queue not in known:
            try:
                known[queue] = mgmt.queue(vhost, queue).delivery_limit
            except ManagementMismatch:
                raise  # the API answers for another broker: exit 3, as everywhere
            except DlxtoolError:  # gone, or the API unreachable: the attempts say the limit is not known
                known[queue] = None
        return known[queue]

    return limit


def mark_copies(items: list[Entry]) -> int:
    """Find the copies a kill -9 during a replay left (dlxtool.ops.replay.Pairs), set their `copy_of` to
    the position of the other one of the pair, and say how many."""
    from dlxtool.ops.provenance import Pairs, provenance_src, record_fingerprint

    pairs = Pairs(limit=len(items) + 1)
    keyed = [(item, record_fingerprint(item.record), provenance_src(item.record.headers)) for item in items]
    # sources first: a copy pairs with its source wherever the two are in the queue
    for item, fingerprint, origin in sorted(keyed, key=lambda k: k[2] is not None):
        partners = pairs.partners(fingerprint, origin)
        if partners:
            item.copy_of = partners[0]
        pairs.add(fingerprint, origin, item.record.position)
    return sum(item.copy_of is not None for item in items)


MAX_TEXTS = 1000  # distinct error texts a group counts (past it: "1000+")


@dataclass
class Group:
    origin: str | None       # a queue, or "exchange → routing key"
    convention: str | None   # the convention that named the origin
    reason: str | None
    type: str | None
    error: str | None        # the first message's error text: the group's example
    failure: FailureKey = field(default_factory=lambda: FailureKey(None))  # what its messages' failures share
    messages: int = 0
    deaths: int = 0  # at least: x-death, or an app retry counter where the broker restarted x-death
    deaths_recorded: int = 0  # what the x-death headers add up to
    deaths_may_be_low: int = 0  # messages whose count may be low (see dlxtool.deaths.DeathCount)
    first: datetime | None = None
    last: datetime | None = None
    positions: list[int] = field(default_factory=list[int])
    route: Route | None = None  # the origin as a route (queue, or exchange + routing key)
    # x-death's deaths that are failures, by reason, and the TTL expiries in wait queues (not failures)
    by_reason: Counter[str] = field(default_factory=Counter[str])
    waits: int = 0
    failures: int = 0  # at least (MessageHistory.failures)
    attempts: list[int] = field(default_factory=list[int])  # per message whose attempts a convention counts
    texts: set[str] = field(default_factory=set[str])  # the distinct error texts (up to MAX_TEXTS)
    names: list[str] = field(default_factory=list[str])  # the messages' names (dlxtool.message_ids.message_name)

    def add(self, entry: Entry) -> None:
        from dlxtool.message_ids import message_name

        self.messages += 1
        if entry.explained.error and len(self.texts) < MAX_TEXTS:
            self.texts.add(entry.explained.error)
        self.names.append(message_name(entry.record))
        count = entry.history.deaths
        self.deaths += count.at_least
        self.deaths_recorded += count.recorded
        self.deaths_may_be_low += count.may_be_low
        self.by_reason.update(entry.history.failures_by_reason())
        self.waits += entry.history.waits
        self.failures += entry.history.failures
        if entry.explained.attempts is not None:
            self.attempts.append(entry.explained.attempts)
        self.positions.append(entry.record.position)
        # x-death times, and the failure times frameworks record (NServiceBus, MassTransit) for theirs.
        times = [d.time for d in entry.history.history.deaths]
        times += [r.failed_at for r in entry.explained.readings if r.convention != "x-death"]
        for when in times:
            if when is None:
                continue
            self.first = when if self.first is None else min(self.first, when)
            self.last = when if self.last is None else max(self.last, when)

    def deaths_text(self) -> str:
        """The table's cell: failures by reason, "at least" where an app's counter says more than x-death."""
        text = ", ".join(f"{n} {reason}" for reason, n in sorted(self.by_reason.items(), key=lambda i: -i[1]))
        if self.failures > sum(self.by_reason.values()):
            text = f"at least {self.failures}" + (f" ({text} in x-death)" if text else "")
        return text + ("+" if text and self.deaths_may_be_low else "")

    def error_text(self, shorten: Callable[[str | None, int], str], width: int = 60) -> str:
        """The table's error cell: the example, the frame of a stack group, and how many other texts it stands for
        ("ValueError: order o-00013 has no lines (+149 like it)")."""
        others = len(self.texts) - 1
        more = f" (+{others:,}{'+' if len(self.texts) >= MAX_TEXTS else ''} like it)" if others > 0 else ""
        signature = self.failure.signature
        frame = signature.short_frame() if signature is not None else None
        where = f" at {frame}" if frame else ""
        example = self.error or (signature.exception if signature is not None else None)
        if not example:
            return ""
        return shorten(example, max(20, width - len(more) - len(where))) + where + more

    def attempts_text(self) -> str:
        """Attempts per message: "3 each", "1-4 each"; "" where no convention counts them."""
        if not self.attempts:
            return ""
        low, high = min(self.attempts), max(self.attempts)
        shown = str(low) if low == high else f"{low}-{high}"
        return f"{shown} each" if len(self.attempts) == self.messages else f"{shown} ({len(self.attempts)} counted)"

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "convention": self.convention, "reason": self.reason, "type": self.type,
                "error": self.error, "origin_route": self.route.to_json() if self.route else None,
                "messages": self.messages, "deaths": self.deaths, "deaths_recorded": self.deaths_recorded,
                "deaths_may_be_low": self.deaths_may_be_low, "failures": self.failures,
                "deaths_by_reason": dict(self.by_reason), "waits": self.waits,
                "attempts": sum(self.attempts) if self.attempts else None,
                "attempts_per_message": [min(self.attempts), max(self.attempts)] if self.attempts else None,
                "first": iso(self.first), "last": iso(self.last),
                # what the group's failures share (error_pattern, or exception + frame where a stack was recorded),
                # how many different texts `error` (the first one) stands for, and every message, by name
                **self.failure.to_json(), "error_texts": len(self.texts),
                "example_message_id": self.names[0] if self.names else None, "message_ids": self.names}


def count_notes(items: Iterable[Entry]) -> list[str]:
    """What the output must say about its death counts: which may be low, and which come from an
    application's retry counter rather than x-death (see dlxtool.deaths.DeathCount)."""
    items = list(items)
    low = sum(1 for i in items if i.history.deaths.may_be_low)
    counted = sum(1 for i in items if i.history.deaths.evidence)
    notes: list[str] = []
    if low:
        notes.append(f"{low} of {len(items)} messages were dead-lettered by RabbitMQ 3.13 or later (x-last-death-*): "
                     "4.x and 3.13.0-3.13.2 restart x-death when an application republishes a message, so their "
                     "death counts are a minimum and may be low (marked +); an application retry counter "
                     "(x-retry-count, x-delivery-attempts) would be used where it says more")
    if counted:
        notes.append(f"{counted} of {len(items)} messages: x-death counts fewer deaths than the application's "
                     "retry counter (x-retry-count, x-delivery-attempts), as RabbitMQ 4.x restarts x-death when an "
                     "application republishes a message; the counter's number is shown")
    return notes


def summarize_failures(items: Iterable[Entry], *, ungrouped: bool = False) -> list[Group]:
    """Group by (origin, convention, reason at the origin, type, failure); biggest groups first. The failure is
    the stack's exception type and first application frame where a convention recorded a stack, else the error
    text without what varies from message to message (ids, numbers, UUIDs, hex, timestamps: dlxtool.failures);
    `ungrouped`: the error text as it is.

    Across conventions: a Spring parking lot and broker-made dead letters of the same origin make two
    groups (their conventions differ) that sort next to each other.

    `first`/`last` come from x-death `time`, which RabbitMQ sets when an entry is created (the first
    death for that queue and reason), so `last` is the newest such first death, not the newest death.
    """
    groups: dict[tuple[Any, ...], Group] = {}
    for entry in items:
        x = entry.explained
        failure = entry.history.failure if x.origin_from == "x-death" else None
        stack = x.stack
        fails = failure_key(x.error, stack.stack if stack else None, exception=stack.exception if stack else None,
                            ungrouped=ungrouped)
        key = (x.origin.key() if x.origin else None, x.origin_from, failure.reason if failure else None,
               entry.type, fails)
        if key not in groups:
            groups[key] = Group(*key[:4], x.error, fails, route=x.origin)
        groups[key].add(entry)
    return sorted(groups.values(), key=lambda g: (-g.messages, -g.deaths, str(g.origin)))
