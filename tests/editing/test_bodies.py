"""dlxtool.editing.bodies: bodies opened for editing and closed again — unchanged ones keep their bytes, changed
protobuf keeps its unknown fields, compressed and framed bodies are closed as they were. A hypothesis round trip
(decode → JSON → encode) over every type of the demo schemas."""

from __future__ import annotations

import base64
import gzip
import random
import zlib

import pytest
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlxtool.editing.bodies import (
    BASE64,
    JSON,
    PROTOBUF,
    TEXT,
    BodyError,
    SchemaError,
    apply_json,
    compress,
    same_json,
    view_body,
)
from proto_registry import DEMO_PROTOS, Registry
from tests.proto_registry.randmsg import fill

ORDER = "shop.orders.v1.OrderPlaced"
UNKNOWN = b"\xa0\x1f\x05"  # field 500, varint 5: a field a newer producer added


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return Registry.load([DEMO_PROTOS], cache_dir=tmp_path_factory.mktemp("proto-cache"))


def order(registry: Registry, **fields: object) -> Message:
    msg = registry.message_class(ORDER)(order_id="o-1", customer_id="c-9")
    msg.total.currency_code = "EUR"
    msg.total.units = 12
    for name, value in fields.items():
        setattr(msg, name, value)
    return msg


# -- views -------------------------------------------------------------------------------------------------------


def test_a_typed_protobuf_body_is_shown_as_its_json_mapping_and_an_unedited_one_keeps_its_bytes(registry) -> None:
    body = order(registry).SerializeToString() + UNKNOWN
    view = view_body(body, {"type": ORDER}, {}, lambda: registry)
    assert view.kind == PROTOBUF and view.type_name == ORDER
    assert '"currencyCode": "EUR"' in view.text
    assert "field 500" in view.describe()  # the field the schema does not know is said, and kept
    assert view.read(view.text, lambda: registry) is None
    # formatting alone (the editor re-indented it) is no change either
    assert view.read(view.text.replace("\n", " "), lambda: registry) is None


def test_an_edited_protobuf_keeps_unknown_fields_and_changes_only_what_was_edited(registry) -> None:
    body = order(registry).SerializeToString() + UNKNOWN
    view = view_body(body, {"type": ORDER}, {}, lambda: registry)
    out = view.read(view.text.replace('"EUR"', '"USD"'), lambda: registry)
    assert out is not None
    msg = registry.message_class(ORDER).FromString(out)
    assert msg.total.currency_code == "USD" and msg.order_id == "o-1" and msg.total.units == 12
    assert [(f.field_number, f.data) for f in UnknownFieldSet(msg)] == [(500, 5)]
    assert "field-number order" in view.how_edited()


def test_a_value_the_schema_rejects_names_the_field(registry) -> None:
    view = view_body(order(registry).SerializeToString(), {"type": ORDER}, {}, lambda: registry)
    with pytest.raises(SchemaError) as err:
        view.read(view.text.replace('"currencyCode"', '"currency"'), lambda: registry)
    assert err.value.field == "currency" and "Money" in err.value.message
    with pytest.raises(SchemaError) as err:
        view.read(view.text.replace('"orderId": "o-1"', '"orderId": "o-1", "channel": "BY_PIGEON"'),
                  lambda: registry)
    assert err.value.field == "channel"
    with pytest.raises(BodyError, match="not valid JSON"):
        view.read(view.text + ",", lambda: registry)


def test_a_proto2_message_missing_a_required_field_is_refused(registry) -> None:
    msg = registry.message_class("shop.legacy.v1.StockAdjusted")(sku="s-1", delta=-3)
    view = view_body(msg.SerializeToString(), {"type": "shop.legacy.v1.StockAdjusted"}, {}, lambda: registry)
    with pytest.raises(BodyError, match="sku"):
        view.read(view.text.replace('"sku": "s-1",', ""), lambda: registry)


