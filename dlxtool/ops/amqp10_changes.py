"""What a decision (or `replay --edit`) changed in the 0.9.1 view of an AMQP 1.0 message, as changes to its sections.

dlxtool decides on the view (dlxtool.amqp10_view.view_091); a move over AMQP 1.0 sends the ORIGINAL sections
(dlxtool.ops.amqp10_outgoing). `changes` maps each property and header the published record changed back to where the
view read it from, keeping the original's AMQP 1.0 type wherever the new value still fits it:

- message_id, correlation_id: the property, as the type it had (a ulong stays a ulong while the text is a number, a
  uuid while it is urn:uuid:…; else a string); user_id: binary; content_type, content_encoding: symbols; reply_to:
  an address (a bare queue name becomes /queues/NAME where the original was such an address); timestamp: the
  creation-time in ms; app_id: the group-id (what 4.3.6 gives a 0.9.1 reader, measured);
- delivery_mode, priority, expiration: the header's durable, priority and ttl;
- type: the x-basic-type annotation (an amqp-value or amqp-sequence body's type=amqp-1.0 is the view's, not a
  property: it cannot change);
- a header: the application property or `x-` message annotation it reads as (the annotation where both have the
  name: the view shows that one; a new one: an annotation where its name starts with x-, else an application
  property), typed as the original was where the value fits (`typed_like`: a ulong shown wrapped past 2^63-1 is
  wrapped back, a binary shown as its text is binary again, an array keeps its element type); an application
  property holds simple values only (AMQP 1.0 §3.2.5), so a table or a list there has no form.

What has none — cluster_id, the death history, the headers the view makes from a binary id (x-message-id,
x-correlation-id: changed or removed), x-cc or the received time, a header named as an annotation the view does not
show as one (x-exchange, x-basic-*, x-opt-deaths …) — is a `Why` (Stay.NOT_SENT): the message stays rather than
going out half-changed, and `replay --edit` names it as a problem in the document before anything moves.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from dlxtool.amqp10_message import Typed
from dlxtool.amqp_values import RawValue
from dlxtool.json_shapes import is_list_or_tuple, is_object
from dlxtool.ops.provenance import PROVENANCE_HEADER
from dlxtool.ops.stay import Stay, Why

if TYPE_CHECKING:
    from dlxtool.amqp10_message import Amqp10Message
    from dlxtool.record import MessageRecord

# Headers the view makes from something else than an application property or an x- annotation of that name
_VIEW_ONLY = {"x-message-id": "a binary message-id", "x-correlation-id": "a binary correlation-id",
              "CC": "the x-cc annotation", "timestamp_in_ms": "the broker's received time"}
_HISTORY = ("x-death", "x-first-death-", "x-last-death-", "x-opt-deaths")
# Annotations that are not headers to the view (a delivery's, a basic property's, the broker's own, dlxtool's
# provenance): a header of such a name would plant one
_NOT_HEADERS = {"x-exchange": "the broker's (where it delivered the message from)", "x-routing-key": "the broker's",
                "x-cc": "the broker's CC list (shown as the header CC)",
                "x-opt-rabbitmq-received-time": "the broker's received time",
                "x-opt-dlxtool-replay": "dlxtool's provenance (shown as the header dlxtool-replay)"}
_INTEGERS = {"ubyte": (0, 2**8 - 1), "ushort": (0, 2**16 - 1), "uint": (0, 2**32 - 1), "ulong": (0, 2**64 - 1),
             "byte": (-2**7, 2**7 - 1), "short": (-2**15, 2**15 - 1), "int": (-2**31, 2**31 - 1),
             "long": (-2**63, 2**63 - 1)}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_FLOAT_MAX = {"float": 3.4028234663852886e38, "double": 1.7976931348623157e308}  # beyond: not that type (nor inf)
# An array keeps its element type where each edited item still is one (a nested array, list or map: dlxtool's form)
_SIMPLE = frozenset({*_INTEGERS, "symbol", "string", "binary", "boolean", "float", "double", "timestamp", "uuid",
                     "char"})


@dataclass
class Changes:
    """Per section, the fields to set (None: remove)."""

    header: dict[str, Typed | None] = field(default_factory=dict[str, "Typed | None"])
    properties: dict[str, Typed | None] = field(default_factory=dict[str, "Typed | None"])
    annotations: dict[str, Typed | None] = field(default_factory=dict[str, "Typed | None"])  # x- name -> new value
    application_properties: dict[str, Typed] = field(default_factory=dict[str, Typed])       # name -> new value


def changes(msg: Amqp10Message, source: MessageRecord, published: MessageRecord) -> Changes | Why:
    """What `published` changed of `source`'s view, as changes to `msg` (read over 1.0: source.amqp10); headers the
    published record removed are not here (the caller leaves out what it no longer holds)."""
    out = Changes()
    before, after = dict(source.properties), dict(published.properties)
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            why = _property(msg, name, after.get(name), out)
            if why is not None:
                return Why(f"its {name} was changed, which {why}", Stay.NOT_SENT)
    old = source.headers if is_object(source.headers) else {}
    new = published.headers if is_object(published.headers) else {}
    for name, value in new.items():
        if name == PROVENANCE_HEADER or (name in old and old[name] == value):
            continue
        why = _header(msg, name, value, out)
        if why is not None:
            return Why(f"its header {name!r} was changed, which {why}", Stay.NOT_SENT)
    for name in ("x-message-id", "x-correlation-id"):  # a binary id's header: removing it removes nothing
        if name in old and name not in new:
            return Why(f"its header {name!r} was removed, which {_VIEW_ONLY[name]} is shown as: remove the property "
                       "itself", Stay.NOT_SENT)
    return out


def _property(msg: Amqp10Message, name: str, value: Any, out: Changes) -> str | None:
    """Set `out` for the property `name` set to `value` (None: removed), or say why there is no AMQP 1.0 form."""
    p = msg.properties or {}
    if name in ("message_id", "correlation_id"):
        out.properties[name] = None if value is None else _id(p.get(name), value)
    elif name == "user_id":
        out.properties[name] = None if value is None else Typed("binary", _bytes(value))
    elif name in ("content_type", "content_encoding"):
        out.properties[name] = None if value is None else Typed("symbol", str(value))
    elif name == "reply_to":
        out.properties[name] = None if value is None else Typed("string", _address(p.get(name), str(value)))
    elif name == "timestamp":
        if value is None:
            out.properties["creation_time"] = None
        elif isinstance(value, int | datetime):
            ms = milliseconds(value) if isinstance(value, datetime) else value * 1000
            out.properties["creation_time"] = Typed("timestamp", ms)
        else:
            return "has to be a whole number of seconds"
    elif name == "app_id":
        out.properties["group_id"] = None if value is None else Typed("string", str(value))
    elif name == "delivery_mode":
        out.header["durable"] = None if value is None else Typed("boolean", value == 2)
    elif name == "priority":
        if value is not None and not (isinstance(value, int) and 0 <= value <= 255):
            return "has to be 0 to 255"
        out.header["priority"] = None if value is None else Typed("ubyte", value)
    elif name == "expiration":
        if value is not None and not (str(value).isdigit() and int(str(value)) < 2**32):
            return "has to be milliseconds (digits, below 2^32) for the header's ttl"
        out.header["ttl"] = None if value is None else Typed("uint", int(str(value)))
    elif name == "type":
        if msg.body.kind in ("amqp-value", "amqp-sequence"):
            return f"is how a 0.9.1 reader is told the body is an {msg.body.kind} (type=amqp-1.0), not a property"
        out.annotations["x-basic-type"] = None if value is None else Typed("string", str(value))
    else:
        return "AMQP 1.0 has no field for"
    return None


def _header(msg: Amqp10Message, name: Any, value: Any, out: Changes) -> str | None:
    """Set `out` for the header `name` set to `value`, or say why there is no AMQP 1.0 form."""
    if not isinstance(name, str):
        return "is no text: a name AMQP 1.0 cannot hold"
    if name in _VIEW_ONLY:
        return f"is how a 0.9.1 reader is shown {_VIEW_ONLY[name]}: edit the property itself"
    if name.startswith(_HISTORY):
        return "is the death history (the broker's x-opt-deaths): not something a move sets"
    if name in _NOT_HEADERS or name.startswith("x-basic-"):
        return f"is {_NOT_HEADERS.get(name, 'a basic property (edit the property itself)')}: not a header to set"
    annotation = msg.annotation(name) if name.startswith("x-") else None
    prop = msg.application_property(name)
    if annotation is None and (prop is not None or not name.startswith("x-")):
        if isinstance(value, dict) or is_list_or_tuple(value):
            return "an AMQP 1.0 application property cannot hold: simple values only (a table or a list is no such)"
        out.application_properties[name] = typed_like(prop, value)
        return None
    # an x- name: the annotation (which the view shows where an application property has the same name)
    out.annotations[name] = typed_like(annotation, value)
    return None


def typed_like(original: Typed | None, value: Any) -> Typed:
    """`value` (a header value as the view and the edit document give it) as an AMQP 1.0 value, of `original`'s type
    where it still fits (a ulong stays a ulong while the number is one, a symbol a symbol while it is text, a
    timestamp a timestamp while it is a time); else as dlxtool writes such a value (typed)."""
    if isinstance(value, RawValue):
        value = value.value
    if original is not None:
        t = original.type
        if t in _INTEGERS and isinstance(value, int) and not isinstance(value, bool):
            low, high = _INTEGERS[t]
            if t == "ulong" and value < 0:
                value += 2**64  # the view shows a ulong past 2^63-1 wrapped, as RabbitMQ's conversion does
            if low <= value <= high:
                return Typed(t, int(value))
        if t in ("symbol", "string") and isinstance(value, str):
            return Typed(t, value)
        if t == "binary" and isinstance(value, str):
            return Typed(t, value.encode("utf-8"))  # shown as its text where that is UTF-8
        if t in ("float", "double") and isinstance(value, int | float) and not isinstance(value, bool) \
                and abs(value) <= _FLOAT_MAX[t]:
            return Typed(t, float(value))
        if t == "timestamp" and isinstance(value, datetime):
            return Typed(t, milliseconds(value))
        if t == "uuid" and isinstance(value, str) and _is_uuid(value):
            return Typed(t, value.lower())
        if t == "char" and isinstance(value, str) and len(value) == 1:
            return Typed(t, value)
        if t == "array" and is_list_or_tuple(value) and original.value[0] in _SIMPLE:
            element = original.value[0]
            items = [typed_like(Typed(element, None), v) for v in value]
            if all(item.type == element for item in items):
                return Typed("array", (element, items))
    return typed(value)


def milliseconds(moment: datetime) -> int:
    """A point in time as an AMQP timestamp (ms since the epoch), exactly (no float rounding)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return (aware - _EPOCH) // timedelta(milliseconds=1)


