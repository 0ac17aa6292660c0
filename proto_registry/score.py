"""Scoring a payload against the index.

:class:`PayloadScan` holds one payload: every sub-span is wire-scanned at most once, and the set of
types a span parses *cleanly* as (no unknown field, no wire-type mismatch, valid UTF-8 in strings,
closed enums in range, required fields present, sub-messages clean too) is computed with bitset
operations from the index, memoised per span. Only when no type is clean are a short list of types
scored one by one on byte coverage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from operator import gt

from google.protobuf.internal import api_implementation

from proto_registry.index import NO_FACTS, NOT_CHECKABLE, Index, Kind, bits
from proto_registry.wire import I32, I64, LEN, SGROUP, VARINT, packed_varints, read_varint, scan, varint_size

Field = tuple[int, int, int, int, int, int]  # wire.Field shape: tag, value, start, vstart, vend, end

MAX_DEPTH = 64
SHORT_LIST = 128
# The round trip (PayloadScan._round_trips) was proven against the rules with protobuf's upb backend (the
# default); the pure-Python one differs in corners (UTF-8 checks, unknown enum values): the rules alone there.
_UPB = api_implementation.Type() == "upb"
CLEAN = 1  # PayloadScan.single: the span parses cleanly as the type
CANONICAL = 2  # ... and is its canonical encoding
_OVERLONG = re.compile(rb"[\x80-\xff]{10}")  # a varint of 11 bytes or more: not a varint
_PADDED = re.compile(rb"[\x80-\xff]\x00")  # a varint ending in a zero byte: longer than needed
_OVER64 = re.compile(rb"[\x80-\xff]{9}[\x02-\x7f]")  # a 10-byte varint past 64 bits
_LONG = re.compile(rb"[\x80-\xff]{4}")  # a varint of 5 bytes or more (a value >= 2**28)


# Evidence that a payload is one registered type, not one of the many types nobody registered, for
# a type that fits it canonically: per top-level field, by how easily another schema reads it the
# same way. A varint, a text or bytes value fits any field of that wire type at that number (field
# numbers 1..5 with strings are everywhere); a fixed-width value needs a fixed-width field (rarer);
# a sub-message counts with half of what its own fields say. Empty values and binary data in a
# string field say nothing. Confidence for a unique fit is 1 - 2**-evidence: >= 0.9 takes 3.3,
# e.g. seven flat scalars, or two sub-messages with a few fields each.
EVIDENCE_SCALAR = 0.5
EVIDENCE_FIXED = 1.0
EVIDENCE_MESSAGE = 1.0
NESTED_SHARE = 0.5
NESTED_SAMPLE = 4  # occurrences of a repeated sub-message looked into (the best one counts)
EVIDENCE_ENOUGH = 24.0  # past this, confidence is 1 - 6e-8: no need to look further


@dataclass(frozen=True, slots=True)
class Scored:
    """One type's score for a payload."""

    tid: int
    score: float  # share of payload bytes explained by valid fields, with penalties
    clean: bool


