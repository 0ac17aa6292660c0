"""Header values that Python (and pika) cannot carry faithfully, kept as their AMQP bytes.

pika 1.4 decodes an AMQP double 1.1 as the integer 1 (and re-encodes it as a long), a float32 1.5 as 1,
the small integer kinds b/B/u/s/U and i as plain ints (re-encoded as I or l), a signed 64-bit L as the
same long as l (re-encoded as l), a decimal with a scale of 2 and value 100 as Decimal("1.00")
re-encoded as D(0, 1); a timestamp beyond year 9999 (RabbitMQ accepts 2^62) does not decode at all.
dlxtool's codec decodes those as a RawValue instead: its exact bytes (kind byte + payload), written back
verbatim by its encoder and stored in records as {"$amqp": base64, "$value": readable} (dlxtool.record).

The field value codec is here too (encode_field, decode_field and the table and single-value forms): what
the wire codec (dlxtool.broker.wire.frames) reads and writes header tables with, and what a record file's
{"$amqp": …} values are made of. It writes the bytes pika writes and reads the values pika reads (the
differential tests in tests/broker/test_frames.py), with two differences on purpose: the kinds above stay
RawValue, and a 64-bit `l` integer is a `Long` (pika's marker for it, pika.compat.long, is written as one
too). It raises FieldError for what it cannot write; the wire codec then lets pika's encoder decide.
A model-level module (no pika): the broker layer, record, deaths and selection all import it.

U is the AMQP 0-9-1 spec's short-int (signed 16-bit, as pika reads it; RabbitMQ spells it s). RabbitMQ's
table parser has no U: a publish carrying one makes it close the whole connection (541 INTERNAL_ERROR,
seen on 3.10.8), so no message in RabbitMQ holds one. It can only come from a record file, and `load`
refuses such a record before publishing anything (`rabbitmq_refuses`). L (signed 64-bit) is accepted
and delivered as sent."""

from __future__ import annotations

import calendar
import struct
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

# kind byte -> (struct format of the payload, what the readable value is)
_FIXED = {
    ord("b"): ">b", ord("B"): ">B", ord("s"): ">h", ord("u"): ">H", ord("U"): ">h", ord("i"): ">I",
    ord("L"): ">q", ord("f"): ">f", ord("d"): ">d", ord("T"): ">Q",
}
REFUSED_BY_RABBITMQ = frozenset({ord("U")})


@dataclass(frozen=True)
class RawValue:
    """One AMQP field value exactly as on the wire: `encoded` = kind byte + payload."""

    encoded: bytes

    @property
    def kind(self) -> str:
        return chr(self.encoded[0])

    @property
    def value(self) -> Any:
        """What it means, for people and filters: a float, an int, a Decimal, or seconds (T)."""
        fmt = _FIXED.get(self.encoded[0])
        if fmt is not None:
            return struct.unpack_from(fmt, self.encoded, 1)[0]
        if self.kind == "D":
            scale, digits = struct.unpack_from(">Bi", self.encoded, 1)
            return Decimal(digits).scaleb(-scale)
        return None

    def __repr__(self) -> str:
        return f"RawValue({self.kind}:{self.value!r})"


def raw_with_value(raw: RawValue | Long, value: Any) -> RawValue | Long:
    """`raw`'s kind holding `value` instead (an edited header kept as its AMQP bytes: a float stays a float, an L an
    L; a Long — a 64-bit `l` that fits 32 bits, shown with its kind — a Long). ValueError where that kind cannot
    hold it (out of range, not a number; a decimal: write a $decimal)."""
    if isinstance(raw, Long):
        if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer() \
                or not -2**63 <= int(value) < 2**63:
            raise ValueError(f"AMQP kind 'l' holds whole numbers from -2^63 to 2^63-1, not {value!r}")
        return Long(int(value))
    fmt = _FIXED.get(raw.encoded[0])
    if fmt is None or isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a value of AMQP kind {raw.kind!r} cannot be set to {value!r}")
    if fmt[-1] not in "fd" and not float(value).is_integer():
        raise ValueError(f"AMQP kind {raw.kind!r} holds whole numbers, not {value!r}")
    try:
        return RawValue(raw.encoded[:1] + struct.pack(fmt, value if fmt[-1] in "fd" else int(value)))
    except struct.error:
        raise ValueError(f"{value!r} does not fit AMQP kind {raw.kind!r}") from None


