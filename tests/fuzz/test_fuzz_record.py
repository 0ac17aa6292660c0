"""Fuzz the message-record JSON codec: lossless for every header pika can produce; any JSON in a file
gives a record or a UsageError (exit 2), never a crash."""

from __future__ import annotations

import contextlib
import io
import json

import orjson
from hypothesis import example, given
from hypothesis import strategies as st

from dlxtool.errors import UsageError
from dlxtool.ops.record_files import read_records
from dlxtool.record import MessageRecord, tag_table, untag_table
from tests.fuzz.strategies import FUZZ, amqp_tables, json_values, text


@FUZZ
@given(amqp_tables)
@example({"$bytes": "not a tag, a real string"})
@example({"t": {"$table": {"$bytes": 1}}})
@example({"deep": {"a": {"b": {"c": [[[[{"d": b"\xff"}]]]]}}}})
def test_headers_survive_json(headers: dict) -> None:
    assert untag_table(orjson.loads(orjson.dumps(tag_table(headers)))) == headers


@FUZZ
@given(amqp_tables, st.binary(max_size=200), text, st.integers(0, 10**6))
def test_record_survives_jsonl(headers: dict, body: bytes, queue: str, position: int) -> None:
    record = MessageRecord(queue=queue, body=body, position=position, headers=headers,
                           properties={"message_id": queue, "priority": 3})
    (back,) = list(read_records(io.BytesIO(record.to_jsonl())))
    assert (back.queue, back.body, back.position, back.headers, back.properties) == \
        (record.queue, record.body, record.position, record.headers, record.properties)


@FUZZ
@given(json_values)
def test_any_json_is_a_record_or_a_usage_error(data: object) -> None:
    with contextlib.suppress(UsageError):
        MessageRecord.from_json(data)
    # The stdlib writes what orjson refuses (integers past 64 bits), as a hand-edited file may hold.
    with contextlib.suppress(UsageError):
        list(read_records(io.BytesIO(json.dumps(data).encode() + b"\n")))


@FUZZ
@given(st.binary(max_size=300))
def test_any_bytes_in_a_file_are_records_or_a_usage_error(data: bytes) -> None:
    with contextlib.suppress(UsageError):
        list(read_records(io.BytesIO(data)))
