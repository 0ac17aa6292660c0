"""Conventions: how to read a dead letter's origin, error text and attempts, whoever made it.

RabbitMQ's dead-lettering writes x-death (dlxtool.deaths reads it). Many dead-letter queues are filled
by the consumer framework instead, which republishes a failed message into a parking-lot or error
queue with its own headers and no x-death. Each convention here says, for one such maker:

- the origin: a queue (published to through the default exchange), or an exchange + routing key;
- the error text; the attempt count (at least this many failures);
- which headers a replay removes with the count reset (kept with --keep-history).

When several conventions name different origins, the most recent failure wins (see `explain`);
`origin_from` forces one. Teams' own conventions come from the config file (`HeaderConvention`).
Reading never raises: headers written by other programs can be any shape.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol
from urllib.parse import unquote, urlsplit

import orjson

from dlxtool.deaths import (
    ERROR_HEADERS,
    FAILURE_REASONS,
    HISTORY_HEADERS,
    Death,
    DeathHistory,
    Origin,
    _text,
    error_text,
    find_origin,
    parse_history,
)
from dlxtool.errors import UsageError

X_DEATH = "x-death"


@dataclass(frozen=True)
class Route:
    """Where a replay sends a message: a queue (default exchange), or an exchange + routing key."""

    queue: str | None = None
    exchange: str | None = None
    routing_key: str | None = None

    @staticmethod
    def to(exchange: str, routing_key: str) -> Route:
        # The default exchange routes by queue name: that is a queue origin, not an exchange one.
        return Route(queue=routing_key) if exchange == "" else Route(exchange=exchange, routing_key=routing_key)

    def describe(self) -> str:
        if self.queue is not None:
            return f"queue {self.queue}"
        if not self.routing_key:  # a convention that names the exchange only (a fanout exchange)
            return f"exchange {self.exchange}, empty routing key"
        return f"exchange {self.exchange}, routing key {self.routing_key}"

    def key(self) -> str:
        """One short text for tables and grouping."""
        if self.queue is not None:
            return self.queue
        return f"{self.exchange} → {self.routing_key}" if self.routing_key else f"{self.exchange} (empty key)"

    def to_json(self) -> dict[str, str | None]:
        return {"queue": self.queue, "exchange": self.exchange, "routing_key": self.routing_key}


@dataclass(frozen=True)
class Reading:
    """What one convention found in one message."""

    convention: str
    origin: Route | None = None
    origin_why: str = ""
    error: str | None = None
    attempts: int | None = None
    attempts_why: str = ""
    failed_at: datetime | None = None  # when the failure was recorded, when the convention says
    reset: tuple[str, ...] = ()        # headers present that a replay's count reset removes
    # (exchange, routing key) the message was delivered with at its origin, where the convention records them:
    # a queue origin replayed through a temporary exchange keeps that routing key (dlxtool.ops.replay)
    received: tuple[str, str] | None = None
    # The stack the failure left, where the convention records one, and the exception type where it records that
    # apart: what `history --summary` groups by (dlxtool.failures.stack_signature)
    stack: str | None = None
    exception: str | None = None


@dataclass(frozen=True)
class Message:
    """The parts of a message a convention may read."""

    headers: Mapping[str, Any]
    body: bytes = b""
    queue: str | None = None  # the queue it was read from (MassTransit's `<queue>_error`)
    # x-death's origin as the caller already resolved it (dlxtool.deaths.message_history, which may follow
    # a wait queue's way out); None: dlxtool.deaths.find_origin's.
    x_death_origin: Origin | None = None
    x_death: DeathHistory | None = None  # the parsed x-death when the caller has it (parsed once)
    # A queue's delivery limit now (management API), for the attempts of a delivery_limit death; None: not known
    delivery_limit: Callable[[str], int | None] | None = None
    _lower: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    def get(self, name: str) -> Any:
        """A header by name; names differ in case across clients, so a miss tries case-insensitively."""
        value = self.headers.get(name)
        if value is None:
            if self._lower is None:  # built once per message, on the first miss
                object.__setattr__(self, "_lower", {str(k).lower(): v for k, v in self.headers.items()})
            value = self._lower.get(name.lower())  # type: ignore[union-attr]
        return value


class Convention(Protocol):
    @property
    def name(self) -> str: ...  # what --origin-from and the output use

    @property
    def label(self) -> str: ...  # how a plan says it: "from Spring headers"

    def read(self, message: Message) -> Reading | None: ...


# A convention may say which header names it needs to be present before it can name an origin or headers to
# reset (`triggers`: lowercase; a trailing "*" makes a prefix). Replay's C fast path, which knows x-death only,
# declines every message that carries one (see fast_path_triggers).


class _BuiltIn:
    """A built-in convention: its name and label are class attributes, it has no state. A plain class, not a
    frozen dataclass: each of those cost about 0.7 ms of every history's and replay's start-up to create
    (python -X importtime). Equal to another of its kind, immutable, shown as `Spring()`."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _str(value: Any) -> str | None:
    if value is None:
        return None
    return " ".join(_text(value).split()) if not isinstance(value, Mapping | list | tuple) else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(_text(value)) if not isinstance(value, int) else value
    except ValueError:
        return None


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    text = _str(value)
    if not text:
        return None
    # NServiceBus writes "yyyy-MM-dd HH:mm:ss:ffffff Z" (DateTimeOffsetHelper); ISO 8601 otherwise.
    for candidate in (text.replace(" Z", "Z"), _nsb_time(text)):
        try:
            parsed = datetime.fromisoformat(candidate.replace("Z", "+00:00")) if candidate else None
        except ValueError:
            continue
        if parsed is not None:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def _nsb_time(text: str) -> str | None:
    parts = text.split(" ")
    if len(parts) >= 2 and parts[1].count(":") == 3:
        hms, frac = parts[1].rsplit(":", 1)
        return f"{parts[0]}T{hms}.{frac}+00:00"
    return None