def raw_fixed(buf: bytes, o: int) -> tuple[RawValue, int] | None:
    """The value of a fixed-size kind at buf[o] (its kind byte) as a RawValue, or None for other kinds."""
    kind = buf[o]
    fmt = _FIXED.get(kind)
    size = struct.calcsize(fmt) if fmt is not None else (5 if kind == ord("D") else -1)
    if size < 0:
        return None
    end = o + 1 + size
    if end > len(buf):
        raise IndexError("field value runs past the table")
    return RawValue(bytes(buf[o:end])), end


# pika decodes header tables recursively (two Python frames per level) and a content header frame
# (frame_max 128 KiB) can nest a table ~18,000 deep; at Python's default limit of 1000, a message with
# 500 levels kills the connection and can never be peeked. Python >= 3.11 runs Python-to-Python calls
# without C stack, so a higher limit is safe for that; dlxtool itself never str()s header tables.
# Raised before anything decodes AMQP values: a connection (broker.connection) or a record file's
# {"$amqp": …} values (record).
DEEP_HEADER_RECURSION_LIMIT = 40_000


def allow_deep_headers() -> None:
    if sys.getrecursionlimit() < DEEP_HEADER_RECURSION_LIMIT:
        sys.setrecursionlimit(DEEP_HEADER_RECURSION_LIMIT)


def rabbitmq_refuses(value: Any, path: str = "") -> str | None:
    """Where in a header value (a table, a list, a RawValue) sits a kind RabbitMQ refuses to take (it would
    close the connection): "name.inner[2]", or None."""
    if isinstance(value, RawValue):
        return path if value.encoded[0] in REFUSED_BY_RABBITMQ else None
    if isinstance(value, dict):
        items: Any = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list | tuple):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for where, inner in items:
        found = rabbitmq_refuses(inner, where)
        if found is not None:
            return found
    return None


# -- the field value codec ------------------------------------------------------------------------------


class FieldError(ValueError):
    """A value this codec cannot write (a type AMQP tables do not hold) or bytes it cannot read."""


class Long(int):
    """An integer AMQP carried as kind `l` (signed 64-bit: RabbitMQ's x-death counts), written back as `l`
    whatever its size; a plain int is written as `I` where it fits 32 bits, as pika does."""

    __slots__ = ()


_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_DECIMAL = struct.Struct(">Bi")
_unpack_I = _I.unpack_from
_unpack_i = _i.unpack_from
_unpack_q = _q.unpack_from
_unpack_Q = _Q.unpack_from
_utc = timezone.utc  # noqa: UP017 - the object pika uses

# Encoded short strings of header names, exchange and queue names: the same few, message after message.
_SHORT_CACHE: dict[str, bytes] = {}
_SHORT_CACHE_MAX = 4096
_TIME_CACHE: dict[datetime, bytes] = {}  # datetimes are immutable; replay stamps the same second over and over
_STAMP_CACHE: dict[int, datetime] = {}
_KEY_CACHE: dict[bytes, str] = {}


def short_string(value: Any) -> bytes:
    """An AMQP short string (length byte + bytes) of a str (UTF-8) or bytes; FieldError past 255 bytes.
    Remembered for a str: table keys and names come back message after message."""
    raw = _SHORT_CACHE.get(value) if type(value) is str else None
    if raw is None:
        data = value if isinstance(value, bytes) else value.encode("UTF-8")
        if len(data) > 255:
            raise FieldError(f"short string of {len(data)} bytes (at most 255)")
        raw = bytes((len(data),)) + data
        if type(value) is str:
            if len(_SHORT_CACHE) >= _SHORT_CACHE_MAX:
                _SHORT_CACHE.clear()
            _SHORT_CACHE[value] = raw
    return raw


def _is_long(kind: type) -> bool:
    """Long, or pika's marker for the same (pika.compat.long: values pika decoded), without importing pika."""
    if kind is Long:
        return True
    compat = sys.modules.get("pika.compat")
    return compat is not None and kind is getattr(compat, "long", None)


