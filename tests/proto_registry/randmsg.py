"""Seeded random messages of any descriptor, and wire-level rewrites a non-standard producer makes.

Values lean on the edges a canonical encoder treats specially: defaults (0, "", b"", 0.0 and -0.0),
negative int32 (10-byte varints), values past 32 bits, unknown values of open enums, empty
sub-messages and maps, groups.
"""

from __future__ import annotations

import random

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from proto_registry import wire

F = FieldDescriptor
_INT = {F.TYPE_INT32: 31, F.TYPE_SINT32: 31, F.TYPE_SFIXED32: 31, F.TYPE_INT64: 63, F.TYPE_SINT64: 63}
_INT.update({F.TYPE_SFIXED64: 63})
_UINT = {F.TYPE_UINT32: 32, F.TYPE_FIXED32: 32, F.TYPE_UINT64: 64, F.TYPE_FIXED64: 64}


def fill(msg: Message, rng: random.Random, depth: int = 0, max_depth: int = 3, fill_rate: float = 0.6) -> None:
    for f in msg.DESCRIPTOR.fields:
        if not f.is_required and rng.random() > fill_rate:
            continue
        nested = f.type in (F.TYPE_MESSAGE, F.TYPE_GROUP)
        if nested and depth >= max_depth:
            continue
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            _fill_map(msg, f, rng, depth, max_depth)
        elif f.is_repeated:
            for _ in range(rng.randint(0, 3)):
                if nested:
                    fill(getattr(msg, f.name).add(), rng, depth + 1, max_depth)
                else:
                    getattr(msg, f.name).append(scalar(f, rng))
        elif nested:
            sub = getattr(msg, f.name)
            sub.SetInParent()
            fill(sub, rng, depth + 1, max_depth)
        else:
            setattr(msg, f.name, scalar(f, rng))


def _fill_map(msg: Message, f: FieldDescriptor, rng: random.Random, depth: int, max_depth: int) -> None:
    key_f = f.message_type.fields_by_name["key"]
    val_f = f.message_type.fields_by_name["value"]
    container = getattr(msg, f.name)
    for _ in range(rng.randint(0, 2)):
        k = scalar(key_f, rng)
        if val_f.type == F.TYPE_MESSAGE:
            if depth < max_depth:
                fill(container[k], rng, depth + 1, max_depth)
        else:
            container[k] = scalar(val_f, rng)


def scalar(f: FieldDescriptor, rng: random.Random) -> object:
    t = f.type
    default = rng.random() < 0.15
    if t == F.TYPE_STRING:
        return "" if default else rng.choice(["a", "order-17", "Zürich", "日本", "x" * rng.randint(1, 40)])
    if t == F.TYPE_BYTES:
        return b"" if default else rng.randbytes(rng.randint(1, 12))
    if t == F.TYPE_BOOL:
        return not default and rng.random() < 0.7
    if t == F.TYPE_ENUM:
        values = [v.number for v in f.enum_type.values]
        if not f.enum_type.is_closed and rng.random() < 0.1:
            return rng.randint(-5, 1000)  # open enum: any int32
        return values[0] if default else rng.choice(values)
    if t in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
        return rng.choice([0.0, -0.0, 1.5, -2.25, 1e10]) if not default else 0.0
    if default:
        return 0
    if t in _INT:
        bits = _INT[t]
        return rng.choice([-1, 1, rng.randint(-(1 << bits), (1 << bits) - 1), rng.randint(-300, 300)])
    bits = _UINT[t]
    return rng.choice([1, 127, 128, rng.randint(0, (1 << bits) - 1)])


# -- non-standard producers: rewrites of a canonical payload ----------------------------------------
def rewrites(data: bytes, rng: random.Random, descriptor: Descriptor | None = None) -> list[bytes]:
    """Variants of ``data`` that a parser may accept but protobuf would not write: at the top level,
    and, given the payload's ``descriptor``, inside one sub-message (or group, or map entry) at each
    nesting depth, picked at random."""
    out = _rewrites_here(data, rng)
    if descriptor is not None:
        out.extend(_nested_rewrites(data, rng, descriptor))
    return [d for d in out if d != data]


def _nested_rewrites(data: bytes, rng: random.Random, descriptor: Descriptor) -> list[bytes]:
    """The rewrites of one randomly chosen sub-message, recursively, spliced back into ``data``
    (a length-delimited sub-message gets its new length; a group's end tag stays as it is)."""
    fields = wire.scan(data) or []
    subs = []
    for f in fields:
        fd = descriptor.fields_by_number.get(f[0] >> 3)
        if fd is not None and fd.message_type is not None and f[0] & 7 in (wire.LEN, wire.SGROUP):
            subs.append((f, fd.message_type))
    if not subs:
        return []
    (tag, _, start, vstart, vend, end), sub_descriptor = rng.choice(subs)
    inner = data[vstart:vend]
    variants = _rewrites_here(inner, rng) + _nested_rewrites(inner, rng, sub_descriptor)
    if tag & 7 == wire.SGROUP:
        return [data[:vstart] + v + data[vend:] for v in variants]
    head = data[start : start + wire.varint_size(tag)]
    return [data[:start] + head + _varint(len(v)) + v + data[end:] for v in variants]


def _rewrites_here(data: bytes, rng: random.Random) -> list[bytes]:
    """Rewrites of the fields of ``data`` itself (not of its sub-messages)."""
    fields = wire.scan(data)
    if not fields:
        return []
    chunks = [data[f[2] : f[5]] for f in fields]
    out = []
    if len(chunks) > 1:  # two fields swapped
        i = rng.randrange(len(chunks) - 1)
        swapped = chunks[:i] + [chunks[i + 1], chunks[i]] + chunks[i + 2 :]
        out.append(b"".join(swapped))
    i = rng.randrange(len(chunks))  # one field written twice
    out.append(b"".join(chunks[: i + 1] + [chunks[i]] + chunks[i + 1 :]))
    tag, value, start, vstart, _, end = fields[i]
    if tag & 7 == wire.VARINT:  # the same field with its default value, or a padded varint
        out.append(b"".join(chunks[:i] + [data[start:vstart] + b"\x00"] + chunks[i + 1 :]))
        padded = data[start:vstart] + _long_varint(value)
        out.append(b"".join(chunks[:i] + [padded] + chunks[i + 1 :]))
        if value < 1 << 32:
            out.append(b"".join(chunks[:i] + [data[start:vstart] + _long_varint(value | 1 << 40)] + chunks[i + 1 :]))
    if tag & 7 == wire.LEN:  # the same field empty
        head = data[start : start + wire.varint_size(tag)]
        out.append(b"".join(chunks[:i] + [head + b"\x00"] + chunks[i + 1 :]))
        values = wire.packed_varints(data, vstart, fields[i][4])
        if values:  # read as packed varints: the first one padded
            body = _long_varint(values[0]) + data[vstart + wire.varint_size(values[0]) : fields[i][4]]
            out.append(b"".join(chunks[:i] + [head + _varint(len(body)) + body] + chunks[i + 1 :]))
    return out


def _long_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        out.append(b | 0x80)
        if not value:
            break
    out.append(0)  # one byte more than needed
    return bytes(out)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
