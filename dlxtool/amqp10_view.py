"""An AMQP 1.0 message seen as AMQP 0.9.1 sees it, and what that view loses.

RabbitMQ 4.x converts AMQP 1.0 messages for 0.9.1 readers (its mc_amqpl module). dlxtool reads over AMQP 1.0 where
it can, keeps the whole message (MessageRecord.amqp10), and gives the rest of dlxtool — filters, conventions,
the death history, tables — the same 0.9.1 view the broker would: `view_091`. What that conversion changes or
drops, message by message, is `conversion_losses` (said by peek and history: `conversion_notes`).

Measured on RabbitMQ 4.3.6 and 4.0.5 (tests/broker/test_amqp10_client.py): several data sections arrive as one
body; an amqp-value or amqp-sequence body arrives as its AMQP encoding with type=amqp-1.0; subject, to,
absolute-expiry-time, group-sequence and reply-to-group-id are dropped; creation-time and timestamp values lose
their milliseconds; symbols become strings; a ulong above 2^63-1 becomes a negative long (2^64-1: -1); a ulong
message-id becomes its decimal text, a uuid one "urn:uuid:…", a binary one moves to the header x-message-id
(x-correlation-id for a correlation-id); x-opt-* message annotations become headers; 4.3.6 cannot convert a char
or uuid application property at all (it closes the 0.9.1 connection: dlxtool.broker.versions).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from dlxtool.amqp_values import Long

if TYPE_CHECKING:  # the 1.0 codec only for a message read over 1.0
    from dlxtool.amqp10_message import Amqp10Message, Typed

# dlxtool's provenance of a replay over AMQP 1.0 (dlxtool.ops.amqp10_outgoing): application properties hold no
# maps, so the `dlxtool-replay` header (dlxtool.ops.provenance.PROVENANCE_HEADER) travels as this annotation, read
# back as that header here
PROVENANCE_ANNOTATION = "x-opt-dlxtool-replay"
_PROVENANCE_HEADER = "dlxtool-replay"
_DROPPED_PROPERTIES = ("to", "subject", "absolute_expiry_time", "group_sequence", "reply_to_group_id")


def view_091(msg: Amqp10Message) -> tuple[dict[str, Any], dict[str, Any], str, str]:
    """(properties, headers, exchange, routing_key) as a 0.9.1 reader of this message gets them."""
    props: dict[str, Any] = {}
    headers: dict[Any, Any] = {}  # names are text, or bytes where not UTF-8 (as in a record read over 0.9.1)
    header = msg.header or {}
    if header.get("durable") is not None and header["durable"].value:
        props["delivery_mode"] = 2
    if header.get("priority") is not None:
        props["priority"] = header["priority"].value
    if header.get("ttl") is not None:
        props["expiration"] = str(header["ttl"].value)
    p = msg.properties or {}
    for field, extra in (("message_id", "x-message-id"), ("correlation_id", "x-correlation-id")):
        if field in p:
            text = _id_text(p[field])
            if text is None:
                headers[extra] = p[field].value
            else:
                props[field] = text
    if "user_id" in p:
        props["user_id"] = _text(p["user_id"].value)
    if "reply_to" in p:
        props["reply_to"] = _reply_to(str(p["reply_to"].value))
    if "content_type" in p:
        props["content_type"] = str(p["content_type"].value)
    if "content_encoding" in p:
        props["content_encoding"] = str(p["content_encoding"].value)
    if "creation_time" in p:
        props["timestamp"] = int(p["creation_time"].value) // 1000  # seconds, as pika hands the property over
    if "group_id" in p:
        props["app_id"] = str(p["group_id"].value)  # what 4.3.6 hands a 0.9.1 reader (measured)
    if msg.body.kind in ("amqp-value", "amqp-sequence"):
        props["type"] = "amqp-1.0"
    for key, value in msg.application_properties or ():
        headers[_name(key)] = header_value(value)
    exchange = routing_key = ""
    # Every x- annotation is a header to a 0.9.1 reader (mc_amqpl:convert_from; a 0.9.1 message's own x- headers
    # reach a 1.0 reader as annotations: Spring's x-exception-message, x-death's companions), but for these:
    for key, value in msg.message_annotations or ():
        name = _name(key)
        if name == "x-exchange":
            exchange = _as_name(value.value)
        elif name == "x-routing-key":
            routing_key = _as_name(value.value)
        elif name == "x-opt-deaths":
            headers["x-death"] = deaths_091(value)
        elif name == PROVENANCE_ANNOTATION and value.type == "map":
            headers[_PROVENANCE_HEADER] = header_value(value)
        elif name == "x-cc":
            headers["CC"] = header_value(value)
        elif name == "x-opt-rabbitmq-received-time" and value.type == "timestamp":
            headers["timestamp_in_ms"] = Long(value.value)
        elif name == "x-basic-type":
            props.setdefault("type", str(value.value))
        elif isinstance(name, str) and name in _BASIC:
            if not msg.header:  # a header section's fields come first
                props[_BASIC[name]] = str(value.value) if name == "x-basic-expiration" else value.value
        elif key.type == "symbol" and (name.startswith(b"x-") if isinstance(name, bytes) else name.startswith("x-")):
            headers[name] = header_value(value)
    return props, headers, exchange, routing_key


def annotation_header(key: Typed, value: Typed) -> str | bytes | None:
    """The header a message annotation reads as in view_091 (None: none; it is the delivery's exchange or routing
    key, a basic property, or no `x-` symbol)."""
    name = _name(key)
    if name in ("x-exchange", "x-routing-key", "x-basic-type") or (isinstance(name, str) and name in _BASIC):
        return None
    if name == "x-opt-deaths":
        return "x-death"
    if name == PROVENANCE_ANNOTATION and value.type == "map":
        return _PROVENANCE_HEADER
    if name == "x-cc":
        return "CC"
    if name == "x-opt-rabbitmq-received-time" and value.type == "timestamp":
        return "timestamp_in_ms"
    if key.type == "symbol" and (name.startswith(b"x-") if isinstance(name, bytes) else name.startswith("x-")):
        return name
    return None


# 0.9.1 basic properties the conversion takes from an annotation where the message has no AMQP 1.0 header section
_BASIC = {"x-basic-delivery-mode": "delivery_mode", "x-basic-priority": "priority",
          "x-basic-expiration": "expiration"}


def _as_name(value: Any) -> Any:
    """An exchange or routing key: its text, or its bytes where it is not UTF-8 (as a record read over 0.9.1 holds
    such a name)."""
    return value if isinstance(value, bytes) else str(value)


def _name(key: Typed) -> str | bytes:
    """A map key as a 0.9.1 header name: its text, or its bytes where it is not UTF-8 (as pika hands such names)."""
    return key.value if isinstance(key.value, bytes) else str(key.value)


def _id_text(value: Typed) -> str | bytes | None:
    """A message-id or correlation-id as a 0.9.1 reader gets it (bytes: a string that is not UTF-8), or None: a
    binary one, which becomes a header."""
    if value.type == "string":
        text: str | bytes = _text(value.value)
        return text
    if value.type == "ulong":
        return str(value.value)
    if value.type == "uuid":
        return f"urn:uuid:{value.value}"
    return None  # binary: a header of its own


def _reply_to(address: str) -> str:
    """/queues/NAME (address v2) is the queue NAME to a 0.9.1 reader (the default exchange's key)."""
    if address.startswith("/queues/") and "/" not in address[len("/queues/"):]:
        return unquote(address[len("/queues/"):])
    return address


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value


def _seconds(ms: int) -> datetime | int:
    from dlxtool.amqp10_message import timestamp_datetime  # the 1.0 codec: only for a message read over 1.0

    stamp = timestamp_datetime(ms - ms % 1000)
    return stamp


def header_value(value: Typed) -> Any:
    """A typed value as a 0.9.1 header value (as the conversion gives it: symbols as text, timestamps in seconds,
    a ulong past 2^63-1 wrapped to a negative long)."""
    t, v = value.type, value.value
    if t in ("long", "ulong"):
        return Long(v - 2**64 if v >= 2**63 else v)
    if t == "timestamp":
        return _seconds(v)
    if t == "list":
        return [header_value(x) for x in v]
    if t == "array":
        return [header_value(x) for x in v[1]]
    if t == "map":
        return {_name(k): header_value(x) for k, x in v}
    if t == "described":
        return header_value(v[1])
    if t == "encoded":
        return value.plain()
    if t in ("binary", "string", "symbol") and isinstance(v, bytes):
        # a 0.9.1 reader gets a longstr, text where it is UTF-8 (as pika decodes it); the broker's conversion of a
        # 0.9.1 header holding a NUL made it binary
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return v
    return v


def deaths_091(value: Typed) -> list[dict[str, Any]]:
    """x-opt-deaths (an array of maps: queue, reason, count, first-time, last-time, exchange, routing-keys, ttl) as
    the x-death header a 0.9.1 reader gets."""
    items = value.value[1] if value.type == "array" else value.value if value.type == "list" else []
    out = []
    for item in items:
        if item.type == "described":
            item = item.value[1]
        if item.type != "map":
            continue
        fields = {str(k.value): x for k, x in item.value}
        death: dict[str, Any] = {}
        if "count" in fields:
            death["count"] = Long(int(fields["count"].value))
        for name in ("reason", "queue", "exchange"):
            if name in fields:
                death[name] = str(fields[name].value)
        if "first-time" in fields:
            death["time"] = _seconds(fields["first-time"].value)
        if "routing-keys" in fields:
            keys = fields["routing-keys"]
            death["routing-keys"] = [str(k.value) for k in (keys.value[1] if keys.type == "array" else keys.value)]
        if "ttl" in fields:
            death["original-expiration"] = str(fields["ttl"].value)
        out.append(death)
    return out


def conversion_losses(msg: Amqp10Message, *, poison_091: bool = False) -> list[str]:
    """What RabbitMQ's conversion to AMQP 0.9.1 would change or drop of this message, one phrase each (empty: it
    survives whole). `poison_091`: the broker cannot convert a char or uuid application property (4.3.6)."""
    return [phrase for _kind, phrase in loss_kinds(msg, poison_091=poison_091)]


# The kinds of loss (loss_kinds' first element) and what each is, said once per kind in a replay's plan
LOSS_KINDS = {
    "data-sections": "several data sections arrive merged into one body",
    "encoded-body": "an amqp-value or amqp-sequence body arrives as its AMQP encoding (type=amqp-1.0)",
    "subject": "subject dropped",
    "to": "to dropped",
    "absolute-expiry-time": "absolute-expiry-time dropped",
    "group-sequence": "group-sequence dropped",
    "reply-to-group-id": "reply-to-group-id dropped",
    "creation-time-ms": "creation-time loses its milliseconds",
    "id-as-text": "a ulong or uuid message-id/correlation-id becomes text",
    "id-moved": "a binary message-id/correlation-id moves to a header (x-message-id/x-correlation-id)",
    "symbol": "a symbol application property becomes a string",
    "ulong-wraps": "a ulong application property above 2^63-1 becomes a negative long (2^64-1: -1)",
    "timestamp-ms": "a timestamp application property loses its milliseconds",
    "char-uuid": "a char or uuid application property becomes text",
    "unconvertible": "a char or uuid application property cannot be converted (the broker closes the 0.9.1 "
                     "connection it is delivered to)",
    "nested": "a list, map or array application property holds a value that changes",
    "annotations": "message annotations that are not x- symbols are dropped",
}


# The kinds a message published over AMQP 0.9.1 can show when read over AMQP 1.0 too (RabbitMQ's mc_amqpl rebuilds
# them): a body marked type=amqp-1.0 is decoded into 1.0 sections (encoded-body, data-sections), a "urn:uuid:" id
# becomes a uuid (id-as-text). Every other kind is AMQP 1.0's alone.
_ALSO_FROM_091 = frozenset({"encoded-body", "data-sections", "id-as-text"})


def published_over_amqp10(msg: Amqp10Message) -> bool:
    """Whether a message read over AMQP 1.0 shows something only a message published over AMQP 1.0 has (a subject, a
    symbol, a char, a ulong id …): it then has no 0.9.1 headers a move over 1.0 could lose. False where it cannot be
    told (a plain message looks the same either way)."""
    if any(kind not in _ALSO_FROM_091 for kind, _ in loss_kinds(msg, poison_091=True)):
        return True
    props = msg.properties or {}
    return any(name in props and props[name].type == "ulong" for name in ("message_id", "correlation_id"))


# What RabbitMQ's conversion for AMQP 1.0 readers (mc_amqpl, 4.0.5 and 4.3.6) loses of a message published over 0.9.1,
# as a 0.9.1 read shows it: headers become application properties, which hold no table or array (x- headers become
# message annotations, which do: they survive). (A text value holding a NUL arrives as binary, which a 0.9.1 consumer
# of the destination reads as the same text again: not counted.)
LOSS_KINDS_OVER_AMQP10 = {
    "table-header": "a table or array header (not x-) is dropped",
    # judged by dlxtool.ops.conversion_check, which knows a decimal in each of its forms
    "decimal-header": "a decimal header: RabbitMQ cannot give the message to an AMQP 1.0 reader (it ends that "
                      "session), so a move over 1.0 cannot take it",
}


def loss_kinds_over_amqp10(headers: dict[str, Any]) -> list[tuple[str, str]]:
    """What a move over AMQP 1.0 would lose of a message whose 0.9.1 headers (pika's decoding) are `headers`: (a key
    of LOSS_KINDS_OVER_AMQP10, phrase about this message). A message published over 1.0 has no such header (its
    application properties are simple values), so it never matches."""
    out: list[tuple[str, str]] = []
    for name, value in headers.items():
        if not isinstance(name, str) or name.startswith("x-"):
            continue
        if isinstance(value, dict | list | tuple):
            out.append(("table-header", f"its {'table' if isinstance(value, dict) else 'array'} header {name!r}"))
    return out


def loss_kinds(msg: Amqp10Message, *, poison_091: bool = False) -> list[tuple[str, str]]:
    """conversion_losses with the kind of each (a key of LOSS_KINDS): (kind, phrase about this message)."""
    out: list[tuple[str, str]] = []
    if msg.body.kind == "data" and len(msg.body.sections) > 1:
        out.append(("data-sections", f"its {len(msg.body.sections)} data sections arrive merged into one body"))
    if msg.body.kind in ("amqp-value", "amqp-sequence"):
        out.append(("encoded-body", f"its {msg.body.kind} body arrives AMQP-encoded (type=amqp-1.0)"))
    p = msg.properties or {}
    dropped = [n.replace("_", "-") for n in _DROPPED_PROPERTIES if n in p]
    out += [(name, f"{name} dropped") for name in dropped]
    if "creation_time" in p and p["creation_time"].value % 1000:
        out.append(("creation-time-ms", "creation-time loses its milliseconds"))
    for name in ("message_id", "correlation_id"):
        if name in p and p[name].type != "string":
            kind = p[name].type
            where = ("moved to the header x-" + name.replace("_", "-")) if kind == "binary" else "becomes text"
            out.append(("id-moved" if kind == "binary" else "id-as-text",
                        f"the {kind} {name.replace('_', '-')} {where}"))
    for key, value in msg.application_properties or ():
        change = _value_change(value)
        if change is not None:
            what = _CHANGE_KINDS.get(value.type, "nested")
            if value.type in ("char", "uuid") and poison_091:
                change = "cannot be converted: the broker closes the 0.9.1 connection it is delivered to"
                what = "unconvertible"
            out.append((what, f"application property {key.value!r} ({value.type}) {change}"))
    # every x- annotation reaches a 0.9.1 reader as a header (view_091); others (and ulong keys) do not
    annotations = [str(k.value) for k, _ in msg.message_annotations or ()
                   if not (k.type == "symbol" and isinstance(k.value, str) and k.value.startswith("x-"))]
    if annotations:
        out.append(("annotations", f"message annotations {', '.join(annotations)} dropped"))
    return out


_CHANGE_KINDS = {"symbol": "symbol", "ulong": "ulong-wraps", "timestamp": "timestamp-ms", "char": "char-uuid",
                 "uuid": "char-uuid"}


def _value_change(value: Typed) -> str | None:
    t, v = value.type, value.value
    if t == "symbol":
        return "becomes a string"
    if t == "ulong" and v >= 2**63:
        return f"{v} becomes {v - 2**64}"
    if t == "timestamp" and v % 1000:
        return "loses its milliseconds"
    if t in ("char", "uuid"):
        return "becomes text"
    if t in ("list", "map", "array"):
        inner = [x for x in (v if t == "list" else v[1] if t == "array" else [x for _, x in v])]
        return next((f"holds a value that {c}" for c in map(_value_change, inner) if c), None)
    return None


def came_from_amqp10(properties: dict[str, Any], headers: dict[str, Any]) -> list[str]:
    """Signs, in what a 0.9.1 reader got, that a message was published over AMQP 1.0 (and so went through the
    conversion): type=amqp-1.0, x-opt-* headers, a urn:uuid message-id, x-message-id / x-correlation-id."""
    signs = []
    if properties.get("type") == "amqp-1.0":
        signs.append("type=amqp-1.0")
    opt = sorted(k for k in headers if isinstance(k, str) and k.startswith("x-opt-"))
    if opt:
        signs.append(f"header {opt[0]}")
    for name in ("x-message-id", "x-correlation-id"):
        if name in headers:
            signs.append(f"header {name}")
    if str(properties.get("message_id") or "").startswith("urn:uuid:"):
        signs.append("a urn:uuid message-id")
    return signs
