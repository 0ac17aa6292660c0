from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dlxtool import extract
from dlxtool.decode_lines import decode_line
from proto_registry import DEMO_PROTOS, Registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return Registry.load([DEMO_PROTOS], cache_dir=tmp_path_factory.mktemp("proto-cache"))


PAYLOAD = b"\n\x06o-1001\x12\x04c-42\x18\x03*\x0cout of stock"  # an OrderCancelled


def datas(line: str) -> list[tuple[str, bytes]]:
    return [(c.encoding, c.data) for c in extract.candidates(line)]


@pytest.mark.parametrize(
    "line",
    [
        f"ERROR rejected {base64.b64encode(PAYLOAD).decode()} requeue=false",
        f"ERROR rejected {base64.b64encode(PAYLOAD).decode().rstrip('=')}",
        f"ERROR rejected {base64.urlsafe_b64encode(PAYLOAD).decode()}",
        json.dumps({"level": "error", "payload": base64.b64encode(PAYLOAD).decode()}).replace("/", "\\/"),
        f'ts=1 level=warn msg="nack" body="{base64.b64encode(PAYLOAD).decode()}"',
        f"got {PAYLOAD!r} from queue",
        "elixir: <<" + ", ".join(str(b) for b in PAYLOAD) + ">>",
        f"hex {PAYLOAD.hex()} end",
        f"hex 0x{PAYLOAD.hex()} end",
        "escaped " + "".join(f"\\x{b:02x}" for b in PAYLOAD),
    ],
)
def test_finds_the_payload(line: str) -> None:
    assert PAYLOAD in [d for _, d in datas(line)]


def test_json_escaped_slash_and_key() -> None:
    data = bytes([0xFF, 0xEF, 0xFF, 0x3F, 0x10, 0x20])  # base64 with '/' in it
    text = base64.b64encode(data).decode()
    assert "/" in text
    line = json.dumps({"body": text}).replace("/", "\\/")
    (cand,) = [c for c in extract.candidates(line) if c.data == data]
    assert cand.key == "body" and cand.strong
    assert line[cand.start : cand.end].replace("\\/", "/") == text


def test_words_are_not_candidates() -> None:
    assert extract.candidates("consumer rejecting redelivered delivery_tag OrderPlaced") == []


def test_decode_base64_variants() -> None:
    assert extract.decode_base64("CgNv") == (b"\n\x03o", "base64")
    assert extract.decode_base64("-_8") == (b"\xfb\xff", "base64url")
    assert extract.decode_base64("ab+c-d") is None  # mixed alphabets
    assert extract.decode_base64("abcde") is None  # impossible length


def test_decode_whole() -> None:
    assert extract.decode_whole(b"0a 03\n6f2d31", "hex") == b"\n\x03o-1"
    assert extract.decode_whole(base64.b64encode(PAYLOAD) + b"\n", "base64") == PAYLOAD
    with pytest.raises(ValueError):
        extract.decode_whole(b"zz", "hex")


def test_best_candidate_wins(registry: Registry) -> None:
    junk = base64.b64encode(b"\x8a\x99\x01garbage-bytes!").decode()
    good = base64.b64encode(PAYLOAD).decode()
    res = decode_line(registry, f"id={junk} payload={good}")
    assert res is not None and res.candidate.data == PAYLOAD
    assert res.decoded.type == "shop.orders.v1.OrderCancelled"
    assert res.decoded.message == {
        "orderId": "o-1001",
        "customerId": "c-42",
        "reason": "CANCEL_REASON_OUT_OF_STOCK",
        "note": "out of stock",
    }


def test_line_without_payload(registry: Registry) -> None:
    assert decode_line(registry, "2024-05-01 INFO consumer started on queue orders") is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_extractor_never_raises_on_text(line: str) -> None:
    for cand in extract.candidates(line):
        assert 0 <= cand.start < cand.end <= len(line)
        assert cand.data


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_extractor_and_decoder_survive_binary_garbage(data: bytes) -> None:
    line = data.decode("utf-8", "surrogateescape")
    extract.candidates(line)
    extract.candidates(data.decode("latin-1"))


def test_huge_line_is_bounded(registry: Registry) -> None:
    line = "x=" + "A" * (extract.MAX_LINE + 1000)
    extract.candidates(line)  # no exception, bounded work
    decode_line(registry, "payload=" + base64.b64encode(PAYLOAD).decode() + " " + "Q" * 100_000)


def test_content_kind_names_json_anywhere_and_text_only_where_a_payload_is_meant() -> None:
    assert extract.content_kind(b' {"id": 1}', strong=False) == "JSON"
    assert extract.content_kind(b"[1, 2]", strong=False) == "JSON"
    assert extract.content_kind(b"{not json", strong=False) is None
    assert extract.content_kind(b"out of stock", strong=True) == "text"
    assert extract.content_kind(b"out of stock", strong=False) is None  # a bare word decoding to text: chance
    assert extract.content_kind(b"\x0a\x02p1", strong=True) is None  # protobuf bytes are not text


@pytest.mark.parametrize(("line", "where"), [
    ("payload=CgdvLTAwMDEy!!!", "'!' at character 13 of 15"),  # issue 37: decoded as a 9-byte Money before
    ('{"body": "CgdvLTAwMDEy#x"}', "'#' at character 13 of 14"),
    ("data=0a076f2d30303030*", "'*' at character 17 of 17"),
])
def test_a_payload_value_that_is_no_base64_to_its_end_is_said_so(registry: Registry, line: str, where: str) -> None:
    [cand] = [c for c in extract.candidates(line) if c.encoding == "invalid"]
    assert cand.invalid is not None and cand.invalid.endswith(where)
    found = decode_line(registry, line)
    assert found is not None and found.decoded.status == "invalid" and found.decoded.message is None
    assert found.decoded.error == f"{cand.key}: not valid base64 or hex: {where}"


@pytest.mark.parametrize("line", [
    f"payload={base64.b64encode(PAYLOAD).decode()}. next",  # a sentence that ends after it
    f"payload={base64.b64encode(PAYLOAD).decode().replace('=', '%3D')}&next=1",  # URL-quoted
    f'msg="nack" body="{base64.b64encode(PAYLOAD).decode()}", tag=3',
])
def test_a_payload_value_that_ends_where_values_end_is_decoded_whole(line: str) -> None:
    assert PAYLOAD in [d for _, d in datas(line)]
    assert all(c.encoding != "invalid" for c in extract.candidates(line))


@pytest.mark.parametrize("line", ["value=3.14 unit=s", "value=1234567890.5", "id=CgdvLTAwMDEy!!!"])
def test_numbers_and_other_keys_are_no_invalid_payloads(line: str) -> None:
    assert all(c.encoding != "invalid" for c in extract.candidates(line))


def test_decode_whole_says_what_is_not_valid_and_where() -> None:
    with pytest.raises(ValueError, match=r"^not valid base64: '!' at character 15 of 16$"):
        extract.decode_whole(b"notbase64atall!!", "base64")
    with pytest.raises(ValueError, match=r"^not valid base64: 5 characters"):
        extract.decode_whole(b"abcde\n", "base64")
    with pytest.raises(ValueError, match=r"^not valid hex: 'z' at character 1 of 4$"):
        extract.decode_whole(b"zz zz", "hex")
    with pytest.raises(ValueError, match=r"^not valid hex: 3 digits"):
        extract.decode_whole(b"0a0", "hex")
    with pytest.raises(ValueError, match=r"^not valid base64: byte 0xff at byte 1 is not ASCII$"):
        extract.decode_whole(b"\xff\xfe", "base64")
