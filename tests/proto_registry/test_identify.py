from __future__ import annotations

import base64

import pytest
from google.protobuf.message import DecodeError as PbDecodeError

from proto_registry import EMPTY, MALFORMED, MATCH, NO_MATCH, Hints, Registry, UnknownTypeError
from tests.proto_registry.helpers import order_cancelled, order_placed


def test_every_message_type_is_a_candidate_but_map_entries(registry: Registry) -> None:
    names = registry.type_names
    assert "shop.orders.v1.PaymentFailed.Decline" in names  # nested
    assert not any(n.endswith("Entry") for n in names)  # map entries excluded
    assert "shop.orders.v1.OrderPlaced.MetadataEntry" in registry.index.by_name


def test_identifies_a_rich_message_uniquely(registry: Registry) -> None:
    res = registry.identify(order_placed(registry))
    assert res.status == MATCH
    assert res.best is not None and res.best.type == "shop.orders.v1.OrderPlaced"
    assert res.best.clean and not res.ambiguous
    assert res.best.confidence >= 0.9


def test_closed_enum_and_required_fields(registry: Registry) -> None:
    cls = registry.message_class("shop.legacy.v1.StockAdjusted")
    good = cls(sku="SKU-1", delta=-3, cause=2, bin_ids=[4, 5]).SerializeToString()
    res = registry.identify(good)
    assert res.best is not None and res.best.type == "shop.legacy.v1.StockAdjusted"
    # cause = 9 is outside the closed enum: no longer a clean StockAdjusted
    bad_enum = good + b"\x18\x09"
    res = registry.identify_as(bad_enum, "shop.legacy.v1.StockAdjusted")
    assert not res.matches[0].clean
    assert any("enum" in d for d in res.matches[0].defects)
    # required delta missing
    missing = cls(sku="SKU-1").SerializePartialToString()
    res = registry.identify_as(missing, "StockAdjusted")
    assert any("required" in d for d in res.matches[0].defects)


def test_indistinguishable_payload_is_flagged_with_equivalents(registry: Registry) -> None:
    # order_id + customer_id only: OrderPlaced, OrderCancelled, ... all read it cleanly.
    data = registry.message_class("shop.orders.v1.OrderCancelled")(order_id="o-1", customer_id="c").SerializeToString()
    res = registry.identify(data)
    assert res.ambiguous
    assert res.best is not None and res.best.confidence < 0.8
    # Every type that fits, ranked; the default list is its head: the types declaring the fewest fields.
    everyone = registry.identify(data, max_equivalent=1000).equivalent
    assert {"shop.orders.v1.OrderCancelled", "shop.orders.v1.OrderPlaced"} <= set(everyone)
    assert res.equivalent == everyone[:10] and res.equivalent_count == len(everyone) > 10
    counts = [len(registry.index.types[registry.index.by_name[n]].descriptor.fields) for n in everyone]
    assert counts == sorted(counts)


def test_distinguishing_field_removes_ambiguity(registry: Registry) -> None:
    res = registry.identify(order_cancelled(registry))
    assert res.best is not None and res.best.type == "shop.orders.v1.OrderCancelled"
    assert not res.ambiguous


def test_empty_payload_is_any_type(registry: Registry) -> None:
    res = registry.identify(b"")
    assert res.status == EMPTY and res.ambiguous and res.best is None
    assert res.equivalent_count == len(registry)


def test_malformed_and_unknown(registry: Registry) -> None:
    assert registry.identify(b"\xff\xff\xff").status == MALFORMED
    # Valid wire format, but field 900 is in no schema.
    assert registry.identify(b"\xa0\x38\x01").status == NO_MATCH


def test_trailing_garbage_lowers_confidence(registry: Registry) -> None:
    data = order_placed(registry)
    res = registry.identify(data + b"\xf8\x07\x01")  # unknown field 127
    assert res.best is not None and res.best.type == "shop.orders.v1.OrderPlaced"
    assert not res.best.clean and res.best.confidence < 0.5
    assert any("127" in d for d in res.best.defects)


UTF8_PROTOS = {
    "u/v3/text.proto": """syntax = "proto3";
package u.v3;
message Label { string name = 2; }
message Doc { Label label = 1; map<string, string> tags = 3; map<int32, Label> by_id = 4; }
""",
    "u/v3/blob.proto": """syntax = "proto3";
package u.v3;
message Chunk { bytes name = 2; }
message Blob { Chunk label = 1; map<string, bytes> tags = 3; map<int32, Chunk> by_id = 4; }
""",
    "u/ed/framed.proto": """edition = "2023";
package u.ed;
message Line { string text = 6; }
message Frame { Line line = 5 [features.message_encoding = DELIMITED]; }
message RawLine { bytes text = 6; }
message RawFrame { RawLine line = 5 [features.message_encoding = DELIMITED]; }
""",
}

BAD = b"\xff\xfe\xfd"  # not UTF-8


@pytest.fixture(scope="module")
def utf8_registry(tmp_path_factory: pytest.TempPathFactory, cache_dir) -> Registry:
    root = tmp_path_factory.mktemp("utf8")
    for name, text in UTF8_PROTOS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return Registry.load([root], include_defaults=False, cache_dir=cache_dir)


def _ld(tag: int, body: bytes) -> bytes:
    return bytes([tag, len(body)]) + body


