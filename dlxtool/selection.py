"""Which messages a command works on: one selection for peek, history, dump, replay and purge.

All given criteria must hold (AND); a repeated criterion of the same kind matches any of its values (OR),
e.g. `--origin a --origin b`. Each criterion that names values has an excluding form, `--not-NAME` (`exclude`: a
message that `--NAME VALUE` would select, for any one of the values given, is left out), as `--redelivered` has
`--not-redelivered`; the bounds are each other's opposite (`--older-than`/`--newer-than`,
`--min-deaths`/`--max-deaths`). A message is named by its message_id, else by its fingerprint
(dlxtool.message_ids.message_name). The count (`-n`/`--limit`) is not a criterion: a command selects first and
counts the matches (`Selection.limit` for replay and purge; the readers' `-n`).

Regular expressions are Python's (`re`), searched anywhere in the text (`^…$` anchors), case-sensitive
unless they say `(?i)`; one that does not compile is a usage error (exit 2) before anything is read.

What a record does not say by itself comes through a `Lens`: the message's type (the AMQP `type` property,
else its decoded protobuf type), and its origin and error texts as the conventions in use explain them
(dlxtool.conventions: x-death, Spring, NServiceBus, … and the config file's). The commands build one with
the config file's conventions (dlxtool.cli.options.selection_for); the default reads with the built-in ones.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from dlxtool.amqp_values import RawValue
from dlxtool.deaths import ERROR_HEADERS, death_count, message_history
from dlxtool.errors import UsageError
from dlxtool.record import MessageRecord

Decoder = Callable[[MessageRecord], "dict[str, Any] | None"]

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)?\s*$", re.IGNORECASE)
_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
REASONS = ("rejected", "expired", "maxlen", "delivery_limit")


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


def compile_regex(text: str, option: str) -> re.Pattern[str]:
    """`text` as a Python regular expression, or a usage error naming the option and where it fails."""
    try:
        return re.compile(text)
    except re.error as exc:
        where = f" at position {exc.pos}" if exc.pos is not None else ""
        raise UsageError(f"{option} {text!r}: not a regular expression: {exc.msg}{where}",
                         hint="Python's regex syntax (README: Selecting messages); escape a literal . * + ? ( ) [ ] "
                              "with a backslash") from None


@dataclass(frozen=True)
class HeaderMatch:
    """`--header NAME=VALUE` (the header's text equals VALUE) or `--header NAME~REGEX` (the regex is found
    in it). A name matches exactly, else ignoring case (clients differ in the case they write)."""

    name: str
    value: str | None = None
    pattern: re.Pattern[str] | None = None

    @staticmethod
    def parse(text: str, option: str = "--header") -> HeaderMatch:
        at = min((i for i in (text.find("="), text.find("~")) if i >= 0), default=-1)
        if at <= 0:
            raise UsageError(f"bad {option} {text!r}",
                             hint="use NAME=VALUE (equals) or NAME~REGEX (regex found in it), e.g. "
                                  "--header tenant=acme, --header x-exception-message~'(?i)timeout'")
        name, op, rest = text[:at], text[at], text[at + 1:]
        if op == "=":
            return HeaderMatch(name, value=rest)
        return HeaderMatch(name, pattern=compile_regex(rest, f"{option} {name}~"))

    def matches(self, headers: Mapping[str, Any]) -> bool:
        value = header_value(headers, self.name)
        if value is None:
            return False
        text = as_text(value)
        if self.pattern is not None:
            return self.pattern.search(text) is not None
        return text == self.value

    def describe(self) -> str:
        return f"{self.name}={self.value}" if self.pattern is None else f"{self.name}~{self.pattern.pattern}"


@dataclass(frozen=True)
class Explained:
    """What the conventions say of a message, as far as selecting it goes."""

    origins: tuple[str, ...] = ()  # the origin queue, or an exchange origin's exchange and "exchange → key"
    errors: tuple[str, ...] = ()   # every error text found: the conventions', every error header's


def explain_for_selection(record: MessageRecord, known: Sequence[Any] = (), origin_from: str | None = None,
                          error_headers: Sequence[str] = (), through: Callable[[Any], Any] | None = None) -> Explained:
    """The origin and error texts of `record` as `history` shows them: the conventions `known` (default the built-in
    ones), the winner's origin (`origin_from` forces one), `through` following a TTL-only history's wait queue."""
    from dlxtool.conventions import BUILT_IN, Message, explain

    headers = record.headers if isinstance(record.headers, dict) else {}
    history = message_history(headers, through=through)
    x = explain(Message(headers, record.body, record.queue, x_death_origin=history.origin, x_death=history.history),
                known or BUILT_IN, origin_from=origin_from, error_headers=tuple(error_headers))
    origins: tuple[str, ...] = ()
    if x.origin is not None:
        origins = (x.origin.queue,) if x.origin.queue is not None else (str(x.origin.exchange), x.origin.key())
    errors = [x.error, *(r.error for r in x.readings)]
    for name in (*error_headers, *ERROR_HEADERS):
        value = header_value(headers, name)
        if value is not None:
            errors.append(as_text(value))
    return Explained(origins, tuple(dict.fromkeys(e for e in errors if e)))


@dataclass(frozen=True)
class Lens:
    """How a selection sees what a record does not say by itself (module docstring).

    `decode`: the protobuf decoder for a record's type when its AMQP `type` property does not match (None: the
    record's `decoded` field only, which a reader fills before it selects). `conventions` (default: the built-in
    ones), `origin_from`, `error_headers` and `through` explain origins and error texts as `history` does."""

    decode: Decoder | None = None
    conventions: tuple[Any, ...] = ()
    origin_from: str | None = None
    error_headers: tuple[str, ...] = ()
    through: Callable[[Any], Any] | None = None

    def types(self, record: MessageRecord) -> Iterator[str]:
        """The AMQP type property, then the decoded protobuf type (decoded only when asked for it). A guess (a
        defective, ambiguous or unsure match: dlxtool.decoding.is_weak) is no type to select by: a replay or purge
        by --type must not take messages the registry only guessed at."""
        amqp = record.properties.get("type")
        if amqp:
            yield str(amqp)
        if record.decoded is None and self.decode is not None:
            record.decoded = self.decode(record)
        if record.decoded and record.decoded.get("type"):
            from dlxtool.decoding import is_weak

            if not is_weak(record.decoded):
                yield str(record.decoded["type"])

    def explain(self, record: MessageRecord) -> Explained:
        return explain_for_selection(record, self.conventions, self.origin_from, self.error_headers, self.through)


@dataclass
class CountTally:
    """Messages `--min-deaths` left out although their death count may be low (RabbitMQ 4.x restarts
    x-death when an application republishes a message; see dlxtool.deaths.DeathCount)."""

    maybe_low: int = 0
    maybe_more: int = 0  # selected by --max-deaths although they may have died more often

    def note(self, min_deaths: int | None, max_deaths: int | None = None) -> str | None:
        why = ("dead-lettered by RabbitMQ 3.13 or later, which restarts x-death (4.x, 3.13.0-3.13.2) when an "
               "application republishes a message: they may have died more often than x-death says; see "
               "`dlxtool history`")
        said = []
        if self.maybe_low:
            said.append(f"{self.maybe_low} message(s) not selected by --min-deaths {min_deaths} were {why}")
        if self.maybe_more:
            said.append(f"{self.maybe_more} message(s) selected by --max-deaths {max_deaths} were {why}")
        return "; ".join(said) or None


Check = Callable[[MessageRecord, float], bool]


@dataclass(frozen=True)
class Selection:
    """The criteria of a selection, all of which a message must meet (module docstring)."""

    origins: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    min_deaths: int | None = None
    types: tuple[str, ...] = ()
    headers: tuple[HeaderMatch, ...] = ()
    errors: tuple[re.Pattern[str], ...] = ()
    routing_keys: tuple[str, ...] = ()  # glob patterns
    older_than: float | None = None     # seconds
    newer_than: float | None = None
    body_contains: tuple[bytes, ...] = ()
    body_patterns: tuple[re.Pattern[str], ...] = ()
    redelivered: bool | None = None
    limit: int | None = None
    message_ids: frozenset[str] = frozenset()  # names: message_id properties, fingerprint names ("fp:…")
    max_deaths: int | None = None
    # --not-NAME: the criteria a message must not meet; any one value of any of them leaves it out (`excludes`)
    exclude: Selection | None = None
    lens: Lens = field(default_factory=Lens, compare=False, repr=False)
    tally: CountTally = field(default_factory=CountTally, compare=False, repr=False)

    @property
    def filters_anything(self) -> bool:
        return bool(self.describe())

    @property
    def needs_type(self) -> bool:
        """Whether matching may need a record's decoded body (a reader decodes before it selects)."""
        return bool(self.types) or (self.exclude is not None and self.exclude.needs_type)

    @property
    def explains(self) -> bool:
        """Whether matching needs the conventions' reading of a message (origin, error texts)."""
        return bool(self.origins or self.errors) or (self.exclude is not None and self.exclude.explains)

    @property
    def sees_headers(self) -> bool:
        """Whether matching reads what an AMQP 1.0 reader does not get of a message published over 0.9.1 (its table
        and array headers: --header, error texts and origins read from headers) or names messages by a fingerprint
        of their 0.9.1 view: over 1.0 it could select other messages than over 0.9.1."""
        from dlxtool.message_ids import FINGERPRINT_PREFIX

        if self.headers or self.errors or self.origins:
            return True
        if any(name.startswith(FINGERPRINT_PREFIX) for name in self.message_ids):
            return True
        return self.exclude is not None and self.exclude.sees_headers

    def with_lens(self, lens: Lens) -> Selection:
        return replace(self, lens=lens, exclude=self.exclude.with_lens(lens) if self.exclude is not None else None)

    def matches(self, record: MessageRecord, now: float | None = None) -> bool:
        at = now if now is not None else time.time()
        return all(check(record, at) for check in self.checks())

    def checks(self) -> list[Check]:
        """The predicates of the criteria given, cheapest first; a message `--min-deaths` leaves out is tallied
        only when it matched everything else."""
        checks: list[Check] = []
        if self.message_ids:
            checks.append(self._named)
        if self.redelivered is not None:
            checks.append(lambda r, _n: r.redelivered == self.redelivered)
        if self.reasons:
            checks.append(lambda r, _n: any(d.reason in self.reasons for d in r.deaths))
        if self.headers:
            checks.append(lambda r, _n: all(h.matches(_headers(r)) for h in self.headers))
        if self.routing_keys:
            checks.append(self._routing_key_matches)
        if self.older_than is not None:
            checks.append(lambda r, n: (age := message_age(r, n)) is not None and age >= (self.older_than or 0))
        if self.newer_than is not None:
            checks.append(lambda r, n: (age := message_age(r, n)) is not None and age <= (self.newer_than or 0))
        if self.body_contains:
            checks.append(lambda r, _n: any(s in r.body for s in self.body_contains))
        if self.body_patterns:
            checks.append(lambda r, _n: any(p.search(body_text(r.body)) for p in self.body_patterns))
        if self.types:
            checks.append(self._type_matches)
        if self.origins or self.errors:
            checks.append(self._explained_matches)
        if self.exclude is not None:
            exclude = self.exclude
            checks.append(lambda r, n: not exclude.excludes(r, n))
        if self.max_deaths is not None:
            checks.append(self._died_rarely_enough)
        if self.min_deaths is not None:  # last: a message it leaves out matched everything else
            checks.append(self._died_often_enough)
        return checks

    def excludes(self, record: MessageRecord, now: float) -> bool:
        """As the `exclude` of another selection: whether any one value of any criterion here selects `record`
        (`--not-type A --not-error B` leaves out the messages of type A and those whose error matches B)."""
        return any(one.matches(record, now) for one in self._one_by_one)

    @functools.cached_property
    def _one_by_one(self) -> tuple[Selection, ...]:
        """This selection as one selection per criterion value (made once; a frozen dataclass keeps its
        __dict__, where cached_property stores it)."""
        singles: list[Selection] = []
        for name in ("origins", "reasons", "types", "headers", "errors", "routing_keys", "body_contains",
                     "body_patterns"):
            values: dict[str, Any] = {name: ()}
            for value in getattr(self, name):
                values[name] = (value,)
                singles.append(replace(_NOTHING, lens=self.lens, **values))
        if self.message_ids:
            singles.append(Selection(message_ids=self.message_ids, lens=self.lens))
        return tuple(singles)

    @functools.cached_property
    def _names(self) -> tuple[frozenset[str], frozenset[str], tuple[str, ...]]:
        """message_ids as (message ids, whole fingerprint names, fingerprint prefixes), fingerprints lower case."""
        from dlxtool.message_ids import FINGERPRINT_PREFIX, is_fingerprint_name

        fingerprints = {n.lower() for n in self.message_ids if is_fingerprint_name(n)}
        whole = frozenset(n for n in fingerprints if len(n) == len(FINGERPRINT_PREFIX) + 16)
        return self.message_ids, whole, tuple(sorted(fingerprints - whole))

    def _named(self, record: MessageRecord, _now: float) -> bool:
        """Its message_id is one of the names, or its fingerprint name is (or starts with a short one given)."""
        ids, whole, prefixes = self._names
        message_id = record.properties.get("message_id")
        if isinstance(message_id, bytes | bytearray):
            message_id = bytes(message_id).decode("utf-8", "replace")
        if message_id in ids:
            return True
        if not (whole or prefixes):
            return False
        from dlxtool.message_ids import fingerprint_name

        name = fingerprint_name(record)
        return name is not None and (name in whole or (bool(prefixes) and name.startswith(prefixes)))

    def _died_rarely_enough(self, record: MessageRecord, _now: float) -> bool:
        """At most max_deaths by the same count as --min-deaths; a selected message whose count may be low is
        tallied (it may have died more often)."""
        count = death_count(record.headers)
        if count.at_least > (self.max_deaths or 0):
            return False
        if count.may_be_low:
            self.tally.maybe_more += 1
        return True

    def _type_matches(self, record: MessageRecord, _now: float) -> bool:
        """A type given in full, or its last part (`PaymentFailed` for shop.orders.v1.PaymentFailed)."""
        return any(t in self.types or t.rsplit(".", 1)[-1] in self.types for t in self.lens.types(record))

    def _explained_matches(self, record: MessageRecord, _now: float) -> bool:
        x = self.lens.explain(record)
        if self.origins and not any(o in self.origins for o in x.origins):
            return False
        return not self.errors or any(p.search(e) for p in self.errors for e in x.errors)

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
        keys = {as_text(record.routing_key), *(k for d in record.deaths for k in d.routing_keys)}
        return any(fnmatch.fnmatchcase(k, p) for k in keys for p in self.routing_keys)

    def describe(self) -> dict[str, Any]:
        """The criteria that are set, for plans, summaries and the provenance header."""
        out: dict[str, Any] = {}
        for name in ("origins", "reasons", "types", "routing_keys"):
            if getattr(self, name):
                out[name] = list(getattr(self, name))
        if self.headers:
            out["headers"] = [h.describe() for h in self.headers]
        if self.errors:
            out["errors"] = [p.pattern for p in self.errors]
        if self.body_contains:
            out["body_contains"] = [b.decode("utf-8", "backslashreplace") for b in self.body_contains]
        if self.body_patterns:
            out["body_matches"] = [p.pattern for p in self.body_patterns]
        if self.message_ids:
            out["message_ids"] = names_described(self.message_ids)
        for name in ("min_deaths", "max_deaths", "older_than", "newer_than", "redelivered"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.exclude is not None:
            out.update({f"not_{k}": v for k, v in self.exclude.describe().items()})
        return out

    def describe_text(self) -> str:
        """'origins=orders; errors=timeout': one line for messages to the user."""
        return "; ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"
                         for k, v in self.describe().items())


