"""Schema-less decoding, like ``protoc --decode_raw``: field numbers, wire types, guessed values.

Length-delimited values are shown as a sub-message when they scan as one, else as text when they
are printable UTF-8, else as hex. The result is plain JSON-ready data.
"""

from __future__ import annotations

import struct
from typing import Any

from proto_registry.wire import I32, I64, LEN, SGROUP, VARINT, Field, as_signed64, scan, zigzag

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
        n = item["field"]
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
        elif item["wire_type"] == "i32":
            lines.append(f"{pad}{n}: 0x{item['value']:08x}")
        elif item["wire_type"] == "i64":
            lines.append(f"{pad}{n}: 0x{item['value']:016x}")
        else:
            lines.append(f"{pad}{n}: {item.get('value', item.get('group'))}")
    return "\n".join(line for line in lines if line)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