def _present(headers: Mapping[str, Any], names: Iterable[str], prefixes: Iterable[str] = (), *,
             fold: bool = True) -> tuple[str, ...]:
    """The headers here by these names (or prefixes): in any case where the convention reads them in any case
    (Message.get), so that a replay resets what was read; exactly for the broker's own (`fold=False`)."""
    if not fold:
        wanted, starts = set(names), tuple(prefixes)
        return tuple(k for k in headers if k in wanted or (starts and str(k).startswith(starts)))
    wanted, starts = {n.lower() for n in names}, tuple(p.lower() for p in prefixes)
    out = []
    for k in headers:
        key = str(k).lower()
        if key in wanted or (starts and key.startswith(starts)):
            out.append(k)
    return tuple(out)


def _joined(kind: str | None, message: str | None) -> str | None:
    if kind and message:
        return f"{kind}: {message}"
    return message or kind


# -- RabbitMQ ----------------------------------------------------------------------------------------------


class XDeath(_BuiltIn):
    """RabbitMQ's own dead-lettering: dlxtool.deaths' origin rules, unchanged (this only wraps them)."""

    __slots__ = ()

    name: str = "x-death"
    label: str = "x-death"
    triggers: ClassVar[tuple[str, ...]] = ()  # the fast path reads x-death itself (dlxtool.ops.replay_raw)

    def read(self, message: Message) -> Reading | None:
        history = message.x_death or parse_history(message.headers)
        if not history.deaths and not history.first:
            return None
        origin = message.x_death_origin or find_origin(message.headers, history)
        failures = [d for d in history.deaths if d.queue == origin.queue and d.reason in FAILURE_REASONS]
        newest = max((d.time for d in history.deaths if d.time is not None), default=None)
        attempts, attempts_why = x_death_attempts(failures, message.delivery_limit)
        return Reading(
            self.name, Route(queue=origin.queue) if origin.queue else None, origin.why,
            attempts=attempts, attempts_why=attempts_why,
            # x-death `time` is when an entry was created (its first death): a lower bound.
            failed_at=newest, reset=_present(message.headers, HISTORY_HEADERS, fold=False))


def x_death_attempts(failures: Sequence[Death], limit_of: Callable[[str], int | None] | None) -> tuple[int | None, str]:
    """How many times the origin's consumers had the message, at least, and why. A rejection is one. A
    delivery_limit death is the queue's limit + 1 deliveries: a quorum queue dead-letters a message at the
    return past its limit (limit 3: four deliveries, four rejects), and the dead letter says neither the limit
    nor the count (no x-delivery-count: seen on 3.10.8, 4.0.5 and 4.3.6), so the queue's limit now is read
    (`limit_of`, management API); not known (a file, no API), it counts 1."""
    total, notes = 0, []
    for death in failures:
        limit = limit_of(death.queue) if death.reason == "delivery_limit" and limit_of and death.queue else None
        if death.reason == "delivery_limit" and limit is not None and limit >= 0:
            total += death.count * (limit + 1)
            times = f" × {death.count}" if death.count > 1 else ""
            notes.append(f"delivery_limit in {death.queue}, whose delivery-limit is {limit} now: {limit + 1} "
                         f"deliveries{times}")
            continue
        total += death.count
        if death.reason == "delivery_limit":
            notes.append(f"delivery_limit in {death.queue}: its delivery-limit + 1 deliveries, counted as 1 (the "
                         "limit is not known here)")
    if not failures:
        return None, ""
    return total or None, "; ".join(notes) if notes else "x-death counts at the origin"


# -- Spring AMQP -------------------------------------------------------------------------------------------

