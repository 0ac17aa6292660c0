"""x-death parsing, origin resolution and the history-reset rules for replay.

RabbitMQ keeps one x-death entry per (queue, reason), most recent first, each with `count`, `time`
(the first death for that entry), `exchange`, `routing-keys` and maybe `original-expiration`. Headers
written by hand or by old/odd clients can be any shape: parsing never raises, it warns and reads what
it can.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dlxtool.amqp_values import RawValue

# Reasons that mean "the message failed in this queue" (as opposed to waiting out a TTL there).
FAILURE_REASONS = ("rejected", "delivery_limit", "maxlen")

# The death history and the delivery counters a quorum queue wrote (4.3 carries x-acquired-count across
# dead-lettering, and a publisher's value survives a publish: measured on 4.3.6): a count reset removes them all
HISTORY_HEADERS = (
    "x-death",
    "x-first-death-queue", "x-first-death-reason", "x-first-death-exchange",
    "x-last-death-queue", "x-last-death-reason", "x-last-death-exchange",
    "CC", "BCC", "x-delivery-count", "x-acquired-count",
)
DEFAULT_RETRY_HEADERS = ("x-retry-count", "x-delivery-attempts")
# Retry counters applications commonly add; shown by `history`, reset only when named.
COMMON_RETRY_HEADERS = ("x-retry-count", "x-delivery-attempts", "count")
# Headers consumer libraries leave the error text in (config `error_headers` adds more).
ERROR_HEADERS = ("x-exception-message", "x-error", "MT-Fault-Message")


@dataclass(frozen=True)
class Death:
    """One x-death entry: the queue that dead-lettered the message and why, how often, its exchange and routing keys."""

    queue: str | None
    reason: str | None
    count: int
    exchange: str | None
    routing_keys: tuple[str, ...]
    time: datetime | None
    original_expiration: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "reason": self.reason,
            "count": self.count,
            "exchange": self.exchange,
            "routing_keys": list(self.routing_keys),
            "time": iso(self.time),
            "original_expiration": self.original_expiration,
        }


@dataclass(frozen=True)
class Origin:
    """The queue a dead letter came from, and how that was found."""

    queue: str | None
    why: str  # how it was found, for --dry-run and history output


@dataclass
class DeathHistory:
    """A message's x-death entries, with what the x-first-death-* and x-last-death-* headers say."""

    deaths: list[Death]
    warnings: list[str] = field(default_factory=list)
    first: dict[str, str] = field(default_factory=dict)  # queue/reason/exchange from x-first-death-*
    last: dict[str, str] = field(default_factory=dict)   # from x-last-death-* (3.13+)

    @property
    def total(self) -> int:
        return sum(d.count for d in self.deaths)


_COMPANIONS = tuple((f"{prefix}{key}", which, key) for prefix, which in (("x-first-death-", "first"),
                                                                     ("x-last-death-", "last"))
                    for key in ("queue", "reason", "exchange"))


def parse_history(headers: Mapping[str, Any] | None) -> DeathHistory:
    headers = headers or {}
    deaths, warnings = _parse_x_death(headers.get("x-death"))
    history = DeathHistory(deaths=deaths, warnings=warnings)
    for name, which, key in _COMPANIONS:
        value = headers.get(name)
        if value is not None:
            getattr(history, which)[key] = value if type(value) is str else _text(value)
    return history


def parse_deaths(headers: Mapping[str, Any] | None) -> list[Death]:
    return parse_history(headers).deaths


def _parse_x_death(raw: Any) -> tuple[list[Death], list[str]]:
    if raw is None:
        return [], []
    if type(raw) is list and all(type(e) is dict and "queue" in e and "reason" in e and "count" in e for e in raw):
        return [_death(entry) for entry in raw], []  # the broker's shape, no warnings to collect
    if isinstance(raw, Mapping):  # a single table instead of an array of tables
        return [_death(raw)], ["x-death is a table, not an array; read it as one entry"]
    if not isinstance(raw, list | tuple):
        return [], [f"x-death is a {type(raw).__name__}, not an array; ignored"]
    deaths, warnings = [], []
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            warnings.append(f"x-death[{i}] is a {type(entry).__name__}, not a table; skipped")
            continue
        if "queue" not in entry or "reason" not in entry or "count" not in entry:
            missing = [k for k in ("queue", "reason", "count") if k not in entry]
            warnings.append(f"x-death[{i}] lacks {', '.join(missing)}")
        deaths.append(_death(entry))
    return deaths, warnings