def test_confluent_and_grpc_framings_are_kept(registry) -> None:
    payload = order(registry).SerializeToString()
    confluent = b"\x00\x00\x00\x00\x07\x00" + payload  # schema id 7, message index 0
    grpc = b"\x00" + len(payload).to_bytes(4, "big") + payload
    for body, check in ((confluent, lambda out: out.startswith(confluent[:6])),
                        (grpc, lambda out: out[1:5] == (len(out) - 5).to_bytes(4, "big"))):
        view = view_body(body, {"type": ORDER}, {}, lambda: registry)
        assert view.kind == PROTOBUF, body[:8]
        out = view.read(view.text.replace('"o-1"', '"order-0001"'), lambda: registry)
        assert out is not None and check(out)
        assert registry.message_class(ORDER).FromString(out[len(body) - len(payload):]).order_id == "order-0001"


@pytest.mark.parametrize("method", ["gzip", "zlib", "deflate"])
def test_compressed_bodies_are_edited_inflated_and_compressed_again_the_same_way(method) -> None:
    body = compress(b'{"amount": 10, "currency": "EUR"}', method)
    view = view_body(body, {"content_type": "application/json", "content_encoding": method}, {}, lambda: None)
    assert view.kind == JSON and f"{method}-compressed" in view.describe()
    assert view.read(view.text, lambda: None) is None
    out = view.read(view.text.replace("EUR", "USD"), lambda: None)
    assert out is not None
    wbits = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS, "deflate": -zlib.MAX_WBITS}[method]
    assert zlib.decompress(out, wbits) == view.text.replace("EUR", "USD").encode()
    if method == "gzip":
        assert out[:2] == b"\x1f\x8b"


def test_kombu_labels_zlib_bytes_gzip_and_they_go_back_as_zlib() -> None:
    body = zlib.compress(b"hello")
    view = view_body(body, {}, {"compression": "application/x-gzip"}, lambda: None)
    assert view.kind == TEXT and view.text == "hello"
    out = view.read("HELLO", lambda: None)
    assert out is not None and zlib.decompress(out) == b"HELLO"


def test_an_edited_json_body_is_published_as_saved_and_a_reformatted_one_is_not_edited() -> None:
    body = b'{"a":1,"b":[1,2]}'
    view = view_body(body, {"content_type": "application/json"}, {}, lambda: None)
    assert view.kind == JSON
    assert view.read('{"b": [1, 2.0], "a": 1}', lambda: None) is None  # same value: the original bytes stay
    saved = '{\n  "a": 2,\n  "b": [1, 2]\n}'
    assert view.read(saved, lambda: None) == saved.encode()
    with pytest.raises(BodyError) as err:
        view.read('{\n  "a": 1,\n  "b": NaN\n}', lambda: None)
    assert err.value.line == 0 or err.value.line == 3


def test_text_and_binary_bodies() -> None:
    text = view_body(b"line one\nline two\n", {}, {}, lambda: None)
    assert text.kind == TEXT and text.text == "line one\nline two\n"
    assert text.read("line one\nline 2\n", lambda: None) == b"line one\nline 2\n"
    for odd in (b"\x00\xff\x10", b"a\r\nb", b"### message 1\n", "caf\u00e9".encode("latin-1")):
        view = view_body(odd, {}, {}, lambda: None)
        assert view.kind == BASE64, odd
        assert base64.b64decode(view.text) == odd
        assert view.read(view.text, lambda: None) is None
        assert view.read(base64.b64encode(odd + b"!").decode(), lambda: None) == odd + b"!"
    with pytest.raises(BodyError, match="base64"):
        view.read("not base64 !", lambda: None)


def test_a_compression_dlxtool_does_not_inflate_is_shown_as_it_is() -> None:
    view = view_body(b"BZh9...", {}, {"compression": "application/x-bz2"}, lambda: None)
    assert view.kind in (TEXT, BASE64) and "does not inflate" in view.describe()
    assert view.wrapping.compression is None


