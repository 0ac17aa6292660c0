"""MessageRecord: the one message model, and its lossless JSON codec.

Written by `peek --format json/jsonl`, `dump`, `purge --backup` and `replay --save`; read by `load`
and the offline modes of `history` and `decode`. One JSON object per message (JSON Lines in files):

    queue, position, exchange, routing_key, redelivered,
    properties   only the AMQP basic properties that are set, by their AMQP names
    headers      AMQP field table; values JSON lacks are tagged (see below)
    deaths       parsed x-death, most recent first (derived from headers; informational)
    body         base64 of the exact body bytes
    decoded      protobuf match {status: match, type, confidence, ambiguous, alternatives, message}; a body
                 cut short or malformed {status: truncated|malformed, error, offset, size, and type + message
                 of the bytes before the stop where a type explains them}; JSON {status: json, message}; or null

Header tagging: bytes → {"$bytes": base64}, timestamps → {"$timestamp": "…Z"},
decimals → {"$decimal": "1.50"}. A real table whose only key is one of those tag names is wrapped
as {"$table": {...}} so that decoding stays unambiguous. A table with a name that is not UTF-8 (AMQP names
are bytes; pika and dlxtool's codec hand those over as bytes) is written as {"$pairs": [[name, value], …]} in
its order, each such name as {"$bytes": base64} — at any depth, `headers` itself included; so is a table whose
only name is "$pairs". The same goes for `exchange`, `routing_key` and the string properties: UTF-8 names stay
plain strings, others are {"$bytes": base64}. Tables and arrays nested deeper than
MAX_JSON_DEPTH levels (a hostile header can nest thousands deep, JSON writers stop at a few hundred)
are kept whole as {"$amqp": base64 of their AMQP field-value encoding}. Values pika would change or
cannot decode (floats, b/B/s/u/U/i and L integers, rescaled decimals, timestamps past 9999) arrive as
dlxtool.amqp_values.RawValue and are stored as {"$amqp": base64, "$value": readable}; $value is
informational, $amqp is published back byte for byte.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from dlxtool.amqp_values import Long, RawValue, allow_deep_headers, decode_field_value, encode_field_value
from dlxtool.deaths import Death, parse_deaths
from dlxtool.errors import UsageError

if TYPE_CHECKING:  # the AMQP 1.0 codec loads where a record holds a 1.0 message (from_json, the 1.0 reader)
    from dlxtool.amqp10_message import Amqp10Message

PROPERTY_NAMES = (
    "content_type", "content_encoding", "delivery_mode", "priority", "correlation_id", "reply_to",
    "expiration", "message_id", "timestamp", "type", "user_id", "app_id", "cluster_id",
)
_TAGS = ("$bytes", "$timestamp", "$decimal", "$table", "$amqp", "$pairs")
_RAW_KEYS = {"$amqp", "$value"}
_PAIRS = "$pairs"
MAX_JSON_DEPTH = 32


@dataclass
class MessageRecord:
    """One message as read from a queue or a record file (module docstring: the record's JSON shape)."""

    queue: str
    body: bytes
    position: int = 0
    exchange: str = ""
    routing_key: str = ""
    redelivered: bool = False
    properties: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, Any] = field(default_factory=dict)
    decoded: dict[str, Any] | None = None
    # The message as AMQP 1.0 holds it, where it was read over AMQP 1.0 (dlxtool.amqp10_message): every section with
    # its types. `properties` and `headers` above are then the 0.9.1 view RabbitMQ's conversion would give (what
    # filters, conventions and 0.9.1 publishing read); a 1.0 path publishes this.
    amqp10: Amqp10Message | None = None

    @property
    def deaths(self) -> list[Death]:
        return parse_deaths(self.headers)

    # -- JSON -------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "position": self.position,
            "exchange": tag_name(self.exchange),
            "routing_key": tag_name(self.routing_key),
            "redelivered": self.redelivered,
            "properties": {k: tag_name(v) for k, v in self.properties.items()},
            "headers": tag_table(self.headers),
            "deaths": [d.to_json() for d in self.deaths],
            "body": base64.b64encode(self.body).decode("ascii"),
            "decoded": self.decoded,
            **({"amqp10": self.amqp10.to_json()} if self.amqp10 is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "record") -> MessageRecord:
        if not isinstance(data, Mapping):
            raise UsageError(f"{where}: a message record must be a JSON object")
        try:
            body = base64.b64decode(data.get("body") or "", validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise UsageError(f"{where}: 'body' is not valid base64") from None
        properties = data.get("properties") or {}
        if not isinstance(properties, Mapping):
            raise UsageError(f"{where}: 'properties' must be an object")
        unknown = sorted(set(properties) - set(PROPERTY_NAMES))
        if unknown:
            raise UsageError(f"{where}: unknown AMQP property {unknown[0]!r}",
                             hint=f"known: {', '.join(PROPERTY_NAMES)}")
        headers = data.get("headers") or {}
        if not isinstance(headers, Mapping):
            raise UsageError(f"{where}: 'headers' must be an object")
        try:
            decoded_headers = untag_table(headers, where=f"{where}: headers", top=True)
        except RecursionError:
            raise UsageError(f"{where}: headers nested too deeply",
                             hint=f"dlxtool writes tables deeper than {MAX_JSON_DEPTH} levels as $amqp") from None
        amqp10 = None
        if data.get("amqp10") is not None:
            from dlxtool.amqp10_message import Amqp10Error, Amqp10Message

            try:
                amqp10 = Amqp10Message.from_json(data["amqp10"], f"{where}: amqp10")
            except Amqp10Error as exc:
                raise UsageError(str(exc), hint="docs/message-record.md says the amqp10 field's form") from None
        return cls(
            amqp10=amqp10,
            queue=str(data.get("queue") or ""),
            body=body,
            position=_int_field(data, "position", where),
            exchange=untag_name(data.get("exchange"), f"{where}: exchange"),
            routing_key=untag_name(data.get("routing_key"), f"{where}: routing_key"),
            redelivered=bool(data.get("redelivered", False)),
            properties={k: untag_name(v, f"{where}: properties.{k}", keep=True) for k, v in properties.items()},
            headers=decoded_headers,
            decoded=data.get("decoded"),
        )

    def to_jsonl(self) -> bytes:
        from dlxtool.render import dumps

        return dumps(self.to_json()) + b"\n"

    # -- AMQP 1.0 ---------------------------------------------------------------------------------

    @classmethod
    def from_amqp10(cls, queue: str, raw: bytes, position: int = 0) -> MessageRecord:
        """From a delivery's bytes over AMQP 1.0: the whole message in `amqp10`, and the 0.9.1 view
        (dlxtool.amqp10_view.view_091) in properties/headers/exchange/routing_key; `body` is what a 0.9.1 reader
        gets (data sections joined; another body as its encoding). Amqp10Error for bytes that are no message."""
        from dlxtool.amqp10_message import parse_message
        from dlxtool.amqp10_view import view_091

        msg = parse_message(raw)
        props, headers, exchange, routing_key = view_091(msg)
        header = msg.header or {}
        first = header.get("first_acquirer")
        count = header.get("delivery_count")
        redelivered = (first is not None and not first.value) or (count is not None and count.value > 0)
        return cls(queue=queue, body=msg.body.payload(), position=position, exchange=exchange,
                   routing_key=routing_key, redelivered=redelivered, properties=props, headers=headers, amqp10=msg)

    # -- pika -------------------------------------------------------------------------------------

    @classmethod
    def from_delivery(cls, queue: str, method: Any, properties: Any, body: bytes,
                      position: int = 0) -> MessageRecord:
        """From pika's (method, BasicProperties, body) as basic_get or a consumer hands them over."""
        props = {}
        for name in PROPERTY_NAMES:
            value = getattr(properties, name, None)
            if value is not None:
                props[name] = value
        return cls(
            queue=queue,
            body=bytes(body),
            position=position,
            exchange=getattr(method, "exchange", "") or "",
            routing_key=getattr(method, "routing_key", "") or "",
            redelivered=bool(getattr(method, "redelivered", False)),
            properties=props,
            headers=dict(getattr(properties, "headers", None) or {}),
        )


def _int_field(data: Mapping[str, Any], key: str, where: str) -> int:
    value = data.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{where}: {key!r} must be a whole number, got {value!r}")
    return value


# -- header values ----------------------------------------------------------------------------------


def encode_value(value: Any, depth: int = 0, *, plain_longs: bool = False) -> Any:
    if type(value) is Long and not plain_longs and -0x80000000 <= value <= 0x7FFFFFFF:
        # a 64-bit integer that fits 32 bits: as a plain number it would come back as a 32-bit one (load writes a
        # plain int as `I` where it fits); kept as its AMQP bytes. Larger ones are `l` either way.
        return {"$amqp": base64.b64encode(encode_field_value(value)).decode("ascii"), "$value": int(value)}
    if isinstance(value, bool) or value is None or isinstance(value, int | str | float):
        return value
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, datetime):
        ts = value if value.tzinfo else value.replace(tzinfo=UTC)
        return {"$timestamp": ts.astimezone(UTC).isoformat().replace("+00:00", "Z")}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, RawValue):  # kept as its AMQP bytes (dlxtool.amqp_values): $value is for people only
        readable = value.value
        return {"$amqp": base64.b64encode(value.encoded).decode("ascii"),
                "$value": str(readable) if isinstance(readable, Decimal) else readable}
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_JSON_DEPTH:
        return {"$amqp": base64.b64encode(_amqp_encode(value)).decode("ascii")}
    if isinstance(value, Mapping):
        table = tag_table(value, depth + 1, plain_longs=plain_longs)
        if _pairs(table) is not None:  # tag_table's own form: a tag already
            return table
        if (len(table) == 1 and next(iter(table)) in _TAGS) or set(table) == _RAW_KEYS:
            return {"$table": table}
        return table
    if isinstance(value, list | tuple):
        return [encode_value(v, depth + 1, plain_longs=plain_longs) for v in value]
    raise TypeError(f"cannot encode header value of type {type(value).__name__}")