# The text type and its bytes twin read the same bytes; where a string holds invalid UTF-8, protobuf
# rejects the text type (proto3 and editions verify UTF-8 at any depth), so only the twin fits.
@pytest.mark.parametrize(
    ("data", "text_type", "bytes_type", "defect"),
    [
        (_ld(0x12, BAD), "u.v3.Label", "u.v3.Chunk", "field 2 (name): invalid UTF-8"),
        (_ld(0x0A, _ld(0x12, BAD)), "u.v3.Doc", "u.v3.Blob", "field 1.2 (name): invalid UTF-8"),
        (_ld(0x1A, _ld(0x0A, b"k") + _ld(0x12, BAD)), "u.v3.Doc", "u.v3.Blob", "field 3.2 (value): invalid UTF-8"),
        (_ld(0x22, b"\x08\x07" + _ld(0x12, _ld(0x12, BAD))), "u.v3.Doc", "u.v3.Blob",
         "field 4.2.2 (name): invalid UTF-8"),
        (b"\x2b" + _ld(0x32, BAD) + b"\x2c", "u.ed.Frame", "u.ed.RawFrame", "field 5.6 (text): invalid UTF-8"),
    ],
    ids=["top level", "nested message", "map value", "message in a map value", "delimited (group-encoded) message"],
)
def test_invalid_utf8_at_depth_rules_out_the_string_type(
    utf8_registry: Registry, data: bytes, text_type: str, bytes_type: str, defect: str
) -> None:
    with pytest.raises(PbDecodeError):  # protobuf's own verdict, for the record
        utf8_registry.message_class(text_type).FromString(data)
    as_text = utf8_registry.identify_as(data, text_type).matches[0]
    assert not as_text.clean and not as_text.canonical
    assert as_text.defects == (defect,)
    res = utf8_registry.identify(data)
    assert res.best is not None
    assert (res.best.type, res.best.clean, res.best.canonical, res.ambiguous) == (bytes_type, True, True, False)
    assert res.equivalent == [bytes_type] and res.best.confidence > 0
    # The same shape with valid UTF-8: both fit, and the payload cannot tell them apart.
    good = data.replace(BAD, "é!".encode())
    res = utf8_registry.identify(good)
    assert res.ambiguous and sorted(res.equivalent) == sorted([text_type, bytes_type])


@pytest.mark.parametrize(
    "hints",
    [
        Hints(amqp_type="shop.orders.v1.OrderCancelled"),
        Hints(amqp_type="OrderCancelled"),
        Hints(amqp_type="order_cancelled"),
        Hints(content_type="application/x-protobuf; proto=shop.orders.v1.OrderCancelled"),
        Hints(content_type='application/protobuf; messageType="shop.orders.v1.OrderCancelled"'),
        Hints(type_url="type.googleapis.com/shop.orders.v1.OrderCancelled"),
    ],
)
def test_hints_pick_among_equivalents(registry: Registry, hints: Hints) -> None:
    data = registry.message_class("shop.orders.v1.OrderCancelled")(order_id="o-1", customer_id="c").SerializeToString()
    res = registry.identify(data, hints)
    assert res.best is not None and res.best.type == "shop.orders.v1.OrderCancelled"
    assert res.source == "hint" and not res.ambiguous and res.best.hinted


def test_hint_that_does_not_fit_is_not_obeyed(registry: Registry) -> None:
    res = registry.identify(order_placed(registry), Hints(amqp_type="shop.common.v1.Money"))
    assert res.best is not None and res.best.type == "shop.orders.v1.OrderPlaced"
    assert any("does not fit" in n for n in res.notes)


def test_grpc_and_confluent_framing(registry: Registry) -> None:
    data = order_cancelled(registry)
    grpc = b"\x00" + len(data).to_bytes(4, "big") + data
    res = registry.identify(grpc)
    assert res.framing is not None and res.framing.kind == "grpc"
    assert res.best is not None and res.best.type == "shop.orders.v1.OrderCancelled"
    confluent = b"\x00" + (17).to_bytes(4, "big") + b"\x00" + data
    res = registry.identify(confluent)
    assert res.framing is not None and res.framing.kind == "confluent" and res.framing.schema_id == 17
    assert res.framing.message_indexes == (0,)
    assert res.best is not None and res.best.type == "shop.orders.v1.OrderCancelled"


def test_any_envelope_decodes_inner_message(registry: Registry) -> None:
    env = registry.message_class("shop.events.v1.Envelope")(event_id="e-1", source="orders")
    env.payload.Pack(registry.message_class("shop.orders.v1.OrderCancelled")(order_id="o-9", reason=1))
    res = registry.identify(env.SerializeToString())
    assert res.best is not None and res.best.type == "shop.events.v1.Envelope"
    as_dict = registry.to_dict(registry.decode(res.payload, res.best.type))
    assert as_dict["payload"]["@type"].endswith("shop.orders.v1.OrderCancelled")
    assert as_dict["payload"]["orderId"] == "o-9"


def test_resolve_and_unknown_type(registry: Registry) -> None:
    assert registry.resolve_one("OrderPlaced") == "shop.orders.v1.OrderPlaced"
    with pytest.raises(UnknownTypeError) as e:
        registry.resolve_one("OrderPlacd")
    assert "OrderPlaced" in (e.value.hint or "")


def test_raw_decode_shows_structure(registry: Registry) -> None:
    raw = registry.decode_raw(order_cancelled(registry))
    assert raw is not None
    assert raw[0] == {"field": 1, "wire_type": "len", "string": "o-1001"}
    assert {"field": 3, "wire_type": "varint", "value": 3, "zigzag": -2} in raw
    assert registry.decode_raw(b"\xff") is None


def test_memo_returns_same_answer(registry: Registry) -> None:
    data = base64.b64decode(base64.b64encode(order_placed(registry)))
    first = registry.identify(data)
    registry.memo_size = 0
    try:
        second = registry.identify(data)
    finally:
        registry.memo_size = 4096
    assert first.best is not None and second.best is not None
    assert (first.best.type, first.ambiguous, first.equivalent) == (
        second.best.type,
        second.ambiguous,
        second.equivalent,
    )