_NOTHING = Selection()


def names_described(names: frozenset[str]) -> list[str] | str:
    """--message-id values as a plan, a summary or a replay's provenance header says them: a few listed, many
    counted with a digest (dlxtool.message_ids.id_digest) — the provenance goes into every replayed message."""
    if len(names) <= 3:
        return sorted(names)
    from dlxtool.message_ids import id_digest

    return f"{len(names)} names, digest {id_digest(names)[:16]}"


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
                    types: Sequence[str] = (), headers: Sequence[str] = (), errors: Sequence[str] = (),
                    routing_keys: Sequence[str] = (), older_than: str | None = None, newer_than: str | None = None,
                    body_contains: Sequence[str] = (), body_matches: Sequence[str] = (),
                    redelivered: bool | None = None, limit: int | None = None, lens: Lens | None = None,
                    message_ids: Sequence[str] = (), max_deaths: int | None = None,
                    exclude: Mapping[str, Sequence[str]] | None = None) -> Selection:
    """A Selection from command-line text (durations, NAME=VALUE / NAME~REGEX and regexes parsed; errors as
    UsageError, exit 2). `exclude`: the --not-NAME values by the name of this function's parameter (origins,
    reasons, types, headers, errors, routing_keys, body_contains, body_matches, message_ids)."""
    if limit is not None and limit < 0:
        raise UsageError("--limit must be >= 0")
    unknown = [r for r in (*reasons, *(exclude or {}).get("reasons", ())) if r not in REASONS]
    if unknown:
        raise UsageError(f"bad --reason {unknown[0]!r}", hint=f"one of {', '.join(REASONS)}")
    if min_deaths is not None and max_deaths is not None and min_deaths > max_deaths:
        raise UsageError(f"--min-deaths {min_deaths} and --max-deaths {max_deaths} select nothing together",
                         hint="--min-deaths N: at least N deaths; --max-deaths N: at most N")
    opposite = _excluded(exclude or {})
    return Selection(
        origins=tuple(origins), reasons=tuple(reasons), min_deaths=min_deaths, types=tuple(types),
        headers=tuple(HeaderMatch.parse(h) for h in headers),
        errors=tuple(compile_regex(e, "--error") for e in errors), routing_keys=tuple(routing_keys),
        older_than=parse_duration(older_than) if older_than else None,
        newer_than=parse_duration(newer_than) if newer_than else None,
        body_contains=tuple(s.encode() for s in body_contains),
        body_patterns=tuple(compile_regex(b, "--body-matches") for b in body_matches),
        redelivered=redelivered, limit=limit, message_ids=frozenset(message_ids), max_deaths=max_deaths,
        exclude=opposite, lens=lens or Lens(),
    )