def _death(entry: Mapping[str, Any]) -> Death:
    # Called for every dead letter replay moves: the common shapes (str, int, datetime) take no detour.
    get = entry.get
    routing_keys = death_routing_keys(get("routing-keys"))
    exp = get("original-expiration")
    queue, reason, exchange, count, when = (get("queue"), get("reason"), get("exchange"), get("count"),
                                            get("time"))
    return Death(
        queue=queue if type(queue) is str else _opt_text(queue),
        reason=reason if type(reason) is str else _opt_text(reason),
        count=count if type(count) is int else _count(count),
        exchange=exchange if type(exchange) is str else _opt_text(exchange),
        routing_keys=routing_keys,
        time=when if type(when) is datetime and when.tzinfo is not None else _time(when),
        original_expiration=None if exp is None else _text(exp),
    )


def death_routing_keys(keys: Any) -> tuple[str, ...]:
    """An x-death entry's `routing-keys` value as Death.routing_keys holds it."""
    if isinstance(keys, list | tuple):
        return tuple([k if type(k) is str else _text(k) for k in keys])
    return () if keys is None else (_text(keys),)


_FAILED_IN = {reason: f"most recent {reason} death" for reason in FAILURE_REASONS}


def find_origin(headers: Mapping[str, Any] | None, history: DeathHistory | None = None) -> Origin:
    """The queue a dead letter failed in: not where it waited out a TTL, not its routing key."""
    history = history or parse_history(headers)
    failed = failed_in(history)
    if failed is not None and failed.queue and failed.reason:
        return Origin(failed.queue, _FAILED_IN[failed.reason])
    if history.first.get("queue"):
        return Origin(history.first["queue"], "x-first-death-queue")
    if history.deaths and history.deaths[-1].queue:
        return Origin(history.deaths[-1].queue, "oldest x-death entry")
    return Origin(None, "no death history")


def failed_in(history: DeathHistory) -> Death | None:
    """The most recent death with a failure reason and a queue: where the message failed (its origin)."""
    for death in history.deaths:  # most recent first
        if death.reason in FAILURE_REASONS and death.queue:
            return death
    return None


def waited_only(history: DeathHistory) -> Death | None:
    """The most recent death when a message's deaths are only TTL expiries (no queue it failed in): the
    queue it expired from may be a wait queue, whose way out leads to the queue that processes it
    (dlxtool.ops.routes.Router.through_wait_queue). None when a failure names the origin."""
    if not history.deaths or any(d.reason in FAILURE_REASONS for d in history.deaths):
        return None
    latest = history.deaths[0]
    return latest if latest.reason == "expired" and latest.queue else None


@dataclass
class MessageHistory:
    """Everything `history` shows for one message: deaths, companions, counters, origin, error text."""

    history: DeathHistory
    origin: Origin
    delivery_count: Any = None  # quorum x-delivery-count as found (not validated)
    retry: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    count: DeathCount | None = None  # None: only x-death counted (built by hand)

    @property
    def deaths(self) -> DeathCount:
        return self.count or DeathCount(self.history.total, self.history.total)

    @property
    def waits(self) -> int:
        """TTL expiries in a queue other than the origin: waits in a retry ladder's wait queue, not failures."""
        return sum(d.count for d in self.history.deaths if d.reason == "expired" and d.queue != self.origin.queue)

    @property
    def failures(self) -> int:
        """The deaths that are not waits, at least: x-death's, or an app's retry counter where it says more
        (DeathCount.evidence: it counts the app's retries, not the waits between them)."""
        count = self.deaths
        return count.at_least if count.evidence else count.recorded - self.waits

    def failures_by_reason(self) -> dict[str, int]:
        """The deaths that are not waits, by reason (rejected, delivery_limit, maxlen, expired in the origin)."""
        out: dict[str, int] = {}
        for d in self.history.deaths:
            if not (d.reason == "expired" and d.queue != self.origin.queue):
                out[d.reason or "?"] = out.get(d.reason or "?", 0) + d.count
        return out

    @property
    def failure(self) -> Death | None:
        """The death at the origin: most recent failure there, else the most recent death."""
        for death in self.history.deaths:
            if death.queue == self.origin.queue and death.reason in FAILURE_REASONS:
                return death
        return self.history.deaths[0] if self.history.deaths else None

    def to_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin.queue,
            "origin_why": self.origin.why,
            "total_deaths": self.history.total,
            "deaths_at_least": self.deaths.at_least,
            "deaths_may_be_low": self.deaths.may_be_low,
            "deaths_note": self.deaths.note,
            "deaths": [d.to_json() for d in self.history.deaths],
            "failures": self.failures,
            "waits": self.waits,
            "first_death": dict(self.history.first),
            "last_death": dict(self.history.last),
            "delivery_count": self.delivery_count,
            "retry_headers": {k: _plain(v) for k, v in self.retry.items()},
            "error": self.error,
            "warnings": list(self.history.warnings),
        }


