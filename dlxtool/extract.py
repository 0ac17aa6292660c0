"""Find binary payloads inside log lines. Pure logic: no click, no registry.

:func:`candidates` yields every plausible payload of a line (bare base64 std/URL-safe with or
without padding and with ``\\/`` JSON escapes, hex strings, Python ``b'...'`` literals, Elixir
``<<10, 3, ...>>`` binaries, ``\\x0a`` escape runs), each with its span in the line and the key it
was the value of (JSON ``"key": "..."``, logfmt ``key=...``), if any. :func:`best` picks the
candidate that a caller-supplied rating (e.g. "how well does it decode") likes most.
"""

from __future__ import annotations

import ast
import base64
import binascii
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import unquote

import orjson

T = TypeVar("T")

MIN_BASE64 = 8  # characters
MIN_HEX = 8  # characters
MAX_LINE = 4 * 1024 * 1024  # longer lines are cut (a log line this long is already a problem)

# Keys whose values are payloads more often than not.
PAYLOAD_KEYS = frozenset({"body", "payload", "data", "bytes", "raw", "blob", "proto", "protobuf", "content", "value"})

_B64 = re.compile(r"(?<![A-Za-z0-9+/_\-\\])(?:[A-Za-z0-9+/_\-]|\\/)+={0,2}(?![A-Za-z0-9+/_\-=])")
_HEX0X = re.compile(r"\b0x((?:[0-9a-fA-F]{2})+)\b")
_PYBYTES = re.compile(r"""\bb(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")""")
_ELIXIR = re.compile(r"<<\s*(\d{1,3}(?:\s*,\s*\d{1,3})*)\s*(?:,\s*\.\.\.\s*)?>>")
_XESC = re.compile(r"(?:\\x[0-9a-fA-F]{2}|\\[nrt0]){4,}")
# Identifiers and words (delivery_tag, dead-lettered, OrderPlaced) are valid base64 by accident.
_WORDLIKE = re.compile(r"[a-z]+(?:[_\-.][a-z]+)*|(?:[A-Z][a-z]+)+|[A-Z]+(?:_[A-Z]+)*")
MAX_WORD = 24
_KEY_BEFORE = re.compile(r"""["']?([A-Za-z_][\w.\-]*)["']?\s*(?::|=)\s*["']?\s*$""")


@dataclass(frozen=True, slots=True)
class Candidate:
    start: int  # span of the encoded text in the line
    end: int
    encoding: str  # base64 | base64url | hex | python-bytes | elixir-binary | escaped
    data: bytes
    key: str | None = None  # the JSON/logfmt key it is the value of
    invalid: str | None = None  # encoding "invalid": why a payload key's value is no base64 or hex (data: its text)

    @property
    def strong(self) -> bool:
        """Unmistakably meant as binary data (not a word that happens to be valid base64)."""
        if self.encoding in ("python-bytes", "elixir-binary", "escaped"):
            return True
        return bool(self.key and _is_payload_key(self.key))


def _is_payload_key(key: str) -> bool:
    return key.rsplit(".", 1)[-1].lower() in PAYLOAD_KEYS


def candidates(line: str) -> list[Candidate]:
    """Every plausible payload in ``line``, in order of appearance, duplicates removed."""
    if len(line) > MAX_LINE:
        line = line[:MAX_LINE]
    found: list[Candidate] = []
    taken: list[tuple[int, int]] = []
    for cand in _literal_candidates(line):
        found.append(cand)
        taken.append((cand.start, cand.end))
    for cand in _token_candidates(line):
        if any(a <= cand.start and cand.end <= b for a, b in taken):
            continue
        found.append(cand)
    seen: set[bytes] = set()
    out: list[Candidate] = []
    for cand in sorted(found, key=lambda c: (c.start, -c.end)):
        if cand.data and cand.data not in seen:
            seen.add(cand.data)
            out.append(cand)
    return out


