"""dlxtool.compression: declared compressions, bounded inflating, labels. Pure logic (zlib from the stdlib)."""

from __future__ import annotations

import gzip
import zlib

import pytest

from dlxtool import compression
from dlxtool.compression import DEFLATE, GZIP, ZLIB, declared, inflate, sniff, view

BODY = b'{"order": "o-42", "lines": [' + b'{"sku": "A-1", "qty": 2},' * 300 + b"]}"
SIZE = compression.human_size(len(BODY))  # 7.4 KiB


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


@pytest.mark.parametrize(("packed", "method", "actual"), [
    (gzip.compress(BODY), GZIP, GZIP),
    (zlib.compress(BODY), ZLIB, ZLIB),
    (zlib.compress(BODY), GZIP, ZLIB),  # kombu: "application/x-gzip" on zlib-wrapped bytes
    (zlib.compress(BODY), DEFLATE, ZLIB),  # HTTP's deflate is zlib-wrapped
    (raw_deflate(BODY), DEFLATE, DEFLATE),  # ... or raw, as many senders write it
    (gzip.compress(BODY[:100]) + gzip.compress(BODY[100:]), GZIP, GZIP),  # gzip members one after another
], ids=["gzip", "zlib", "kombu-x-gzip", "deflate-zlib", "deflate-raw", "gzip-members"])
def test_inflates_what_the_bytes_are_whatever_the_label(packed: bytes, method: str, actual: str) -> None:
    got = inflate(packed, method)
    assert got.ok and got.complete and got.data == BODY and got.size == len(BODY)
    assert got.method == actual and got.compressed_size == len(packed)
    assert got.label() == f"decompressed from {actual}, {compression.human_size(len(packed))} → {SIZE}"


def test_a_zip_bomb_stops_at_the_cap_and_says_its_ratio() -> None:
    bomb = zlib.compress(b"\0" * (20 * 1024 * 1024), 9)  # 20 MiB of zeros in ~20 KiB
    got = inflate(bomb, ZLIB, max_inflated=1024 * 1024, keep=100)
    assert got.over_cap and not got.ok and got.size is None
    assert got.data == b"\0" * 100  # keeps no more than asked for
    assert "inflates past 1 MiB" in got.label() and "shown compressed" in got.label()
    assert f"ratio over {1024 * 1024 // len(bomb)}:1" in got.label()
    assert inflate(bomb, ZLIB, max_inflated=20 * 1024 * 1024).ok  # at the cap exactly: inflated


def test_keep_bounds_what_is_held_while_the_size_is_counted_whole() -> None:
    got = inflate(gzip.compress(BODY), GZIP, keep=10)
    assert got.ok and not got.complete and got.data == BODY[:10] and got.size == len(BODY)


@pytest.mark.parametrize(("packed", "method", "error"), [
    (zlib.compress(BODY)[:40], ZLIB, "cut short"),
    (b"plain text, not compressed", GZIP, "not gzip"),
    (zlib.compress(BODY) + b"junk", ZLIB, "4 bytes after the end"),
])
def test_bytes_that_do_not_inflate_say_why(packed: bytes, method: str, error: str) -> None:
    got = inflate(packed, method)
    assert not got.ok and got.error is not None and error in got.error
    assert "does not inflate" in got.label()


def test_declared_by_content_encoding_or_kombus_header() -> None:
    assert declared({"content_encoding": "GZIP"}, {}) == compression.Declared(GZIP, "content_encoding: GZIP")
    assert declared({"content_encoding": "deflate"}, None).method == DEFLATE
    assert declared({"content_encoding": "utf-8"}, {"compression": "application/x-gzip"}).method == GZIP
    assert declared({}, {"compression": b"application/zlib"}).method == ZLIB
    bz2 = declared({}, {"compression": "application/x-bz2"})
    assert bz2 is not None and bz2.method is None  # declared, not one dlxtool inflates
    assert declared({"content_encoding": "utf-8"}, {}) is None
    assert declared({}, {"compression": 5}) is None


def test_sniff_knows_gzip_and_zlib_headers_only() -> None:
    assert sniff(gzip.compress(b"x")) == GZIP
    assert all(sniff(zlib.compress(b"x", level)) == ZLIB for level in (1, 6, 9))
    assert sniff(b"\x0a\x03abc") is None and sniff(b"") is None


def test_view_of_a_body_for_people() -> None:
    packed = gzip.compress(BODY)
    shown = view(packed, {"content_encoding": "gzip"}, {}, keep=20)
    assert shown.data == BODY[:20] and shown.note == f"body: decompressed from gzip, {len(packed)} B → {SIZE}"
    assert shown.short == f"[gzip {len(packed)} B→{SIZE}]"
    assert view(packed, {}, {}).data == packed and view(packed, {}, {}).note is None  # nothing declared
    bomb = zlib.compress(b"\0" * (2 * 1024 * 1024))
    over = view(bomb, {}, {"compression": "application/x-gzip"}, max_inflated=1024 * 1024)
    assert over.data == bomb and over.short == "[zlib >1 MiB, not inflated]"
    assert view(b"x", {}, {"compression": "application/x-lzma"}).short == "[compressed]"


def test_human_sizes() -> None:
    assert [compression.human_size(n) for n in (0, 1023, 1024, 1229, 8192, 256 * 1024 * 1024)] == [
        "0 B", "1,023 B", "1 KiB", "1.2 KiB", "8 KiB", "256 MiB"]
