"""Fuzz the decode extractor: any log line gives candidates inside it, never an exception."""

from __future__ import annotations

import base64
import contextlib

from hypothesis import given
from hypothesis import strategies as st

from dlxtool.extract import best, candidates, decode_base64, decode_whole
from tests.fuzz.strategies import FUZZ

# Lines made of the pieces the extractor looks for, so the fuzzer reaches its branches.
pieces = st.one_of(
    st.text(max_size=20),
    st.binary(max_size=30).map(lambda b: base64.b64encode(b).decode()),
    st.binary(max_size=30).map(lambda b: base64.urlsafe_b64encode(b).decode().rstrip("=")),
    st.binary(max_size=20).map(lambda b: "0x" + b.hex()),
    st.binary(max_size=20).map(repr),
    st.lists(st.integers(0, 300), max_size=8).map(lambda xs: "<<" + ", ".join(map(str, xs)) + ">>"),
    st.binary(max_size=10).map(lambda b: "".join(f"\\x{c:02x}" for c in b)),
    st.sampled_from(['"body": "', "payload=", "b'", 'b"', "\\/", "\\", "'", '"', "<<", ">>", "=", ", ...>>"]),
)
lines = st.lists(pieces, max_size=8).map("".join)


@FUZZ
@given(lines)
def test_candidates_are_inside_the_line(line: str) -> None:
    found = candidates(line)
    for cand in found:
        assert 0 <= cand.start < cand.end <= len(line)
        assert cand.data
    if found:
        assert best(found, lambda c: (len(c.data), None)) is not None


@FUZZ
@given(st.text(max_size=200))
def test_any_text_is_safe(line: str) -> None:
    candidates(line)
    decode_base64(line)


@FUZZ
@given(st.binary(max_size=200), st.sampled_from(["base64", "hex", "binary"]))
def test_decode_whole_raises_only_value_errors(data: bytes, encoding: str) -> None:
    with contextlib.suppress(ValueError):  # UnicodeDecodeError is one
        decode_whole(data, encoding)
