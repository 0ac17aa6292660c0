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
# Also what reorders or hides text without being a control: bidi overrides and isolates (U+202A-E,
# U+2066-9, "Trojan source"), zero-width characters, line/paragraph separators, BOM; and lone
# surrogates, which a UTF-8 terminal stream refuses to encode at all.
_INVISIBLE = "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff"
_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{_INVISIBLE}]")
_CONTROL_ALL = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{_INVISIBLE}]")


def _orjson_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)


# The same characters as UTF-8 bytes, plus DEL and C1 (JSON escapes C0 only; orjson writes the rest
# raw). Lead bytes never occur inside another character, so a match is always a whole character, and in
# JSON text these can only be inside strings: \uXXXX is an exact substitute. Besides keeping JSON on a
# terminal safe, it keeps U+2028/9 from splitting JSON Lines for line readers that honour them.
_JSON_UNSAFE = re.compile(
    rb"\x7f|\xc2[\x80-\x9f]|\xd8\x9c|\xe2\x80[\x8b-\x8f\xa8-\xae]|\xe2\x81[\xa0-\xa9]|\xef\xbb\xbf")


def dumps(obj: Any, *, pretty: bool = False) -> bytes:
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if pretty else 0)
    try:
        data = orjson.dumps(obj, default=_orjson_default, option=option)
    except orjson.JSONEncodeError as exc:
        if "64-bit" not in str(exc):
            raise
        # An integer past 64 bits (a hand-written header in a file, a hostile count): the standard
        # library writes any integer; slower, and only ever used for such input.
        import json

        data = json.dumps(obj, default=_orjson_default, ensure_ascii=False, indent=2 if pretty else None,
                          separators=None if pretty else (",", ":")).encode("utf-8", "surrogatepass")
    # Every alternative but DEL starts with a byte >= 0x80: ASCII output without DEL (most of it) needs no search.
    if (not data.isascii() or b"\x7f" in data) and _JSON_UNSAFE.search(data):
        data = _JSON_UNSAFE.sub(lambda m: b"\\u%04x" % ord(m.group().decode()), data)
    return data


def write_json(obj: Any, out: IO[str], *, fmt: str = "json") -> None:
    """All JSON output goes through here: one pretty document (json) or one line per item (jsonl)."""
    if fmt == "jsonl":
        items = obj if isinstance(obj, list) else [obj]
        for item in items:
            _write_bytes(dumps(item) + b"\n", out)
    else:
        _write_bytes(dumps(obj, pretty=True) + b"\n", out)
    out.flush()


def _write_bytes(data: bytes, out: IO[str]) -> None:
    """orjson's bytes straight to the byte stream under `out` when there is one: no decoded copy of
    what may be hundreds of MB of base64 bodies."""
    buffer = getattr(out, "buffer", None)
    if buffer is None:
        out.write(data.decode())
        return
    out.flush()
    buffer.write(data)


def write_json_line(obj: Any, out: IO[str]) -> None:
    """One JSON Lines item, flushed: for streaming commands (decode, tail -f)."""
    _write_bytes(dumps(obj) + b"\n", out)
    out.flush()


def safe_text(value: Any, *, keep_newlines: bool = False) -> str:
    """Make any text safe to print on a terminal: controls become visible escapes."""
    text = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes | bytearray) else str(value)
    if text.isascii() and text.isprintable():  # nothing to escape (the common case: a table of 10,000 queues)
        return text
    pattern = _CONTROL if keep_newlines else _CONTROL_ALL
    return pattern.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def preview(body: bytes, width: int = 60) -> str:
    """A one-line body preview: text if it is printable UTF-8, else hex."""
    sample = body[: width * 4]
    text = ""
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


REASON_WIDTH = 100  # a reason in a table: its first clause; the whole text with -v and in JSON
_CLAUSE_ENDS = ("; ", " — ", " (", ": ", ", ")  # where a reason's first sentence may end, best first


