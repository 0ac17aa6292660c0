"""What a replayed copy carries to tell where it came from (the `dlxtool-replay` header), and how copies
are paired with their sources after a kill -9 (Pairs).

Shared by replay (which writes the header and keeps --max-replays over a run) and history (which marks
the copies a kill left): history must not import replay's workflow (the engine, capacity) for it."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from dlxtool.amqp_values import StringEntry, decode_field_value, encode_entries, table_entry
from dlxtool.json_shapes import is_object
from dlxtool.ops.stay import Stay, Why

if TYPE_CHECKING:
    from collections.abc import Mapping


class Fingerprinted(Protocol):
    """What a fingerprint reads of a message (dlxtool.record.MessageRecord is one): here as a protocol, so that the
    record model, which names messages by their fingerprints, and this module need not import each other."""

    @property
    def body(self) -> bytes: ...

    @property
    def properties(self) -> Mapping[str, Any]: ...

PROVENANCE_HEADER = "dlxtool-replay"
_CONTENT_TYPE, _CONTENT_ENCODING, _HEADERS, _MORE_FLAGS = 0x8000, 0x4000, 0x2000, 0x0001


def source_fingerprint(properties: bytes, body: bytes) -> str:
    """The provenance `src` of a copy made from this delivery: 16 hex digits of a hash of its body and its
    encoded properties without the headers. Not the headers: the queue adds x-delivery-count to a source
    a kill left behind when it redelivers it (quorum), and a header value Python would encode back
    differently (replay's fast path copies the bytes) would give the two paths different fingerprints.
    So a dead letter is told apart from another by its body, message_id, timestamp… — identical messages
    cannot be told apart, from their copies or from each other."""
    flags = int.from_bytes(properties[:2], "big")
    if flags & _HEADERS and not flags & _MORE_FLAGS and len(properties) > 2:
        at = 2
        for flag in (_CONTENT_TYPE, _CONTENT_ENCODING):
            if flags & flag:
                at += 1 + properties[at]
            if at >= len(properties):  # malformed: the fast path declines it anyway
                break
        end = at + 4 + int.from_bytes(properties[at:at + 4], "big")
        properties = (flags & ~_HEADERS).to_bytes(2, "big") + properties[2:at] + properties[end:]
    digest = hashlib.blake2b(len(properties).to_bytes(4, "big"), digest_size=8)
    digest.update(properties)
    digest.update(body)
    return digest.hexdigest()


def record_fingerprint(record: Fingerprinted) -> str | None:
    """source_fingerprint of a message read back (history, the Python replay path). None where its
    properties cannot be encoded again (then it pairs with nothing)."""
    from dlxtool.broker.wire.frames import basic_properties, encode_properties

    try:
        return source_fingerprint(encode_properties(basic_properties(record.properties, None)), record.body)
    except Exception:  # noqa: BLE001 - an unencodable value: no fingerprint, no false pair
        return None


CopySource = tuple[str, str]  # (src, run): the source delivery a copy was made from, and the replay run that made it


def provenance_src(headers: dict[str, Any] | None) -> CopySource | None:
    """(src, run) of a replayed copy's provenance: the fingerprint of the delivery it was made from, and the
    run that made it (its `id` without the per-publish number). None for a message never replayed."""
    prov = (headers or {}).get(PROVENANCE_HEADER)
    if not is_object(prov):
        return None
    src, publish_id = (v.decode("utf-8", "replace") if isinstance(v, bytes) else v
                       for v in (prov.get("src"), prov.get("id")))
    return copy_origin(src, publish_id)


def replayed(headers: dict[str, Any] | None) -> dict[str, Any] | None:
    """What an earlier replay recorded, as `history` shows it: from (the DLQ), at, count, and the first origin's
    exchange and routing key — the exchange a temporary one stood for; `edited` and `original_sha256` where that
    replay replayed it as edited (replay --edit). None for a message never replayed."""
    prov = headers.get(PROVENANCE_HEADER) if is_object(headers) else None
    if not is_object(prov):
        return None
    shown = {name: prov.get(key) for name, key in (("from", "from"), ("at", "at"), ("count", "count"),
                                                   ("exchange", "exchange"), ("routing_key", "routing-key"))}
    for name in ("edited", "original-sha256"):  # replay --edit: only where it edited the message
        if prov.get(name) is not None:
            shown[name.replace("-", "_")] = prov[name]
    if isinstance(shown["at"], datetime):
        from dlxtool.deaths import iso

        shown["at"] = iso(shown["at"])
    return {k: v.decode("utf-8", "replace") if isinstance(v, bytes | bytearray) else v for k, v in shown.items()}


def copy_origin(src: object, publish_id: object) -> CopySource | None:
    """provenance_src of a provenance's decoded `src` and `id`."""
    if not isinstance(src, str) or len(src) != 16:
        return None
    return src, str(publish_id or "").rsplit("-", 1)[0]


class Pairs:
    """Which messages are one message twice: a source a kill -9 left in the DLQ and the copy of it made
    before the kill, or two copies of one source made by different replay runs (a rerun republished the
    source the kill left). A copy's fingerprint is its source's (same body and properties), and its
    provenance `src` says it is a copy. Identical messages cannot be told apart: two never-replayed ones,
    or copies from one run, are never a pair; an identical twin of a replayed message is (a wrong pair)."""

    def __init__(self, limit: int = 1_000_000) -> None:
        self._sources: dict[str, Any] = {}                 # fingerprint of a never-replayed message -> value
        self._copies: dict[str, dict[str, Any]] = {}       # src -> run -> value
        self._limit = limit
        self._size = 0

    def partners(self, fingerprint: str | None, origin: CopySource | None) -> list[Any]:
        """Values of the messages seen before that this one pairs with."""
        if origin is None:
            return list(self._copies.get(fingerprint, {}).values()) if fingerprint is not None else []
        src, run = origin
        found = [v for r, v in self._copies.get(src, {}).items() if r != run]
        if src in self._sources:
            found.append(self._sources[src])
        return found

    def add(self, fingerprint: str | None, origin: CopySource | None, value: Any) -> None:
        if self._size >= self._limit:
            return
        self._size += 1
        if origin is None:
            if fingerprint is not None:
                self._sources.setdefault(fingerprint, value)
        else:
            self._copies.setdefault(origin[0], {}).setdefault(origin[1], value)


# -- the header's layout: written here only -------------------------------------------------------------


def shape_entries(count: int, exchange: str, routing_key: Any, expiration: str | None, deaths: str,
                  reset: str | None) -> dict[str, Any]:
    """The entries of the provenance that every dead letter of one shape shares (dlxtool.ops.replay_decision.Shape),
    in the header's order: the replay count (after this replay), the first origin's exchange, routing key and
    per-message TTL, the deaths summary, the retry counters removed."""
    entries: dict[str, Any] = {"count": count, "exchange": exchange, "routing-key": routing_key}
    if expiration is not None:
        entries["expiration"] = expiration
    entries["deaths"] = deaths
    if reset:
        entries["reset"] = reset
    return entries


def edit_entries(changed: tuple[str, ...], original_sha256: str) -> dict[str, Any]:
    """The provenance's entries of a message replayed as edited (replay --edit): what was edited ("body,headers") and
    the SHA-256 of the body it had in the DLQ (its bytes as they were, compressed or not), so that the copy can be
    told from the dead letter it was made from. Not written for a message replayed as it was."""
    return {"edited": ",".join(changed), "original-sha256": original_sha256}


class ProvenanceWriter:
    """The `dlxtool-replay` header of one run: {from, at, id, <shape entries>, [filters], [src]}.

    Written in one place for both of replay's paths: `table` as the header value the Python path (and `load
    --reset-history`) puts in a message's headers, encoded later with the rest; `header` as the encoded table
    entry the fast path splices into a message's properties (dlxtool.ops.replay_raw), put together from parts
    encoded by dlxtool.amqp_values — the encoder that writes every other header — so that the two are byte for
    byte the same table (tests/broker/test_hotpath.py)."""

    ID = StringEntry("id")
    SRC = StringEntry("src")

    def __init__(self, source: str, filters: str | None = None) -> None:
        self.source = source
        self.filters = filters or None
        self._tail = encode_entries({"filters": self.filters}) if self.filters else b""

    def table(self, at: datetime, publish_id: str, entries: dict[str, Any], src: str | None) -> dict[str, Any]:
        prov: dict[str, Any] = {"from": self.source, "at": at, "id": publish_id, **entries}
        if self.filters:
            prov["filters"] = self.filters
        if src:
            prov["src"] = src
        return prov

    # The encoded parts, each made as often as it changes: `head` once a second, `middle` once per shape.

    def head(self, at: datetime) -> bytes:
        return encode_entries({"from": self.source, "at": at})

    @staticmethod
    def middle(entries: dict[str, Any]) -> bytes:
        """struct.error where a value does not fit its AMQP kind (a count past 64 bits)."""
        return encode_entries(entries)

    def header(self, head: bytes, publish_id: bytes, middle: bytes, src: bytes) -> bytes:
        """The header's table entry for one message: `publish_id` and `src` ASCII (as next_id and the
        fingerprint make them)."""
        return table_entry(PROVENANCE_HEADER, b"".join((head, self.ID(publish_id), middle, self._tail, self.SRC(src))))


def picked_copy_origin(table: bytes) -> CopySource | None:
    """provenance_src of an earlier provenance of which only `id` and `src` were picked (a table with its size,
    as dlxtool.broker.wire's scan hands it over); ValueError where they do not decode. On every re-replayed copy's
    path: the layout ProvenanceWriter writes (id, then src, ASCII) is read where it wrote it, any other decoded."""
    found = ProvenanceWriter.ID.read(table, 4)
    if found is not None:
        src = ProvenanceWriter.SRC.read(table, found[1])
        if src is not None and src[1] == len(table) and found[0].isascii() and src[0].isascii():
            return copy_origin(src[0].decode(), found[0].decode())  # decoded, they are these bytes as text
    return provenance_src({PROVENANCE_HEADER: decode_field_value(b"F" + table)})


def _key(src: str) -> int | str:
    """A fingerprint as CopyGuard keeps it: the number its 16 lowercase hex digits spell (one text per number,
    unlike int(), which also reads "0x…", "+…" or upper case), else the text as it is (an odd provenance)."""
    return int(src, 16) if len(src) == 16 and not src.strip("0123456789abcdef") else src


COPY_LEFT = Why("a copy of a message replayed in this run (a replay killed before its acks left both; "
                "one of them is enough)", Stay.LOOP_GUARD)


class CopyGuard:
    """Pairs for every replay, in bounded memory: the second of a pair this run meets stays in the DLQ with
    COPY_LEFT instead of being replayed too (two deliveries of one message at the origin). --max-replays keeps
    its own, exact bookkeeping (Lineage).

    Copies are rare (a replayed message that died again), sources are every never-replayed message: the
    copies are kept exactly, the sources' fingerprints in a Bloom filter (2 MiB, 3 bits each; for a million
    messages about 1 in 400 false hits). Only a copy consults the filter, so a false hit can only make a copy
    stay in the DLQ (said, never lost) — never a source. Same limits as Pairs: identical messages cannot be
    told apart."""

    BITS = 1 << 24
    _MASK = BITS - 1

    def __init__(self, bits: Callable[[bytearray, str, bool], bool] | None = None) -> None:
        """`bits`: the C extension's bloom() (the `c` codec's, dlxtool.broker.wire.codec.Codec.bloom), which reads
        and sets the same bits as the Python below, at a fraction of its cost on every replayed message."""
        self._bits = bits
        self._bloom: bytearray | None = None  # made at the first source: a run of copies only needs none
        # src -> the run whose copy of it was replayed here (one: the copy of another run stays, unrecorded).
        # A re-replay records every message: src as its 64-bit number (36 bytes, not a 65-byte str) and each
        # run's name once (_runs), about 80 bytes a copy instead of 170.
        self._copies: dict[int | str, str] = {}
        self._runs: dict[str, str] = {}

    def stays(self, fingerprint: str | None, origin: CopySource | None) -> bool:
        """Whether this delivery pairs with one already replayed in this run (else it is remembered as
        replayed: call only for a delivery that is about to be replayed). On every replayed message's path,
        hence unrolled: the filter's bits come from the string's own hash (stable within the process, all a
        run needs)."""
        if origin is None:
            if fingerprint is None:
                return False
            copies = self._copies
            if copies and _key(fingerprint) in copies:
                return True
            bloom = self._bloom
            if bloom is None:
                bloom = self._bloom = bytearray(self.BITS // 8)
            if self._bits is not None:
                self._bits(bloom, fingerprint, True)
                return False
            h, mask = hash(fingerprint), self._MASK
            bit = h & mask
            bloom[bit >> 3] |= 1 << (bit & 7)
            bit = (h >> 20) & mask
            bloom[bit >> 3] |= 1 << (bit & 7)
            bit = (h >> 40) & mask
            bloom[bit >> 3] |= 1 << (bit & 7)
            return False
        src, run = origin
        key = _key(src)
        replayed = self._copies.get(key)
        if (replayed is not None and replayed != run) or self._seen(src):
            return True
        if replayed is None:
            self._copies[key] = self._runs.setdefault(run, run)
        return False

    def _seen(self, fingerprint: str) -> bool:
        bloom = self._bloom
        if bloom is None:
            return False
        if self._bits is not None:
            return self._bits(bloom, fingerprint, False)
        h, mask = hash(fingerprint), self._MASK
        bit = h & mask
        if not bloom[bit >> 3] & (1 << (bit & 7)):
            return False
        bit = (h >> 20) & mask
        if not bloom[bit >> 3] & (1 << (bit & 7)):
            return False
        bit = (h >> 40) & mask
        return bool(bloom[bit >> 3] & (1 << (bit & 7)))