class PayloadScan:
    def __init__(self, index: Index, data: bytes) -> None:
        self.index = index
        self.data = data
        self._scans: dict[tuple[int, int], list[Field] | None] = {}
        self._groups: dict[tuple[int, int], dict[int, list[Field]] | None] = {}
        self._fused: dict[bytes | tuple[int, int], tuple[int, int, int]] = {}
        self._tidy: dict[tuple[int, int], bool] = {}
        self._packed: dict[tuple[int, int], list[int] | None] = {}
        self._single: dict[tuple[bytes | int, int] | tuple[int, int, int], int] = {}
        self._evidence: dict[tuple[bytes | int, int] | tuple[int, int, int], float] = {}

    # -- scanning -----------------------------------------------------------------------------
    def fields(self, start: int, end: int) -> list[Field] | None:
        key = (start, end)
        if key not in self._scans:
            self._scans[key] = scan(self.data, start, end)
        return self._scans[key]

    def grouped(self, start: int, end: int) -> dict[int, list[Field]] | None:
        key = (start, end)
        got = self._groups.get(key, 0)
        if got == 0:
            fields = self.fields(start, end)
            got = None
            if fields is not None:
                got = {}
                for f in fields:
                    got.setdefault(f[0], []).append(f)
            self._groups[key] = got
        return got  # type: ignore[return-value]

    # -- clean parses and canonical encoding --------------------------------------------------
    def clean_mask(self, start: int, end: int, mask: int, depth: int = 0) -> int:
        """Types among ``mask`` that ``data[start:end]`` parses cleanly as."""
        if not mask & (mask - 1):  # one type (or none): see single
            return mask if mask and self.single(start, end, mask.bit_length() - 1, depth) else 0
        return self.clean_and_canonical(start, end, mask, depth)[0]

    def canonical_mask(self, start: int, end: int, mask: int, depth: int = 0, *, clean: bool = False) -> int:
        """Types among ``mask`` that ``data[start:end]`` is the *canonical* encoding of: it parses
        cleanly, and a standard serializer (protobuf's own) would write exactly these bytes for the
        parsed message — fields in number order, each singular field once, no default value of an
        implicit-presence field, packed or not as the schema says, minimal varints, map entries
        whole, sub-messages canonical too. (``clean``: the caller knows every type in ``mask`` is
        clean; kept for callers, the answer is the same.)"""
        if not mask & (mask - 1):
            return mask if mask and self.single(start, end, mask.bit_length() - 1, depth) == CLEAN | CANONICAL else 0
        return self.clean_and_canonical(start, end, mask, depth)[1]

    def clean_and_canonical(self, start: int, end: int, mask: int, depth: int = 0) -> tuple[int, int]:
        """(clean_mask, canonical_mask) of the span for ``mask``, found in one pass. Each type's verdict
        is its own (no check looks at which other types are in the mask), so the answer for a mask
        holds for any part of it: memoised by the span's bytes with the mask it was found for."""
        key = self.data[start:end] if depth + (end - start) // 2 <= MAX_DEPTH else (start, end)
        got = self._fused.get(key)
        if got is not None and not mask & ~got[0]:
            return got[1] & mask, got[2] & mask
        clean, canon = self._clean_and_canonical(start, end, mask, depth)
        self._fused[key] = (mask, clean, canon)
        return clean, canon

    def _clean_and_canonical(self, start: int, end: int, mask: int, depth: int) -> tuple[int, int]:
        if depth > MAX_DEPTH:
            return 0, 0
        groups = self.grouped(start, end)
        if groups is None:
            return 0, 0
        idx = self.index
        known = idx.known
        for tag in groups:
            mask &= known.get(tag, 0)
            if not mask:
                return 0, 0
        canon = mask if self.tidy(start, end) else 0
        data = self.data
        facts = idx.facts
        parent_any = idx.parent_any
        # Most selective tags first: the candidate set shrinks before the costlier checks.
        tags = sorted(groups, key=idx.tag_cost.__getitem__) if len(groups) > 1 else groups
        for tag in tags:
            occs = groups[tag]
            # clean: the wire type fits, the values are valid, sub-messages are clean
            ok = 0
            for kind, kmask, always in idx.simple.get(tag, ()):
                if kmask & mask and (always or self.kind_ok(kind, occs)):
                    ok |= kmask
            holders = parent_any.get(tag, 0) & mask
            child_canon = 0
            if holders:
                child_ok = child_canon = self._children_of(tag, holders)
                for f in occs:
                    if child_ok & (child_ok - 1):
                        child_ok, sub_canon = self.clean_and_canonical(f[3], f[4], child_ok, depth + 1)
                        child_canon &= sub_canon
                    else:  # one child type left: see single
                        verdict = self.single(f[3], f[4], child_ok.bit_length() - 1, depth + 1)
                        if not verdict & CLEAN:
                            child_ok = 0
                        if not verdict & CANONICAL:
                            child_canon = 0
                    if not child_ok:
                        break
                if child_ok:
                    ok |= self._parents(tag, child_ok)
            mask &= ok
            if not mask:
                return 0, 0
            canon &= mask
            if not canon:
                continue
            # canonical: what protobuf's serializer writes for these values
            written, multi, implicit, packed, narrow_any, maps, message = facts.get(tag, NO_FACTS)
            canon &= written
            if len(occs) > 1:
                canon &= multi
            if not canon:
                continue
            if implicit & canon and (
                _is_default(data, tag, occs[0]) if len(occs) == 1 else any(_is_default(data, tag, f) for f in occs)
            ):
                canon &= ~implicit
            if packed & canon and not all(_shortest(data, f[3], f[4]) for f in occs):
                canon &= ~packed  # a padded varint in a packed run: re-encoded shorter
            if narrow_any & canon:
                canon &= ~self._narrow_misfits(tag, occs, idx.narrow[tag], canon)
            if maps & canon and len(occs) > 1 and self._repeated_keys(occs):
                canon &= ~maps  # a map keeps one entry per key: the re-encoding would lose one
            if message & canon:
                canon &= ~message | (self._parents(tag, child_canon) if child_canon else 0)
        need = mask & idx.required_mask
        if need:
            numbers = {tag >> 3 for tag in groups}
            for tid in bits(need):
                if not idx.types[tid].required_numbers <= numbers:
                    mask &= ~(1 << tid)
        need = mask & idx.oneof_mask
        if need and len(groups) > 1:
            numbers = {tag >> 3 for tag in groups}
            for tid in bits(need):
                if any(len(o & numbers) > 1 for o in idx.types[tid].oneofs):
                    mask &= ~(1 << tid)
        canon &= mask
        entries = canon & idx.map_entry_mask
        if entries:
            numbers_in_order = [f[0] >> 3 for f in self.fields(start, end) or ()]
            if numbers_in_order != [1, 2]:
                canon &= ~entries
        return mask, canon

    # -- one type -------------------------------------------------------------------------------
    def single(self, start: int, end: int, tid: int, depth: int = 0) -> int:
        """How ``data[start:end]`` reads as the one type ``tid``: 0 (not cleanly), CLEAN, or CLEAN |
        CANONICAL. Below the top of a payload most spans have one candidate type left (a map entry, a
        sub-message's type): protobuf's own parser and serializer decide those at C speed (see
        _round_trips); the rules above decide what they cannot. Memoised by the span's bytes: a
        payload repeats sub-messages (the same map value under several keys)."""
        key = (self.data[start:end], tid) if depth + (end - start) // 2 <= MAX_DEPTH else (start, end, tid)
        got = self._single.get(key)
        if got is None:
            if self._round_trips(start, end, tid, depth):
                got = CLEAN | CANONICAL
            else:
                clean, canon = self._clean_and_canonical(start, end, 1 << tid, depth)
                got = (CLEAN if clean else 0) | (CANONICAL if canon else 0)
            self._single[key] = got
        return got

    def _round_trips(self, start: int, end: int, tid: int, depth: int) -> bool:
        """protobuf parses the span as ``tid`` and, unknown fields dropped, writes exactly these bytes back
        (map entries in key order). Then the span is clean and canonical by the rules above: an unknown
        field, a wire-type mismatch or an out-of-range closed enum is left out of what protobuf writes (the
        bytes differ), invalid UTF-8 where the schema checks it and a missing required field raise, and
        what protobuf writes is the canonical form. Cases the rules see differently are kept out: a map entry
        without its key or value (whole in a map, an ordinary message alone), a
        type that may hold extensions (protobuf parses a registered extension; the index calls its field
        unknown), and nesting past MAX_DEPTH (unclean for the rules, parsed by protobuf). Anything else,
        including maps in another order, a False: the rules decide."""
        if not _UPB:
            return False
        idx = self.index
        height = idx.height(tid)
        if height == NOT_CHECKABLE or depth + min(height, (end - start) // 2) > MAX_DEPTH:
            return False
        span = self.data[start:end]
        try:
            msg = idx.message_class(tid).FromString(span)
            msg.DiscardUnknownFields()
            if msg.SerializeToString(deterministic=True) != span:
                return False
        except Exception:  # noqa: BLE001 - any failure (DecodeError, EncodeError, ...): the rules decide
            return False
        # A map entry on its own is an ordinary message to protobuf (an unset key is left out); in a map
        # it is written whole, key then value: both must be there.
        return not idx.types[tid].is_map_entry or len(msg.ListFields()) == 2

    def _repeated_keys(self, occs: list[Field]) -> bool:
        """Two map entries with the same key (the entry's first field, as written)."""
        keys = set()
        data = self.data
        for f in occs:
            key = _entry_key(data, f[3], f[4])
            if key is None:  # a first field the quick reader does not take: the scan says
                inner = self.fields(f[3], f[4])
                key = data[inner[0][2] : inner[0][5]] if inner and inner[0][0] >> 3 == 1 else b""
            if key in keys:
                return True
            keys.add(key)
        return False

    def tidy(self, start: int, end: int) -> bool:
        """Type-independent canonical form of one message span: fields in ascending number order,
        every varint (tags, values, lengths) in its shortest form and within 64 bits."""
        key = (start, end)
        got = self._tidy.get(key)
        if got is None:
            got = self._tidy[key] = _tidy(self.data, start, end, self.fields(start, end) or ())
        return got

    def _narrow_misfits(self, tag: int, occs: list[Field], narrow: tuple[int, int, int], mask: int) -> int:
        """Types (bool, int32/enum, uint32/sint32 at this tag) that could not have written these
        varints: a parser truncates the value, so the re-encoding differs."""
        if tag & 7 == VARINT:
            top = occs[0][1] if len(occs) == 1 else max(f[1] for f in occs)
            if top < 1 << 31:  # the common case: only a bool can be out of range
                return narrow[0] if top > 1 else 0
            values = [f[1] for f in occs]
        elif tag & 7 == LEN and self.index.packed_varint.get(tag, 0) & mask:
            data = self.data
            if not any(_LONG.search(data, f[3], f[4]) for f in occs):  # every value < 2**28
                return narrow[0] if any(f[4] > f[3] and max(data[f[3] : f[4]]) > 1 for f in occs) else 0
            values = []
            for f in occs:
                values.extend(self.packed(f[3], f[4]) or ())
        else:
            return 0
        out = 0
        if any(v > 1 for v in values):
            out |= narrow[0]
        if any((1 << 31) <= v < (1 << 64) - (1 << 31) for v in values):
            out |= narrow[1]
        if any(v >= 1 << 32 for v in values):
            out |= narrow[2]
        return out

    def canonical_defects(self, tid: int, start: int = 0, end: int | None = None, path: str = "") -> list[str]:
        """Why a clean ``tid`` is not the canonical encoding (empty when it is): what a standard
        serializer would have written differently."""
        if end is None:
            end = len(self.data)
        bit = 1 << tid
        if self.canonical_mask(start, end, bit):
            return []
        idx = self.index
        info = idx.types[tid]
        groups = self.grouped(start, end) or {}
        out: list[str] = []
        where = path or "payload"
        fields = self.fields(start, end) or []
        numbers = [f[0] >> 3 for f in fields]
        if numbers != sorted(numbers):
            out.append(f"{where}: fields out of number order")
        elif not self.tidy(start, end):
            out.append(f"{where}: a varint longer than needed")
        if info.is_map_entry and numbers != [1, 2]:
            out.append(f"{where}: map entry not written as key then value")
        for tag, occs in groups.items():
            number = tag >> 3
            fd = info.descriptor.fields_by_number.get(number)
            name = f"field {path}{number} ({fd.name if fd else '?'})"
            if not idx.canon.get(tag, 0) & bit:
                out.append(f"{name}: {'not packed' if tag & 7 != LEN else 'packed'}, the schema says otherwise")
            elif len(occs) > 1 and not idx.multi.get(tag, 0) & bit:
                out.append(f"{name}: written {len(occs)} times")
            if idx.implicit.get(tag, 0) & bit and any(_is_default(self.data, tag, f) for f in occs):
                out.append(f"{name}: default value written (implicit presence leaves it out)")
            narrow = idx.narrow.get(tag)
            if narrow is not None and self._narrow_misfits(tag, occs, narrow, bit) & bit:
                out.append(f"{name}: value out of the field type's range")
            kind = info.fields.get(tag)
            if kind is not None and kind[0] in ("m", "g"):
                for f in occs:
                    out.extend(self.canonical_defects(kind[1], f[3], f[4], f"{path}{number}."))  # type: ignore[misc]
        return out or [f"{where}: not the canonical encoding"]

    def _children_of(self, tag: int, holders: int) -> int:
        """The sub-message types that the types in ``holders`` have at ``tag``."""
        idx = self.index
        memo = idx.child_memo
        key = (tag, holders)
        got = memo.get(key)
        if got is None:
            got = 0
            by_child = idx.parents[tag]
            if holders.bit_count() <= len(by_child):
                types = idx.types
                for t in bits(holders):
                    got |= 1 << types[t].fields[tag][1]  # type: ignore[misc]
            else:  # many holders, fewer child types: ask each child type whether a holder has it
                for bit, parents in idx.child_bits(tag):
                    if parents & holders:
                        got |= bit
            if len(memo) > 50_000:
                memo.clear()
            memo[key] = got
        return got

    def _parents(self, tag: int, children: int) -> int:
        """Types whose field ``tag`` holds one of the message types in ``children``."""
        if not children:
            return 0
        memo = self.index.parent_memo
        key = (tag, children)
        got = memo.get(key)
        if got is None:
            got = 0
            parents = self.index.parents[tag]
            for child in bits(children):
                got |= parents[child]
            if len(memo) > 50_000:
                memo.clear()
            memo[key] = got
        return got

    def packed(self, start: int, end: int) -> list[int] | None:
        """The varints of a packed run (memoised: several checks read the same run)."""
        key = (start, end)
        got = self._packed.get(key, 0)
        if got == 0:
            got = self._packed[key] = packed_varints(self.data, start, end)
        return got  # type: ignore[return-value]

    def kind_ok(self, kind: Kind, occs: list[Field]) -> bool:
        k = kind[0]
        data = self.data
        if k == "s":
            for f in occs:
                try:
                    data[f[3] : f[4]].decode("utf-8")
                except UnicodeDecodeError:
                    return False
            return True
        if k == "p0":  # whole varints: ends on a last byte, none over 10 bytes (checked in C)
            return all(f[4] == f[3] or (data[f[4] - 1] < 0x80 and not _OVERLONG.search(data, f[3], f[4])) for f in occs)
        if k == "p1":
            return all((f[4] - f[3]) % 8 == 0 for f in occs)
        if k == "p5":
            return all((f[4] - f[3]) % 4 == 0 for f in occs)
        if k == "e":
            values = self.index.enums[kind[1]]  # type: ignore[misc]
            return all(f[1] in values for f in occs)
        if k == "pe":
            values = self.index.enums[kind[1]]  # type: ignore[misc]
            for f in occs:
                got = self.packed(f[3], f[4])
                if got is None or not all(v in values for v in got):
                    return False
            return True
        return True  # varint, fixed, bytes: the wire type already matched

    def field_ok(self, kind: Kind, occs: list[Field], depth: int = 0) -> bool:
        if kind[0] in ("m", "g"):
            bit = 1 << kind[1]  # type: ignore[misc]
            return all(self.clean_mask(f[3], f[4], bit, depth + 1) for f in occs)
        return self.kind_ok(kind, occs)

    # -- evidence and ranking -----------------------------------------------------------------
    def evidence(self) -> float:
        """How much the top-level bytes constrain the type: distinct fields, non-trivial values."""
        groups = self.grouped(0, len(self.data)) or {}
        e = float(len(groups))
        for tag, occs in groups.items():
            if tag & 7 == LEN:
                e += 0.5 * sum(1 for f in occs if f[4] - f[3] >= 2)
        return e

    def evidence_for(self, tid: int, start: int = 0, end: int | None = None, depth: int = 0) -> float:
        """How much the bytes say they are ``tid`` rather than a type nobody registered: each field
        weighs by how hard it would be for another schema to read it the same way (see the weights
        above). ``tid`` must fit the span cleanly."""
        if end is None:
            end = len(self.data)
        # Memoised like single(): repeated sub-messages weigh the same wherever they are.
        key = (self.data[start:end], tid) if depth + (end - start) // 2 <= MAX_DEPTH else (start, end, tid)
        got = self._evidence.get(key)
        if got is None:
            got = self._evidence[key] = self._evidence_for(tid, start, end, depth)
        return got

    def _evidence_for(self, tid: int, start: int, end: int, depth: int) -> float:
        groups = self.grouped(start, end)
        if not groups or depth > MAX_DEPTH:
            return 0.0
        fields = self.index.types[tid].fields
        data = self.data
        e = 0.0
        for tag, occs in groups.items():
            wt = tag & 7
            kind = fields.get(tag)
            if kind is not None and kind[0] in ("m", "g"):
                inner = -1.0  # the best of the first NESTED_SAMPLE non-empty occurrences
                seen = 0
                for f in occs:
                    if f[4] > f[3]:
                        got = self.evidence_for(kind[1], f[3], f[4], depth + 1)  # type: ignore[misc]
                        if got > inner:
                            inner = got
                        seen += 1
                        if seen == NESTED_SAMPLE:
                            break
                if seen:
                    e += EVIDENCE_MESSAGE + NESTED_SHARE * inner
                else:
                    e += EVIDENCE_SCALAR  # an empty sub-message: a tag and a zero length
            elif wt == LEN:
                if len(occs) == 1:
                    f = occs[0]
                    if f[4] == f[3]:
                        continue
                    if kind is not None and kind[0] in ("s", "sl") and is_binary(data, f[3], f[4]):
                        continue  # binary data read as text: a misfit the parser lets through, not evidence
                else:
                    if all(f[4] == f[3] for f in occs):
                        continue
                    if kind is not None and kind[0] in ("s", "sl") and any(is_binary(data, f[3], f[4]) for f in occs):
                        continue
                e += EVIDENCE_SCALAR
            elif wt in (I32, I64):
                e += EVIDENCE_FIXED
            else:
                e += EVIDENCE_SCALAR
            if e >= EVIDENCE_ENOUGH:
                break
        return e

    def rank_unclean(self, start_mask: int, limit: int = SHORT_LIST) -> list[Scored]:
        """Score a short list of types by the share of bytes they explain (no type is clean)."""
        groups = self.grouped(0, len(self.data))
        if not groups:
            return []
        idx = self.index
        total = len(self.data)
        weights = {tag: sum(f[5] - f[2] for f in occs) for tag, occs in groups.items()}
        heavy = sorted(weights, key=weights.__getitem__, reverse=True)[:3]
        cand = 0
        for tag in heavy:
            cand |= idx.known.get(tag, 0)
        cand &= start_mask
        # Short list: types that know most of the payload's tags (cheap bit tests), best first.
        known_counts = []
        for tid in bits(cand):
            bit = 1 << tid
            known_counts.append((sum(weights[t] for t in groups if idx.known.get(t, 0) & bit), tid))
        known_counts.sort(reverse=True)
        out: list[Scored] = []
        for _, tid in known_counts[:limit]:
            out.append(Scored(tid, self.score_type(tid, groups, weights, total), False))
        out.sort(key=lambda s: -s.score)
        return out

    def score_type(self, tid: int, groups: dict[int, list[Field]], weights: dict[int, int], total: int) -> float:
        info = self.index.types[tid]
        covered = 0.0
        for tag, occs in groups.items():
            kind = info.fields.get(tag)
            if kind is None:
                continue
            if self.field_ok(kind, occs):
                covered += weights[tag]
            elif kind[0] in ("m", "g"):
                covered += weights[tag] * 0.5 * self._nested_share(kind[1], occs)  # type: ignore[misc]
        score = covered / total if total else 0.0
        numbers = {tag >> 3 for tag in groups}
        if info.required_numbers and not info.required_numbers <= numbers:
            score *= 0.9
        if any(len(o & numbers) > 1 for o in info.oneofs):
            score *= 0.9
        return score

    def _nested_share(self, tid: int, occs: list[Field]) -> float:
        shares = []
        for f in occs:
            groups = self.grouped(f[3], f[4])
            if groups is None:
                shares.append(0.0)
                continue
            size = f[4] - f[3]
            info = self.index.types[tid]
            ok = sum(
                sum(g[5] - g[2] for g in o)
                for tag, o in groups.items()
                if tag in info.fields and self.field_ok(info.fields[tag], o)
            )
            shares.append(ok / size if size else 1.0)
        return min(shares) if shares else 0.0

    def defects(self, tid: int, start: int = 0, end: int | None = None, path: str = "") -> list[str]:
        """Human-readable reasons why the span is not a clean ``tid`` (empty when it is)."""
        if end is None:
            end = len(self.data)
        idx = self.index
        info = idx.types[tid]
        groups = self.grouped(start, end)
        if groups is None:
            return [f"{path or 'payload'}: not valid protobuf wire format"]
        out: list[str] = []
        for tag, occs in groups.items():
            number, wt = tag >> 3, tag & 7
            where = f"{path}{number}"
            kind = info.fields.get(tag)
            if kind is None:
                fd = info.descriptor.fields_by_number.get(number)
                if fd is None:
                    out.append(f"field {where}: unknown to {info.name}")
                else:
                    out.append(f"field {where} ({fd.name}): wire type {wt} does not fit")
                continue
            if kind[0] in ("m", "g"):
                for f in occs:
                    out.extend(self.defects(kind[1], f[3], f[4], f"{where}."))  # type: ignore[misc]
            elif not self.kind_ok(kind, occs):
                fd = info.descriptor.fields_by_number[number]
                what = {"s": "invalid UTF-8", "e": "value outside the enum", "pe": "value outside the enum"}
                out.append(f"field {where} ({fd.name}): {what.get(kind[0], 'malformed packed values')}")
        numbers = {tag >> 3 for tag in groups}
        for o in info.oneofs:
            if len(o & numbers) > 1:
                names = ", ".join(info.descriptor.fields_by_number[n].name for n in sorted(o & numbers))
                out.append(f"{path or 'payload'}: several members of one oneof ({names})")
        missing = info.required_numbers - numbers
        for number in sorted(missing):
            out.append(f"field {path}{number} ({info.descriptor.fields_by_number[number].name}): required, missing")
        return out


_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f]")


