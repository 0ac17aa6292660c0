"""Index of every message type by ``(field number, wire type)``.

Types are numbered; sets of types are Python ints used as bitsets, so narrowing thousands of
candidates to the few that know every field of a payload is a handful of ``&`` operations.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from proto_registry.wire import I32, I64, LEN, SGROUP, VARINT

# Field kinds, as the scorer checks them. A kind is a small tuple so equal kinds share one check.
Kind = tuple[str] | tuple[str, int]

VARINT_ANY: Kind = ("v",)  # int32/64, uint, sint, bool, open enum: any varint is a valid value
FIXED: Kind = ("f",)  # fixed32/64, sfixed, float, double
STRING: Kind = ("s",)  # must be valid UTF-8 (proto3, editions' utf8_validation VERIFY: the parser rejects it)
STRING_LAX: Kind = ("sl",)  # proto2 string: the parser takes any bytes (invalid UTF-8 only weighs on ranking)
BYTES: Kind = ("b",)  # anything goes
PACKED_VARINT: Kind = ("p0",)
PACKED_I64: Kind = ("p1",)
PACKED_I32: Kind = ("p5",)
# ("e", enum_id) closed enum value, ("pe", enum_id) packed closed enum,
# ("m", type_id) message, ("g", type_id) group: these live in Index.children/parents.

_VARINT_TYPES = {
    FieldDescriptor.TYPE_INT32,
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT32,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT32,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_BOOL,
}
_I64_TYPES = {FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64, FieldDescriptor.TYPE_DOUBLE}
_I32_TYPES = {FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_FLOAT}

NO_FACTS = (0, 0, 0, 0, 0, 0, 0)  # a tag no type knows (never reached: clean_mask rejects it first)


@dataclass(slots=True)
class TypeInfo:
    """What the scorer needs to know about one message type."""

    tid: int
    name: str
    descriptor: Descriptor
    fields: dict[int, Kind]  # tag (number << 3 | wire type) -> kind
    required_numbers: frozenset[int]
    field_count: int
    is_map_entry: bool
    oneofs: tuple[frozenset[int], ...] = ()  # field numbers of each (real) oneof


@dataclass(slots=True)
class Index:
    """What the registered types accept, indexed for identifying payloads by their tags and wire types."""

    types: list[TypeInfo] = field(default_factory=list)
    by_name: dict[str, int] = field(default_factory=dict)
    candidate_mask: int = 0  # every type a payload may be (map entries excluded)
    known: dict[int, int] = field(default_factory=dict)  # tag -> types that accept it
    # tag -> (kind, types, whether the wire type is all the kind needs: VARINT_ANY, FIXED, BYTES, STRING_LAX)
    simple: dict[int, list[tuple[Kind, int, bool]]] = field(default_factory=dict)
    children: dict[int, int] = field(default_factory=dict)  # tag -> message types found under it
    parents: dict[int, dict[int, int]] = field(default_factory=dict)  # tag -> child tid -> parents
    parent_any: dict[int, int] = field(default_factory=dict)  # tag -> types whose tag is a message
    required_mask: int = 0
    oneof_mask: int = 0  # types with a oneof: two members present is a defect
    enums: list[frozenset[int]] = field(default_factory=list)
    tag_cost: dict[int, int] = field(default_factory=dict)  # how costly checking a tag is (order)
    field_counts: list[int] = field(default_factory=list)  # per type id
    # Candidate types by how many fields they declare, fewest first (one mask per count): the order
    # in which equally fitting types are listed, found without visiting every type of a large pool.
    by_field_count: list[int] = field(default_factory=list)
    parent_memo: dict[tuple[int, int], int] = field(default_factory=dict)  # (tag, clean children) -> parents
    child_memo: dict[tuple[int, int], int] = field(default_factory=dict)  # (tag, holders) -> their children
    # Canonical-encoder evidence (what a standard serializer writes), per tag: see score.canonical_mask.
    canon: dict[int, int] = field(default_factory=dict)  # types for which this wire type is the one written
    multi: dict[int, int] = field(default_factory=dict)  # types that write this tag more than once
    implicit: dict[int, int] = field(default_factory=dict)  # types that never write this tag's default value
    narrow: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # tag -> (bool, int32, 32-bit) types
    packed_varint: dict[int, int] = field(default_factory=dict)  # LEN tag -> types where it is packed varints
    map_entry_mask: int = 0
    map_field: dict[int, int] = field(default_factory=dict)  # tag -> types where it is a map (keys unique)
    # All of the above for one tag in one look-up (the canonical check's inner loop): canon, multi,
    # implicit, packed varint, any narrow varint type, map field, message field (parent_any).
    facts: dict[int, tuple[int, int, int, int, int, int, int]] = field(default_factory=dict)
    # protobuf's own message classes, by type id (made on first use: a class costs ~50 us to make).
    classes: dict[int, type[Message]] = field(default_factory=dict)
    # Per type id: how deep its sub-messages can nest (UNBOUNDED: a recursive schema), or NOT_CHECKABLE
    # when protobuf's parser would read more of a payload as the type than the index does (an extension
    # range below it: protobuf parses a registered extension, the index calls the field unknown).
    # Computed on first use, for the types below the one asked about (score.PayloadScan.single).
    heights: dict[int, int] = field(default_factory=dict)
    _child_bits: dict[int, list[tuple[int, int]]] = field(default_factory=dict)

    def child_bits(self, tag: int) -> list[tuple[int, int]]:
        """(1 << child type, the types holding it at ``tag``) for every child type at ``tag``."""
        got = self._child_bits.get(tag)
        if got is None:
            got = self._child_bits[tag] = [(1 << c, p) for c, p in self.parents[tag].items()]
        return got

    def message_class(self, tid: int) -> type[Message]:
        cls = self.classes.get(tid)
        if cls is None:
            cls = self.classes[tid] = message_factory.GetMessageClass(self.types[tid].descriptor)
        return cls

    def height(self, tid: int) -> int:
        """How deep below ``tid`` a payload can nest (UNBOUNDED, NOT_CHECKABLE: see _heights)."""
        got = self.heights.get(tid)
        if got is None:
            _settle_from(self, tid)
            got = self.heights[tid]
        return got

    @property
    def candidate_count(self) -> int:
        return self.candidate_mask.bit_count()

    def names(self, mask: int) -> list[str]:
        return [self.types[t].name for t in bits(mask)]


UNBOUNDED = 1 << 30  # a recursive schema: the payload alone bounds the nesting
NOT_CHECKABLE = -1


def _children(idx: Index, tid: int) -> list[int]:
    return [kind[1] for kind in idx.types[tid].fields.values() if len(kind) == 2 and kind[0] in ("m", "g")]


def _settle_from(idx: Index, root: int) -> None:
    """Index.height of ``root`` and of every type below it not yet known: strongly connected components
    of the "has a field of type" graph (Tarjan's, iterative), children first. A component of several
    types, or a type holding itself, nests without bound. Only the types below ``root`` are visited."""
    heights = idx.heights
    order: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    edges: dict[int, list[int]] = {}
    work = [(root, 0)]  # (type, next edge to follow)
    while work:
        v, i = work[-1]
        if i == 0:
            order[v] = low[v] = len(order)
            stack.append(v)
            on_stack.add(v)
            edges[v] = _children(idx, v)
        out = edges[v]
        descended = False
        while i < len(out):
            w = out[i]
            i += 1
            if w not in order and w not in heights:
                work[-1] = (v, i)
                work.append((w, 0))
                descended = True
                break
            if w in on_stack:
                low[v] = min(low[v], order[w])
        if descended:
            continue
        work.pop()
        if work:
            parent = work[-1][0]
            low[parent] = min(low[parent], low[v])
        if low[v] == order[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            _settle(idx, component, edges)


def _settle(idx: Index, component: list[int], edges: dict[int, list[int]]) -> None:
    """Heights of one component, its children's known (Tarjan's order)."""
    heights = idx.heights
    members = set(component)
    cyclic = len(component) > 1 or any(t in edges[t] for t in component)
    height = UNBOUNDED if cyclic else 0
    checkable = True
    for t in component:
        if idx.types[t].descriptor.extension_ranges:
            checkable = False
        for c in edges[t]:
            if c in members:
                continue
            if heights[c] == NOT_CHECKABLE:
                checkable = False
            elif height != UNBOUNDED:
                height = UNBOUNDED if heights[c] == UNBOUNDED else max(height, heights[c] + 1)
    for t in component:
        heights[t] = height if checkable else NOT_CHECKABLE


def bits(mask: int) -> Iterator[int]:
    """Yield the set bit positions of ``mask`` (type ids), lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def build_index(descriptors: list[Descriptor], map_entries: set[str]) -> Index:
    """Index ``descriptors`` (every message type, nested ones and map entries included)."""
    idx = Index()
    for d in descriptors:
        idx.by_name[d.full_name] = len(idx.types)
        idx.types.append(TypeInfo(len(idx.types), d.full_name, d, {}, frozenset(), 0, d.full_name in map_entries))
    enum_ids: dict[str, int] = {}
    simple: dict[int, dict[Kind, int]] = {}
    for info in idx.types:
        bit = 1 << info.tid
        if not info.is_map_entry:
            idx.candidate_mask |= bit
        required: set[int] = set()
        d = info.descriptor
        info.field_count = len(d.fields)
        if info.is_map_entry:
            idx.map_entry_mask |= bit
        for f in d.fields:
            if f.is_required:
                required.add(f.number)
            _canonical_facts(f, bit, info.is_map_entry, idx)
            for tag, kind in _kinds(f, idx, enum_ids):
                info.fields[tag] = kind
                idx.known[tag] = idx.known.get(tag, 0) | bit
                if kind[0] in ("m", "g") and len(kind) == 2:
                    child = kind[1]
                    idx.children[tag] = idx.children.get(tag, 0) | (1 << child)
                    per_tag = idx.parents.setdefault(tag, {})
                    per_tag[child] = per_tag.get(child, 0) | bit
                    idx.parent_any[tag] = idx.parent_any.get(tag, 0) | bit
                else:
                    per_kind = simple.setdefault(tag, {})
                    per_kind[kind] = per_kind.get(kind, 0) | bit
        if required:
            info.required_numbers = frozenset(required)
            idx.required_mask |= bit
        oneofs = tuple(frozenset(f.number for f in o.fields) for o in d.oneofs if len(o.fields) > 1)
        if oneofs:
            info.oneofs = oneofs
            idx.oneof_mask |= bit
    always_ok = (VARINT_ANY, FIXED, BYTES, STRING_LAX)
    idx.simple = {tag: [(k, m, k in always_ok) for k, m in kinds.items()] for tag, kinds in simple.items()}
    for tag in idx.known:
        b, i, u = idx.narrow.get(tag, (0, 0, 0))
        idx.facts[tag] = (
            idx.canon.get(tag, 0),
            idx.multi.get(tag, 0),
            idx.implicit.get(tag, 0),
            idx.packed_varint.get(tag, 0),
            b | i | u,
            idx.map_field.get(tag, 0),
            idx.parent_any.get(tag, 0),
        )
    idx.field_counts = [t.field_count for t in idx.types]
    levels: dict[int, int] = {}
    for t in idx.types:
        if not t.is_map_entry:
            levels[t.field_count] = levels.get(t.field_count, 0) | 1 << t.tid
    idx.by_field_count = [levels[n] for n in sorted(levels)]
    for tag in idx.known:
        idx.tag_cost[tag] = len(idx.simple.get(tag, ())) + (8 if tag in idx.parent_any else 0)
    return idx


