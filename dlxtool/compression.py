"""Compressed message bodies: which ones are, and their bytes inflated — never past a cap.

A body is compressed when its AMQP `content_encoding` says gzip, deflate or zlib, or when kombu's `compression`
header names gzip or zlib (kombu writes `application/x-gzip` for both its "gzip" and "zlib" aliases, and its
bytes are zlib-wrapped either way: the wrapper is read from the bytes, not from the label). What is shown and
decoded is the inflated body; the message itself (replay, dump, load, records) keeps its raw bytes.

Inflating reads the body through zlib's incremental decompressobj with `max_length`, a chunk at a time: a body
that inflates past `max_inflated` (a zip bomb: 1 MiB of zeros deflates to 1 KiB) is stopped there and shown as
compressed, with its ratio. Pure logic on the standard library: no click, no broker.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The cap on what one body may inflate to. The caller's byte budget (dlxtool's max_bytes) is passed in as
# `max_inflated` where it is smaller: this module never decides a budget, it only keeps to one.
DEFAULT_MAX_INFLATED = 256 * 1024 * 1024
CHUNK = 64 * 1024  # output produced per decompress call: what is held beyond what the caller keeps

GZIP, ZLIB, DEFLATE = "gzip", "zlib", "deflate"
# content_encoding values (HTTP's names, as AMQP producers use them) and kombu's `compression` header values.
_ENCODINGS = {"gzip": GZIP, "x-gzip": GZIP, "deflate": DEFLATE, "zlib": ZLIB, "x-zlib": ZLIB}
_KOMBU = {"application/x-gzip": GZIP, "application/gzip": GZIP, "application/zlib": ZLIB,
          "application/x-zlib": ZLIB, "application/deflate": DEFLATE, "gzip": GZIP, "zlib": ZLIB}


@dataclass(frozen=True, slots=True)
class Declared:
    """What a message says about its body's compression: `method` (gzip, zlib, deflate) when dlxtool can
    inflate it, None for a compression it cannot (kombu's bzip2, lzma, brotli, zstd); `label` as written."""

    method: str | None
    label: str  # e.g. "content_encoding: gzip", "compression: application/x-bz2"


@dataclass(frozen=True, slots=True)
class Inflated:
    """A body inflated (or not). `data` is its first `keep` inflated bytes (all of them when `complete`);
    `size` the inflated size, None when it inflates past the cap (then `data` holds at most its first CHUNK
    inflated bytes)."""

    method: str  # gzip | zlib | deflate: what the bytes are, whatever the label said
    compressed_size: int
    size: int | None
    data: bytes
    complete: bool  # data is the whole inflated body
    cap: int
    error: str | None = None  # the bytes do not inflate (not that format, cut short)

    @property
    def ok(self) -> bool:
        """Inflated within the cap, the stream whole and checked: `data` is the body to show (all of it
        when `complete`, else its first bytes)."""
        return self.error is None and self.size is not None

    @property
    def over_cap(self) -> bool:
        return self.error is None and self.size is None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"from": self.method, "compressed_bytes": self.compressed_size}
        if self.size is not None:
            d["bytes"] = self.size
        if self.over_cap:
            d["over_cap"] = self.cap
        if self.error:
            d["error"] = self.error
        return d

    def label(self) -> str:
        return label(self.to_dict())


def label(info: Mapping[str, Any]) -> str:
    """For people, from Inflated.to_dict() (as a record's `decoded.decompressed` keeps it): `decompressed from
    gzip, 1.2 KiB → 8 KiB`, or why the body is shown compressed."""
    method = info.get("from", "?")
    raw = human_size(int(info.get("compressed_bytes") or 0))
    if info.get("error"):
        return f"{method}-compressed, {raw}, does not inflate ({info['error']}): shown as it is"
    if info.get("over_cap"):
        ratio = int(info["over_cap"]) / max(int(info.get("compressed_bytes") or 0), 1)
        return (f"{method}-compressed, {raw}, inflates past {human_size(int(info['over_cap']))} "
                f"(ratio over {ratio:,.0f}:1): shown compressed")
    return f"decompressed from {method}, {raw} → {human_size(int(info.get('bytes') or 0))}"


def declared(properties: Mapping[str, Any] | None, headers: Mapping[str, Any] | None) -> Declared | None:
    """The body's compression as the message declares it, or None when it declares none."""
    encoding = _text((properties or {}).get("content_encoding"))
    if encoding:
        method = _ENCODINGS.get(encoding.strip().lower())
        if method is not None:
            return Declared(method, f"content_encoding: {encoding}")
    kombu = _text((headers or {}).get("compression")) if isinstance(headers, Mapping) else None
    if kombu:
        name = kombu.strip().lower()
        return Declared(_KOMBU.get(name), f"compression: {kombu}")
    return None


def sniff(data: bytes) -> str | None:
    """gzip or zlib when `data` starts the way those streams must (gzip's magic; zlib's header, whose check
    bits make a chance match 1 in 31 — inflate() then proves it with the stream's own checksum)."""
    if data[:3] == b"\x1f\x8b\x08":
        return GZIP
    if len(data) >= 2 and data[0] & 0x0F == 8 and data[0] >> 4 <= 7 and (data[0] << 8 | data[1]) % 31 == 0:
        return ZLIB
    return None