def _excluded(values: Mapping[str, Sequence[str]]) -> Selection | None:
    """The --not-NAME values as the selection they leave out (errors name the --not- option)."""
    if not any(values.values()):
        return None
    return Selection(
        origins=tuple(values.get("origins", ())), reasons=tuple(values.get("reasons", ())),
        types=tuple(values.get("types", ())),
        headers=tuple(HeaderMatch.parse(h, "--not-header") for h in values.get("headers", ())),
        errors=tuple(compile_regex(e, "--not-error") for e in values.get("errors", ())),
        routing_keys=tuple(values.get("routing_keys", ())),
        body_contains=tuple(s.encode() for s in values.get("body_contains", ())),
        body_patterns=tuple(compile_regex(b, "--not-body-matches") for b in values.get("body_matches", ())),
        message_ids=frozenset(values.get("message_ids", ())),
    )


def header_value(headers: Mapping[str, Any], name: str) -> Any:
    """A header by name: exactly, else ignoring case."""
    if name in headers:
        return headers[name]
    lowered = name.lower()
    return next((v for k, v in headers.items() if str(k).lower() == lowered), None)


def body_text(body: bytes) -> str:
    """A body as text for a regex: UTF-8, bytes that are not kept as \\xNN escapes (so they can be matched too)."""
    return body.decode("utf-8", "backslashreplace")


def as_text(value: Any) -> str:
    if isinstance(value, RawValue):  # a kind kept as its AMQP bytes (a float, an L …): match what it means
        value = value.value
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _headers(record: MessageRecord) -> Mapping[str, Any]:
    return record.headers if isinstance(record.headers, dict) else {}
