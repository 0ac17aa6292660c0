"""Selection predicates on header values (dlxtool.selection)."""

from __future__ import annotations

import struct

import pytest

from dlxtool.amqp_values import RawValue
from dlxtool.errors import UsageError
from dlxtool.record import MessageRecord
from dlxtool.selection import build_selection, parse_age, parse_duration


@pytest.mark.parametrize(("raw", "text"), [
    (b"L" + struct.pack(">q", -2), "-2"), (b"U\xff\xfe", "-2"), (b"b\x07", "7"), (b"d" + struct.pack(">d", 1.5), "1.5"),
])
def test_header_match_sees_what_a_raw_value_means(raw: bytes, text: str) -> None:
    """Kinds kept as their AMQP bytes (RawValue) match --header NAME=VALUE as the number they hold."""
    record = MessageRecord(queue="q", body=b"", headers={"n": RawValue(raw)})
    assert build_selection(headers=[f"n={text}"]).matches(record)
    assert not build_selection(headers=["n=3"]).matches(record)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("2sec", 2), ("15m", 900), ("15 min", 900), ("1.5h", 5400), ("3d", 259200),
    ("1w", 604800), (" 2h ", 7200), ("30M", 1800), ("2D", 172800), ("1W", 604800),
])
def test_one_age_parser_takes_what_selection_and_peek_offset_took(text: str, seconds: float) -> None:
    """The union of --older-than's durations (fractions, sec/min, weeks) and --offset's ages (any case)."""
    assert parse_age(text) == seconds
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-1h", "1y", "yesterday", "1h30m", "2026-01-31"])
def test_what_is_not_an_age(text: str) -> None:
    assert parse_age(text) is None
    with pytest.raises(UsageError, match="bad duration"):
        parse_duration(text)
