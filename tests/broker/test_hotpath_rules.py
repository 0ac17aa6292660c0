"""The C extension knows the AMQP wire format and none of replay's rules (issue 21: C splices bytes, Python
decides). Its string literals name no header, field, reason or text of replay's, and it exposes only the
byte-level functions: a C function that learned a rule again (a failure reason, the provenance layout, the
deaths summary …) would have to carry one of these names, and fails here. Reads the source: runs whether or
not the extension is built."""

from __future__ import annotations

import re
from pathlib import Path

from dlxtool.broker.wire import hotpath

SOURCE = Path(__file__).resolve().parents[2] / "dlxtool/broker/wire/_hotpath.c"

# Words no literal may hold (as a whole word, in any literal, adjacent literals joined): x-death and its fields,
# the failure reasons, the provenance header and its fields, the history and retry headers, the summary's words.
RULE_WORDS = (
    "x-death", "queue", "reason", "count", "routing-keys", "original-expiration", "time",
    "rejected", "delivery_limit", "maxlen", "expired",
    "dlxtool-replay", "from", "routing-key", "expiration", "deaths", "reset", "filters", "src", "more",
    "x-first-death-queue", "x-first-death-reason", "x-first-death-exchange", "x-last-death-queue",
    "x-last-death-reason", "x-last-death-exchange", "CC", "BCC", "x-delivery-count", "x-retry-count",
    "x-delivery-attempts", "retries", "lang",
)
RULE_LITERALS = ("at", "id")  # too common as words: a literal that is just one of these
MULTIPLICATION_SIGN = "×".encode()  # the deaths summary's "rejected×3"
EXPOSED = {"Deliver", "bloom", "fingerprint", "publish_frames", "read_deliveries", "scan_headers", "splice_headers"}

_TOKENS = re.compile(r'/\*.*?\*/|//[^\n]*|\'(?:\\.|[^\'\\])*\'|"((?:\\.|[^"\\])*)"|(\s+)|.', re.S)
_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]+|[0-7]{1,3}|.)", re.S)
_SIMPLE = {b"n": b"\n", b"t": b"\t", b"r": b"\r", b"0": b"\0"}


def _unescape(text: str) -> bytes:
    def one(match: re.Match[bytes]) -> bytes:
        code = match.group(1)
        if code[:1] == b"x":
            return bytes([int(code[1:], 16) & 0xFF])
        if code[:1].isdigit() and code[:1] not in (b"8", b"9"):
            return bytes([int(code, 8) & 0xFF])
        return _SIMPLE.get(code, code)

    return _ESCAPE.sub(one, text.encode())


def string_literals(source: str) -> list[bytes]:
    """The C string literals of `source` (comments and character literals skipped), adjacent ones joined (as
    the compiler joins them), escapes resolved."""
    out: list[bytes] = []
    joining = False
    for match in _TOKENS.finditer(source):
        text, space = match.group(1), match.group(2)
        if text is not None:
            value = _unescape(text)
            if joining:
                out[-1] += value
            else:
                out.append(value)
            joining = True
        elif space is None and not match.group(0).startswith("/"):
            joining = False
    return out


def rule_knowledge(source: str) -> list[str]:
    """What of replay's rules the literals of `source` name."""
    found = []
    for literal in string_literals(source):
        for word in RULE_WORDS:
            if re.search(rb"(?<![\w-])" + re.escape(word.encode()) + rb"(?![\w-])", literal):
                found.append(f"{word!r} in {literal!r}")
        if literal in (w.encode() for w in RULE_LITERALS) or MULTIPLICATION_SIGN in literal:
            found.append(repr(literal))
    return found


def test_the_c_extension_names_none_of_replays_rules() -> None:
    assert rule_knowledge(SOURCE.read_text()) == []


def test_the_check_finds_rules_however_the_literal_is_written() -> None:
    # what the C rewrite held before issue 21, and ways of spelling it
    assert rule_knowledge('static int f(span r) { return key_is(r, "rejected") || key_is(r, "maxlen"); }') == [
        "'rejected' in b'rejected'", "'maxlen' in b'maxlen'"]
    assert rule_knowledge('out_shortstr(&out, "at"); out_put(&out, "\\x05" "cou" "nt", 6);') == [
        "b'at'", "'count' in b'\\x05count'"]
    assert rule_knowledge('out_put(o, "\\xc3\\x97", 2); /* "deaths" in a comment is fine */') == ["b'\\xc3\\x97'"]
    assert rule_knowledge('char c = \'"\'; f("ok", "a queue");') == ["'queue' in b'a queue'"]
    assert rule_knowledge('f("counter", "x-deaths", "deathsx", "at last")') == []


def test_the_extension_exposes_byte_functions_only() -> None:
    module = hotpath.load()
    if module is not None:  # not built here: the source check above still ran
        assert {name for name in dir(module) if not name.startswith("__")} == EXPOSED