def inflate(body: bytes, method: str, *, max_inflated: int = DEFAULT_MAX_INFLATED,
            keep: int | None = None) -> Inflated:
    """Inflate `body` (gzip, zlib or deflate) a chunk at a time, keeping its first `keep` bytes (default: all,
    up to the cap) and counting the rest; stopped as soon as it passes `max_inflated`."""
    keep = max_inflated if keep is None else min(keep, max_inflated)
    actual = sniff(body) or method
    got = _inflate(body, actual, max_inflated, keep)
    if got.error and method == DEFLATE and actual != DEFLATE:  # raw deflate that happens to start like zlib
        got = _inflate(body, DEFLATE, max_inflated, keep)
    return got


def _inflate(body: bytes, actual: str, max_inflated: int, keep: int) -> Inflated:
    wbits = {GZIP: 16 + zlib.MAX_WBITS, ZLIB: zlib.MAX_WBITS, DEFLATE: -zlib.MAX_WBITS}[actual]
    kept = _Kept(keep)
    size = 0
    rest = body
    try:
        while rest:
            stream = zlib.decompressobj(wbits)
            while True:
                piece = stream.decompress(rest, CHUNK)
                size += len(piece)
                kept.add(piece)
                if size > max_inflated:  # not inflated: only its first bytes are kept (not a copy of the cap)
                    return Inflated(actual, len(body), None, kept.data(CHUNK), False, max_inflated)
                rest = stream.unconsumed_tail
                if stream.eof or not (rest or piece):
                    break
            if not stream.eof:
                return Inflated(actual, len(body), size, kept.data(), False, max_inflated,
                                error=f"the {actual} stream is cut short")
            rest = stream.unused_data
            if rest and actual != GZIP:  # gzip allows members one after another; zlib and deflate end here
                return Inflated(actual, len(body), size, kept.data(), False, max_inflated,
                                error=f"{len(rest):,} bytes after the end of the {actual} stream")
    except zlib.error as exc:
        return Inflated(actual, len(body), size, kept.data(), False, max_inflated, error=f"not {actual}: {exc}")
    return Inflated(actual, len(body), size, kept.data(), kept.size == size, max_inflated)


class _Kept:
    """The first `limit` inflated bytes, as the chunks they came in (a growing bytearray would hold up to
    twice the cap while it reallocates): joined once, at the end."""

    def __init__(self, limit: int) -> None:
        self.limit, self.size = limit, 0
        self.chunks: list[bytes] = []

    def add(self, piece: bytes) -> None:
        if self.size < self.limit and piece:
            piece = piece[: self.limit - self.size]
            self.chunks.append(piece)
            self.size += len(piece)

    def data(self, limit: int | None = None) -> bytes:
        if limit is not None:
            return b"".join(self.chunks[: limit // CHUNK + 1])[:limit]
        data = b"".join(self.chunks)
        self.chunks = [data]
        return data


def human_size(n: int) -> str:
    """1,234 B, 1.2 KiB, 8 KiB, 256 MiB: sizes as people read them."""
    if n < 1024:
        return f"{n:,} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            return f"{value:.1f} {unit}".replace(".0 ", " ")
    raise AssertionError("unreachable")


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class View:
    """A body as it is shown: `data` (inflated when it could be, else the raw bytes), `note` saying which, and
    `short` for a table cell."""

    data: bytes
    note: str | None = None
    short: str | None = None


def view(body: bytes, properties: Mapping[str, Any] | None, headers: Mapping[str, Any] | None, *,
         keep: int | None = None, max_inflated: int = DEFAULT_MAX_INFLATED) -> View:
    """How to show `body`: inflated (its first `keep` bytes) when its message declares a compression dlxtool
    inflates and it inflates within `max_inflated`; else the raw bytes, with why."""
    how = declared(properties, headers)
    if how is None:
        return View(body)
    if how.method is None:
        return View(body, f"compressed ({how.label}), not inflated by dlxtool: shown as it is", "[compressed]")
    got = inflate(body, how.method, max_inflated=max_inflated, keep=keep)
    if got.ok and got.size is not None:
        return View(got.data, f"body: {got.label()}",
                    f"[{got.method} {human_size(got.compressed_size)}→{human_size(got.size)}]")
    if got.over_cap:
        return View(body, f"body: {got.label()}", f"[{got.method} >{human_size(got.cap)}, not inflated]")
    return View(body, f"body: {got.label()}", f"[{got.method}? does not inflate]")


def short_label(info: Mapping[str, Any]) -> str:
    """The table cell's form of label(): `[gzip 1.2 KiB→8 KiB]`."""
    return f"[{info.get('from', '?')} {human_size(int(info.get('compressed_bytes') or 0))}→" \
           f"{human_size(int(info.get('bytes') or 0))}]"


def inflated_whole(body: bytes, properties: Mapping[str, Any] | None, headers: Mapping[str, Any] | None, *,
                   max_inflated: int = DEFAULT_MAX_INFLATED) -> tuple[bytes, str | None, str | None]:
    """(the body to read, the compression its bytes are in, a note): a body its message declares compressed,
    inflated whole within `max_inflated`, with the method its bytes really are (to compress an edited body the same
    way); else the bytes as they are, with why where they are compressed."""
    how = declared(properties, headers)
    if how is None:
        return body, None, None
    if how.method is None:
        return body, None, f"compressed ({how.label}), which dlxtool does not inflate: shown as it is"
    got = inflate(body, how.method, max_inflated=max_inflated)
    if not got.ok or not got.complete:
        return body, None, f"{got.label()}: shown as it is"
    return got.data, got.method, None
