"""Selection predicates on header values (dlxtool.selection)."""

from __future__ import annotations

import struct

import pytest

from dlxtool.broker.amqp_values import RawValue
from dlxtool.record import MessageRecord
from dlxtool.selection import build_selection


@pytest.mark.parametrize(("raw", "text"), [
    (b"L" + struct.pack(">q", -2), "-2"), (b"U\xff\xfe", "-2"), (b"b\x07", "7"), (b"d" + struct.pack(">d", 1.5), "1.5"),
])
def test_header_match_sees_what_a_raw_value_means(raw: bytes, text: str) -> None:
    """Kinds kept as their AMQP bytes (RawValue) match --header NAME=VALUE as the number they hold."""
    record = MessageRecord(queue="q", body=b"", headers={"n": RawValue(raw)})
    assert build_selection(headers=[f"n={text}"]).matches(record)
    assert not build_selection(headers=["n=3"]).matches(record)