# spring-projects/spring-amqp, spring-rabbit/src/main/java/org/springframework/amqp/rabbit/retry/
# RepublishMessageRecoverer.java: X_EXCEPTION_STACKTRACE = "x-exception-stacktrace", X_EXCEPTION_MESSAGE =
# "x-exception-message", X_ORIGINAL_EXCHANGE = "x-original-exchange", X_ORIGINAL_ROUTING_KEY =
# "x-original-routingKey" (the received exchange and routing key); it writes no time and no attempt count.
SPRING_HEADERS = ("x-exception-stacktrace", "x-exception-message", "x-original-exchange", "x-original-routingKey")


class Spring(_BuiltIn):
    __slots__ = ()

    name: str = "spring"
    label: str = "Spring headers"
    triggers: ClassVar[tuple[str, ...]] = ("x-original-exchange", "x-original-routingkey", "x-exception-stacktrace")

    def read(self, message: Message) -> Reading | None:
        h = message.headers
        exchange, key = _str(message.get("x-original-exchange")), _str(message.get("x-original-routingKey"))
        error = _str(message.get("x-exception-message"))
        # x-exception-message alone is a generic error header many apps write (dlxtool.deaths.ERROR_HEADERS):
        # Spring's recoverer always writes the stack trace and the received exchange/routing key with it.
        if exchange is None and key is None and message.get("x-exception-stacktrace") is None:
            return None
        origin = Route.to(exchange or "", key) if key is not None else None
        stack = message.get("x-exception-stacktrace")
        return Reading(self.name, origin, "x-original-exchange/x-original-routingKey" if origin else "",
                       error=error or _first_line(stack),
                       reset=_present(h, SPRING_HEADERS), received=(exchange or "", key) if key is not None else None,
                       stack=_long_text(stack))


def _long_text(value: Any) -> str | None:
    """A header's text with its lines kept (a stack), or None."""
    if value is None or isinstance(value, Mapping | list | tuple):
        return None
    return _text(value) or None


def _first_line(value: Any) -> str | None:
    text = None if value is None else _text(value).strip()
    return text.splitlines()[0].strip() if text else None


# -- NServiceBus -------------------------------------------------------------------------------------------

# Particular/NServiceBus, src/NServiceBus.Core/Headers.cs (FaultsHeaderKeys.FailedQ = "NServiceBus.FailedQ",
# DelayedRetries = "NServiceBus.Retries", DelayedRetriesTimestamp = "NServiceBus.Retries.Timestamp",
# TimeOfFailure = "NServiceBus.TimeOfFailure", ExceptionInfo prefix "NServiceBus.ExceptionInfo."
# with .ExceptionType/.Message/.StackTrace/.Source/.HelpLink/.Data.*). The reset list is ServiceControl's
# KeysToRemoveWhenRetryingAMessage (what Particular's own retry strips).
NSB_RESET = ("NServiceBus.FailedQ", "NServiceBus.Retries", "NServiceBus.Retries.Timestamp",
             "NServiceBus.TimeOfFailure", "NServiceBus.ProcessingEndpoint", "NServiceBus.ProcessingMachine")
NSB_EXCEPTION = "NServiceBus.ExceptionInfo."


class NServiceBus(_BuiltIn):
    __slots__ = ()

    name: str = "nservicebus"
    label: str = "NServiceBus headers"
    triggers: ClassVar[tuple[str, ...]] = ("nservicebus.failedq", "nservicebus.exceptioninfo.*")

    def read(self, message: Message) -> Reading | None:
        h = message.headers
        failed_q = _str(message.get("NServiceBus.FailedQ"))
        kind = _str(message.get(NSB_EXCEPTION + "ExceptionType"))
        error = _joined(kind, _str(message.get(NSB_EXCEPTION + "Message")))
        if failed_q is None and error is None:
            return None
        delayed = _int(message.get("NServiceBus.Retries"))
        # On the RabbitMQ transport FailedQ is the input queue's name (MSMQ's "queue@machine" is not).
        return Reading(self.name, Route(queue=failed_q) if failed_q else None,
                       "NServiceBus.FailedQ" if failed_q else "", error=error,
                       attempts=(delayed or 0) + 1,
                       attempts_why="at least NServiceBus.Retries (delayed retries) + 1; immediate retries are "
                                    "not counted in a header",
                       failed_at=_when(message.get("NServiceBus.TimeOfFailure")),
                       reset=_present(h, NSB_RESET, (NSB_EXCEPTION,)),
                       stack=_long_text(message.get(NSB_EXCEPTION + "StackTrace")), exception=kind)


# -- MassTransit -------------------------------------------------------------------------------------------

# MassTransit/MassTransit, src/MassTransit.Abstractions/MessageHeaders.cs: Reason = "MT-Reason",
# FaultExceptionType "MT-Fault-ExceptionType", FaultMessage "MT-Fault-Message", FaultMessageType,
# FaultConsumerType, FaultTimestamp "MT-Fault-Timestamp", FaultStackTrace, FaultRetryCount
# "MT-Fault-RetryCount", FaultRedeliveryCount, FaultInputAddress "MT-Fault-InputAddress" (the receive
# endpoint's address, rabbitmq://host/vhost/queue). Its error queue is `<queue>_error`.
MT_RESET = ("MT-Reason", "MT-Fault-ExceptionType", "MT-Fault-Message", "MT-Fault-MessageType",
            "MT-Fault-ConsumerType", "MT-Fault-Timestamp", "MT-Fault-StackTrace", "MT-Fault-RetryCount",
            "MT-Fault-RedeliveryCount", "MT-Fault-InputAddress")
