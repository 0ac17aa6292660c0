"""Output: the one JSON writer, tables, and neutralising what a terminal must not interpret.

Data goes to stdout, everything else (status, warnings, progress) to stderr; the CLI passes the
streams in so tests can capture them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, Any

import orjson

FORMATS = ("table", "json", "jsonl")

# C0/C1 controls and DEL; ESC starts every terminal escape sequence, so escaping it disarms them all.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ALL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _orjson_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


def dumps(obj: Any, *, pretty: bool = False) -> bytes:
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if pretty else 0)
    return orjson.dumps(obj, default=_orjson_default, option=option)


def write_json(obj: Any, out: IO[str], *, fmt: str = "json") -> None:
    """All JSON output goes through here: one pretty document (json) or one line per item (jsonl)."""
    if fmt == "jsonl":
        items = obj if isinstance(obj, list) else [obj]
        for item in items:
            out.write(dumps(item).decode() + "\n")
    else:
        out.write(dumps(obj, pretty=True).decode() + "\n")
    out.flush()


def write_json_line(obj: Any, out: IO[str]) -> None:
    """One JSON Lines item, flushed: for streaming commands (decode, tail -f)."""
    out.write(dumps(obj).decode() + "\n")
    out.flush()


def safe_text(value: Any, *, keep_newlines: bool = False) -> str:
    """Make any text safe to print on a terminal: controls become visible escapes."""
    text = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes | bytearray) else str(value)
    pattern = _CONTROL if keep_newlines else _CONTROL_ALL
    return pattern.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def preview(body: bytes, width: int = 60) -> str:
    """A one-line body preview: text if it is printable UTF-8, else hex."""
    sample = body[: width * 4]
    try:
        text = sample.decode("utf-8")
        printable = sum(ch.isprintable() or ch in "\n\r\t" for ch in text) >= 0.95 * max(len(text), 1)
    except UnicodeDecodeError:
        printable = False
    if printable:
        out = safe_text(text.replace("\n", " ").replace("\r", " ").replace("\t", " "))
    else:
        out = "hex:" + sample[:width // 2].hex()
    return truncate(out, width) if len(body) <= len(sample) else truncate(out, width - 1) + "…"


def truncate(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def write_table(rows: Iterable[Sequence[Any] | Mapping[str, Any]], headers: Sequence[str],
                out: IO[str], *, empty: str | None = None,
                styles: Mapping[int, Callable[[str], str]] | None = None) -> None:
    """A plain table; `styles` maps a column index to a function colouring that column's (already
    terminal-safe) cells. tabulate measures widths without the escape codes."""
    from tabulate import tabulate

    rows = list(rows)
    if not rows and empty is not None:
        out.write(empty + "\n")
        return
    styles = styles or {}
    cleaned = [
        [_cell(c, styles.get(i)) for i, c in enumerate(r.values() if isinstance(r, Mapping) else r)]
        for r in rows
    ]
    out.write(tabulate(cleaned, headers=list(headers), tablefmt="simple", disable_numparse=True) + "\n")
    out.flush()


def _cell(value: Any, style: Callable[[str], str] | None) -> str:
    text = safe_text(value) if value is not None else ""
    return style(text) if style and text else text


def write_kv(pairs: Iterable[tuple[str, Any]], out: IO[str]) -> None:
    """Aligned 'key: value' lines for one object (details views)."""
    pairs = list(pairs)
    width = max((len(k) for k, _ in pairs), default=0)
    for key, value in pairs:
        out.write(f"{key + ':':<{width + 1}} {safe_text(value)}\n")
