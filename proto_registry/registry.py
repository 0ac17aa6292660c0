"""The registry: load schemas once, then identify and decode payloads."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pool, json_format, text_format
from google.protobuf.message import DecodeError as PbDecodeError
from google.protobuf.message import Message

from proto_registry import sources
from proto_registry.errors import DecodeError, UnknownTypeError
from proto_registry.hints import Hints, unframe
from proto_registry.index import STRING, STRING_LAX, Index, bits, build_index
from proto_registry.raw import decode_raw
from proto_registry.result import EMPTY, MALFORMED, MATCH, NO_MATCH, Identification, Match
from proto_registry.score import PayloadScan, Scored, is_binary

MEMO_SIZE = 4096
MEMO_MAX_BYTES = 8 * 1024  # with MEMO_SIZE entries: at most 32 MiB held
MIN_SCORE = 0.5  # below this share of explained bytes, a type is not a match
MAX_EQUIVALENT = 10  # names listed; the count covers them all
EVIDENCE_BASE = 0.5
NON_CANONICAL_FACTOR = 0.5  # no type could have written the bytes canonically: at most half as sure
NON_CANONICAL_SAMPLE = 64  # types whose departures from canonical form are counted one by one


def confidence_from_evidence(evidence: float) -> float:
    return 1.0 - float(EVIDENCE_BASE**evidence)


class Registry:
    """Every message type of the loaded schemas, indexed for identification."""

    def __init__(self, pool: descriptor_pool.DescriptorPool, index: Index, loaded: sources.LoadedFiles) -> None:
        self.pool = pool
        self.index = index
        self.loaded = loaded
        self._short: dict[str, list[int]] | None = None
        self._resolved: dict[str, list[int]] = {}
        # Identifications of recent payloads: a poison message is logged on every redelivery.
        self._memo: OrderedDict[tuple[bytes, tuple[str, ...], int, int], Identification] = OrderedDict()
        self.memo_size = MEMO_SIZE

    # -- loading ------------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        paths: Iterable[str | Path] = (),
        *,
        include_defaults: bool = False,
        use_cache: bool = True,
        cache_dir: Path | None = None,
    ) -> Registry:
        """Load ``.proto`` directories/files and descriptor sets. The demo's bundled ``shop.*`` schemas
        only with ``include_defaults=True`` (or ``DEMO_PROTOS`` among the paths): they are example data,
        and loaded by default they would put demo names on a user's own bytes."""
        loaded = sources.load_files(
            list(paths), include_defaults=include_defaults, use_cache=use_cache, cache_root=cache_dir
        )
        pool = sources.build_pool(loaded)
        names, map_entries = sources.message_names(loaded)
        descriptors = [pool.FindMessageTypeByName(n) for n in names]
        return cls(pool, build_index(descriptors, map_entries), loaded)

    @property
    def type_names(self) -> list[str]:
        return [t.name for t in self.index.types if not t.is_map_entry]

    def __len__(self) -> int:
        return self.index.candidate_count

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lstrip(".") in self.index.by_name

    # -- names --------------------------------------------------------------------------------
    def resolve(self, name: str) -> list[str]:
        """Types a user- or hint-given name may mean: full name, type URL, unique suffix, or a
        case/punctuation-insensitive match of the short name (``order_placed`` → ``OrderPlaced``)."""
        return [self.index.types[t].name for t in self._resolve(name)]

    def _resolve(self, name: str) -> list[int]:
        got = self._resolved.get(name)
        if got is None:
            got = self._resolved[name] = self._resolve_uncached(name)
        return got

    def _resolve_uncached(self, name: str) -> list[int]:
        name = name.strip().rsplit("/", 1)[-1].lstrip(".")
        idx = self.index
        if name in idx.by_name and not idx.types[idx.by_name[name]].is_map_entry:
            return [idx.by_name[name]]
        if self._short is None:
            short: dict[str, list[int]] = {}
            for t in idx.types:
                if t.is_map_entry:
                    continue
                short.setdefault(_norm(t.name.rsplit(".", 1)[-1]), []).append(t.tid)
                short.setdefault(_norm(t.name), []).append(t.tid)
            self._short = short
        suffix = [t.tid for t in idx.types if not t.is_map_entry and t.name.endswith("." + name)]
        if suffix:
            return suffix
        return list(dict.fromkeys(self._short.get(_norm(name), [])))

    def resolve_one(self, name: str) -> str:
        """The one type ``name`` means, or :class:`UnknownTypeError` saying why not."""
        found = self._resolve(name)
        if len(found) == 1:
            return self.index.types[found[0]].name
        if found:
            listed = ", ".join(self.index.types[t].name for t in found[:5])
            raise UnknownTypeError(f"type name {name!r} is ambiguous: {listed}", "give the full name")
        import difflib  # only to suggest a name after a miss; not worth its import on every decode

        by_short = {n.rsplit(".", 1)[-1]: n for n in self.type_names}
        close = difflib.get_close_matches(name, self.type_names, n=3, cutoff=0.6) or [
            by_short[s] for s in difflib.get_close_matches(name.rsplit(".", 1)[-1], by_short, n=3, cutoff=0.6)
        ]
        hint = f"did you mean {', '.join(close)}?" if close else "add its schema with --proto-path"
        raise UnknownTypeError(f"unknown message type {name!r} ({len(self)} types loaded)", hint)

    # -- identification -----------------------------------------------------------------------
    def identify(
        self,
        payload: bytes,
        hints: Hints | None = None,
        *,
        limit: int = 5,
        max_equivalent: int = MAX_EQUIVALENT,
    ) -> Identification:
        """Rank the registered types for ``payload``. Never raises on bad bytes.

        Results for recently seen payloads are memoised (``memo_size`` entries; 0 disables); treat
        the returned object as read-only."""
        hints = hints or Hints()
        payload = bytes(payload)
        if self.memo_size and len(payload) <= MEMO_MAX_BYTES:
            key = (payload, tuple(hints.names()), limit, max_equivalent)
            memo = self._memo
            got = memo.get(key)
            if got is not None:
                memo.move_to_end(key)
                return got
            got = self._identify(payload, hints, limit, max_equivalent)
            memo[key] = got
            if len(memo) > self.memo_size:
                memo.popitem(last=False)
            return got
        return self._identify(payload, hints, limit, max_equivalent)

    def _identify(self, payload: bytes, hints: Hints, limit: int, max_equivalent: int) -> Identification:
        data, framing = unframe(bytes(payload))
        notes: list[str] = []
        hinted: list[int] = []
        for name in hints.names():
            found = self._resolve(name)
            if found:
                hinted.extend(t for t in found if t not in hinted)
            else:
                notes.append(f"hinted type {name!r} is not loaded")
        idx = self.index
        result = Identification(status=MATCH, framing=framing, payload=data, notes=notes)
        if not data:
            result.status = EMPTY
            result.ambiguous = True
            result.equivalent_count = idx.candidate_count
            if hinted:
                result.status = MATCH
                result.source = "hint"
                result.ambiguous = False
                result.matches = [Match(idx.types[hinted[0]].name, 1.0, 0.5, True, hinted=True)]
                result.equivalent = [idx.types[hinted[0]].name]
            return result
        ps = PayloadScan(idx, data)
        if ps.fields(0, len(data)) is None:
            result.status = MALFORMED
            return result
        clean = ps.clean_mask(0, len(data), idx.candidate_mask)
        if clean:
            return self._rank_clean(ps, clean, hinted, result, limit, max_equivalent)
        base = confidence_from_evidence(ps.evidence())
        scored = ps.rank_unclean(idx.candidate_mask)
        hinted_set = set(hinted)
        if hinted:
            have = {s.tid for s in scored}
            groups = ps.grouped(0, len(data)) or {}
            weights = {tag: sum(f[5] - f[2] for f in occs) for tag, occs in groups.items()}

            for t in hinted:
                if t not in have:
                    scored.append(Scored(t, ps.score_type(t, groups, weights, len(data)), False))
            scored.sort(key=lambda s: (-s.score, s.tid not in hinted_set))
            notes.append(f"hinted type {idx.types[hinted[0]].name} does not fit these bytes cleanly")
        matches = []
        for i, s in enumerate(scored[:limit]):
            defects = tuple(ps.defects(s.tid)[:5]) if i < 3 else ()
            conf = 0.5 * base * s.score**2
            matches.append(Match(idx.types[s.tid].name, s.score, conf, False, s.tid in hinted_set, defects))
        result.matches = matches
        if not matches or matches[0].score < MIN_SCORE:
            result.status = NO_MATCH
            return result
        top = matches[0].score
        ties = [m.type for m in matches if abs(m.score - top) < 1e-9]
        result.ambiguous = len(ties) > 1
        result.equivalent = ties
        result.equivalent_count = len(ties)
        return result

    def _rank_clean(
        self,
        ps: PayloadScan,
        clean: int,
        hinted: list[int],
        result: Identification,
        limit: int,
        max_equivalent: int,
    ) -> Identification:
        """Rank the types the payload parses cleanly as. Types it is the canonical encoding of (what
        protobuf's serializer writes for the parsed message) come first and alone decide the
        ambiguity; when there is none, a non-canonical producer wrote it: the types with the fewest
        departures from canonical form are kept, at lower confidence."""
        idx = self.index
        canon = ps.canonical_mask(0, len(ps.data), clean, clean=True)
        pool = canon or clean
        count = pool.bit_count()
        hinted_clean = [t for t in hinted if clean >> t & 1]
        hinted_set = set(hinted)

        # Rank a bounded sample: very short payloads fit hundreds of types; all are counted. The
        # sample is the tightest fits, chosen from the whole pool (what the user is shown).
        cap = max(max_equivalent, limit) if canon else max(max_equivalent, limit, NON_CANONICAL_SAMPLE)
        rest = pool & ~sum(1 << t for t in hinted_set)
        penalized = self._binary_as_string(ps) if rest & (rest - 1) else 0
        others = _tightest(rest, penalized, idx.by_field_count, idx.field_counts, cap)
        sample = hinted_clean + others
        departures: dict[int, int] = {}
        if not canon:
            departures = {t: len(ps.canonical_defects(t)) for t in sample}
            if others:
                fewest = min(departures[t] for t in others)
                others = [t for t in others if departures[t] == fewest]
                count = len(others) if count <= cap else count
        # Among equivalents, the type declaring the fewest fields explains the payload most tightly.
        # Text with control characters or invalid UTF-8 in a string field reads better as a
        # sub-message or bytes elsewhere.
        if len(others) > 1 and penalized & sum(1 << t for t in others):
            binary_tags = self._binary_tags(ps)

            def key(tid: int) -> tuple[int, int]:
                fields = idx.types[tid].fields
                penalty = sum(1 for tag in binary_tags if fields.get(tag) in (STRING, STRING_LAX))
                return (penalty, idx.field_counts[tid])

            others.sort(key=key)
        ordered = hinted_clean + others
        hint_wins = bool(hinted_clean)
        base = confidence_from_evidence(ps.evidence_for(ordered[0])) if ordered else 0.0
        if hint_wins:
            result.source = "hint"
            fits = canon >> hinted_clean[0] & 1 or not canon
            conf_top = 0.5 + 0.5 * base if fits else 0.5
            result.ambiguous = False
        elif canon:
            conf_top = base / count
            result.ambiguous = count > 1
        else:
            conf_top = NON_CANONICAL_FACTOR * base / count
            result.ambiguous = count > 1
        matches = []
        for i, tid in enumerate(ordered[:limit]):
            if i == 0:
                conf = conf_top
            elif hint_wins:
                conf = (1 - conf_top) / max(count - 1, 1)
            else:
                conf = conf_top if tid in others else 0.0
            is_canon = bool(canon >> tid & 1)
            defects = () if is_canon or i >= 3 else tuple(ps.canonical_defects(tid)[:5])
            matches.append(Match(idx.types[tid].name, 1.0, conf, True, tid in hinted_set, defects, is_canon))
        if hinted and not hinted_clean:
            result.notes.append(f"hinted type {idx.types[hinted[0]].name} does not fit these bytes; guessed instead")
        if not canon:
            result.notes.append("not the canonical encoding of any registered type (a non-standard producer?)")
        result.matches = matches
        result.equivalent = [idx.types[t].name for t in ordered[:max_equivalent]]
        result.equivalent_count = max(count, len(result.equivalent))
        return result

    @staticmethod
    def _binary_tags(ps: PayloadScan) -> set[int]:
        """Top-level length-delimited tags holding control characters or invalid UTF-8."""
        groups = ps.grouped(0, len(ps.data)) or {}
        data = ps.data
        return {tag for tag, occs in groups.items() if tag & 7 == 2 and any(is_binary(data, f[3], f[4]) for f in occs)}

    def _binary_as_string(self, ps: PayloadScan) -> int:
        """Types that declare a string where the payload holds binary data (listed after the others)."""
        out = 0
        for tag in self._binary_tags(ps):
            for kind, kmask, _ in self.index.simple.get(tag, ()):
                if kind in (STRING, STRING_LAX):
                    out |= kmask
        return out

    def identify_as(self, payload: bytes, type_name: str) -> Identification:
        """Score ``payload`` as one given type (``--type``): no guessing."""
        name = self.resolve_one(type_name)
        data, framing = unframe(bytes(payload))
        tid = self.index.by_name[name]
        result = Identification(status=MATCH, framing=framing, payload=data, source="explicit")
        if not data:  # every field unset: what protobuf writes for a type with nothing required
            fits = not self.index.types[tid].required_numbers
            result.matches = [Match(name, 1.0, 1.0, fits, hinted=True, canonical=fits)]
            result.equivalent = [name]
            result.equivalent_count = 1
            return result
        ps = PayloadScan(self.index, data)
        if ps.fields(0, len(data)) is None:
            result.status = MALFORMED
            return result
        clean = bool(ps.clean_mask(0, len(data), 1 << tid))
        canonical = clean and bool(ps.canonical_mask(0, len(data), 1 << tid, clean=True))
        groups = ps.grouped(0, len(data)) or {}
        weights = {tag: sum(f[5] - f[2] for f in occs) for tag, occs in groups.items()}
        score = 1.0 if clean else ps.score_type(tid, groups, weights, len(data))
        if canonical:
            defects: tuple[str, ...] = ()
        else:
            defects = tuple((ps.canonical_defects(tid) if clean else ps.defects(tid))[:5])
        result.matches = [Match(name, score, 1.0 if clean else score, clean, True, defects, canonical)]
        result.equivalent = [name]
        result.equivalent_count = 1
        return result

    # -- decoding -----------------------------------------------------------------------------
    def message_class(self, type_name: str) -> type[Message]:
        tid = self.index.by_name.get(type_name.lstrip("."))
        if tid is None:
            raise UnknownTypeError(f"unknown message type {type_name!r}")
        return self.index.message_class(tid)

    def decode(self, payload: bytes, type_name: str) -> Message:
        """Parse ``payload`` (already unframed) as ``type_name``."""
        cls = self.message_class(type_name)
        try:
            return cls.FromString(payload)
        except (PbDecodeError, RuntimeError, ValueError) as e:
            raise DecodeError(f"payload does not parse as {type_name}: {e}", "try without --type") from e

    def to_dict(self, msg: Message) -> dict[str, Any]:
        """Protobuf JSON mapping (``google.protobuf.Any`` resolved through this registry)."""
        try:
            return json_format.MessageToDict(msg, descriptor_pool=self.pool)
        except Exception as e:  # json_format raises TypeError/KeyError for unresolvable Any
            raise DecodeError(f"cannot render {msg.DESCRIPTOR.full_name} as JSON: {e}") from e

    def to_text(self, msg: Message) -> str:
        return text_format.MessageToString(msg, descriptor_pool=self.pool)

    @staticmethod
    def decode_raw(payload: bytes) -> list[dict[str, Any]] | None:
        return decode_raw(payload)


_NORM = re.compile(r"[^0-9a-z]")


def _tightest(pool: int, penalized: int, levels: list[int], field_counts: list[int], cap: int) -> list[int]:
    """Up to ``cap`` types of ``pool``, fewest declared fields first (``levels``: one mask per field
    count, ascending; ties by type id), the ``penalized`` ones after all the others."""
    out: list[int] = []
    for tier in (pool & ~penalized, pool & penalized):
        room = cap - len(out)
        if not tier or room <= 0:
            continue
        if tier.bit_count() <= room:
            out.extend(sorted(bits(tier), key=field_counts.__getitem__))
            continue
        for level in levels:
            sub = tier & level
            if sub:
                for t in bits(sub):
                    out.append(t)
                    if len(out) >= cap:
                        return out
    return out


def _norm(name: str) -> str:
    return _NORM.sub("", name.lower())
