"""Payloads that stop being protobuf before their end: proto_registry.wire.scan_prefix and raw.decode_partial."""

from __future__ import annotations

import pytest

from proto_registry import DEMO_PROTOS, Registry
from proto_registry.raw import decode_partial, decode_raw, format_raw
from proto_registry.wire import MALFORMED, TRUNCATED, scan, scan_prefix


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    registry = Registry.load([DEMO_PROTOS], cache_dir=tmp_path_factory.mktemp("proto-cache"))
    msg = registry.message_class("shop.orders.v1.OrderPlaced")(order_id="ord-42", customer_id="cust-7")
    msg.total.currency_code = "EUR"
    msg.total.units = 129
    msg.metadata["source"] = "web"
    return msg.SerializeToString()


def test_the_demo_body_cut_in_half_stops_in_its_second_field() -> None:
    body = bytes.fromhex("0a066f2d313031371208706179")  # order_id "o-1017", payment_id "pay…" cut
    fields, stop = scan_prefix(body)
    assert stop is not None and stop.kind == TRUNCATED and stop.offset == 8
    assert len(fields) == 1 and "declares 8 bytes, 3 left" in stop.reason
    partial = decode_partial(body)
    assert partial is not None and (partial.kind, partial.offset, partial.size) == (TRUNCATED, 8, 13)
    assert partial.fields == [
        {"field": 1, "wire_type": "len", "string": "o-1017"},
        {"field": 2, "wire_type": "len", "cut": True, "length": 8, "arrived": 3, "string": "pay"},
    ]


def test_every_cut_of_a_real_message_is_found_where_the_cut_field_starts(placed: bytes) -> None:
    """Cut at every byte: either at a field boundary (it scans whole: nothing to see) or truncated at the
    start of the top-level field the cut went through, the fields before it exactly decode_raw's."""
    boundaries = {f[5] for f in scan(placed) or []} | {0}
    starts = sorted(f[2] for f in scan(placed) or [])
    for k in range(1, len(placed)):
        cut = placed[:k]
        partial = decode_partial(cut)
        if k in boundaries:
            assert partial is None, k
            continue
        assert partial is not None and partial.kind == TRUNCATED, k
        assert partial.offset == max(s for s in starts if s < k), k
        assert partial.fields[:-1] == (decode_raw(cut[: partial.offset]) or []), k
        assert partial.fields[-1]["cut"] is True
    assert decode_partial(placed) is None


def test_a_cut_sub_message_shows_what_arrived_of_it() -> None:
    body = b"\x0a\x0c\x0a\x03abc\x12\x05hel"  # field 1 = {1: "abc", 2: "hel…"}, cut inside the inner field 2
    partial = decode_partial(body)
    assert partial is not None and partial.offset == 0
    (outer,) = partial.fields
    assert (outer["field"], outer["length"], outer["arrived"]) == (1, 12, 10)
    assert outer["message"] == [
        {"field": 1, "wire_type": "len", "string": "abc"},
        {"field": 2, "wire_type": "len", "cut": True, "length": 5, "arrived": 3, "string": "hel"},
    ]
    assert "# cut short here: 3 of 5 bytes arrived" in format_raw(partial.fields)


def test_a_character_split_by_the_cut_does_not_turn_text_into_hex() -> None:
    partial = decode_partial(b"\x0a\x06caf\xc3\xa9!"[:6])  # "café!" cut inside the é
    assert partial is not None and partial.fields[0]["string"] == "caf"


@pytest.mark.parametrize(("body", "offset", "reason"), [
    (b"\x08\x01\x00\x01", 2, "field number 0"),
    (b"\x08\x01\x0e\x01", 2, "wire type 6"),
    (b"\x08\x01\x0c", 2, "end of group 1 without its start"),
    (b"\x08" + b"\xff" * 10 + b"\x01", 0, "longer than 10 bytes"),
])
def test_bytes_no_writer_produces_are_malformed_where_they_start(body: bytes, offset: int, reason: str) -> None:
    partial = decode_partial(body)
    assert partial is not None and partial.kind == MALFORMED and partial.offset == offset
    assert reason in partial.reason
    assert not any(f.get("cut") for f in partial.fields)


@pytest.mark.parametrize("body", [b"\x08", b"\x08\x96", b"\x0a", b"\x0a\x85", b"\x15\x01\x02", b"\x11" + b"\0" * 7,
                                  b"\x80", b"\x0b\x08\x01"])
def test_a_cut_in_any_wire_type_is_truncated(body: bytes) -> None:
    partial = decode_partial(body)
    assert partial is not None and partial.kind == TRUNCATED and partial.offset == 0
    assert partial.fields[-1]["cut"] is True
    format_raw(partial.fields)  # renders whatever arrived


def test_any_bytes_either_scan_whole_or_stop_where_a_whole_prefix_ends() -> None:
    import random

    rng = random.Random(30)
    for _ in range(5000):
        data = rng.randbytes(rng.randrange(1, 40))
        partial = decode_partial(data)
        assert (partial is None) == (scan(data) is not None), data.hex()
        if partial is not None:
            assert 0 <= partial.offset < partial.size == len(data)
            assert scan(data[: partial.offset]) is not None, data.hex()  # what comes before the stop is whole
            format_raw(partial.fields)