def _literal_candidates(line: str) -> Iterator[Candidate]:
    if "b'" in line or 'b"' in line:
        for m in _PYBYTES.finditer(line):
            try:
                value = _literal(m.group())
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(value, bytes):
                yield Candidate(m.start(), m.end(), "python-bytes", value, _key_before(line, m.start()))
    if "<<" in line:
        for m in _ELIXIR.finditer(line):
            numbers = [int(x) for x in m.group(1).split(",")]
            if all(n < 256 for n in numbers):
                yield Candidate(m.start(), m.end(), "elixir-binary", bytes(numbers), _key_before(line, m.start()))
    if "\\x" in line:
        for m in _XESC.finditer(line):
            if _inside_pybytes(line, m.start()):
                continue
            data = _unescape(m.group())
            if data is not None:
                yield Candidate(m.start(), m.end(), "escaped", data, _key_before(line, m.start()))


def _literal(text: str) -> object:
    """ast.literal_eval without the compiler's warnings about odd escapes (b'\\N…' in a log line),
    which would otherwise reach the user's terminal (a SyntaxWarning from Python 3.12 on)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.literal_eval(text)


def _inside_pybytes(line: str, pos: int) -> bool:
    return any(m.start() < pos < m.end() for m in _PYBYTES.finditer(line))


def _unescape(text: str) -> bytes | None:
    try:
        value = _literal("b'" + text.replace("'", "\\'") + "'")
        return value if isinstance(value, bytes) else None  # a b'…' literal: always bytes
    except (ValueError, SyntaxError):
        return None


def _token_candidates(line: str) -> Iterator[Candidate]:
    for m in _HEX0X.finditer(line):
        if len(m.group(1)) >= MIN_HEX:
            yield Candidate(m.start(), m.end(), "hex", bytes.fromhex(m.group(1)), _key_before(line, m.start()))
    for m in _B64.finditer(line):
        token = m.group()
        if len(token) < MAX_WORD and _WORDLIKE.fullmatch(token):
            continue
        key = None
        if len(token) < MIN_BASE64:
            # Tiny payloads only count as the value of a payload-like key (body=EAE=).
            key = _key_before(line, m.start())
            if not (key and _is_payload_key(key)):
                continue
        text = token.replace("\\/", "/")
        is_hex = len(text) >= MIN_HEX and len(text) % 2 == 0 and _is_hex(text)
        decoded = decode_base64(text)
        if (is_hex or decoded is not None) and len(text) >= MIN_BASE64 and not text.isdigit():
            key = key or _key_before(line, m.start())
            whole = _whole_value(line, m.start(), m.end(), key)
            if whole is not None:  # a payload key's value that goes on past the base64/hex: not its prefix
                yield whole
                continue
        if is_hex:
            key = key or _key_before(line, m.start())
            yield Candidate(m.start(), m.end(), "hex", bytes.fromhex(text), key)
        if decoded is not None:
            data, encoding = decoded
            if key is None:
                key = _key_before(line, m.start())
            yield Candidate(m.start(), m.end(), encoding, data, key)


# What may follow a value in a log line: a space, a closing quote or bracket, a separator. A "." or ":" only where a
# sentence or a field ends (a space or the line's end next).
_VALUE_ENDS = frozenset(" \t\r\n\"',;&)]}>|")


def _value_end(line: str, pos: int) -> int:
    """Where the value whose base64 or hex stopped at `pos` ends: at the first character that may follow a value."""
    end = pos
    while end < len(line):
        ch = line[end]
        if ch in _VALUE_ENDS or (ch in ".:" and (end + 1 == len(line) or line[end + 1].isspace())):
            break
        end += 1
    return end


def _whole_value(line: str, start: int, stop: int, key: str | None) -> Candidate | None:
    """The value of a payload key (payload=, "body": …) whose base64 or hex stops before the value does (at `stop`):
    decoding the valid prefix would show a message that is not there (`payload=CgdvLTAwMDEy!!!` read as a 9-byte
    one). URL-quoted base64 (%2B, %2F, %3D) is the payload unquoted; anything else is reported as what it is: no
    valid base64 or hex, and where. None where the value ends at `stop`, or is no payload key's."""
    end = _value_end(line, stop)
    if end == stop or not (key and _is_payload_key(key)):
        return None
    value = line[start:end]
    if "%" in value:
        unquoted = unquote(value)
        got = decode_base64(unquoted) if unquoted != value else None
        if got is not None:
            return Candidate(start, end, got[1], got[0], key)
    return Candidate(start, end, "invalid", value.encode("utf-8", "surrogateescape"), key,
                     invalid=not_encoded(value, "base64 or hex"))


