"""AMQP 1.0 messages as dlxtool holds them: the type codec (AMQP 1.0 part 1), the message's sections (part 3), and
their lossless JSON form in the message record (dlxtool.record's `amqp10` field; docs/message-record.md).

A model-level module: no proton, no pika. The broker layer (dlxtool.broker.amqp10) moves the bytes a delivery
carries (`parse_message`) and sends the bytes a record holds (`encode_message`); everything in between — what a
section says, what a value's AMQP type is — is decided here, the same for a live read and a record file.

Every value keeps its AMQP type: `Typed(type, value)` with `type` one of TYPES ("ulong", "symbol", "char", "uuid",
"timestamp" in milliseconds …). A map is a list of (key, value) pairs in its order, an array its element type and
items, a described value its descriptor and value. In JSON a typed value is a one-key object named by its type:
{"ulong": 18446744073709551615}, {"symbol": "x-opt-reason"}, {"binary": base64}, {"map": [[k, v], …]},
{"array": {"type": "symbol", "items": [...]}}, {"described": [descriptor, value]} — nothing inferred, nothing lost.
The bytes re-encoded from a record mean the same message (the same sections, values and types); an encoder's free
choices (a long written as smalllong or long, a list as list8 or list32) may differ from the sender's.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

# -- typed values -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)  # slots: a message holds dozens, made per delivery (a third faster to create)
class Typed:
    """One AMQP 1.0 value with its type. value: None (null), bool, int (the integer types, char's code point is a
    str of one character, timestamp in ms), float (float, double), str (string, symbol, char, uuid as its text),
    bytes (binary, decimal32/64/128 as their bytes), list[Typed] (list), list[tuple[Typed, Typed]] (map),
    tuple[str, list[Typed]] (array: element type, items), tuple[Typed, Typed] (described)."""

    type: str
    value: Any

    def plain(self) -> Any:
        """The value without AMQP types, for people, filters and conventions: symbols and chars as text, uuids as
        text, timestamps as aware datetimes, maps as dicts (keys plain), arrays and lists as lists."""
        t, v = self.type, self.value
        if t == "timestamp":
            return timestamp_datetime(v)
        if t == "list":
            return [x.plain() for x in v]
        if t == "map":
            return {_hashable(k.plain()): x.plain() for k, x in v}
        if t == "array":
            return [x.plain() for x in v[1]]
        if t == "described":
            return v[1].plain()
        if t == "encoded":
            return f"(an AMQP 1.0 value nested past {MAX_DECODE_DEPTH} levels, {len(v)} bytes)"
        return v


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str | int | bytes | bool | float) or value is None else repr(value)


def timestamp_datetime(ms: int) -> datetime | int:
    """An AMQP timestamp (ms since the epoch) as an aware datetime; the number itself where no datetime holds it."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, ValueError, OSError):
        return ms


# fixed-width primitive types: name -> (constructor, struct format)
_FIXED_TYPES = {
    "ubyte": (0x50, ">B"), "ushort": (0x60, ">H"), "uint": (0x70, ">I"), "ulong": (0x80, ">Q"),
    "byte": (0x51, ">b"), "short": (0x61, ">h"), "int": (0x71, ">i"), "long": (0x81, ">q"),
    "float": (0x72, ">f"), "double": (0x82, ">d"), "timestamp": (0x83, ">q"),
}
_DECIMALS = {"decimal32": (0x74, 4), "decimal64": (0x84, 8), "decimal128": (0x94, 16)}
TYPES = frozenset({"null", "boolean", "char", "uuid", "binary", "string", "symbol", "list", "map", "array",
                   "described", *_FIXED_TYPES, *_DECIMALS})
_INT_RANGES = {"ubyte": (0, 2**8 - 1), "ushort": (0, 2**16 - 1), "uint": (0, 2**32 - 1), "ulong": (0, 2**64 - 1),
               "byte": (-2**7, 2**7 - 1), "short": (-2**15, 2**15 - 1), "int": (-2**31, 2**31 - 1),
               "long": (-2**63, 2**63 - 1), "timestamp": (-2**63, 2**63 - 1)}


class Amqp10Error(ValueError):
    """Bytes that are not an AMQP 1.0 value or message, or a value that AMQP 1.0 cannot hold as typed."""


# -- decoding ---------------------------------------------------------------------------------------------------