def encode_field(value: Any, out: list[bytes]) -> None:
    """Append one encoded field value (pika.data.encode_value's choices, dispatched on exact type)."""
    kind = type(value)
    if kind is str:
        raw = value.encode("UTF-8")
        out.append(b"S" + _I.pack(len(raw)))
        out.append(raw)
    elif kind is int:
        if -0x80000000 <= value <= 0x7FFFFFFF:
            out.append(b"I" + _i.pack(value))
        else:
            out.append(b"l" + _q.pack(value))
    elif kind is dict:
        out.append(b"F")
        out.append(encode_field_table(value))
    elif kind is datetime:
        raw = _TIME_CACHE.get(value)
        if raw is None:
            raw = b"T" + _Q.pack(calendar.timegm(value.utctimetuple()))
            if len(_TIME_CACHE) >= 64:
                _TIME_CACHE.clear()
            _TIME_CACHE[value] = raw
        out.append(raw)
    elif kind is bytes:
        out.append(b"x" + _I.pack(len(value)))
        out.append(value)
    elif kind is bool:
        out.append(b"t\x01" if value else b"t\x00")
    elif kind is list:
        parts: list[bytes] = []
        for item in value:
            encode_field(item, parts)
        joined = b"".join(parts)
        out.append(b"A" + _I.pack(len(joined)))
        out.append(joined)
    elif value is None:
        out.append(b"V")
    elif kind is RawValue:  # decoded as is (a float, a small integer kind…): back byte for byte
        out.append(value.encoded)
    elif _is_long(kind):
        out.append(b"l" + _q.pack(value))
    elif kind is Decimal:
        out.append(_decimal(value))
    else:  # a float, a tuple, a subclass: pika's encoder has its own answer (the wire codec asks it)
        raise FieldError(f"cannot write a header value of type {kind.__name__}")


def _decimal(value: Decimal) -> bytes:
    """pika's Decimal encoding: normalized, scale = the number of decimals, digits as a signed 32-bit int."""
    value = value.normalize()
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < 0:
        return b"D" + _DECIMAL.pack(-exponent, int(value * (Decimal(10) ** -exponent)))
    return b"D" + _DECIMAL.pack(0, int(value))  # per spec the scale octet is unsigned


def encode_field_table(table: dict[Any, Any] | None) -> bytes:
    """A field table with its 4-byte size, as pika.data.encode_table writes it."""
    if not table:
        return b"\x00\x00\x00\x00"
    out: list[bytes] = []
    append = out.append
    for key, value in table.items():
        append(_SHORT_CACHE.get(key) or short_string(key))
        if type(value) is str:  # the common case, inline
            raw = value.encode("UTF-8")
            append(b"S" + _I.pack(len(raw)))
            append(raw)
        else:
            encode_field(value, out)
    joined = b"".join(out)
    return _I.pack(len(joined)) + joined


def encode_entries(fields: dict[str, Any]) -> bytes:
    """Table entries (name + value each) as encode_field_table writes them, without the table's size: the
    parts of a table that is put together elsewhere (replay's provenance header, dlxtool.ops.provenance)."""
    return encode_field_table(fields)[4:]


class StringEntry:
    """One table entry `name` whose value is a long string, for values given as bytes (ids, fingerprints: text
    known to be ASCII), encoded as encode_field writes a str; and read back from where it was written."""

    __slots__ = ("name", "prefix")

    def __init__(self, name: str) -> None:
        self.name = name
        self.prefix = short_string(name) + b"S"

    def __call__(self, value: bytes) -> bytes:
        return self.prefix + _I.pack(len(value)) + value

    def read(self, buf: bytes, at: int) -> tuple[bytes, int] | None:
        """(value, offset after it) of this entry at buf[at:], or None where another entry (or none) is there."""
        start = at + len(self.prefix)
        if buf[at:start] != self.prefix or len(buf) < start + 4:
            return None
        end = start + 4 + _unpack_I(buf, start)[0]
        return (buf[start + 4:end], end) if end <= len(buf) else None


def table_entry(name: str, entries: bytes) -> bytes:
    """One table entry `name` whose value is a table of these encoded `entries` (encode_entries)."""
    return short_string(name) + b"F" + _I.pack(len(entries)) + entries


def encode_field_value(value: Any) -> bytes:
    """One AMQP field value (kind byte + payload) as a header table holds it; a tuple as an array."""
    out: list[bytes] = []
    encode_field(list(value) if isinstance(value, tuple) else value, out)
    return b"".join(out)


def text_or_bytes(raw: bytes) -> Any:
    """str if the bytes are UTF-8, else the bytes (pika's rule for short and long strings)."""
    try:
        return raw.decode("utf8")
    except UnicodeDecodeError:
        return raw