MT_ERROR_SUFFIX = "_error"


class MassTransit(_BuiltIn):
    __slots__ = ()

    name: str = "masstransit"
    label: str = "MassTransit headers"
    triggers: ClassVar[tuple[str, ...]] = ("mt-reason", "mt-fault-*")

    def read(self, message: Message) -> Reading | None:
        h = message.headers
        if not any(str(k).startswith("MT-Fault-") for k in h) and message.get("MT-Reason") is None:
            return None
        origin, why = None, ""
        address = _str(message.get("MT-Fault-InputAddress"))
        queue = _address_queue(address) if address else None
        if queue:
            origin, why = Route(queue=queue), "MT-Fault-InputAddress"
        elif message.queue and message.queue.endswith(MT_ERROR_SUFFIX) and len(message.queue) > len(MT_ERROR_SUFFIX):
            origin, why = Route(queue=message.queue[:-len(MT_ERROR_SUFFIX)]), f"queue name {message.queue}"
        retries = _int(message.get("MT-Fault-RetryCount"))
        kind = _str(message.get("MT-Fault-ExceptionType"))
        return Reading(self.name, origin, why,
                       error=_joined(kind, _str(message.get("MT-Fault-Message"))),
                       attempts=None if retries is None else retries + 1,
                       attempts_why="MT-Fault-RetryCount + 1" if retries is not None else "",
                       failed_at=_when(message.get("MT-Fault-Timestamp")), reset=_present(h, MT_RESET),
                       stack=_long_text(message.get("MT-Fault-StackTrace")), exception=kind)


def _address_queue(address: str) -> str | None:
    """rabbitmq://host/vhost/queue?bind=true → queue (the last path segment, percent-decoded)."""
    try:
        path = urlsplit(address).path
    except ValueError:
        return None
    last = path.rstrip("/").rsplit("/", 1)[-1]
    return unquote(last) or None


# -- rascal (npm) ------------------------------------------------------------------------------------------

# onebeyond/rascal, lib/amqp/SubscriberError.js: the republish and forward strategies set, in one nested
# table header `rascal`: originalQueue (set on receipt by lib/amqp/SubscriberSession.js), originalExchange,
# originalRoutingKey, error.message (truncated to 1024), error.code, recovery.<originalQueue>.republished /
# .forwarded (counts), restoreRoutingHeaders, and recovery.<queue>.immediateNack.
RASCAL = "rascal"


class Rascal(_BuiltIn):
    __slots__ = ()

    name: str = "rascal"
    label: str = "rascal headers"
    triggers: ClassVar[tuple[str, ...]] = (RASCAL,)

    def read(self, message: Message) -> Reading | None:
        table = message.get(RASCAL)
        if not isinstance(table, Mapping):
            return None
        queue = _str(table.get("originalQueue"))
        error_table = table.get("error")
        error = None
        if isinstance(error_table, Mapping):
            error = _joined(_str(error_table.get("code")), _str(error_table.get("message")))
        recovery = table.get("recovery")
        counts = recovery.get(queue) if isinstance(recovery, Mapping) and queue else None
        attempts = None
        if isinstance(counts, Mapping):
            attempts = sum(_int(counts.get(k)) or 0 for k in ("republished", "forwarded")) or None
        if queue is None and error is None:
            return None
        exchange, key = table.get("originalExchange"), table.get("originalRoutingKey")
        received = (_text(exchange), _text(key)) if isinstance(exchange, str | bytes) and isinstance(
            key, str | bytes) else None
        return Reading(self.name, Route(queue=queue) if queue else None, "rascal.originalQueue" if queue else "",
                       error=error, attempts=attempts,
                       attempts_why="rascal.recovery.<queue>.republished + forwarded" if attempts else "",
                       reset=_present(message.headers, (RASCAL,)), received=received)


# -- application retry headers ----------------------------------------------------------------------------

# The seed patterns' own counters (x-retry-count, x-delivery-attempts, count: see dlxtool.deaths).
APP_RETRY_HEADERS = ("x-retry-count", "x-delivery-attempts", "count")
# Counters of retries: a message retried N times was handled N + 1 times (its first try, then each retry), as
# Celery's retries, MassTransit's RetryCount and NServiceBus' Retries count. An app that counts its republishes
# (x-retry-count + 1, then republish; at the last attempt it rejects without counting) leaves 2 on a message it
# handled three times. x-delivery-attempts counts deliveries and `count` says not what: both are taken as they are.
RETRY_COUNTERS = ("x-retry-count",)