def message_history(headers: Mapping[str, Any] | None, *, error_headers: Iterable[str] = (),
                    through: Callable[[Death], Origin] | None = None) -> MessageHistory:
    """Parse once, for display: never raises, malformed parts become warnings. `through(death)`: the origin of
    a message that only waited out TTLs, followed through that wait queue's way out (dlxtool.ops.history)."""
    if headers is not None and not isinstance(headers, Mapping):
        headers = {}
    history = parse_history(headers)
    waited = waited_only(history) if through is not None else None
    return MessageHistory(
        history=history,
        origin=through(waited) if through is not None and waited is not None else find_origin(headers, history),
        delivery_count=(headers or {}).get("x-delivery-count"),
        retry=retry_headers(headers),
        error=error_text(headers, (*error_headers, *ERROR_HEADERS)),
        count=death_count(headers, history),
    )


def error_text(headers: Mapping[str, Any] | None, names: Iterable[str] = ERROR_HEADERS) -> str | None:
    """The first error header present (case-insensitive names), as one line of text."""
    if not headers:
        return None
    lowered = {str(k).lower(): v for k, v in headers.items()}
    for name in names:
        value = lowered.get(name.lower())
        if value is not None and value != "":
            return " ".join(_text(value).split())
    return None


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    return value if isinstance(value, int | float | str | bool) or value is None else _text(value)


def summarize(deaths: Iterable[Death], limit: int = 2) -> str:
    """One line for tables: 'rejected×3 from orders.q, expired×3 from orders.wait'."""
    parts = [f"{d.reason or '?'}×{d.count} from {d.queue or '?'}" for d in deaths]
    if len(parts) > limit:
        parts = parts[:limit] + [f"+{len(parts) - limit} more"]
    return ", ".join(parts)


def retry_headers(headers: Mapping[str, Any] | None, names: Iterable[str] = COMMON_RETRY_HEADERS) -> dict[str, Any]:
    headers = headers or {}
    return {n: headers[n] for n in names if n in headers}


# -- how many times, at least -----------------------------------------------------------------------
#
# RabbitMQ 4.x (and 3.13.0-3.13.2) ignores an x-death a client publishes: a message an application
# republishes with the headers it received (a retry loop in the app) starts a fresh x-death at its next
# death, so it says count 1 however often it died before (rabbitmq-server #10709, #11339; seen on 4.0.5:
# three reject-republish rounds give count 1 where 3.10 says 3). Deaths the broker makes by itself (a
# TTL wait queue sending a message back) are still counted. The brokers that restart x-death so write
# x-last-death-* (3.13 and later; 3.10 does not), which tells even a record read from a file where it
# was dead-lettered. There, an application's own retry counter is the better count when it says more.


