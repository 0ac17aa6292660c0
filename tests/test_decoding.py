"""dlxtool.decoding on payloads that do not decode whole: what is reported, what is not, and the run's outcome.
Pure logic against the demo schemas (no broker)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import uuid
import zlib

import pytest

from dlxtool import decode_lines, decoding
from dlxtool.outcome import Status
from proto_registry import DEMO_PROTOS, Registry

CUT = "CgZvLTEwMTcSCHBheS0xMDE="  # the demo's body cut by its proxy: order_id "o-1017", payment_id "pay-101…"


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return Registry.load([DEMO_PROTOS], cache_dir=tmp_path_factory.mktemp("proto-cache"))


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return Registry.load([], include_defaults=False, cache_dir=tmp_path_factory.mktemp("proto-cache"))


def line(registry: Registry, text: str, **kw: object) -> decoding.DecodedBody | None:
    found = decode_lines.decode_line(registry, text, **kw)  # type: ignore[arg-type]
    return None if found is None else found.decoded


def test_a_cut_payload_under_a_payload_key_is_reported_without_schemas(empty: Registry) -> None:
    got = line(empty, f"ERROR payload={CUT}")
    assert got is not None and got.status == "truncated" and (got.offset, got.size) == (8, 17)
    assert got.type is None and got.raw is not None and got.raw[0]["string"] == "o-1017"
    assert got.error == "cut short at byte 8 of 17: field 2 (len) declares 8 bytes, 7 left"


def test_the_fields_before_the_cut_are_named_after_the_type_that_explains_them(shop: Registry) -> None:
    got = line(shop, f"ERROR payload={CUT}", type_name="shop.orders.v1.PaymentCaptured")
    assert got is not None and got.status == "truncated" and got.type == "shop.orders.v1.PaymentCaptured"
    assert got.message == {"orderId": "o-1017"}
    assert got.raw is not None and got.raw[1]["name"] == "payment_id" and got.raw[1]["cut"] is True
    guessed = line(shop, f"ERROR payload={CUT}")  # no type given: the best-ranked, marked as the guess it is
    assert guessed is not None and guessed.type is not None and decoding.is_weak(guessed.to_dict())
    assert "shop.orders.v1.PaymentCaptured" in [guessed.type, *guessed.alternatives]
    # Types that declare field 2 as something else than length-delimited (Money.units) come after.
    assert guessed.raw is not None and guessed.raw[1].get("name") is not None


def test_a_bare_cut_token_counts_when_a_registered_type_explains_its_start(shop: Registry, empty: Registry) -> None:
    got = line(shop, f"WARN rejected {CUT} requeue=false")
    assert got is not None and got.status == "truncated" and got.explained
    assert line(empty, f"WARN rejected {CUT} requeue=false") is None  # nothing explains it: not evidence


@pytest.mark.parametrize("token", [str(uuid.UUID(int=7 ** 40)), hashlib.sha256(b"x").hexdigest(),
                                   hashlib.sha1(b"y").hexdigest(), "0123456789abcdef0123456789abcdef"])
def test_ids_and_hashes_in_a_log_line_are_not_payloads(shop: Registry, token: str) -> None:
    assert line(shop, f"INFO request {token} done") is None


def test_json_and_text_under_a_payload_key_stay_what_they_are(shop: Registry) -> None:
    js = line(shop, "payload=" + base64.b64encode(b'{"order": "o-42"}').decode())
    assert js is not None and js.status == decoding.NOT_PROTOBUF
    short = line(shop, "content=abc")  # 2 bytes under a payload-like key: not evidence of anything
    assert short is None


def test_a_malformed_payload_says_where_it_stops(shop: Registry) -> None:
    got = line(shop, "payload=" + base64.b64encode(b"\x0a\x02ok\x0f\xff\xfe\xfd").decode())
    assert got is not None and got.status == "malformed" and got.offset == 4
    assert got.error is not None and got.error.startswith("not protobuf from byte 4 of 8: wire type 7")


def test_whole_inputs_and_raw_mode_report_the_cut_too(shop: Registry) -> None:
    whole = decode_lines.decode_whole_input(shop, CUT.encode(), "base64")
    assert whole.decoded is not None and whole.decoded.status == "truncated" and whole.decoded.raw
    raw = line(shop, f"payload={CUT}", raw=True, want_text=True)
    assert raw is not None and raw.status == "truncated" and raw.text is not None
    assert "# cut short here: 7 of 8 bytes arrived" in raw.text


def test_compressed_payloads_decode_inflated_and_say_so(shop: Registry) -> None:
    msg = shop.message_class("shop.orders.v1.OrderCancelled")(order_id="o-77", customer_id="c-5", reason=2,
                                                              note="card declined")
    msg.cancelled_at.seconds = 1_714_000_000
    data = gzip.compress(msg.SerializeToString())
    got = line(shop, "payload=" + base64.b64encode(data).decode())
    assert got is not None and got.status == "match" and got.type == "shop.orders.v1.OrderCancelled"
    assert got.decompressed == {"from": "gzip", "compressed_bytes": len(data), "bytes": msg.ByteSize()}
    bomb = zlib.compress(b"\0" * (2 * 1024 * 1024))
    over = line(shop, "payload=" + base64.b64encode(bomb).decode(), max_inflated=1024 * 1024)
    assert over is not None and over.status == decoding.COMPRESSED and over.failed
    assert over.decompressed is not None and over.decompressed["over_cap"] == 1024 * 1024


def outcome(*statuses: str | None) -> decode_lines.Tally:
    tally = decode_lines.Tally()
    for status in statuses:
        body = None if status is None else decoding.DecodedBody(status=status)
        tally.add(decode_lines.LinePayload("-", 1, body))
    return tally


def test_the_run_fails_only_when_payloads_were_found_and_none_decoded() -> None:
    assert outcome().outcome().ok and outcome(None, None).outcome().ok  # no payload: pipelines go on
    assert outcome("truncated", "match").outcome().ok  # some decoded
    assert outcome("truncated", decoding.NOT_PROTOBUF).outcome().ok  # JSON is read whole, as JSON
    bad = outcome(None, "truncated", "truncated", "malformed").outcome()
    assert bad.status is Status.USAGE
    assert bad.message == "decode: 3 payloads found, none decoded (1 malformed, 2 cut short)"