def typed(value: Any) -> Typed:
    """A header value as dlxtool writes it (the provenance: text, whole numbers, times, tables, lists) as an AMQP 1.0
    value; the 1.0 view reads it back as the same header value (dlxtool.amqp10_view.header_value)."""
    if isinstance(value, RawValue):
        value = value.value
    if value is None:
        return Typed("null", None)
    if isinstance(value, bool):
        return Typed("boolean", value)
    if isinstance(value, int):  # a long where it fits, else a ulong; past both: its digits (no number type holds it)
        if -2**63 <= value < 2**63:
            return Typed("long", int(value))
        return Typed("ulong", int(value)) if 0 <= value < 2**64 else Typed("string", str(value))
    if isinstance(value, float):
        return Typed("double", value)
    if isinstance(value, Decimal):
        return Typed("string", str(value))
    if isinstance(value, datetime):
        return Typed("timestamp", milliseconds(value))
    if isinstance(value, bytes | bytearray):
        return Typed("binary", bytes(value))
    if is_object(value):
        return Typed("map", [(Typed("string", str(k)), typed(v)) for k, v in value.items()])
    if is_list_or_tuple(value):
        return Typed("list", [typed(v) for v in value])
    return Typed("string", str(value))


def _id(original: Typed | None, value: Any) -> Typed:
    """A message-id or correlation-id as the type it had while the new text still reads as one."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    kind = original.type if original is not None else "string"
    if kind == "ulong" and text.isdigit() and int(text) < 2**64:
        return Typed("ulong", int(text))
    if kind == "uuid" and text.startswith("urn:uuid:") and _is_uuid(text[len("urn:uuid:"):]):
        return Typed("uuid", text[len("urn:uuid:"):].lower())
    return Typed("string", text)


def _address(original: Typed | None, name: str) -> str:
    """reply_to as an address: a bare queue name becomes /queues/NAME where the original was such an address (the
    view showed it as the bare name)."""
    from dlxtool.broker.amqp10.addresses import queue_address

    was_v2 = original is None or str(original.value).startswith("/")
    return queue_address(name) if was_v2 and not name.startswith("/") else name


def _bytes(value: Any) -> bytes:
    return bytes(value) if isinstance(value, bytes | bytearray) else str(value).encode("utf-8")


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