def shorten(text: str, width: int | None = REASON_WIDTH) -> str:
    """A reason for a table cell: whole when it fits (or `width` is None: -v), else cut where a clause ends
    (before "; ", " (", ": " …), else at a word, with "…"."""
    if width is None or len(text) <= width:
        return text
    for end in _CLAUSE_ENDS:  # a clause that keeps most of the room
        cut = text.rfind(end, width * 2 // 3, width - 1)
        if cut > 0:
            return text[:cut].rstrip(" ,;:") + "…"
    cut = text.rfind(" ", width // 3, width - 1)
    return text[:cut if cut > 0 else width - 1] + "…"


def write_table(rows: Iterable[Sequence[Any] | Mapping[str, Any]], headers: Sequence[str],
                out: IO[str], *, empty: str | None = None,
                styles: Mapping[int, Callable[[str], str]] | None = None, width: int | None = None,
                optional: Sequence[int] = ()) -> bool:
    """A plain table; `styles` maps a column index to a function colouring that column's (already
    terminal-safe) cells. tabulate measures widths without the escape codes.

    `width` (a terminal's columns; None: as wide as the cells): a table wider than that is laid out to fit it
    (fitted_table: the widest columns cut, their cells ending in "…"); where even its columns' floors do not fit,
    the `optional` columns (indices, the first to go first) are left out until they do. Returns whether any cell
    was cut or column left out."""
    rows = list(rows)
    if not rows and empty is not None:
        out.write(empty + "\n")
        return False
    styles = dict(styles or {})
    cleaned = [_clean_row(list(r.values() if isinstance(r, Mapping) else r)) for r in rows]
    headers = list(headers)
    dropped = False
    if width is not None and optional and cleaned and all(len(r) == len(headers) for r in cleaned):
        keep = list(range(len(headers)))
        for column in optional:
            if _floors_fit([[r[i] for i in keep] for r in cleaned], [headers[i] for i in keep], width):
                break
            if column in keep and len(keep) > 1:
                keep.remove(column)
                dropped = True
        if dropped:
            headers = [headers[i] for i in keep]
            cleaned = [[r[i] for i in keep] for r in cleaned]
            styles = {keep.index(i): f for i, f in styles.items() if i in keep}
    fitted = fitted_table(cleaned, headers, width, styles) if width is not None else None
    if fitted is not None:
        text, cut = fitted
    else:
        cut = False
        for cells in cleaned:
            for i, style in styles.items():
                if i < len(cells) and cells[i]:
                    cells[i] = style(cells[i])
        text = simple_table(cleaned, headers) or _tabulate(cleaned, headers)
    out.write(text + "\n")
    out.flush()
    return cut or dropped


def _floors_fit(rows: list[list[str]], headers: Sequence[str], width: int) -> bool:
    """Whether the table fits `width` with every column at its floor (fitted_table's narrowest layout)."""
    n = len(headers)
    if not rows or any(len(r) != n for r in rows):
        return True
    content = [max(display_width(row[i]) for row in rows) for i in range(n)]
    floors = [min(max(len(h), w), max(len(h), MIN_COLUMN)) for h, w in zip(headers, content, strict=True)]
    return sum(floors) + 2 * (n - 1) <= width


def _tabulate(rows: list[list[str]], headers: Sequence[str]) -> str:
    from tabulate import tabulate

    text: str = tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True)
    return text


def _clean_row(values: list[Any]) -> list[str]:
    """Every cell terminal-safe text (None: empty). A row of printable ASCII text is checked at once."""
    try:
        joined: str | None = "".join(values)
    except TypeError:  # a cell that is no text (a number, None)
        joined = None
    if joined is not None and joined.isascii() and joined.isprintable():
        return list(values)
    return [safe_text(c) if c is not None else "" for c in values]


MIN_COLUMN = 6  # a column cut to fit is at least this wide, or as wide as its header


def fitted_table(rows: list[list[str]], headers: Sequence[str], width: int,
                 styles: Mapping[int, Callable[[str], str]]) -> tuple[str, bool] | None:
    """The table laid out in `width` columns, and whether a cell was cut; None when it fits as simple_table lays it
    out (each column as wide as its widest cell or its header + 2), or its rows are ragged.

    Laid out to fit, a column is as wide as its widest cell or its header (no 2 spaces more), two spaces between
    columns; if that is still too wide, the widest columns are narrowed to one common width, as little as fits, and
    their cells longer than that end in "…" — the narrow ones (counts, flags) stay whole. No column is narrowed below
    its header or MIN_COLUMN: a table with too many columns for `width` stays wider. Widths are terminal columns
    (display_width), so wide characters need no tabulate here."""
    n = len(headers)
    if not rows or any(len(r) != n for r in rows):
        return None
    cells = [[cell.strip() for cell in row] for row in rows]
    seps = 2 * (n - 1)
    content = [max(display_width(row[i]) for row in cells) for i in range(n)]
    if sum(max(len(h) + 2, w) for h, w in zip(headers, content, strict=True)) + seps <= width:
        return None
    natural = [max(len(h), w) for h, w in zip(headers, content, strict=True)]
    room = width - seps
    floors = [min(w, max(len(h), MIN_COLUMN)) for w, h in zip(natural, headers, strict=True)]

    def total(cap: int) -> int:
        return sum(max(f, min(w, cap)) for w, f in zip(natural, floors, strict=True))

    low, high = 0, max(natural)  # the widest cap that fits (binary search); 0: every column at its floor
    while low < high:
        mid = (low + high + 1) // 2
        if total(mid) <= room:
            low = mid
        else:
            high = mid - 1
    widths = [max(f, min(w, low)) for w, f in zip(natural, floors, strict=True)]
    cut = False
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for row in cells:
        shown = []
        for i, (cell, w) in enumerate(zip(row, widths, strict=True)):
            size = display_width(cell)
            if size > w:
                cell, cut = cut_to(cell, w), True
                size = display_width(cell)
            style = styles.get(i)
            shown.append((style(cell) if style is not None and cell else cell) + " " * (w - size))
        lines.append("  ".join(shown).rstrip())
    return "\n".join(lines), cut


def display_width(text: str) -> int:
    """Columns `text` takes on a terminal: wide (East Asian) characters 2, combining ones 0, others 1."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def cut_to(text: str, width: int) -> str:
    """`text` in at most `width` terminal columns, ending in "…" where cut."""
    if display_width(text) <= width:
        return text
    if text.isascii():
        return text[: max(width - 1, 0)] + "…"
    kept, used = [], 0
    for c in text:
        w = display_width(c)
        if used + w > width - 1:
            break
        kept.append(c)
        used += w
    return "".join(kept) + "…"


_SGR = re.compile("\x1b\\[[0-9;]*m")  # the colours of `styles` (click.style): all the escapes a cleaned cell has


def _plain(text: str) -> bool:
    """Printable ASCII, "…" allowed: each character one column, as len() counts it."""
    if text.isascii():
        return text.isprintable()
    text = text.replace("\u2026", "")
    return text.isascii() and text.isprintable()


def simple_table(rows: Sequence[Sequence[str]], headers: Sequence[str]) -> str | None:
    """What tabulate(rows, headers, tablefmt="simple", disable_numparse=True) writes, for cells of printable ASCII
    (colours aside) and at least one row; None for anything else (tabulate then: wide characters, other escapes).
    tabulate spends about 100 µs a row deducing column types this table never uses (every column is text, left
    aligned): 1-2 s for 10,000 queues, more than the broker took to list them (scripts/bench/queues.py). The same
    text as tabulate's, checked against it (tests/test_render.py): cells stripped, each column as wide as its widest
    cell or its header + 2, two spaces between columns, lines right-stripped, a line of dashes under the headers."""
    n = len(headers)
    if not rows or any(len(r) != n for r in rows) or not all(h.isascii() and h.isprintable() for h in headers):
        return None
    # "…" (where a cell was cut) is one column wide, as tabulate counts it too
    columns: list[list[str]] = []
    widths: list[int] = []
    for i, header in enumerate(headers):
        try:
            column = [row[i].strip() for row in rows]
            text = "".join(column)
        except (AttributeError, TypeError):  # a cell that is no text
            return None
        if "\x1b" in text:  # coloured cells: as wide as what shows
            visible = [_SGR.sub("", cell) for cell in column]
            text = "".join(visible)
            if not _plain(text):
                return None
            width = max(len(header) + 2, *map(len, visible))
            column = [cell + " " * (width - len(shown)) for cell, shown in zip(column, visible, strict=True)]
        else:
            if not _plain(text):
                return None
            width = max(len(header) + 2, *map(len, column))
            column = [cell.ljust(width) for cell in column]
        columns.append(column)
        widths.append(width)
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(cells).rstrip() for cells in zip(*columns, strict=True)]
    return "\n".join(lines)