@dataclass(frozen=True)
class DeathCount:
    """How many times a message died: what x-death says, and the least any of its headers proves."""

    recorded: int  # the sum of the x-death counts
    at_least: int  # recorded, or an app retry counter where the broker restarts x-death and it says more
    evidence: str | None = None  # the header behind at_least when it is not x-death, e.g. "x-retry-count 3"
    may_be_low: bool = False  # the broker restarts x-death on republish and no app counter says otherwise

    @property
    def note(self) -> str | None:
        """Why the count is not simply x-death's, in words for the output; None when it is."""
        if self.evidence:
            return (f"x-death says {self.recorded}, {self.evidence}: the broker restarts x-death when an "
                    "application republishes a message (RabbitMQ 4.x, 3.13.0-3.13.2)")
        if self.may_be_low:
            return ("dead-lettered by RabbitMQ 3.13+ (x-last-death-*): 4.x and 3.13.0-3.13.2 restart x-death "
                    "when an application republishes a message, so it may have died more often")
        return None


def restarts_x_death(headers: Mapping[str, Any] | None) -> bool:
    """Dead-lettered by a broker that may restart x-death at a client's republish (it wrote x-last-death-*)."""
    return any(isinstance(k, str) and k.startswith("x-last-death-") for k in (headers or {}))


def death_count(headers: Mapping[str, Any] | None, history: DeathHistory | None = None) -> DeathCount:
    """The deaths x-death records and the least the headers prove (see the note above this class)."""
    if headers is not None and not isinstance(headers, Mapping):
        headers = {}
    history = history or parse_history(headers)
    recorded = history.total
    if not restarts_x_death(headers):
        return DeathCount(recorded, recorded)
    counters = {name: value for name, value in retry_headers(headers, DEFAULT_RETRY_HEADERS).items()
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0}
    if not counters:
        return DeathCount(recorded, recorded, may_be_low=recorded > 0)
    name, value = max(counters.items(), key=lambda kv: kv[1])
    if value > recorded:
        return DeathCount(recorded, value, evidence=f"{name} says {value}")
    return DeathCount(recorded, recorded)


def reset_history(
    headers: Mapping[str, Any] | None, extra: Iterable[str] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Headers with the death history and retry counters removed, and what was removed."""
    names = _reset_names(extra) if isinstance(extra, tuple) else {*HISTORY_HEADERS, *DEFAULT_RETRY_HEADERS, *extra}
    kept: dict[str, Any] = {}
    removed: dict[str, Any] = {}
    for key, value in (headers or {}).items():
        (removed if key in names else kept)[key] = value
    if is_celery_task(kept) and kept["retries"] != 0:
        # Celery (task protocol 2) counts its attempts in the `retries` header and needs it there: a task
        # replayed with retries=3 and max_retries=3 would get one attempt instead of four. Set back to 0.
        removed["retries"], kept["retries"] = kept["retries"], 0
    return kept, removed


CELERY_HEADER = "lang"  # a Celery task (protocol 2) has lang = "py": is_celery_task


def is_celery_task(headers: Mapping[str, Any]) -> bool:
    """A Celery task message (protocol 2): task name, id, lang "py" and an integer `retries` in the headers."""
    retries = headers.get("retries")
    return (headers.get(CELERY_HEADER) == "py" and isinstance(headers.get("task"), str)
            and isinstance(headers.get("id"), str) and isinstance(retries, int) and not isinstance(retries, bool))


@functools.lru_cache(maxsize=32)
def _reset_names(extra: tuple[str, ...]) -> frozenset[str]:
    return frozenset((*HISTORY_HEADERS, *DEFAULT_RETRY_HEADERS, *extra))


def reset_header_names(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Every header name reset_history removes (but Celery's `retries`, set back to 0): the history, the retry
    counters and `extra`, in that order."""
    return tuple(dict.fromkeys((*HISTORY_HEADERS, *DEFAULT_RETRY_HEADERS, *extra)))


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _text(value: Any) -> str:
    if isinstance(value, RawValue):  # a kind kept as its AMQP bytes (an L, a float …): what it means
        value = value.value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, Mapping | list | tuple):
        # A table where text belongs (a hand-made or hostile header): say so rather than str() it,
        # which recurses in C through however deep it nests.
        return f"({'table' if isinstance(value, Mapping) else 'array'} of {len(value)})"
    return str(value)


def _opt_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _count(value: Any) -> int:
    if isinstance(value, RawValue):
        value = value.value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        return int(value)  # a string or float from a hand-made header
    except (TypeError, ValueError):
        return 1


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    return None