def test_a_gzip_body_that_does_not_inflate_is_shown_as_it_is() -> None:
    body = gzip.compress(b"x" * 100)[:20]
    view = view_body(body, {"content_encoding": "gzip"}, {}, lambda: None)
    assert view.kind == BASE64 and view.wrapping.compression is None and "cut short" in view.describe()


def test_same_json_tells_booleans_from_numbers_but_not_1_from_1_0() -> None:
    assert same_json({"a": 1, "b": [1.0]}, {"b": [1], "a": 1.0})
    assert not same_json({"a": True}, {"a": 1})
    assert not same_json([1, 2], [2, 1])
    assert not same_json({"a": None}, {})


# -- the round trip, over every type of the demo schemas ---------------------------------------------------------



def _json_safe(msg: Message, rng: random.Random, registry: Registry) -> None:
    """randmsg fills well-known types with values their JSON mapping cannot carry (a Timestamp past year 9999, an
    Any naming no type): made representable."""
    for fd, value in list(msg.ListFields()):
        if fd.message_type is None:
            continue
        items = list(value.values()) if fd.message_type.GetOptions().map_entry and \
            fd.message_type.fields_by_name["value"].message_type is not None else \
            (list(value) if fd.is_repeated and not fd.message_type.GetOptions().map_entry else
             [] if fd.is_repeated else [value])
        for sub in items:
            name = sub.DESCRIPTOR.full_name
            if name == "google.protobuf.Timestamp":
                sub.seconds, sub.nanos = rng.randint(0, 253402300799), rng.randint(0, 999_999_999)
            elif name == "google.protobuf.Any":
                money = registry.message_class("shop.common.v1.Money")(currency_code="EUR", units=rng.randint(0, 99))
                sub.Pack(money)
            else:
                _json_safe(sub, rng, registry)


def _random(registry: Registry, type_name: str, seed: int) -> Message:
    rng = random.Random(seed)
    msg = registry.message_class(type_name)()
    fill(msg, rng)
    _json_safe(msg, rng, registry)
    if msg.DESCRIPTOR.full_name == "shop.legacy.v1.StockAdjusted":  # proto2: its required fields
        msg.sku, msg.delta = msg.sku or "s", msg.delta
    return msg


SHOP_TYPES = ["shop.common.v1.Money", "shop.common.v1.Address", "shop.common.v1.LineItem", "shop.events.v1.Envelope",
              "shop.legacy.v1.StockAdjusted", "shop.orders.v1.OrderPlaced", "shop.orders.v1.OrderCancelled",
              "shop.orders.v1.OrderShipped", "shop.orders.v1.PaymentCaptured", "shop.orders.v1.PaymentFailed",
              "shop.orders.v1.PaymentFailed.Decline", "shop.orders.v1.InventoryReserved",
              "shop.orders.v1.InventoryReservationFailed", "shop.orders.v1.RefundIssued"]


def test_the_round_trip_covers_every_shop_type(registry) -> None:
    assert sorted(SHOP_TYPES) == sorted(t for t in registry.type_names if t.startswith("shop."))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(type_name=st.sampled_from(SHOP_TYPES), seed=st.integers(0, 2**32), other=st.integers(0, 2**32))
def test_decode_json_encode_round_trip(registry, type_name, seed, other) -> None:
    cls = registry.message_class(type_name)
    original = _random(registry, type_name, seed)
    body = original.SerializeToString() + UNKNOWN
    shown = registry.to_dict(cls.FromString(body))
    # decode → JSON → encode, unchanged: nothing to re-encode (the original bytes stay)
    assert apply_json(registry, type_name, body, shown) is None
    # …with another message's JSON: the result says exactly that JSON, and the unknown field survives
    wanted = registry.to_dict(_random(registry, type_name, other))
    out = apply_json(registry, type_name, body, wanted)
    if out is None:
        assert same_json(shown, wanted)
        return
    got = cls.FromString(out)
    assert same_json(registry.to_dict(got), wanted)
    assert [(f.field_number, f.data) for f in UnknownFieldSet(got)] == [(500, 5)]