_BOOL = {FieldDescriptor.TYPE_BOOL}
_INT32 = {FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_ENUM}  # negative values: sign-extended to 64 bits
_U32 = {FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_SINT32}
_SCALAR_WIRE = {
    **{t: VARINT for t in (*_VARINT_TYPES, FieldDescriptor.TYPE_ENUM)},
    **{t: I64 for t in _I64_TYPES},
    **{t: I32 for t in _I32_TYPES},
}


def _canonical_facts(f: FieldDescriptor, bit: int, in_map_entry: bool, idx: Index) -> None:
    """What a standard serializer does with ``f``: which wire type it writes, whether it may write
    the tag several times, whether it leaves a default value out, which varint values it can write."""
    n = f.number << 3
    scalar_wt = _SCALAR_WIRE.get(f.type)
    if f.type == FieldDescriptor.TYPE_GROUP:
        written = n | SGROUP
    elif scalar_wt is None or (f.is_repeated and f.is_packed):
        written = n | LEN
    else:
        written = n | scalar_wt
    idx.canon[written] = idx.canon.get(written, 0) | bit
    packed = scalar_wt is not None and f.is_repeated and f.is_packed
    if f.message_type is not None and f.message_type.GetOptions().map_entry:
        idx.map_field[written] = idx.map_field.get(written, 0) | bit
    if f.is_repeated and not packed:
        idx.multi[written] = idx.multi.get(written, 0) | bit
    # A map entry is always written whole (key and value, defaults included): checked per entry.
    if packed or (not in_map_entry and not f.is_repeated and not f.has_presence):
        idx.implicit[written] = idx.implicit.get(written, 0) | bit
    if scalar_wt == VARINT:
        if packed:
            idx.packed_varint[written] = idx.packed_varint.get(written, 0) | bit
        b, i, u = idx.narrow.get(written, (0, 0, 0))
        if f.type in _BOOL:
            b |= bit
        elif f.type in _INT32:
            i |= bit
        elif f.type in _U32:
            u |= bit
        if b | i | u:
            idx.narrow[written] = (b, i, u)