class AppRetry(_BuiltIn):
    __slots__ = ()

    name: str = "retry-headers"
    label: str = "retry headers"
    triggers: ClassVar[tuple[str, ...]] = ()  # x-retry-count, x-delivery-attempts: the fast path resets them too

    def read(self, message: Message) -> Reading | None:
        for header in APP_RETRY_HEADERS:
            value = _int(message.headers.get(header))
            if value is not None:
                retries = header in RETRY_COUNTERS
                # `count` is reset only when named (deaths.reset_history), the x- ones always.
                return Reading(self.name, attempts=value + 1 if retries else value,
                               attempts_why=f"{header} + 1 (the first try, then each retry)" if retries else header,
                               reset=_present(message.headers, APP_RETRY_HEADERS[:2], fold=False))
        return None


# -- Celery -----------------------------------------------------------------------------------------------

# celery/celery, celery/app/amqp.py (as_task_v2: task protocol 2 headers lang="py", task, id, retries, …) and
# celery/app/task.py (Task.retry sends a new message with retries + 1). Celery writes no error text into
# the message and its dead letters are broker-made (a task raising Reject(requeue=False)): attempts only.
# The count reset keeps `retries` (Celery needs it; dlxtool.deaths sets it back to 0 where it handles Celery).


class Celery(_BuiltIn):
    __slots__ = ()

    name: str = "celery"
    label: str = "Celery headers"
    triggers: ClassVar[tuple[str, ...]] = ()  # no origin, no reset (the fast path leaves Celery tasks to __call__)

    def read(self, message: Message) -> Reading | None:
        h = message.headers
        retries = h.get("retries")
        if h.get("lang") != "py" or not isinstance(h.get("task"), str) or not isinstance(h.get("id"), str):
            return None
        if not isinstance(retries, int) or isinstance(retries, bool):
            return None
        return Reading(self.name, attempts=retries + 1, attempts_why="Celery retries + 1")


# -- Dramatiq ----------------------------------------------------------------------------------------------

# Bogdanp/dramatiq, dramatiq/middleware/retries.py: on failure `message.options["traceback"] =
# traceback.format_exc(limit=30)` (and options["retries"] += 1); the message is a JSON body
# (dramatiq/message.py: queue_name, actor_name, args, kwargs, options, message_id, message_timestamp).
# Its dead letters are broker-made (the .XQ queue), so only the error text comes from here.
BODY_LIMIT = 1 << 20  # bodies above 1 MiB are not parsed for a traceback


class Dramatiq(_BuiltIn):
    __slots__ = ()

    name: str = "dramatiq"
    label: str = "Dramatiq options"
    triggers: ClassVar[tuple[str, ...]] = ()  # error text only: it changes nothing a replay does

    def read(self, message: Message) -> Reading | None:
        body = message.body
        if not may_be_dramatiq(body):
            return None
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        options = data.get("options") if isinstance(data, dict) else None
        trace = options.get("traceback") if isinstance(options, dict) else None
        if not isinstance(trace, str) or not trace.strip():
            return None
        # The last line of a Python traceback is the exception: "ValueError: boom".
        return Reading(self.name, error=trace.strip().splitlines()[-1].strip(), stack=trace)


def may_be_dramatiq(body: bytes) -> bool:
    """The cheap test before a body is parsed as a Dramatiq message: a JSON object, not too big, naming an actor."""
    return bool(body) and body[:1] == b"{" and len(body) <= BODY_LIMIT and b'"actor_name"' in body


def dramatiq_message(body: bytes) -> dict[str, Any] | None:
    """A Dramatiq message (a JSON object with queue_name, actor_name and an options object), or None.
    Parsed with the standard json module, as Dramatiq's JSONEncoder does (dramatiq/encoder.py): orjson
    would turn an integer beyond 64 bits into a float, and a rewritten body must keep every other value."""
    if not may_be_dramatiq(body):
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep
        return None
    if not isinstance(data, dict) or not isinstance(data.get("options"), dict):
        return None
    if not isinstance(data.get("queue_name"), str) or not isinstance(data.get("actor_name"), str):
        return None
    return data


def used_body_retries(body: bytes) -> int | None:
    """Dramatiq's options.retries when it has used some (> 0): what --reset-body-retries sets back to 0."""
    data = dramatiq_message(body)
    return None if data is None else _used(data["options"].get("retries"))


def _used(retries: Any) -> int | None:
    return retries if isinstance(retries, int) and not isinstance(retries, bool) and retries > 0 else None


def reset_body_retries(body: bytes) -> bytes | None:
    """The body with Dramatiq's options.retries set to 0, or None (leave the body byte for byte): not a
    Dramatiq message, or no retries used. Dramatiq's Retries middleware compares options["retries"] with
    max_retries, so a replayed message that keeps it gets no retry at all. Written as Dramatiq's
    JSONEncoder writes it (json.dumps, compact separators): same keys in the same order, same values."""
    data = dramatiq_message(body)
    if data is None or _used(data["options"].get("retries")) is None:
        return None
    data["options"]["retries"] = 0
    try:
        return json.dumps(data, separators=(",", ":")).encode("utf-8")
    except ValueError:  # e.g. NaN was parsed and can be written back; anything else: leave it alone
        return None