def is_binary(data: bytes, start: int, end: int) -> bool:
    """Control characters or invalid UTF-8: bytes, not text."""
    if _CONTROL.search(data, start, end):
        return True
    try:
        data[start:end].decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _is_default(data: bytes, tag: int, f: Field) -> bool:
    """The occurrence holds the default value (0, all-zero bits, empty string/bytes/packed list)."""
    wt = tag & 7
    if wt == VARINT:
        return f[1] == 0
    if wt == LEN:
        return f[4] == f[3]
    if wt in (I64, I32):
        return not any(data[f[3] : f[4]])
    return False


def _entry_key(data: bytes, start: int, end: int) -> bytes | None:
    """The bytes of a (well-formed) map entry's first field when it is field 1, its key; b"" when the
    entry starts with another field or is empty; None when that field is not a scalar or a string
    (then the caller scans the entry). Reads one field, not the entry's value."""
    if start >= end:
        return b""
    try:
        tag, pos = read_varint(data, start, end)
        if tag >> 3 != 1:
            return b""
        wt = tag & 7
        if wt == VARINT:
            _, pos = read_varint(data, pos, end)
        elif wt == LEN:
            length, pos = read_varint(data, pos, end)
            pos += length
        elif wt in (I64, I32):
            pos += 8 if wt == I64 else 4
        else:
            return None
    except ValueError:
        return None
    return data[start:pos] if pos <= end else None