def _kinds(f: FieldDescriptor, idx: Index, enum_ids: dict[str, int]) -> list[tuple[int, Kind]]:
    n = f.number << 3
    t = f.type
    repeated = f.is_repeated
    if t == FieldDescriptor.TYPE_STRING:
        return [(n | LEN, STRING if _utf8_checked(f) else STRING_LAX)]
    if t == FieldDescriptor.TYPE_BYTES:
        return [(n | LEN, BYTES)]
    if t in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        assert f.message_type is not None  # a message or group field always has its type
        child = idx.by_name[f.message_type.full_name]
        return [(n | LEN, ("m", child))] if t == FieldDescriptor.TYPE_MESSAGE else [(n | SGROUP, ("g", child))]
    if t == FieldDescriptor.TYPE_ENUM:
        e = f.enum_type
        assert e is not None  # an enum field always has its enum
        if e.is_closed:
            eid = enum_ids.get(e.full_name)
            if eid is None:
                eid = enum_ids[e.full_name] = len(idx.enums)
                idx.enums.append(frozenset(v.number & 0xFFFFFFFFFFFFFFFF for v in e.values))
            kinds: list[tuple[int, Kind]] = [(n | VARINT, ("e", eid))]
            if repeated:
                kinds.append((n | LEN, ("pe", eid)))
            return kinds
        kinds = [(n | VARINT, VARINT_ANY)]
        if repeated:
            kinds.append((n | LEN, PACKED_VARINT))
        return kinds
    if t in _VARINT_TYPES:
        return [(n | VARINT, VARINT_ANY)] + ([(n | LEN, PACKED_VARINT)] if repeated else [])
    if t in _I64_TYPES:
        return [(n | I64, FIXED)] + ([(n | LEN, PACKED_I64)] if repeated else [])
    if t in _I32_TYPES:
        return [(n | I32, FIXED)] + ([(n | LEN, PACKED_I32)] if repeated else [])
    return []


def _utf8_checked(f: FieldDescriptor) -> bool:
    """proto3 and editions (by default) reject invalid UTF-8 in strings; proto2 does not."""
    try:
        # no public accessor for a field's resolved features; the stubs do not list it either
        return bool(f._GetFeatures().utf8_validation != 3)  # type: ignore[attr-defined]  # noqa: SLF001 - FeatureSet.NONE
    except AttributeError:  # older runtimes: no features, go by syntax
        return getattr(getattr(f, "file", None), "syntax", "proto2") == "proto3"  # .file: not in the stubs