_CONSTRUCTOR_TYPES = {
    0x40: "null", 0x41: "boolean", 0x42: "boolean", 0x56: "boolean", 0x50: "ubyte", 0x60: "ushort", 0x70: "uint",
    0x52: "uint", 0x43: "uint", 0x80: "ulong", 0x53: "ulong", 0x44: "ulong", 0x51: "byte", 0x61: "short",
    0x71: "int", 0x54: "int", 0x81: "long", 0x55: "long", 0x72: "float", 0x82: "double", 0x74: "decimal32",
    0x84: "decimal64", 0x94: "decimal128", 0x73: "char", 0x83: "timestamp", 0x98: "uuid", 0xA0: "binary",
    0xB0: "binary", 0xA1: "string", 0xB1: "string", 0xA3: "symbol", 0xB3: "symbol", 0x45: "list", 0xC0: "list",
    0xD0: "list", 0xC1: "map", 0xD1: "map", 0xE0: "array", 0xF0: "array",
}


def decode_value(buf: bytes, at: int = 0) -> tuple[Typed, int]:
    """(value, offset after it) of the AMQP 1.0 value at buf[at]; Amqp10Error where the bytes are not one."""
    try:
        return _decode(buf, at)
    except (IndexError, struct.error, UnicodeDecodeError, RecursionError) as exc:
        raise Amqp10Error(f"not an AMQP 1.0 value at byte {at} ({type(exc).__name__})") from None


# Lists, maps and arrays nested deeper than this are kept as their bytes, Typed("encoded", bytes): a hostile 0.9.1
# header can nest thousands deep (RabbitMQ hands it to a 1.0 reader as such), and a tree that deep overflows the
# stack of any recursive reader or writer. Sent back byte for byte.
MAX_DECODE_DEPTH = 32
_COMPOUND = frozenset({0xC0, 0xD0, 0xC1, 0xD1, 0xE0, 0xF0})


def _decode(buf: bytes, at: int, depth: int = 0) -> tuple[Typed, int]:
    code = buf[at]
    if code == 0x00:  # described: descriptor, then the value
        if depth >= MAX_DECODE_DEPTH:
            raise Amqp10Error(f"described values nested past {MAX_DECODE_DEPTH} levels at byte {at}")
        descriptor, at = _decode(buf, at + 1, depth + 1)
        value, at = _decode(buf, at, depth + 1)
        return Typed("described", (descriptor, value)), at
    if code in _COMPOUND and depth >= MAX_DECODE_DEPTH:
        size, end = _size(code, buf, at + 1)
        _need(buf, end + size)
        return Typed("encoded", bytes(buf[at:end + size])), end + size
    return _decode_with(code, buf, at + 1, depth)


_TEXT = {0xA0: "binary", 0xA1: "string", 0xA3: "symbol", 0xB0: "binary", 0xB1: "string", 0xB3: "symbol"}
_NULL, _TRUE, _FALSE = Typed("null", None), Typed("boolean", True), Typed("boolean", False)
_unpack_I = struct.Struct(">I").unpack_from


