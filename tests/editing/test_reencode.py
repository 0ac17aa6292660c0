"""dlxtool.editing.reencode (`load --reencode`): a record whose `decoded` was changed gets the body that says it; an
unchanged one keeps its bytes. Records as dump writes them (dlxtool.decoding.record_decoder)."""

from __future__ import annotations

import json
import zlib

import pytest
from google.protobuf.unknown_fields import UnknownFieldSet

from dlxtool.decoding import record_decoder
from dlxtool.editing.reencode import Reencoder
from dlxtool.errors import UsageError
from dlxtool.record import MessageRecord
from proto_registry import DEMO_PROTOS, Registry

ORDER = "shop.orders.v1.OrderPlaced"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return Registry.load([DEMO_PROTOS], cache_dir=tmp_path_factory.mktemp("proto-cache"))


def dumped(record: MessageRecord) -> MessageRecord:
    """The record as `dump` writes it and `load` reads it back (through JSON)."""
    record.decoded = record_decoder([], demo=True)(record)
    return MessageRecord.from_json(json.loads(record.to_jsonl()))


def test_an_unchanged_protobuf_record_keeps_its_bytes_and_a_changed_one_is_reencoded(registry) -> None:
    msg = registry.message_class(ORDER)(order_id="o-1")
    msg.total.currency_code = "EUR"
    body = msg.SerializeToString() + b"\xa0\x1f\x05"  # a field the schema does not know
    record = dumped(MessageRecord("q", body, properties={"type": ORDER}))
    assert record.decoded is not None and record.decoded["type"] == ORDER
    reencode = Reencoder(lambda: registry)
    assert reencode(record, "f:1").body == body
    record.decoded["message"]["total"]["currencyCode"] = "USD"
    out = reencode(record, "f:1")
    got = registry.message_class(ORDER).FromString(out.body)
    assert got.total.currency_code == "USD" and got.order_id == "o-1"
    assert [f.field_number for f in UnknownFieldSet(got)] == [500]
    assert reencode.reencoded == 1


def test_json_records_compact_and_compressed(registry) -> None:
    body = zlib.compress(b'{"amount": 10,\n "currency": "EUR"}')
    record = dumped(MessageRecord("q", body, properties={"content_type": "application/json"},
                                  headers={"compression": "application/x-gzip"}))
    assert record.decoded == {"status": "json", "type": None, "message": {"amount": 10, "currency": "EUR"},
                              "decompressed": {"from": "zlib", "compressed_bytes": len(body), "bytes": 34}}
    reencode = Reencoder(lambda: None)
    assert reencode(record, "f:1").body == body
    record.decoded["message"]["amount"] = 10.0  # as jq may write it back: the same number
    assert reencode(record, "f:1").body == body
    record.decoded["message"]["currency"] = "USD"
    assert zlib.decompress(reencode(record, "f:1").body) == b'{"amount":10.0,"currency":"USD"}'


def test_records_without_a_decoded_message_are_published_as_their_body() -> None:
    record = MessageRecord("q", b"\x00\x01", decoded=None)
    assert Reencoder(lambda: None)(record, "f:1") is record


def test_a_record_that_cannot_be_reencoded_names_the_file_line(registry) -> None:
    msg = registry.message_class(ORDER)(order_id="o-1")
    record = dumped(MessageRecord("q", msg.SerializeToString(), properties={"type": ORDER}))
    assert record.decoded is not None
    record.decoded["message"]["orderNumber"] = "x"
    with pytest.raises(UsageError, match=r"^f:7: decoded.message: .*no field named \"orderNumber\""):
        Reencoder(lambda: registry)(record, "f:7")
    with pytest.raises(UsageError, match="no protobuf schemas are loaded"):
        Reencoder(lambda: None)(record, "f:7")
    record.decoded["type"] = "shop.Nope"
    with pytest.raises(UsageError, match="'shop.Nope' is not a type"):
        Reencoder(lambda: registry)(record, "f:7")
