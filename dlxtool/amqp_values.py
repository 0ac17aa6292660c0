"""Header values that Python (and pika) cannot carry faithfully, kept as their AMQP bytes.

pika 1.4 decodes an AMQP double 1.1 as the integer 1 (and re-encodes it as a long), a float32 1.5 as 1,
the small integer kinds b/B/u/s/U and i as plain ints (re-encoded as I or l), a signed 64-bit L as the
same long as l (re-encoded as l), a decimal with a scale of 2 and value 100 as Decimal("1.00")
re-encoded as D(0, 1); a timestamp beyond year 9999 (RabbitMQ accepts 2^62) does not decode at all.
dlxtool.broker.wire.frames decodes those as a RawValue instead: its exact bytes (kind byte + payload),
written back verbatim by frames' encoder and stored in records as {"$amqp": base64, "$value": readable}
(dlxtool.record). A model-level module (no pika): the broker layer, record, deaths and selection all
import it.

U is the AMQP 0-9-1 spec's short-int (signed 16-bit, as pika reads it; RabbitMQ spells it s). RabbitMQ's
table parser has no U: a publish carrying one makes it close the whole connection (541 INTERNAL_ERROR,
seen on 3.10.8), so no message in RabbitMQ holds one. It can only come from a record file, and `load`
refuses such a record before publishing anything (`rabbitmq_refuses`). L (signed 64-bit) is accepted
and delivered as sent."""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass
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