# Headers RabbitMQ itself writes, whose integers are always 64-bit (`l`): written as plain numbers (readable; jq
# finds x-death counts as numbers) and read back as 64-bit ones (untag_table at the top level).
BROKER_LONG_HEADERS = frozenset({"x-death", "x-delivery-count", "x-acquired-count"})


def tag_table(table: Mapping[Any, Any], depth: int = 0, *, plain_longs: bool = False) -> dict[str, Any]:
    """A field table as JSON: an object by name; {"$pairs": [[name, value], …]} (in its order) where a name is not
    text (bytes: not UTF-8) or the only name is "$pairs" itself."""
    def plain(name: Any) -> bool:
        return plain_longs or (depth == 0 and name in BROKER_LONG_HEADERS)

    if any(isinstance(k, bytes | bytearray) for k in table) or (len(table) == 1 and _PAIRS in table):
        return {_PAIRS: [[tag_name(k), encode_value(v, depth, plain_longs=plain(k))] for k, v in table.items()]}
    return {str(k): encode_value(v, depth, plain_longs=plain(k)) for k, v in table.items()}


def tag_name(name: Any) -> Any:
    """A name (a table's, an exchange, a routing key, a string property) as JSON: bytes (not UTF-8) as
    {"$bytes": base64}; anything else as it is."""
    if isinstance(name, bytes | bytearray):
        return {"$bytes": base64.b64encode(bytes(name)).decode("ascii")}
    return name