_B64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=")


def not_encoded(text: str, encoding: str) -> str:
    """Why `text` is no valid `encoding` (base64, hex, or "base64 or hex"), in words: the first character it cannot
    hold and where, else its length."""
    allowed = _HEXCHARS if encoding == "hex" else _B64_CHARS
    for i, ch in enumerate(text):
        if ch not in allowed:
            return f"not valid {encoding}: {ch!r} at character {i + 1:,} of {len(text):,}"
    if encoding == "hex":
        return f"not valid hex: {len(text):,} digits (an odd number: hex holds two a byte)"
    body = text.rstrip("=")
    if "=" in body:
        return f"not valid {encoding}: '=' at character {body.index('=') + 1:,} of {len(text):,} (padding ends it)"
    if len(body) % 4 == 1:
        return f"not valid {encoding}: {len(body):,} characters (base64 is never 4n+1 long: one is missing or extra)"
    if ("-" in body or "_" in body) and ("+" in body or "/" in body):
        return f"not valid {encoding}: it mixes the URL-safe alphabet (- _) with the standard one (+ /)"
    return f"not valid {encoding}"


_HEXCHARS = frozenset("0123456789abcdefABCDEF")


def _is_hex(text: str) -> bool:
    return all(c in _HEXCHARS for c in text)


def decode_base64(text: str) -> tuple[bytes, str] | None:
    """Decode standard or URL-safe base64, padding optional; ``None`` if it is not base64."""
    body = text.rstrip("=")
    if len(body) % 4 == 1 or not body:
        return None
    url = "-" in body or "_" in body
    if url and ("+" in body or "/" in body):
        return None
    padded = body + "=" * (-len(body) % 4)
    try:
        if url:
            return base64.b64decode(padded, altchars=b"-_", validate=True), "base64url"
        return base64.b64decode(padded, validate=True), "base64"
    except (binascii.Error, ValueError):
        return None


def decode_whole(data: bytes, encoding: str) -> bytes:
    """Decode a whole input (``--input base64|hex|binary``); raises ``ValueError`` when invalid."""
    if encoding == "binary":
        return data
    joined = b"".join(data.split())
    try:
        text = joined.decode("ascii", "strict")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid {encoding}: byte 0x{joined[exc.start]:02x} at byte {exc.start + 1:,} is not "
                         "ASCII") from None
    if encoding == "hex":
        if text.startswith(("0x", "0X")):
            text = text[2:]
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise ValueError(not_encoded(text, "hex")) from None
    if encoding == "base64":
        got = decode_base64(text.replace("\\/", "/"))
        if got is None:
            raise ValueError(not_encoded(text, "base64"))
        return got[0]
    raise ValueError(f"unknown input encoding {encoding!r}")


MIN_TEXT = 4  # bytes: shorter printable payloads are not called text


def content_kind(data: bytes, *, strong: bool) -> str | None:
    """"JSON" or "text" when a payload is recognisably one of them rather than protobuf, else None.

    JSON counts for any candidate (a word that happens to be base64 does not decode to a JSON object);
    plain text only for a strong one (the value of a payload key, a bytes literal), since short base64
    words decode to printable bytes by chance."""
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        try:
            orjson.loads(data)
            return "JSON"
        except orjson.JSONDecodeError:
            pass
    if not strong or len(data) < MIN_TEXT:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return "text" if all(c.isprintable() or c in "\t\r\n" for c in text) else None


def _key_before(line: str, pos: int) -> str | None:
    m = _KEY_BEFORE.search(line[max(0, pos - 80) : pos])
    return m.group(1) if m else None


def best(cands: list[Candidate], rate: Callable[[Candidate], tuple[float, T]]) -> tuple[Candidate, float, T] | None:
    """The candidate with the highest rating (ties: strong, then longer data, then first)."""
    winner: tuple[tuple[float, bool, int, int], Candidate, float, T] | None = None
    for i, cand in enumerate(cands):
        score, extra = rate(cand)
        key = (score, cand.strong, len(cand.data), -i)
        if winner is None or key > winner[0]:
            winner = (key, cand, score, extra)
    return None if winner is None else (winner[1], winner[2], winner[3])