def _decode_with(code: int, buf: bytes, at: int, depth: int = 0) -> tuple[Typed, int]:
    """The value after constructor `code` at buf[at] (an array's items share one constructor)."""
    # The kinds most of a message is made of first (annotation keys, header names, ids: strings and symbols; the
    # properties list's nulls): a dead letter holds some 60 values, each decoded per delivery
    text = _TEXT.get(code)
    if text is not None:
        if code < 0xB0:
            size, at = buf[at], at + 1
        else:
            size, at = _unpack_I(buf, at)[0], at + 4
        end = at + size
        _need(buf, end)
        raw = bytes(buf[at:end])
        if text == "binary":
            return Typed("binary", raw), end
        try:
            return Typed(text, raw.decode("utf-8")), end
        except UnicodeDecodeError:
            # Not UTF-8: RabbitMQ hands a 0.9.1 header name that is not UTF-8 over as such a string or symbol. Kept
            # as its bytes (a str-typed value holding bytes), sent back as they came.
            return Typed(text, raw), end
    if code == 0x40:
        return _NULL, at
    if code == 0x41:
        return _TRUE, at
    if code == 0x42:
        return _FALSE, at
    name = _CONSTRUCTOR_TYPES.get(code)
    if name is None:
        raise Amqp10Error(f"unknown AMQP 1.0 constructor 0x{code:02x} at byte {at - 1}")
    if code == 0x56:
        return Typed("boolean", buf[at] != 0), at + 1
    if code in (0x43, 0x44):
        return Typed(name, 0), at
    if code == 0x45:
        return Typed("list", []), at
    if code in (0x52, 0x53):
        return Typed(name, buf[at]), at + 1
    if code == 0x54:
        return Typed("int", struct.unpack_from(">b", buf, at)[0]), at + 1
    if code == 0x55:
        return Typed("long", struct.unpack_from(">b", buf, at)[0]), at + 1
    if name in _FIXED_TYPES:
        fmt = _FIXED_TYPES[name][1]
        size = struct.calcsize(fmt)
        value = struct.unpack_from(fmt, buf, at)[0]
        _need(buf, at + size)
        return Typed(name, value), at + size
    if name in _DECIMALS:
        size = _DECIMALS[name][1]
        _need(buf, at + size)
        return Typed(name, bytes(buf[at:at + size])), at + size
    if name == "char":
        _need(buf, at + 4)
        return Typed("char", chr(struct.unpack_from(">I", buf, at)[0])), at + 4
    if name == "uuid":
        _need(buf, at + 16)
        return Typed("uuid", str(uuid.UUID(bytes=bytes(buf[at:at + 16])))), at + 16
    if name in ("list", "map"):
        small = code in (0xC0, 0xC1)
        size, at = _size(code, buf, at)
        end = at + size
        _need(buf, end)
        count = buf[at] if small else struct.unpack_from(">I", buf, at)[0]
        at += 1 if small else 4
        items = []
        for _ in range(count):
            item, at = _decode(buf, at, depth + 1)
            items.append(item)
        if at != end:
            raise Amqp10Error(f"a {name} ends at byte {at}, its size says {end}")
        if name == "map":
            if count % 2:
                raise Amqp10Error("a map with an odd number of items")
            return Typed("map", list(zip(items[::2], items[1::2], strict=True))), at
        return Typed("list", items), at
    # array: size, count, one constructor (possibly described), the items
    small = code == 0xE0
    size, at = _size(code, buf, at)
    end = at + size
    _need(buf, end)
    count = buf[at] if small else struct.unpack_from(">I", buf, at)[0]
    at += 1 if small else 4
    descriptor = None
    element = buf[at]
    at += 1
    if element == 0x00:
        descriptor, at = _decode(buf, at, depth + 1)
        element = buf[at]
        at += 1
    if element in _COMPOUND and depth >= MAX_DECODE_DEPTH:
        # its items share one constructor: they cannot be kept as bytes one by one (Typed("encoded") is a whole value)
        raise Amqp10Error(f"an array of {_CONSTRUCTOR_TYPES[element]}s nested past {MAX_DECODE_DEPTH} levels")
    items = []
    for _ in range(count):
        item, at = _decode_with(element, buf, at, depth + 1)
        items.append(Typed("described", (descriptor, item)) if descriptor is not None else item)
    element_type = "described" if descriptor is not None else _CONSTRUCTOR_TYPES.get(element, "null")
    return Typed("array", (element_type, items)), at


def _size(code: int, buf: bytes, at: int) -> tuple[int, int]:
    if code >> 4 in (0xA, 0xC, 0xE):  # one-byte sizes
        return buf[at], at + 1
    return struct.unpack_from(">I", buf, at)[0], at + 4


def _need(buf: bytes, end: int) -> None:
    if end > len(buf):
        raise IndexError("value runs past the end")


# -- encoding ---------------------------------------------------------------------------------------------------


def encode_value(value: Typed) -> bytes:
    """The AMQP 1.0 bytes of a typed value (the compact encodings where the value fits them)."""
    out: list[bytes] = []
    _encode(value, out)
    return b"".join(out)