# -- AMQP 1.0 consumers (RabbitMQ 4.x) ---------------------------------------------------------------------

# An AMQP 1.0 consumer says why it failed in the `modified` outcome's message annotations: application keys must start
# with x-opt- (RabbitMQ's docs, "modified outcome"; rabbitmq-amqp-python-client's discard_with_annotations and
# requeue_with_annotations). RabbitMQ merges them into the message (quorum queues), and a 0.9.1 reader gets them as
# headers of the same names; an AMQP 1.0 read (MessageRecord.amqp10) gives the same view. No fixed names: the
# error is the first x-opt-* text whose name says error, reason, exception or cause; the attempts the first x-opt-*
# integer whose name says attempt, retry, retries, or delivery-count (an x-opt-*retry* count + 1, as RETRY_COUNTERS).
_OPT = "x-opt-"
_OPT_ERROR_WORDS = ("error", "reason", "exception", "cause", "failure", "message")
_OPT_ATTEMPT_WORDS = ("attempt", "retries", "retry", "delivery-count", "redeliver")


class Amqp10Annotations(_BuiltIn):
    __slots__ = ()

    name: str = "amqp10-annotations"
    label: str = "AMQP 1.0 outcome annotations (x-opt-*)"
    triggers: ClassVar[tuple[str, ...]] = ("x-opt-*",)

    def read(self, message: Message) -> Reading | None:
        error = None
        attempts = attempts_name = None
        reset: list[str] = []
        for key, value in message.headers.items():
            name = str(key).lower()
            if not name.startswith(_OPT) or name == "x-opt-deaths":
                continue
            rest = name[len(_OPT):]
            if any(w in rest for w in _OPT_ATTEMPT_WORDS) and _int(value) is not None:
                if attempts is None:
                    count = _int(value)
                    retries = "retr" in rest
                    attempts, attempts_name = (count + 1 if retries else count), str(key)  # type: ignore[operator]
                reset.append(str(key))
            elif any(w in rest for w in _OPT_ERROR_WORDS) and _str(value):
                if error is None:
                    error = _str(value)
                reset.append(str(key))
        if error is None and attempts is None:
            return None
        why = f"{attempts_name} + 1 (the first try, then each retry)" if attempts_name and "retr" in \
            attempts_name.lower() else (attempts_name or "")
        return Reading(self.name, error=error, attempts=attempts, attempts_why=why, reset=tuple(reset))


# -- teams' own conventions (config file) -----------------------------------------------------------------


@dataclass(frozen=True)
class HeaderConvention:
    """A team's convention from the config file: plain header names, no code."""

    name: str
    origin_queue_header: str | None = None
    origin_exchange_header: str | None = None
    origin_routing_key_header: str | None = None
    error_headers: tuple[str, ...] = ()
    attempts_header: str | None = None
    reset_headers: tuple[str, ...] = ()
    source: str = ""  # "config FILE: [conventions.NAME]", for messages

    @property
    def label(self) -> str:
        return f"{self.name} headers"

    @property
    def triggers(self) -> tuple[str, ...]:
        return tuple(n.lower() for n in self._names())

    def _names(self) -> tuple[str, ...]:
        names = (self.origin_queue_header, self.origin_exchange_header, self.origin_routing_key_header,
                 *self.error_headers, self.attempts_header, *self.reset_headers)
        return tuple(n for n in names if n)

    def read(self, message: Message) -> Reading | None:
        h = message.headers
        origin, why, received = None, "", None
        if self.origin_queue_header and _str(message.get(self.origin_queue_header)):
            origin, why = Route(queue=_str(message.get(self.origin_queue_header))), self.origin_queue_header
        elif self.origin_routing_key_header and self.origin_exchange_header:
            key = _str(message.get(self.origin_routing_key_header))
            if key is not None:
                exchange = _str(message.get(self.origin_exchange_header)) or ""
                origin, received = Route.to(exchange, key), (exchange, key)
                why = f"{self.origin_exchange_header}/{self.origin_routing_key_header}"
        elif self.origin_exchange_header:
            # The exchange alone (@moleculer/channels' x-original-channel: a fanout exchange per channel): published
            # to with an empty routing key; the replay's checks say which queues it reaches (one, unless
            # --allow-fanout). The default exchange routes by key, so an empty name is no origin here.
            named = _str(message.get(self.origin_exchange_header))
            if named:
                origin, why = Route(exchange=named, routing_key=""), self.origin_exchange_header
        error = next((e for e in (_str(message.get(n)) for n in self.error_headers) if e), None)
        attempts = _int(message.get(self.attempts_header)) if self.attempts_header else None
        if origin is None and error is None and attempts is None:
            return None
        return Reading(self.name, origin, why, error=error, attempts=attempts,
                       attempts_why=self.attempts_header or "", reset=_present(h, self._names()), received=received)


