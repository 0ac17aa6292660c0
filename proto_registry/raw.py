"""Schema-less decoding, like ``protoc --decode_raw``: field numbers, wire types, guessed values.

Length-delimited values are shown as a sub-message when they scan as one, else as text when they
are printable UTF-8, else as hex. The result is plain JSON-ready data.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from proto_registry.wire import (
    I32,
    I64,
    LEN,
    SGROUP,
    TRUNCATED,
    VARINT,
    Field,
    as_signed64,
    read_varint,
    scan,
    scan_prefix,
    zigzag,
)

MAX_DEPTH = 32


def decode_raw(data: bytes, max_depth: int = MAX_DEPTH) -> list[dict[str, Any]] | None:
    """Decode ``data`` without a schema; ``None`` when it is not protobuf wire format at all."""
    return _decode(data, 0, len(data), max_depth)


def _decode(data: bytes, start: int, end: int, depth: int) -> list[dict[str, Any]] | None:
    fields = scan(data, start, end)
    if fields is None:
        return None
    out: list[dict[str, Any]] = []
    for t in fields:
        f = Field._make(t)
        item: dict[str, Any] = {"field": f.number, "wire_type": _WT_NAMES.get(f.wire_type, str(f.wire_type))}
        if f.wire_type == VARINT:
            item["value"] = f.value
            signed = as_signed64(f.value)
            if signed != f.value:
                item["signed"] = signed
            if f.value > 1:
                item["zigzag"] = zigzag(f.value)
        elif f.wire_type == I64:
            raw = data[f.vstart : f.vend]
            item["value"] = int.from_bytes(raw, "little")
            item["double"] = struct.unpack("<d", raw)[0]
        elif f.wire_type == I32:
            raw = data[f.vstart : f.vend]
            item["value"] = int.from_bytes(raw, "little")
            item["float"] = struct.unpack("<f", raw)[0]
        elif f.wire_type == LEN:
            item.update(_guess_len(data, f.vstart, f.vend, depth))
        elif f.wire_type == SGROUP:
            sub = _decode(data, f.vstart, f.vend, depth - 1) if depth > 0 else None
            item["group"] = sub if sub is not None else data[f.vstart : f.vend].hex()
        out.append(item)
    return out


def _guess_len(data: bytes, start: int, end: int, depth: int) -> dict[str, Any]:
    raw = data[start:end]
    text: str | None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    printable = text is not None and all(c.isprintable() or c in "\t\r\n" for c in text)
    if raw and depth > 0 and not (printable and _looks_like_words(text or "")):
        sub = _decode(data, start, end, depth - 1)
        if sub is not None:
            return {"message": sub}
    if printable:
        return {"string": text}
    return {"bytes": raw.hex()}


def _looks_like_words(text: str) -> bool:
    """Text that happens to scan as a message is still text when it reads like text."""
    return len(text) >= 2 and sum(c.isalnum() or c in " -_.:/@,'" for c in text) >= 0.8 * len(text)


_WT_NAMES = {VARINT: "varint", I64: "i64", LEN: "len", SGROUP: "group", I32: "i32"}


def format_raw(fields: list[dict[str, Any]], indent: int = 0) -> str:
    """Text rendering close to ``protoc --decode_raw``."""
    pad = "  " * indent
    lines: list[str] = []
    for item in fields:
        if item.get("cut"):
            named = f" (field {item['name']})" if "name" in item else ""
            lines.append(f"{pad}# cut short here{named}" + (
                f": {item['arrived']:,} of {item['length']:,} bytes arrived" if "length" in item else ""))
        n = item.get("field", "?")
        if "message" in item:
            lines.append(f"{pad}{n} {{")
            lines.append(format_raw(item["message"], indent + 1))
            lines.append(f"{pad}}}")
        elif "group" in item and isinstance(item["group"], list):
            lines.append(f"{pad}{n} {{")
            lines.append(format_raw(item["group"], indent + 1))
            lines.append(f"{pad}}}")
        elif "string" in item:
            lines.append(f'{pad}{n}: "{_escape(item["string"])}"')
        elif "bytes" in item:
            lines.append(f"{pad}{n}: 0x{item['bytes']}")
        elif item.get("wire_type") == "i32" and "value" in item:
            lines.append(f"{pad}{n}: 0x{item['value']:08x}")
        elif item.get("wire_type") == "i64" and "value" in item:
            lines.append(f"{pad}{n}: 0x{item['value']:016x}")
        elif "value" in item or "group" in item:
            lines.append(f"{pad}{n}: {item.get('value', item.get('group'))}")
        else:  # a field cut before its value arrived
            lines.append(f"{pad}{n}: …")
    return "\n".join(line for line in lines if line)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# -- payloads that do not scan whole --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Partial:
    """A payload that stops being protobuf before its end: `kind` truncated (the bytes end inside a field:
    cut short) or malformed (bytes no writer produces), at byte `offset` of `size`; `fields` are the
    top-level fields before it, then (truncated) the field the cut went through, marked ``"cut": true``
    with what arrived of it."""

    kind: str
    offset: int
    size: int
    reason: str
    fields: list[dict[str, Any]]

    @property
    def prefix_fields(self) -> int:
        """How many whole top-level fields come before the stop."""
        return sum(1 for f in self.fields if not f.get("cut"))


def decode_partial(data: bytes, max_depth: int = MAX_DEPTH) -> Partial | None:
    """Where and why ``data`` stops being protobuf, with what it holds up to there; ``None`` when it
    scans whole (then :func:`decode_raw` shows it)."""
    _fields, stop = scan_prefix(data)
    if stop is None:
        return None
    fields = _decode(data, 0, stop.offset, max_depth) or []
    if stop.kind == TRUNCATED:
        fields.append(_cut_field(data, stop.offset, max_depth))
    return Partial(stop.kind, stop.offset, len(data), stop.reason, fields)


def _cut_field(data: bytes, pos: int, depth: int) -> dict[str, Any]:
    """What arrived of the field a cut went through: its number and wire type when its tag arrived whole,
    and for a length-delimited one the bytes that did (read as a message cut short, or text, or hex)."""
    end = len(data)
    try:
        tag, vstart = read_varint(data, pos, end)
    except ValueError:
        return {"cut": True, "bytes": data[pos:].hex()}
    item: dict[str, Any] = {"field": tag >> 3, "wire_type": _WT_NAMES.get(tag & 7, str(tag & 7)), "cut": True}
    if tag & 7 == LEN:
        try:
            length, vstart = read_varint(data, vstart, end)
        except ValueError:
            return item
        item["length"] = length
        item["arrived"] = end - vstart
        item.update(_guess_cut(data[vstart:], depth))
    elif tag & 7 == SGROUP and depth > 0:
        inner = decode_partial(data[vstart:], depth - 1)
        item["group"] = inner.fields if inner is not None else []
    elif vstart < end:
        item["bytes"] = data[vstart:].hex()
    return item


def _guess_cut(content: bytes, depth: int) -> dict[str, Any]:
    """The first bytes of a length-delimited value: a sub-message cut short, text cut short, or bytes."""
    text = _text_prefix(content)
    printable = text is not None and all(c.isprintable() or c in "\t\r\n" for c in text)
    if content and depth > 0 and not (printable and _looks_like_words(text or "")):
        inner = decode_partial(content, depth - 1)
        if inner is not None and inner.kind == TRUNCATED and inner.prefix_fields:
            return {"message": inner.fields}
        whole = _decode(content, 0, len(content), depth - 1)  # a cut right after a whole sub-field
        if whole:
            return {"message": whole}
    if printable and text:
        return {"string": text}
    return {"bytes": content.hex()} if content else {}


def _text_prefix(content: bytes) -> str | None:
    """`content` as UTF-8, a character the cut split at its end left out."""
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data" and exc.start >= len(content) - 3:
            try:
                return content[: exc.start].decode("utf-8")
            except UnicodeDecodeError:
                return None
        return None
