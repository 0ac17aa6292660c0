"""Names that are not UTF-8 in the message record (issue 28): header names at every depth, routing keys, exchange
names and string properties survive record JSON byte for byte; UTF-8 names stay plain strings.

AMQP names are bytes. pika and dlxtool's wire codec hand over those that are not UTF-8 as bytes; the record used to
write them with str(): a header name b'\\xff\\xfekey' came back from dump → load as the text "b'\\xff\\xfekey'", a
routing key as backslash-escaped text. The broker side (dump → load on RabbitMQ) is tests/cli/test_record_names.py.
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dlxtool.errors import UsageError
from dlxtool.ops.record_files import read_records
from dlxtool.record import MessageRecord, tag_table, untag_table
from dlxtool.render import dumps
from tests.fuzz.strategies import FUZZ, amqp_scalars

NOT_UTF8 = b"\xff\xfekey"


def through_json(record: MessageRecord) -> tuple[dict[str, Any], MessageRecord]:
    """The record as a file holds it (dlxtool's JSON writer), and read back."""
    line = record.to_jsonl()
    [back] = list(read_records(BytesIO(line)))
    return orjson.loads(line), back


def test_a_header_name_that_is_not_utf8() -> None:
    record = MessageRecord(queue="q", body=b"", headers={NOT_UTF8: "v", "plain": 1})
    data, back = through_json(record)
    assert data["headers"] == {"$pairs": [[{"$bytes": "//5rZXk="}, "v"], ["plain", 1]]}
    assert back.headers == {NOT_UTF8: "v", "plain": 1}
    assert list(back.headers) == [NOT_UTF8, "plain"]  # in its order


def test_names_inside_tables_and_arrays_of_tables() -> None:
    """A table inside headers, and x-death: an array of tables."""
    headers = {"x-death": [{"queue": "q", NOT_UTF8: b"\x80", "count": 1}, {"reason": "expired"}],
               "outer": {"inner": {b"\xc3": [1, {b"\x00\xff": None}]}}, "x-first-death-queue": "q"}
    data, back = through_json(MessageRecord(queue="q", body=b"", headers=headers))
    assert back.headers == headers
    assert set(data["headers"]) == {"x-death", "outer", "x-first-death-queue"}  # headers' own names: all UTF-8
    assert data["headers"]["x-death"][0] == {"$pairs": [["queue", "q"], [{"$bytes": "//5rZXk="}, {"$bytes": "gA=="}],
                                                        ["count", 1]]}
    assert data["headers"]["x-death"][1] == {"reason": "expired"}  # UTF-8 names: plain
    assert data["headers"]["outer"]["inner"] == {"$pairs": [[{"$bytes": "ww=="}, [1, {"$pairs": [
        [{"$bytes": "AP8="}, None]]}]]]}


def test_routing_key_exchange_and_string_properties() -> None:
    record = MessageRecord(queue="q", body=b"", exchange=b"ex\xff", routing_key=b"\xfe.key",
                           properties={"message_id": b"\xff", "type": "t", "priority": 1})
    data, back = through_json(record)
    assert data["exchange"] == {"$bytes": "ZXj/"} and data["routing_key"] == {"$bytes": "/i5rZXk="}
    assert data["properties"] == {"message_id": {"$bytes": "/w=="}, "type": "t", "priority": 1}
    assert (back.exchange, back.routing_key, back.properties) == (record.exchange, record.routing_key,
                                                                  record.properties)


def test_utf8_names_stay_plain_strings() -> None:
    record = MessageRecord(queue="q", body=b"", exchange="ex", routing_key="rk.é",
                           headers={"é": {"ü": 1}, "x-death": [{"queue": "q"}]})
    data, back = through_json(record)
    assert (data["exchange"], data["routing_key"]) == ("ex", "rk.é")
    assert data["headers"] == {"é": {"ü": 1}, "x-death": [{"queue": "q"}]}
    assert back == record


def test_a_real_table_named_pairs_is_told_apart() -> None:
    """A table whose only name is "$pairs" (as a header, or inside one) is written in the $pairs form too."""
    headers = {"$pairs": [["a", 1]], "t": {"$pairs": "x"}}
    assert untag_table(orjson.loads(dumps(tag_table(headers)))) == headers
    alone = {"$pairs": [[{"$bytes": "AA=="}, 1]]}  # exactly the shape of the tagged form
    assert tag_table(alone) == {"$pairs": [["$pairs", [[{"$table": {"$bytes": "AA=="}}, 1]]]]}
    assert untag_table(orjson.loads(dumps(tag_table(alone)))) == alone


def test_an_older_file_with_a_header_named_pairs_reads_as_it_did() -> None:
    """Before the $pairs form a header named "$pairs" alone was written as it was: unless its value has the exact
    shape of the tagged form, it reads as that header."""
    assert untag_table({"$pairs": "text"}) == {"$pairs": "text"}
    assert untag_table({"$pairs": [1, 2]}) == {"$pairs": [1, 2]}
    assert untag_table({"$pairs": [["a", 1], "b"]}) == {"$pairs": [["a", 1], "b"]}


@pytest.mark.parametrize("field, value, needle", [
    ("routing_key", {"$bytes": "***"}, "routing_key: bad $bytes"),
    ("headers", {"$pairs": [[{"$bytes": "***"}, 1]]}, "bad $bytes"),
])
def test_bad_tagged_names_are_named(field: str, value: Any, needle: str) -> None:
    line = orjson.dumps({"queue": "q", "body": "", field: value}) + b"\n"
    with pytest.raises(UsageError) as err:
        list(read_records(BytesIO(line), "dump.jsonl"))
    assert needle in str(err.value) and "dump.jsonl:1" in str(err.value)


names = st.one_of(st.binary(max_size=40), st.text(max_size=12))  # any bytes (mostly not UTF-8), or text
tables = st.recursive(
    amqp_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(names, inner, max_size=4)),
    max_leaves=20,
)


@FUZZ
@given(st.dictionaries(names, tables, max_size=5), st.binary(max_size=255), st.binary(max_size=255),
       st.binary(max_size=60))
@example({NOT_UTF8: {b"\xfe": [{b"\xff": 1}]}}, b"\xff", b"\xfe", b"\xfd")
def test_any_names_survive_record_json(headers: dict[Any, Any], routing_key: bytes, exchange: bytes,
                                       message_id: bytes) -> None:
    def name(raw: bytes) -> Any:  # what the codecs hand over: text where the bytes are UTF-8
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw

    record = MessageRecord(queue="q", body=b"", exchange=name(exchange), routing_key=name(routing_key),
                           properties={"message_id": name(message_id)}, headers=headers)
    _data, back = through_json(record)
    assert back == record
