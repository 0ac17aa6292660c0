"""Schema-less scan of the protobuf wire format.

One pass over the bytes turns a payload into a list of :data:`Field` tuples. Nothing here knows
about types: :mod:`proto_registry.index` and :mod:`proto_registry.score` interpret the scan.
"""

from __future__ import annotations

from typing import Any, NamedTuple

VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5
MAX_FIELD_NUMBER = (1 << 29) - 1
MAX_GROUP_DEPTH = 64


class Field(NamedTuple):
    """One field occurrence: ``tag`` is ``number << 3 | wire_type``. (The scanner builds plain
    tuples of this shape for speed; index them with the TAG/VALUE/... constants or wrap with
    ``Field._make``.)

    ``value`` is the integer of a varint (0 for the other wire types); ``start``..``end`` is the
    whole occurrence including its tag (for coverage); ``vstart``..``vend`` is the value's bytes
    (the content of a length-delimited field or of a group).
    """

    tag: int
    value: int
    start: int
    vstart: int
    vend: int
    end: int

    @property
    def number(self) -> int:
        return self.tag >> 3

    @property
    def wire_type(self) -> int:
        return self.tag & 7


TAG, VALUE, START, VSTART, VEND, END = range(6)


def read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Return ``(value, new_pos)``; raise ``ValueError`` on truncation or over-long varints."""
    b = data[pos] if pos < end else -1
    if 0 <= b < 0x80:
        return b, pos + 1
    result = 0
    shift = 0
    while True:
        if pos >= end or shift > 63:
            raise ValueError("bad varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def scan(data: bytes, start: int = 0, end: int | None = None) -> list[tuple[int, int, int, int, int, int]] | None:
    """Scan ``data[start:end]`` as one message; ``None`` when it is not well-formed wire format."""
    if end is None:
        end = len(data)
    try:
        fields, pos = _scan(data, start, end, 0, 0)
    except (ValueError, IndexError):
        return None
    return fields if pos == end else None


def _scan(data: bytes, pos: int, end: int, group_tag: int, depth: int) -> tuple[list[Any], int]:
    # The hot loop of identification: varints are read inline (no call per value), one-byte ones
    # first. Same bounds as read_varint: at most 10 bytes, each one checked against ``end``.
    fields: list[Any] = []
    append = fields.append
    while pos < end:
        start = pos
        tag = data[pos]
        pos += 1
        if tag >= 0x80:
            tag, pos = read_varint(data, start, end)
        wt = tag & 7
        if tag < 8 or tag >> 3 > MAX_FIELD_NUMBER:
            raise ValueError("bad field number")
        if wt == VARINT:
            if pos >= end:
                raise ValueError("bad varint")
            b = data[pos]
            if b < 0x80:
                append((tag, b, start, pos, pos + 1, pos + 1))
                pos += 1
                continue
            vstart = pos
            value = b & 0x7F
            shift = 7
            pos += 1
            while True:
                if pos >= end or shift > 63:
                    raise ValueError("bad varint")
                b = data[pos]
                pos += 1
                value |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
            append((tag, value, start, vstart, pos, pos))
        elif wt == LEN:
            if pos < end and data[pos] < 0x80:
                vstart = pos + 1
                pos = vstart + data[pos]
            else:
                length, vstart = read_varint(data, pos, end)
                pos = vstart + length
            if pos > end:
                raise ValueError("truncated")
            append((tag, 0, start, vstart, pos, pos))
        elif wt == I32:
            if pos + 4 > end:
                raise ValueError("truncated")
            append((tag, 0, start, pos, pos + 4, pos + 4))
            pos += 4
        elif wt == I64:
            if pos + 8 > end:
                raise ValueError("truncated")
            append((tag, 0, start, pos, pos + 8, pos + 8))
            pos += 8
        elif wt == SGROUP:
            if depth >= MAX_GROUP_DEPTH:
                raise ValueError("groups nested too deep")
            vstart = pos
            _, pos = _scan(data, pos, end, tag, depth + 1)
            # pos is just past the matching end-group tag; the content ends before that tag.
            vend = pos - varint_size(((tag >> 3) << 3) | EGROUP)
            append((tag, 0, start, vstart, vend, pos))
        elif wt == EGROUP:
            if group_tag and tag >> 3 == group_tag >> 3:
                return fields, pos
            raise ValueError("unexpected end group")
        else:
            raise ValueError("bad wire type")
    if group_tag:
        raise ValueError("unterminated group")
    return fields, pos


def varint_size(value: int) -> int:
    """Bytes in the shortest varint encoding of ``value``."""
    n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


def packed_varints(data: bytes, start: int, end: int) -> list[int] | None:
    """The varints of ``data[start:end]``, None when it is not a run of whole varints (read inline:
    the canonical check reads every packed run)."""
    out: list[int] = []
    append = out.append
    pos = start
    while pos < end:
        b = data[pos]
        pos += 1
        if b < 0x80:
            append(b)
            continue
        value = b & 0x7F
        shift = 7
        while True:
            if pos >= end or shift > 63:
                return None
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
        append(value)
    return out


def zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def as_signed64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


# -- where a payload stops being protobuf ------------------------------------------------------------

TRUNCATED = "truncated"  # the bytes end inside a field: the payload was cut short
MALFORMED = "malformed"  # a byte sequence no protobuf writer produces (bad wire type, field 0, ...)
MAX_VARINT_BYTES = 10


class Stop(NamedTuple):
    """Why and where a scan of a payload stopped before its end."""

    kind: str  # TRUNCATED | MALFORMED
    offset: int  # where the field that could not be read starts
    reason: str


class _Cut(Exception):
    """The data ends inside the field being read."""


def scan_prefix(data: bytes) -> tuple[list[tuple[int, int, int, int, int, int]], Stop | None]:
    """The top-level fields of ``data`` up to the first one that cannot be read, and why it cannot
    (``None``: the whole payload scans). A payload cut short scans fine up to the field the cut went
    through: that field is reported as TRUNCATED at its offset; bytes that no writer produces, as
    MALFORMED there."""
    fields: list[tuple[int, int, int, int, int, int]] = []
    pos, end = 0, len(data)
    while pos < end:
        try:
            field, next_pos = _one_field(data, pos, end)
        except _Cut as exc:
            return fields, Stop(TRUNCATED, pos, str(exc))
        except (ValueError, IndexError) as exc:
            return fields, Stop(MALFORMED, pos, str(exc))
        fields.append(field)
        pos = next_pos
    return fields, None


def _varint(data: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    """Like read_varint, but telling a varint cut by the end of the data from an over-long one."""
    result = shift = 0
    start = pos
    while True:
        if pos >= end:
            raise _Cut(f"{what} cut short")
        if pos - start >= MAX_VARINT_BYTES:
            raise ValueError(f"{what} longer than {MAX_VARINT_BYTES} bytes")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _one_field(data: bytes, pos: int, end: int) -> tuple[tuple[int, int, int, int, int, int], int]:
    start = pos
    tag, pos = _varint(data, pos, end, "tag")
    number, wt = tag >> 3, tag & 7
    if number == 0 or number > MAX_FIELD_NUMBER:
        raise ValueError(f"field number {number} is out of range")
    if wt == VARINT:
        value, vend = _varint(data, pos, end, f"field {number} (varint)")
        return (tag, value, start, pos, vend, vend), vend
    if wt == LEN:
        length, vstart = _varint(data, pos, end, f"field {number} (len): its length")
        if vstart + length > end:
            raise _Cut(f"field {number} (len) declares {length:,} bytes, {end - vstart:,} left")
        return (tag, 0, start, vstart, vstart + length, vstart + length), vstart + length
    if wt in (I32, I64):
        size = 4 if wt == I32 else 8
        if pos + size > end:
            raise _Cut(f"field {number} (i{size * 8}) needs {size} bytes, {end - pos} left")
        return (tag, 0, start, pos, pos + size, pos + size), pos + size
    if wt == SGROUP:
        try:
            _, after = _scan(data, pos, end, tag, 1)
        except ValueError as exc:
            if str(exc) in ("unterminated group", "truncated"):
                raise _Cut(f"group {number} cut short") from exc
            raise
        vend = after - varint_size((number << 3) | EGROUP)
        return (tag, 0, start, pos, vend, after), after
    if wt == EGROUP:
        raise ValueError(f"end of group {number} without its start")
    raise ValueError(f"wire type {wt} does not exist")