BUILT_IN: tuple[Convention, ...] = (XDeath(), Spring(), NServiceBus(), MassTransit(), Rascal(), AppRetry(), Celery(),
                                     Dramatiq(), Amqp10Annotations())
BUILT_IN_NAMES = tuple(c.name for c in BUILT_IN)


def conventions(custom: Sequence[HeaderConvention] = ()) -> tuple[Convention, ...]:
    """Teams' own first (they are the most specific), then the built-in ones."""
    return (*custom, *BUILT_IN)


# -- explaining one message --------------------------------------------------------------------------------


@dataclass
class Explanation:
    """Which convention explains a message: origin, error text, attempts, what a replay resets."""

    origin: Route | None
    origin_from: str | None       # the convention whose origin won
    origin_label: str | None      # "Spring headers"
    origin_why: str
    error: str | None = None
    error_from: str | None = None
    attempts: int | None = None
    attempts_from: str | None = None
    conflict: str | None = None   # when conventions named different origins: which won and why
    readings: list[Reading] = field(default_factory=list)
    received: tuple[str, str] | None = None  # the winning convention's Reading.received

    @property
    def stack(self) -> Reading | None:
        """The reading whose recorded stack goes with the error shown: the error's convention's, else the first with
        one (its `stack`, `exception`)."""
        with_stack = [r for r in self.readings if r.stack]
        return next((r for r in with_stack if r.convention == self.error_from), with_stack[0] if with_stack else None)

    def route_text(self) -> str:
        """For a replay plan: "exchange orders.ex, routing key order.created, from Spring headers"."""
        if self.origin is None:
            return f"no origin: {self.origin_why}"
        return f"{self.origin.describe()}, from {self.origin_label}"

    @property
    def recognised(self) -> list[str]:
        return [r.convention for r in self.readings]

    @property
    def reset(self) -> tuple[str, ...]:
        """Every failure header of every recognising convention (x-death's history included)."""
        return tuple(dict.fromkeys(n for r in self.readings for n in r.reset))

    def to_json(self) -> dict[str, Any]:
        return {"origin_route": self.origin.to_json() if self.origin else None,
                "origin_from": self.origin_from, "error_from": self.error_from,
                "attempts": self.attempts, "attempts_from": self.attempts_from,
                "conventions": self.recognised, "origin_conflict": self.conflict}


def explain(message: Message, known: Sequence[Convention] = BUILT_IN, *, origin_from: str | None = None,
            error_headers: Sequence[str] = ()) -> Explanation:
    """Read a message with every convention; pick the origin; never raises on odd headers.

    The origin: with `origin_from`, that convention's (none if it does not recognise the message).
    Otherwise, when conventions disagree, the most recent failure wins: compared by time when both
    record one (x-death's `time` is the entry's first death, a lower bound); without times a
    framework's headers beat x-death, because frameworks republish the headers they received, x-death
    included, so the x-death they carry predates their own failure.
    """
    readings: list[Reading] = []
    for convention in known:
        try:
            reading = convention.read(message)
        except (TypeError, ValueError, AttributeError, KeyError):  # a shape nobody expected: not this one
            reading = None
        if reading is not None:
            readings.append(reading)
    labels = {c.name: c.label for c in known}
    with_origin = [r for r in readings if r.origin is not None]
    if origin_from is not None:
        chosen, conflict = next((r for r in with_origin if r.convention == origin_from), None), None
        why = (f"{chosen.origin_why} (--origin-from {origin_from})" if chosen
               else f"--origin-from {origin_from}: it names no origin here")
    else:
        chosen, conflict = _most_recent(with_origin)
        why = chosen.origin_why if chosen else "no convention names an origin"
    error, error_from = _error(message, readings, chosen, error_headers)
    # Every count is "at least": x-death counts broker deaths only, a framework its own retries; the largest
    # is the best lower bound (a Celery task retried twice then rejected: x-death 1, Celery 3).
    attempts_reading = max((r for r in readings if r.attempts is not None), key=lambda r: r.attempts or 0,
                           default=None)
    return Explanation(
        origin=chosen.origin if chosen else None, origin_from=chosen.convention if chosen else None,
        origin_label=labels.get(chosen.convention) if chosen else None, origin_why=why,
        error=error, error_from=error_from,
        attempts=attempts_reading.attempts if attempts_reading else None,
        attempts_from=(f"{attempts_reading.convention}: {attempts_reading.attempts_why}"
                       if attempts_reading else None),
        conflict=conflict, readings=readings, received=chosen.received if chosen else None)


