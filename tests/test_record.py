from datetime import UTC, datetime
from decimal import Decimal
from io import BytesIO

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlxtool.errors import UsageError
from dlxtool.ops.record_files import read_records, write_records
from dlxtool.record import MessageRecord, tag_table, untag_table

TS = datetime(2026, 11, 21, 10, 30, 5, tzinfo=UTC)


def sample() -> MessageRecord:
    return MessageRecord(
        queue="orders.dlq", body=b"\x0a\x03abc\xff", position=2, exchange="dlx", routing_key="order.placed",
        redelivered=True, properties={"content_type": "application/x-protobuf", "delivery_mode": 2,
                                      "timestamp": 1763721005, "type": "shop.orders.v1.OrderPlaced"},
        headers={"s": "text", "b": b"\x00\xff", "i": -5, "big": 2**40, "t": True, "n": None, "d": Decimal("1.50"),
                 "ts": TS, "tbl": {"nested": [1, "x", b"y", {"$bytes": "looks like a tag"}]}, "arr": [TS, None],
                 "x-death": [{"queue": "orders.q", "reason": "rejected", "count": 3, "time": TS,
                              "exchange": "orders", "routing-keys": ["order.placed"]}]},
    )


def test_json_round_trip_is_lossless() -> None:
    record = sample()
    data = orjson.loads(record.to_jsonl())
    assert data["headers"]["b"] == {"$bytes": "AP8="}
    assert data["headers"]["ts"] == {"$timestamp": "2026-11-21T10:30:05Z"}
    assert data["headers"]["d"] == {"$decimal": "1.50"}
    assert data["headers"]["tbl"]["nested"][3] == {"$table": {"$bytes": "looks like a tag"}}
    assert data["deaths"][0]["count"] == 3 and data["deaths"][0]["time"] == "2026-11-21T10:30:05Z"
    back = MessageRecord.from_json(data)
    assert back == record
    assert back.headers["tbl"]["nested"][3] == {"$bytes": "looks like a tag"}


def test_files_round_trip_jsonl_and_json_array() -> None:
    buf = BytesIO()
    assert write_records([sample(), sample()], buf) == 2
    assert list(read_records(BytesIO(buf.getvalue()))) == [sample(), sample()]
    array = b"[" + b",".join(orjson.dumps(sample().to_json()) for _ in range(2)) + b"]"
    assert list(read_records(BytesIO(array))) == [sample(), sample()]


@pytest.mark.parametrize("line, needle", [
    (b"{not json}\n", "dump.jsonl:1: invalid JSON"),
    (b'{"queue": "q", "body": "***"}\n', "not valid base64"),
    (b'{"queue": "q", "body": "", "properties": {"colour": 1}}\n', "unknown AMQP property 'colour'"),
    (b'{"queue": "q", "body": "", "headers": {"x": {"$timestamp": "soon"}}}\n', "bad $timestamp"),
])
def test_bad_records_are_named(line: bytes, needle: str) -> None:
    with pytest.raises(UsageError) as err:
        list(read_records(BytesIO(line), "dump.jsonl"))
    assert needle in str(err.value)


header_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.text() | st.binary()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
    | st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))
    .map(lambda d: d.replace(microsecond=0)),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=10), header_values, max_size=6))
def test_header_codec_round_trips_any_table(headers: dict) -> None:
    encoded = orjson.loads(orjson.dumps(tag_table(headers)))
    assert untag_table(encoded) == headers


def test_line_numbers_count_blank_lines_and_last_line_without_newline() -> None:
    good = orjson.dumps(sample().to_json())
    with pytest.raises(UsageError) as err:
        list(read_records(BytesIO(b"\n\n" + good + b"\n{broken"), "f.jsonl"))
    assert "f.jsonl:4: invalid JSON" in str(err.value)
    assert len(list(read_records(BytesIO(b"\n" + good), "f.jsonl"))) == 1


@pytest.mark.parametrize("position", ['"abc"', "[1]", "true", "1.5"])
def test_bad_position_is_named(position: str) -> None:
    with pytest.raises(UsageError, match="'position' must be a whole number"):
        list(read_records(BytesIO(b'{"queue": "q", "body": "", "position": ' + position.encode() + b"}\n")))


def test_open_records_maps_file_errors(tmp_path) -> None:
    from dlxtool.errors import NotFoundError
    from dlxtool.ops.record_files import open_records

    with pytest.raises(NotFoundError):
        list(open_records(str(tmp_path / "nope.jsonl"), BytesIO()))
    with pytest.raises(UsageError, match="is a directory"):
        list(open_records(str(tmp_path), BytesIO()))