def _encode(value: Typed, out: list[bytes]) -> None:
    t, v = value.type, value.value
    try:
        if t == "described":
            out.append(b"\x00")
            _encode(v[0], out)
            _encode(v[1], out)
        elif t == "array":
            out.append(_array(v[0], v[1]))
        elif t == "encoded":  # nested past MAX_DECODE_DEPTH: its bytes as they came
            out.append(bytes(v))
        else:
            out.append(_constructor_and_payload(t, v))
    except (struct.error, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        if isinstance(exc, Amqp10Error):
            raise
        raise Amqp10Error(f"cannot encode {v!r} as AMQP 1.0 {t}") from None


def _constructor_and_payload(t: str, v: Any) -> bytes:
    if t == "null":
        return b"\x40"
    if t == "boolean":
        return b"\x41" if v else b"\x42"
    if t in _INT_RANGES:
        low, high = _INT_RANGES[t]
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise Amqp10Error(f"{v!r} is not an AMQP 1.0 {t}")
        if t in ("uint", "ulong") and v == 0:
            return b"\x43" if t == "uint" else b"\x44"
        if t in ("uint", "ulong") and v < 256:
            return (b"\x52" if t == "uint" else b"\x53") + bytes((v,))
        if t in ("int", "long") and -128 <= v <= 127:
            return (b"\x54" if t == "int" else b"\x55") + struct.pack(">b", v)
    if t in _FIXED_TYPES:
        code, fmt = _FIXED_TYPES[t]
        return bytes((code,)) + struct.pack(fmt, v)
    if t in _DECIMALS:
        code, size = _DECIMALS[t]
        if not isinstance(v, bytes) or len(v) != size:
            raise Amqp10Error(f"an AMQP 1.0 {t} is {size} bytes")
        return bytes((code,)) + v
    if t == "char":
        if not isinstance(v, str) or len(v) != 1:
            raise Amqp10Error(f"an AMQP 1.0 char is one character, not {v!r}")
        return b"\x73" + struct.pack(">I", ord(v))
    if t == "uuid":
        return b"\x98" + uuid.UUID(str(v)).bytes
    if t in ("binary", "string", "symbol"):
        raw = v if t == "binary" or isinstance(v, bytes) else v.encode("utf-8") if isinstance(v, str) else None
        if not isinstance(raw, bytes):
            raise Amqp10Error(f"an AMQP 1.0 binary is bytes, not {type(v).__name__}")
        small, large = {"binary": (0xA0, 0xB0), "string": (0xA1, 0xB1), "symbol": (0xA3, 0xB3)}[t]
        if len(raw) < 256:
            return bytes((small, len(raw))) + raw
        return bytes((large,)) + struct.pack(">I", len(raw)) + raw
    if t == "list":
        items = cast("list[Typed]", v)
        if not items:
            return b"\x45"
        return _compound(0xC0, 0xD0, len(items), b"".join(encode_value(x) for x in items))
    if t == "map":
        pairs = cast("list[tuple[Typed, Typed]]", v)
        body = b"".join(encode_value(k) + encode_value(x) for k, x in pairs)
        return _compound(0xC1, 0xD1, 2 * len(pairs), body)
    raise Amqp10Error(f"unknown AMQP 1.0 type {t!r}")


def _compound(small: int, large: int, count: int, body: bytes) -> bytes:
    if len(body) + 1 < 256 and count < 256:
        return bytes((small, len(body) + 1, count)) + body
    return bytes((large,)) + struct.pack(">II", len(body) + 4, count) + body


def _array(element_type: str, items: list[Typed]) -> bytes:
    """An array: one constructor for all items (the wide form of each type, so that every item fits it)."""
    if element_type == "described":
        descriptor = items[0].value[0] if items else Typed("null", None)
        inner_type = items[0].value[1].type if items else "null"
        constructor = b"\x00" + encode_value(descriptor) + bytes((_WIDE[inner_type],))
        payloads = [_payload(inner_type, x.value[1]) for x in items]
    else:
        if any(x.type != element_type for x in items):
            raise Amqp10Error(f"an array of {element_type} holds only {element_type} values")
        constructor = bytes((_WIDE[element_type],))
        payloads = [_payload(element_type, x) for x in items]
    body = constructor + b"".join(payloads)
    return b"\xf0" + struct.pack(">II", len(body) + 4, len(items)) + body


_WIDE = {"null": 0x40, "boolean": 0x56, "ubyte": 0x50, "ushort": 0x60, "uint": 0x70, "ulong": 0x80, "byte": 0x51,
         "short": 0x61, "int": 0x71, "long": 0x81, "float": 0x72, "double": 0x82, "decimal32": 0x74,
         "decimal64": 0x84, "decimal128": 0x94, "char": 0x73, "timestamp": 0x83, "uuid": 0x98, "binary": 0xB0,
         "string": 0xB1, "symbol": 0xB3, "list": 0xD0, "map": 0xD1, "array": 0xF0}


def _payload(element_type: str, item: Typed) -> bytes:
    """An array item's bytes under the array's one (wide) constructor."""
    if element_type == "boolean":
        return b"\x01" if item.value else b"\x00"
    if element_type == "null":
        return b""
    if element_type in ("binary", "string", "symbol"):
        raw: bytes = (item.value if element_type == "binary" or isinstance(item.value, bytes)
                          else item.value.encode("utf-8"))
        return struct.pack(">I", len(raw)) + raw
    if element_type in ("list", "map"):
        body = (b"".join(encode_value(x) for x in item.value) if element_type == "list"
                else b"".join(encode_value(k) + encode_value(x) for k, x in item.value))
        count = len(item.value) * (2 if element_type == "map" else 1)
        return struct.pack(">II", len(body) + 4, count) + body
    if element_type == "array":
        return _array(item.value[0], item.value[1])[1:]
    if element_type in _FIXED_TYPES:
        return struct.pack(_FIXED_TYPES[element_type][1], item.value)
    if element_type in _DECIMALS:
        return bytes(item.value)
    if element_type == "char":
        return struct.pack(">I", ord(item.value))
    if element_type == "uuid":
        return uuid.UUID(str(item.value)).bytes
    raise Amqp10Error(f"an array of {element_type} cannot be written")


# -- JSON -------------------------------------------------------------------------------------------------------


# Lists, maps, arrays and described values nested deeper than this are written whole as {"encoded": base64 of their
# AMQP 1.0 encoding}: a hostile header can nest thousands deep, and JSON writers stop at a few hundred.
MAX_JSON_DEPTH = 32
_NESTED = ("list", "map", "array", "described")


def to_json(value: Typed, depth: int = 0) -> Any:
    """A typed value as JSON: a one-key object named by its type (past MAX_JSON_DEPTH: {"encoded": base64})."""
    t, v = value.type, value.value
    if t == "encoded":
        return {t: base64.b64encode(v).decode("ascii")}
    if t in _NESTED and depth >= MAX_JSON_DEPTH:
        return {"encoded": base64.b64encode(encode_value(value)).decode("ascii")}
    depth += 1
    if t in ("binary", *_DECIMALS):
        return {t: base64.b64encode(v).decode("ascii")}
    if t in ("string", "symbol") and isinstance(v, bytes):  # not UTF-8 (decode_value)
        return {t: {"$bytes": base64.b64encode(v).decode("ascii")}}
    if t in ("float", "double") and not math.isfinite(v):
        return {t: str(v)}
    if t == "list":
        return {t: [to_json(x, depth) for x in v]}
    if t == "map":
        return {t: [[to_json(k, depth), to_json(x, depth)] for k, x in v]}
    if t == "array":
        return {t: {"type": v[0], "items": [to_json(x, depth) for x in v[1]]}}
    if t == "described":
        return {t: [to_json(v[0], depth), to_json(v[1], depth)]}
    return {t: v}


def from_json(data: Any, where: str = "value") -> Typed:
    """to_json undone; Amqp10Error (saying where) for anything else."""
    if not isinstance(data, Mapping) or len(data) != 1:
        raise Amqp10Error(f"{where}: an AMQP 1.0 value is an object with one key, its type (e.g. {{\"ulong\": 5}})")
    t, v = next(iter(data.items()))
    if t == "encoded":  # a value nested past MAX_JSON_DEPTH / MAX_DECODE_DEPTH, kept as its bytes
        try:
            raw = base64.b64decode(v, validate=True)
        except (binascii.Error, TypeError) as exc:
            raise Amqp10Error(f"{where}: not base64 ({exc})") from None
        if not raw or raw[0] not in _COMPOUND:
            raise Amqp10Error(f"{where}: an encoded value is a list, map or array's AMQP 1.0 bytes")
        return Typed("encoded", raw)
    if t not in TYPES:
        raise Amqp10Error(f"{where}: unknown AMQP 1.0 type {t!r}")
    try:
        if t in ("binary", *_DECIMALS):
            typed = Typed(t, base64.b64decode(v, validate=True))
        elif t in ("string", "symbol") and isinstance(v, Mapping):
            typed = Typed(t, base64.b64decode(v["$bytes"], validate=True))
        elif t in ("float", "double"):
            typed = Typed(t, float(v))
        elif t == "list":
            typed = Typed(t, [from_json(x, f"{where}[{i}]") for i, x in enumerate(v)])
        elif t == "map":
            typed = Typed(t, [(from_json(k, f"{where} key"), from_json(x, f"{where} value")) for k, x in v])
        elif t == "array":
            typed = Typed(t, (str(v["type"]), [from_json(x, f"{where}[{i}]") for i, x in enumerate(v["items"])]))
        elif t == "described":
            typed = Typed(t, (from_json(v[0], f"{where} descriptor"), from_json(v[1], f"{where} value")))
        else:
            typed = Typed(t, v)
        encode_value(typed)  # proves it can be sent as it says
    except Amqp10Error as exc:
        raise Amqp10Error(f"{where}: {exc}") from None
    except (binascii.Error, TypeError, ValueError, KeyError, IndexError):
        raise Amqp10Error(f"{where}: {v!r} is not an AMQP 1.0 {t}") from None
    return typed


# -- messages ---------------------------------------------------------------------------------------------------

HEADER_FIELDS = ("durable", "priority", "ttl", "first_acquirer", "delivery_count")
PROPERTY_FIELDS = ("message_id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
                   "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence",
                   "reply_to_group_id")
_SECTIONS = {0x70: "header", 0x71: "delivery_annotations", 0x72: "message_annotations", 0x73: "properties",
             0x74: "application_properties", 0x75: "data", 0x76: "amqp_sequence", 0x77: "amqp_value",
             0x78: "footer"}
_SECTION_SYMBOLS = {f"amqp:{n.replace('_', '-')}:{k}": code for code, (n, k) in {
    0x70: ("header", "list"), 0x71: ("delivery_annotations", "map"), 0x72: ("message_annotations", "map"),
    0x73: ("properties", "list"), 0x74: ("application_properties", "map"), 0x75: ("data", "binary"),
    0x76: ("amqp_sequence", "list"), 0x77: ("amqp_value", "*"), 0x78: ("footer", "map")}.items()}
_CODES = {name: code for code, name in _SECTIONS.items()}
BODY_KINDS = ("data", "amqp-value", "amqp-sequence", "empty")
Pairs = list[tuple[Typed, Typed]]


@dataclass
class Body:
    """The body: kind "data" (its sections: bytes each), "amqp-sequence" (its sections: list[Typed] each),
    "amqp-value" (one Typed in `sections`), or "empty" (no body section at all)."""

    kind: str = "empty"
    sections: list[Any] = field(default_factory=list)

    def payload(self) -> bytes:
        """The bytes a 0.9.1 reader gets as the body (what RabbitMQ 4.x's conversion gives: the data sections
        joined; an amqp-value or amqp-sequence body as its encoded sections, marked type=amqp-1.0)."""
        if self.kind == "data":
            return b"".join(self.sections)
        return b"".join(encode_section(self.kind, s) for s in self.sections)


@dataclass
class Amqp10Message:
    """An AMQP 1.0 message, section by section (a section that is not there is None)."""

    header: dict[str, Typed] | None = None
    delivery_annotations: Pairs | None = None
    message_annotations: Pairs | None = None
    properties: dict[str, Typed] | None = None
    application_properties: Pairs | None = None
    body: Body = field(default_factory=Body)
    footer: Pairs | None = None

    # -- reading ---------------------------------------------------------------------------------------------

    def annotation(self, name: str) -> Typed | None:
        """The message annotation named by symbol `name`, or None."""
        return _lookup(self.message_annotations, name)

    def application_property(self, name: str) -> Typed | None:
        return _lookup(self.application_properties, name)

    def property(self, name: str) -> Typed | None:
        return (self.properties or {}).get(name)

    # -- JSON --------------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.header is not None:
            out["header"] = {k: to_json(v) for k, v in self.header.items()}
        for name in ("delivery_annotations", "message_annotations"):
            pairs = getattr(self, name)
            if pairs is not None:
                out[name] = _pairs_json(pairs, "symbol")
        if self.properties is not None:
            out["properties"] = {k: to_json(v) for k, v in self.properties.items()}
        if self.application_properties is not None:
            out["application_properties"] = _pairs_json(self.application_properties, "string")
        out["body"] = _body_json(self.body)
        if self.footer is not None:
            out["footer"] = _pairs_json(self.footer, "symbol")
        return out

    @classmethod
    def from_json(cls, data: Any, where: str = "amqp10") -> Amqp10Message:
        if not isinstance(data, Mapping):
            raise Amqp10Error(f"{where}: must be an object")
        unknown = sorted(set(data) - {"header", "delivery_annotations", "message_annotations", "properties",
                                      "application_properties", "body", "footer"})
        if unknown:
            raise Amqp10Error(f"{where}: unknown section {unknown[0]!r}")
        msg = cls()
        if data.get("header") is not None:
            msg.header = _fields_from_json(data["header"], HEADER_FIELDS, f"{where}.header")
        for name, keys in (("delivery_annotations", "symbol"), ("message_annotations", "symbol"),
                           ("application_properties", "string"), ("footer", "symbol")):
            if data.get(name) is not None:
                setattr(msg, name, _pairs_from_json(data[name], keys, f"{where}.{name}"))
        if data.get("properties") is not None:
            msg.properties = _fields_from_json(data["properties"], PROPERTY_FIELDS, f"{where}.properties")
        msg.body = _body_from_json(data.get("body") or {"kind": "empty"}, f"{where}.body")
        return msg


def _lookup(pairs: Pairs | None, name: str) -> Typed | None:
    for key, value in pairs or ():
        if key.type in ("symbol", "string") and key.value == name:
            return value
    return None


def _pairs_json(pairs: Pairs, key_type: str) -> Any:
    """A section's map: an object by name where every key is of the section's usual key type (symbol for
    annotations, string for application properties) and no name repeats; else {"$pairs": [[key, value], …]}."""
    names = [k.value for k, _ in pairs]
    if (all(k.type == key_type and isinstance(k.value, str) for k, _ in pairs) and len(set(names)) == len(names)
            and "$pairs" not in names):
        return {k.value: to_json(v) for k, v in pairs}
    return {"$pairs": [[to_json(k), to_json(v)] for k, v in pairs]}


def _pairs_from_json(data: Any, key_type: str, where: str) -> Pairs:
    if not isinstance(data, Mapping):
        raise Amqp10Error(f"{where}: must be an object")
    if set(data) == {"$pairs"} and isinstance(data["$pairs"], list):
        return [(from_json(k, f"{where} key"), from_json(v, f"{where} value")) for k, v in data["$pairs"]]
    return [(Typed(key_type, str(k)), from_json(v, f"{where}.{k}")) for k, v in data.items()]


def _fields_from_json(data: Any, names: tuple[str, ...], where: str) -> dict[str, Typed]:
    if not isinstance(data, Mapping):
        raise Amqp10Error(f"{where}: must be an object")
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise Amqp10Error(f"{where}: unknown field {unknown[0]!r}", )
    return {k: from_json(v, f"{where}.{k}") for k, v in data.items()}


def _body_json(body: Body) -> dict[str, Any]:
    if body.kind == "data":
        return {"kind": "data", "sections": [base64.b64encode(s).decode("ascii") for s in body.sections]}
    if body.kind == "amqp-sequence":
        return {"kind": body.kind, "sections": [[to_json(x) for x in s] for s in body.sections]}
    if body.kind == "amqp-value":
        return {"kind": body.kind, "value": to_json(body.sections[0])}
    return {"kind": "empty"}


def _body_from_json(data: Any, where: str) -> Body:
    if not isinstance(data, Mapping) or data.get("kind") not in BODY_KINDS:
        raise Amqp10Error(f"{where}: 'kind' must be one of {', '.join(BODY_KINDS)}")
    kind = data["kind"]
    try:
        if kind == "data":
            return Body(kind, [base64.b64decode(s, validate=True) for s in data["sections"]])
        if kind == "amqp-sequence":
            return Body(kind, [[from_json(x, f"{where}.sections") for x in s] for s in data["sections"]])
        if kind == "amqp-value":
            return Body(kind, [from_json(data["value"], f"{where}.value")])
    except (binascii.Error, TypeError, ValueError, KeyError) as exc:
        if isinstance(exc, Amqp10Error):
            raise
        raise Amqp10Error(f"{where}: bad {kind} body") from None
    return Body()


# -- the wire form ----------------------------------------------------------------------------------------------


def parse_message(raw: bytes) -> Amqp10Message:
    """The sections of a bare-or-annotated message as a transfer carries it; Amqp10Error for other bytes."""
    msg = Amqp10Message()
    at = 0
    while at < len(raw):
        start = at
        section, at = decode_value(raw, at)
        if section.type != "described":
            raise Amqp10Error(f"byte {start}: not a message section")
        code = _section_code(section.value[0])
        value: Typed = section.value[1]
        name = _SECTIONS.get(code) if code is not None else None
        if name is None:
            raise Amqp10Error(f"byte {start}: unknown message section {section.value[0].value!r}")
        _take_section(msg, name, value, start)
    return msg


def _section_code(descriptor: Typed) -> int | None:
    if descriptor.type == "ulong":
        return int(descriptor.value)
    if descriptor.type == "symbol":
        return _SECTION_SYMBOLS.get(descriptor.value)
    return None


def _take_section(msg: Amqp10Message, name: str, value: Typed, start: int) -> None:
    if name in ("header", "properties"):
        names = HEADER_FIELDS if name == "header" else PROPERTY_FIELDS
        items = value.value if value.type == "list" else []
        setattr(msg, name, {n: v for n, v in zip(names, items, strict=False) if v.type != "null"})
    elif name in ("delivery_annotations", "message_annotations", "application_properties", "footer"):
        if value.type != "map":
            raise Amqp10Error(f"byte {start}: the {name} section is not a map")
        setattr(msg, name, list(value.value))
    else:
        kind = {"data": "data", "amqp_sequence": "amqp-sequence", "amqp_value": "amqp-value"}[name]
        if msg.body.kind not in ("empty", kind) or (kind == "amqp-value" and msg.body.kind == kind):
            raise Amqp10Error(f"byte {start}: a {kind} section after a {msg.body.kind} body")
        if kind == "data" and value.type != "binary":
            raise Amqp10Error(f"byte {start}: a data section that is not binary")
        if kind == "amqp-sequence" and value.type != "list":
            raise Amqp10Error(f"byte {start}: an amqp-sequence section that is not a list")
        msg.body.kind = kind
        msg.body.sections.append(value if kind == "amqp-value" else value.value)


def encode_section(kind_or_name: str, value: Any) -> bytes:
    """One section's bytes: its descriptor (smallulong) and its value."""
    name = {"data": "data", "amqp-value": "amqp_value", "amqp-sequence": "amqp_sequence"}.get(kind_or_name,
                                                                                               kind_or_name)
    if name == "data":
        typed = Typed("binary", value)
    elif name == "amqp_sequence":
        typed = Typed("list", value)
    elif isinstance(value, Typed):
        typed = value
    else:
        raise Amqp10Error(f"cannot encode a {name} section of {type(value).__name__}")
    return b"\x00\x53" + bytes((_CODES[name],)) + encode_value(typed)


def encode_message(msg: Amqp10Message, *, without_annotations: Iterable[str] = ()) -> bytes:
    """The message's bytes, sections in the order the spec gives them. `without_annotations`: message annotations
    left out (a replay leaves out the death history and the broker's own x- annotations)."""
    drop = set(without_annotations)
    parts: list[bytes] = []
    if msg.header:
        parts.append(encode_section("header", _fields_list(msg.header, HEADER_FIELDS)))
    if msg.delivery_annotations is not None:
        parts.append(encode_section("delivery_annotations", Typed("map", msg.delivery_annotations)))
    if msg.message_annotations is not None:
        kept = [(k, v) for k, v in msg.message_annotations if k.value not in drop]
        if kept or not drop:
            parts.append(encode_section("message_annotations", Typed("map", kept)))
    if msg.properties:
        parts.append(encode_section("properties", _fields_list(msg.properties, PROPERTY_FIELDS)))
    if msg.application_properties is not None:
        parts.append(encode_section("application_properties", Typed("map", msg.application_properties)))
    for section in msg.body.sections:
        parts.append(encode_section(msg.body.kind, section))
    if msg.footer is not None:
        parts.append(encode_section("footer", Typed("map", msg.footer)))
    return b"".join(parts)


def _fields_list(fields: dict[str, Typed], names: tuple[str, ...]) -> Typed:
    last = max((names.index(n) for n in fields), default=-1)
    return Typed("list", [fields.get(n, Typed("null", None)) for n in names[:last + 1]])


# -- bodies that arrive AMQP-encoded ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Unwrapped:
    """An AMQP 1.0 body found inside bytes: `what` it was ("amqp-value (binary)", "2 data sections", …), and either
    the bytes it carries (`payload`: data sections joined, a binary or string amqp-value) or, for a structured value
    (a map, a list, an amqp-sequence), that value without AMQP types (`value`)."""

    what: str
    payload: bytes | None = None
    value: Any = None


def unwrap_body(data: bytes) -> Unwrapped | None:
    """The AMQP 1.0 body sections a body is made of, where it is made of nothing else: what RabbitMQ 4.x gives a
    0.9.1 reader for an amqp-value or amqp-sequence body (type=amqp-1.0), and what a record read over 1.0 holds as
    `body` for one. None for any other bytes (a protobuf body never starts with 0x00: field 0 does not exist)."""
    if len(data) < 3 or data[0] != 0x00 or data[1] != 0x53 or data[2] not in (0x75, 0x76, 0x77):
        return None
    try:
        msg = parse_message(data)
    except Amqp10Error:
        return None
    if any(getattr(msg, n) is not None for n in ("header", "delivery_annotations", "message_annotations",
                                                  "properties", "application_properties", "footer")):
        return None
    body = msg.body
    if body.kind == "data":
        n = len(body.sections)
        return Unwrapped(f"{n} data section{'s' if n > 1 else ''}", payload=b"".join(body.sections))
    if body.kind == "amqp-sequence":
        n = len(body.sections)
        return Unwrapped(f"amqp-sequence ({n} section{'s' if n > 1 else ''})",
                         value=[[x.plain() for x in s] for s in body.sections])
    if body.kind == "amqp-value":
        value: Typed = body.sections[0]
        if value.type == "binary":
            return Unwrapped("amqp-value (binary)", payload=value.value)
        if value.type in ("string", "symbol"):
            return Unwrapped(f"amqp-value ({value.type})", payload=str(value.value).encode("utf-8"))
        return Unwrapped(f"amqp-value ({value.type})", value=value.plain())
    return None