def untag_name(value: Any, where: str, *, keep: bool = False) -> Any:
    """tag_name undone: {"$bytes": base64} → bytes; None → ""; other values as text (`keep`: as they are)."""
    if isinstance(value, dict) and set(value) == {"$bytes"}:
        try:
            return base64.b64decode(value["$bytes"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise UsageError(f"{where}: bad $bytes value {value['$bytes']!r}") from None
    if keep:
        return value
    return str(value or "")


def _amqp_encode(value: Any) -> bytes:
    return encode_field_value(value)  # one AMQP value codec: the one the wire codec writes headers with


def _amqp_decode(data: bytes) -> Any:
    allow_deep_headers()
    return decode_field_value(data)


def decode_value(value: Any, where: str = "header") -> Any:
    if isinstance(value, list):
        return [decode_value(v, where) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == _RAW_KEYS:
        value = {"$amqp": value["$amqp"]}  # $value only shows what the bytes mean
    if len(value) == 1:
        tag, inner = next(iter(value.items()))
        try:
            if tag == "$bytes":
                return base64.b64decode(inner, validate=True)
            if tag == "$timestamp":
                return datetime.fromisoformat(inner.replace("Z", "+00:00")).astimezone(UTC)
            if tag == "$decimal":
                return Decimal(inner)
            if tag == "$table":
                return untag_table(inner, where)
            if tag == "$amqp":
                return _amqp_decode(base64.b64decode(inner, validate=True))
        except (binascii.Error, ValueError, TypeError, AttributeError, InvalidOperation):
            raise UsageError(f"{where}: bad {tag} value {inner!r}") from None
    return untag_table(value, where)


def untag_table(table: Mapping[str, Any], where: str = "headers", *, top: bool = False) -> dict[Any, Any]:
    """tag_table undone (`headers` itself, or a table inside): names that are {"$bytes": …} in a $pairs list are
    bytes again. `top`: the message's headers, where RabbitMQ's own headers (BROKER_LONG_HEADERS) get their plain
    integers back as 64-bit ones."""
    pairs = _pairs(table)
    items: list[tuple[Any, Any]] = []
    if pairs is not None:
        for name, value in pairs:
            key = untag_name(name, f"{where}: name {name!r}")
            items.append((key, decode_value(value, f"{where}.{_shown(key)}")))
    else:
        items = [(str(k), decode_value(v, f"{where}.{k}")) for k, v in table.items()]
    return {k: (_longs(v) if top and k in BROKER_LONG_HEADERS else v) for k, v in items}


def _longs(value: Any) -> Any:
    """Plain integers (not bool) as Long, through lists and tables."""
    if type(value) is int:
        return Long(value)
    if isinstance(value, list):
        return [_longs(v) for v in value]
    if isinstance(value, dict):
        return {k: _longs(v) for k, v in value.items()}
    return value


def _pairs(table: Mapping[str, Any]) -> list[list[Any]] | None:
    """The [[name, value], …] of a table in the $pairs form, or None. Only a list of [name, value] pairs whose
    names are text or {"$bytes": …} is one: a table of an older dlxtool whose only name was "$pairs" (written
    as it was) reads as a plain table unless its value has that exact shape."""
    if len(table) != 1 or _PAIRS not in table:
        return None
    pairs = table[_PAIRS]
    if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2
            and (isinstance(p[0], str) or (isinstance(p[0], dict) and set(p[0]) == {"$bytes"})) for p in pairs):
        return None
    return pairs


def _shown(name: Any) -> str:
    return name.decode("utf-8", "backslashreplace") if isinstance(name, bytes) else str(name)