def decode_field(buf: bytes, o: int) -> tuple[Any, int]:
    """(value, offset after it) of the field value at buf[o] (pika.data.decode_value's types and quirks, but
    RawValue and Long: see the module docstring). FieldError for an unknown kind; IndexError or struct.error
    where the bytes end too soon (a string cut short is cut short, as pika reads it)."""
    kind = buf[o]
    o += 1
    if kind == 83:  # S long string: str if UTF-8, else bytes
        end = o + 4 + _unpack_I(buf, o)[0]
        return text_or_bytes(buf[o + 4:end]), end
    if kind == 108:  # l: signed 64-bit (L, the same, is kept raw below)
        return Long(_unpack_q(buf, o)[0]), o + 8
    if kind == 84:  # T timestamp (datetimes are immutable: equal seconds can share one)
        seconds = _unpack_Q(buf, o)[0]
        value = _STAMP_CACHE.get(seconds)
        if value is None:
            try:
                value = datetime.fromtimestamp(seconds, _utc)
            except (OverflowError, ValueError, OSError):  # beyond year 9999 (RabbitMQ accepts 2^62): as is
                return RawValue(bytes(buf[o - 1:o + 8])), o + 8
            if len(_STAMP_CACHE) >= 1024:
                _STAMP_CACHE.clear()
            _STAMP_CACHE[seconds] = value
        return value, o + 8
    if kind == 70:  # F table
        return decode_field_table(buf, o)
    if kind == 65:  # A array
        n = _unpack_I(buf, o)[0]
        o += 4
        end = o + n
        items = []
        while o < end:
            item, o = decode_field(buf, o)
            items.append(item)
        return items, o
    if kind == 73:  # I signed 32-bit
        return _unpack_i(buf, o)[0], o + 4
    if kind == 116:  # t bool
        return bool(buf[o]), o + 1
    if kind == 86:  # V void
        return None, o
    if kind == 120:  # x byte array
        n = _unpack_I(buf, o)[0]
        o += 4
        return buf[o:o + n], o + n
    # The rare kinds b B s u U i L f d: pika would change them (floats truncated, widths or kind lost), so
    # they stay their exact bytes; D too unless pika's Decimal writes it back identically.
    raw = raw_fixed(buf, o - 1)
    if raw is not None:
        if kind == 68:  # D
            scale, digits = _DECIMAL.unpack_from(buf, o)
            value = Decimal(digits) * (Decimal(10) ** -scale)  # as pika decodes it
            if _decimal(value) == raw[0].encoded:
                return value, raw[1]
        return raw
    raise FieldError(f"unknown AMQP field kind {bytes((kind,))!r}")


def decode_field_table(buf: bytes, o: int) -> tuple[dict[Any, Any], int]:
    """(table, offset after it) from the table's 4-byte size at buf[o], as pika.data.decode_table."""
    size = _unpack_I(buf, o)[0]
    o += 4
    limit = o + size
    result: dict[Any, Any] = {}
    while o < limit:
        n = buf[o]
        o += 1
        raw = buf[o:o + n]
        o += n
        key: Any = _KEY_CACHE.get(raw)
        if key is None:
            try:
                key = raw.decode("utf8")
            except UnicodeDecodeError:
                key = raw
            else:
                if len(_KEY_CACHE) >= _SHORT_CACHE_MAX:
                    _KEY_CACHE.clear()
                _KEY_CACHE[raw] = key
        kind = buf[o]
        if kind == 83:  # S, inline: the most common value
            n = _unpack_I(buf, o + 1)[0]
            o += 5
            raw = buf[o:o + n]
            o += n
            try:
                result[key] = raw.decode("utf8")
            except UnicodeDecodeError:
                result[key] = raw
        elif kind == 108:  # l, inline: RabbitMQ's integers (x-death count)
            result[key] = Long(_unpack_q(buf, o + 1)[0])
            o += 9
        else:
            result[key], o = decode_field(buf, o)
    return result, o


def decode_field_value(data: bytes) -> Any:
    """The one AMQP field value that is all of `data` (the rare kinds stay RawValue), or ValueError.
    Deeply nested values need allow_deep_headers() first."""
    try:
        value, end = decode_field(data, 0)
    except Exception as exc:  # noqa: BLE001 - FieldError, IndexError, struct.error …: not one value
        raise ValueError(f"not an AMQP field value ({type(exc).__name__})") from None
    if end != len(data):
        raise ValueError("trailing bytes")
    return value