def _shortest(data: bytes, start: int, end: int) -> bool:
    """No varint in ``data[start:end]`` is longer than needed or past 64 bits (checked in C).
    Only exact for a run of varints; elsewhere a match may be a false alarm."""
    return not _PADDED.search(data, start, end) and not _OVER64.search(data, start, end)


def _tidy(data: bytes, start: int, end: int, fields: list[Field] | tuple[()]) -> bool:
    tags = [f[0] for f in fields]
    if any(map(gt, tags, tags[1:])):
        numbers = [t >> 3 for t in tags]
        if any(map(gt, numbers, numbers[1:])):
            return False
    if _shortest(data, start, end):
        return True  # no padded varint anywhere in the span, so none among the tags, lengths, values
    last = 0
    for tag, value, start, vstart, vend, end in fields:
        number = tag >> 3
        if number < last:
            return False
        last = number
        wt = tag & 7
        head = varint_size(tag)
        if wt == VARINT:
            if vstart - start != head or vend - vstart != varint_size(value) or value >> 64:
                return False
        elif wt == LEN:
            if vstart - start != head + varint_size(vend - vstart):
                return False
        elif wt == SGROUP:
            if vstart - start != head or end - vend != varint_size(tag + 1):
                return False
        elif vstart - start != head:
            return False
    return True