def _most_recent(candidates: list[Reading]) -> tuple[Reading | None, str | None]:
    if not candidates:
        return None, None
    distinct = {r.origin for r in candidates}
    best = candidates[0]
    reason = "the first to name it"
    for other in candidates[1:]:
        if other.origin == best.origin:
            continue
        best, reason = _newer(best, other)
    if len(distinct) == 1:
        return best, None
    others = "; ".join(f"{r.convention} says {r.origin.describe()}" for r in candidates  # type: ignore[union-attr]
                       if r.origin != best.origin)
    return best, f"{best.convention} ({best.origin.describe()}) wins over {others}: {reason}"  # type: ignore[union-attr]


def _newer(a: Reading, b: Reading) -> tuple[Reading, str]:
    if a.failed_at is not None and b.failed_at is not None:
        later, earlier = (a, b) if a.failed_at >= b.failed_at else (b, a)
        return later, (f"most recent failure ({later.convention} at {_iso(later.failed_at)}, "
                       f"{earlier.convention} at {_iso(earlier.failed_at)})")
    if X_DEATH in (a.convention, b.convention):
        framework = b if a.convention == X_DEATH else a
        return framework, ("most recent failure: a framework republishes the headers it received, "
                           "x-death included, so the x-death it carries is older than its own")
    return a, "listed first (teams' conventions, then built-in order); no times to compare"


def _iso(value: datetime | None) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value else "?"


def _first(readings: list[Reading], chosen: Reading | None, ok: Any) -> Reading | None:
    """The chosen convention's reading if it has the part, else the first that has it."""
    if chosen is not None and ok(chosen):
        return chosen
    return next((r for r in readings if ok(r)), None)


def _error(message: Message, readings: list[Reading], chosen: Reading | None,
           named: Sequence[str]) -> tuple[str | None, str | None]:
    # Headers the user named (--error-header, config error_headers) come first: they asked for them.
    for name in named:
        text = _str(message.get(name))
        if text:
            return text, f"header {name}"
    reading = _first(readings, chosen, lambda r: bool(r.error))
    if reading is not None:
        return reading.error, reading.convention
    # Headers some consumers use with no origin convention (x-error; see dlxtool.deaths.ERROR_HEADERS).

    text = error_text(message.headers, ERROR_HEADERS)
    return (text, "error header") if text else (None, None)


def check_origin_from(name: str | None, known: Sequence[Convention]) -> None:
    """--origin-from must name a convention in use; only the ones that can name an origin make sense."""
    if name is None:
        return
    names = [c.name for c in known]
    if name not in names:
        raise UsageError(f"--origin-from {name}: no such convention",
                         hint=f"known: {', '.join(names)} (teams' own go in the config file as [conventions.NAME])")


# -- what a replay needs --------------------------------------------------------------------------------------


def fast_path_triggers(known: Sequence[Convention]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(names, prefixes), lowercase: a message carrying a header by one of these names, in any case, may be
    explained by something other than x-death (another origin, more headers to reset). Without any, x-death
    alone explains it for a replay: replay's fast path on the bytes declines the others, and its Python path reads
    them with every convention. None: a convention here says nothing about its headers (read every message)."""
    names: list[str] = []
    prefixes: list[str] = []
    for convention in known:
        triggers = getattr(convention, "triggers", None)
        if triggers is None:
            return None
        for trigger in triggers:
            lowered = trigger.lower()
            (prefixes if lowered.endswith("*") else names).append(lowered.rstrip("*"))
    return tuple(dict.fromkeys(names)), tuple(dict.fromkeys(prefixes))


def carries_any(headers: Mapping[str, Any], names: frozenset[str], prefixes: tuple[str, ...]) -> bool:
    """Whether a header's name, lowercased, is one of `names` or starts with one of `prefixes`."""
    for key in headers:
        lowered = str(key).lower()
        if lowered in names or (prefixes and lowered.startswith(prefixes)):
            return True
    return False


# rascal keeps more than failures in its one `rascal` table: the encryption profile and IV a subscriber needs to
# decrypt the body (lib/amqp/Subscription.js getContent) and the original exchange/routing key it restores on
# receipt (restoreRoutingHeaders). A replay removes only what records the failure: the recovery counts (and an
# immediateNack flag, which would nack the replayed message at once), the error, the redelivery count, and
# originalQueue (set again on receipt; left in place it would still name an origin after the failure is gone).
PARTIAL_RESET = {RASCAL: ("recovery", "error", "redeliveries", "originalQueue")}


def reset_failure_headers(headers: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """Remove the conventions' failure headers `names` (Explanation.reset) from `headers`, in place; returns
    what was removed, by name ("rascal.error" for a part of a table)."""
    removed: dict[str, Any] = {}
    for name in names:
        if name not in headers:
            continue
        within = PARTIAL_RESET.get(str(name).lower())
        table = headers[name]
        if within is None or not isinstance(table, Mapping):
            removed[name] = headers.pop(name)
            continue
        kept = {k: v for k, v in table.items() if k not in within}
        removed.update({f"{name}.{k}": v for k, v in table.items() if k in within})
        if kept:
            headers[name] = kept
        else:
            del headers[name]
    return removed
