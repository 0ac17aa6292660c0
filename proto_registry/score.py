"""Scoring a payload against the index.

:class:`PayloadScan` holds one payload: every sub-span is wire-scanned at most once, and the set of
types a span parses *cleanly* as (no unknown field, no wire-type mismatch, valid UTF-8 in strings,
closed enums in range, required fields present, sub-messages clean too) is computed with bitset
operations from the index, memoised per span. Only when no type is clean are a short list of types
scored one by one on byte coverage.
"""

from __future__ import annotations

from dataclasses import dataclass

from proto_registry.index import BYTES, FIXED, VARINT_ANY, Index, Kind, bits
from proto_registry.wire import LEN, packed_varints, packed_varints_ok, scan

Field = tuple[int, int, int, int, int, int]  # wire.Field shape: tag, value, start, vstart, vend, end

MAX_DEPTH = 64
ALWAYS_OK = frozenset({VARINT_ANY, FIXED, BYTES})  # the wire type matching is all they need
SHORT_LIST = 128


@dataclass(frozen=True, slots=True)
class Scored:
    tid: int
    score: float  # share of payload bytes explained by valid fields, with penalties
    clean: bool


class PayloadScan:
    def __init__(self, index: Index, data: bytes) -> None:
        self.index = index
        self.data = data
        self._scans: dict[tuple[int, int], list[Field] | None] = {}
        self._clean: dict[tuple[int, int, int], int] = {}
        self._groups: dict[tuple[int, int], dict[int, list[Field]] | None] = {}

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

    # -- clean parses -------------------------------------------------------------------------
    def clean_mask(self, start: int, end: int, mask: int, depth: int = 0) -> int:
        """Types among ``mask`` that ``data[start:end]`` parses cleanly as."""
        key = (start, end, mask)
        got = self._clean.get(key)
        if got is None:
            got = self._clean[key] = self._clean_mask(start, end, mask, depth)
        return got

    def _clean_mask(self, start: int, end: int, mask: int, depth: int) -> int:
        if depth > MAX_DEPTH:
            return 0
        groups = self.grouped(start, end)
        if groups is None:
            return 0
        idx = self.index
        known = idx.known
        for tag in groups:
            mask &= known.get(tag, 0)
            if not mask:
                return 0
        # Most selective tags first: the candidate set shrinks before the costlier checks.
        tags = sorted(groups, key=idx.tag_cost.__getitem__) if len(groups) > 1 else groups
        parent_memo = idx.parent_memo
        for tag in tags:
            occs = groups[tag]
            ok = 0
            for kind, kmask in idx.simple.get(tag, ()):
                if kmask & mask and (kind in ALWAYS_OK or self.kind_ok(kind, occs)):
                    ok |= kmask
            if idx.parent_any.get(tag, 0) & mask:
                child_ok = idx.children[tag]
                for f in occs:
                    child_ok = self.clean_mask(f[3], f[4], child_ok, depth + 1)
                    if not child_ok:
                        break
                if child_ok:
                    memo_key = (tag, child_ok)
                    parents_ok = parent_memo.get(memo_key)
                    if parents_ok is None:
                        parents_ok = 0
                        parents = idx.parents[tag]
                        for child in bits(child_ok):
                            parents_ok |= parents[child]
                        if len(parent_memo) > 50_000:
                            parent_memo.clear()
                        parent_memo[memo_key] = parents_ok
                    ok |= parents_ok
            mask &= ok
            if not mask:
                return 0
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
        return mask

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
        if k == "p0":
            return all(packed_varints_ok(data, f[3], f[4]) for f in occs)
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
                got = packed_varints(data, f[3], f[4])
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
