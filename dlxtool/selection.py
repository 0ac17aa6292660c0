"""Message selection shared by replay and purge: small predicates over a MessageRecord, no eval.

All given criteria must hold (AND); a repeated criterion of the same kind matches any of its values
(OR), e.g. `--origin a --origin b`. `--limit` is not a predicate: the operation stops selecting after
that many matches (`Selection.limit`).

Message type: for now the AMQP `type` property. The protobuf registry (branch `proto`) plugs in
through `type_of` — a callable record -> type name or None — without changing this module's users.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dlxtool.amqp_values import RawValue
from dlxtool.deaths import death_count, find_origin
from dlxtool.errors import UsageError
from dlxtool.record import MessageRecord

TypeResolver = Callable[[MessageRecord], "str | None"]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)?\s*$", re.IGNORECASE)
_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def amqp_type(record: MessageRecord) -> str | None:
    value = record.properties.get("type")
    return None if value is None else str(value)


def parse_age(text: str) -> float | None:
    """The one age parser (--older-than/--newer-than here, peek's --offset 30m): '90', '90s', '1.5h',
    '15 min', '2D', '1w' -> seconds (units s/sec, m/min, h, d, w, any case; none = seconds); None when
    `text` is not an age."""
    match = _AGE.match(text or "")
    if not match:
        return None
    return float(match.group(1)) * _SECONDS[(match.group(2) or "s").lower()]


def parse_duration(text: str) -> float:
    """An age that must be one (parse_age), else a clear error."""
    seconds = parse_age(text)
    if seconds is None:
        raise UsageError(f"bad duration {text!r}", hint="use e.g. 30s, 15m, 2h, 3d")
    return seconds


def parse_header_match(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise UsageError(f"bad header match {text!r}", hint="use NAME=VALUE, e.g. --header tenant=acme")
    return name, value


@dataclass
class CountTally:
    """Messages `--min-deaths` left out although their death count may be low (RabbitMQ 4.x restarts
    x-death when an application republishes a message; see dlxtool.deaths.DeathCount)."""

    maybe_low: int = 0

    def note(self, min_deaths: int | None) -> str | None:
        if not self.maybe_low:
            return None
        return (f"{self.maybe_low} message(s) not selected by --min-deaths {min_deaths} were dead-lettered by "
                "RabbitMQ 3.13 or later, which restarts x-death (4.x, 3.13.0-3.13.2) when an application "
                "republishes a message: they may have died more often than x-death says; see `dlxtool history`")


@dataclass(frozen=True)
class Selection:
    origins: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    min_deaths: int | None = None
    types: tuple[str, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()
    routing_keys: tuple[str, ...] = ()  # glob patterns
    older_than: float | None = None     # seconds
    newer_than: float | None = None
    body_contains: tuple[bytes, ...] = ()
    redelivered: bool | None = None
    limit: int | None = None
    type_of: TypeResolver = field(default=amqp_type, compare=False, repr=False)
    tally: CountTally = field(default_factory=CountTally, compare=False, repr=False)

    @property
    def filters_anything(self) -> bool:
        return bool(self.describe())

    def matches(self, record: MessageRecord, now: float | None = None) -> bool:
        return all(check(record, now if now is not None else time.time()) for check in self._checks())

    def _checks(self) -> list[Callable[[MessageRecord, float], bool]]:
        checks: list[Callable[[MessageRecord, float], bool]] = []
        if self.origins:
            checks.append(lambda r, _n: find_origin(r.headers).queue in self.origins)
        if self.reasons:
            checks.append(lambda r, _n: any(d.reason in self.reasons for d in r.deaths))
        if self.types:
            checks.append(lambda r, _n: self.type_of(r) in self.types)
        if self.headers:
            checks.append(lambda r, _n: all(_text(r.headers.get(k)) == v for k, v in self.headers))
        if self.routing_keys:
            checks.append(self._routing_key_matches)
        if self.older_than is not None:
            checks.append(lambda r, n: (age := message_age(r, n)) is not None and age >= (self.older_than or 0))
        if self.newer_than is not None:
            checks.append(lambda r, n: (age := message_age(r, n)) is not None and age <= (self.newer_than or 0))
        if self.body_contains:
            checks.append(lambda r, _n: any(s in r.body for s in self.body_contains))
        if self.redelivered is not None:
            checks.append(lambda r, _n: r.redelivered == self.redelivered)
        if self.min_deaths is not None:  # last: a message it leaves out matched everything else
            checks.append(self._died_often_enough)
        return checks

    def _died_often_enough(self, record: MessageRecord, _now: float) -> bool:
        """At least min_deaths by x-death, or by an application's retry counter where the broker restarts
        x-death (4.x); a count that may still be low is tallied, so the command can say so."""
        count = death_count(record.headers)
        if count.at_least >= (self.min_deaths or 0):
            return True
        if count.may_be_low:
            self.tally.maybe_low += 1
        return False

    def _routing_key_matches(self, record: MessageRecord, _now: float) -> bool:
        """The delivery's routing key or any routing key in its death history (before a DLX override)."""
        # (a routing key that is not UTF-8 arrives as bytes: matched as text, as the history's keys are)
        keys = {_text(record.routing_key) or "", *(k for d in record.deaths for k in d.routing_keys)}
        return any(fnmatch.fnmatchcase(k, p) for k in keys for p in self.routing_keys)

    def describe(self) -> dict[str, Any]:
        """The criteria that are set, for plans, summaries and the provenance header."""
        out: dict[str, Any] = {}
        for name in ("origins", "reasons", "types", "routing_keys"):
            if getattr(self, name):
                out[name] = list(getattr(self, name))
        if self.headers:
            out["headers"] = [f"{k}={v}" for k, v in self.headers]
        if self.body_contains:
            out["body_contains"] = [b.decode("utf-8", "backslashreplace") for b in self.body_contains]
        for name in ("min_deaths", "older_than", "newer_than", "redelivered"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def message_age(record: MessageRecord, now: float) -> float | None:
    """Seconds since the message was created: the timestamp property, else its latest x-death time."""
    ts = record.properties.get("timestamp")
    if isinstance(ts, int | float) and not isinstance(ts, bool) and ts > 0:
        return now - float(ts)
    times = [d.time for d in record.deaths if d.time is not None]
    if times:
        return now - max(times).timestamp()
    return None


def build_selection(*, origins: Sequence[str] = (), reasons: Sequence[str] = (), min_deaths: int | None = None,
                    types: Sequence[str] = (), headers: Sequence[str] = (), routing_keys: Sequence[str] = (),
                    older_than: str | None = None, newer_than: str | None = None,
                    body_contains: Sequence[str] = (), redelivered: bool | None = None,
                    limit: int | None = None, type_of: TypeResolver | None = None) -> Selection:
    """A Selection from command-line text (durations and NAME=VALUE parsed, errors as UsageError)."""
    if limit is not None and limit < 0:
        raise UsageError("--limit must be >= 0")
    return Selection(
        origins=tuple(origins), reasons=tuple(reasons), min_deaths=min_deaths, types=tuple(types),
        headers=tuple(parse_header_match(h) for h in headers), routing_keys=tuple(routing_keys),
        older_than=parse_duration(older_than) if older_than else None,
        newer_than=parse_duration(newer_than) if newer_than else None,
        body_contains=tuple(s.encode() for s in body_contains), redelivered=redelivered, limit=limit,
        type_of=type_of or amqp_type,
    )


def _text(value: Any) -> str | None:
    if isinstance(value, RawValue):  # a kind kept as its AMQP bytes (a float, an L …): match what it means
        value = value.value
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)
