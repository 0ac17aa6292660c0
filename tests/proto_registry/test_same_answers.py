"""Issue 40 made identification faster; it must not change what a user is told.

Every answer of today's registry is compared with the frozen pre-issue-40 code (tests/proto_registry/
baseline, commit 4f17f3b) on the same schemas: the whole :class:`Identification` (status, every ranked
match with its exact score, confidence, cleanliness, canonical flag and defects, ambiguity, the
equivalent types and their count, notes, framing), for

- protobuf's golden ``TestMaps`` message (13.6 KB, map-heavy: the payload issue 40 measured) and
  non-canonical rewrites, cuts and byte flips of it;
- seeded random messages of every type of several schema sets (edge cases of every encoding rule, the
  demo's, googleapis-common-protos, opentelemetry-proto, protobuf's own test protos) with the rewrites a
  non-standard producer makes, asked with no hint, with the right type hinted, with another type hinted,
  and as ``--type`` (``identify_as``) of the right type and of another type that knows its fields;
- random bytes and mutated payloads from hypothesis.

``DLXTOOL_SAME_ANSWERS_PER_TYPE`` raises the number of random messages per type (default 2).
"""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path

import pytest
from google.protobuf.message import DecodeError, EncodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proto_registry import Hints, Identification, Registry, wire
from proto_registry.compile import well_known_include
from tests.proto_registry import golden, public_sets, randmsg
from tests.proto_registry.baseline import baseline_of
from tests.proto_registry.baseline.registry import Registry as BaselineRegistry
from tests.proto_registry.test_canonical_differential import EDGE_CASES, EDGE_CASES_3, EDGE_CASES_EDITIONS

PER_TYPE = int(os.environ.get("DLXTOOL_SAME_ANSWERS_PER_TYPE", "2"))
Pair = tuple[Registry, BaselineRegistry]


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(scope="module")
def pairs(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pair]:
    edge = tmp_path_factory.mktemp("same-answers")
    _write(edge, "edge/v1/legacy.proto", EDGE_CASES)
    _write(edge, "edge/v3/modern.proto", EDGE_CASES_3)
    _write(edge, "edge/ed/event.proto", EDGE_CASES_EDITIONS)
    sources: dict[str, list[Path]] = {"edge cases": [edge], "protobuf unittest": [public_sets.protobuf_unittest()]}
    wkt = well_known_include()
    if wkt is not None:
        sources["well-known"] = [wkt]
    sources |= {f"public: {name}": [path] for name, path in public_sets.paths().items()}
    out: dict[str, Pair] = {}
    for name, paths in sources.items():
        reg = Registry.load(paths, include_defaults=False, cache_dir=cache_dir)
        out[name] = (reg, baseline_of(reg))
    reg = Registry.load(include_defaults=True, cache_dir=cache_dir)
    out["bundled shop"] = (reg, baseline_of(reg))
    for reg, base in out.values():
        reg.memo_size = base.memo_size = 0  # every answer computed, none remembered
    return out


def same(pair: Pair, data: bytes, *, hints: Hints | None = None, as_type: str | None = None) -> None:
    new, old = pair
    if as_type is not None:
        got, want = new.identify_as(data, as_type), old.identify_as(data, as_type)
    else:
        got, want = new.identify(data, hints, limit=10), old.identify(data, hints, limit=10)
    assert _key(got) == _key(want), f"{data.hex()} hints={hints} as_type={as_type}"


def _key(ident: Identification) -> tuple[object, ...]:
    """Everything an Identification says (floats exact: the same confidence, not a close one)."""
    return (ident.status, ident.matches, ident.ambiguous, ident.equivalent, ident.equivalent_count, ident.source,
            ident.framing, ident.payload, ident.notes)


def _others(registry: Registry, data: bytes, true_type: str, limit: int = 3) -> list[str]:
    """Other types that know every top-level field of ``data`` (the ones a faster path could get wrong)."""
    idx = registry.index
    mask = idx.candidate_mask
    for f in wire.scan(data) or ():
        mask &= idx.known.get(f[0], 0)
    return [n for n in idx.names(mask) if n != true_type][:limit]


# -- the payload issue 40 measured -------------------------------------------------------------------


@pytest.fixture(scope="module")
def test_maps(pairs: dict[str, Pair]) -> bytes:
    reg, _ = pairs["protobuf unittest"]
    data = golden.build(reg.message_class(golden.TYPE))
    assert len(data) == golden.SIZE
    return data


def test_golden_test_maps_gets_the_same_answer(pairs: dict[str, Pair], test_maps: bytes) -> None:
    pair = pairs["protobuf unittest"]
    same(pair, test_maps)
    same(pair, test_maps, hints=Hints(amqp_type=golden.TYPE))
    same(pair, test_maps, hints=Hints(amqp_type="proto2_unittest.TestMessageWithManyRepeatedPtrFields"))
    same(pair, test_maps, as_type=golden.TYPE)
    same(pair, test_maps, as_type="proto2_unittest.TestMap")
    # What the user is told, today as before (ambiguous with a type whose fields 1..12 are repeated strings).
    best = pair[0].identify(test_maps).best
    assert best is not None and best.type == golden.TYPE and best.clean and best.canonical


def test_golden_test_maps_rewritten_cut_and_flipped(pairs: dict[str, Pair], test_maps: bytes) -> None:
    pair = pairs["protobuf unittest"]
    rng = random.Random(40)
    reg = pair[0]
    variants = randmsg.rewrites(test_maps, rng, reg.message_class(golden.TYPE).DESCRIPTOR)
    for _ in range(12):
        variants.append(test_maps[: rng.randrange(len(test_maps))])
        flipped = bytearray(test_maps)
        for _ in range(rng.randint(1, 3)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        variants.append(bytes(flipped))
    assert len(variants) > 30
    for data in variants:
        same(pair, data)
        same(pair, data, as_type=golden.TYPE)


# -- random messages of every type ----------------------------------------------------------------------


def _payloads(registry: Registry, rng: random.Random) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for name in registry.type_names:
        cls = registry.message_class(name)
        for _ in range(PER_TYPE):
            msg = cls()
            randmsg.fill(msg, rng)
            try:
                data = msg.SerializeToString()
            except EncodeError:  # a required field left unset deep down
                continue
            out.append((name, data))
            out.extend((name, d) for d in randmsg.rewrites(data, rng, cls.DESCRIPTOR)[:2])
    return out


@pytest.mark.parametrize(
    "set_name",
    ["edge cases", "bundled shop", "well-known", "public: googleapis-common-protos", "public: opentelemetry-proto",
     "protobuf unittest"],
)
def test_random_messages_get_the_same_answers(pairs: dict[str, Pair], set_name: str) -> None:
    if set_name not in pairs:
        pytest.skip(f"{set_name}: not available here")
    pair = pairs[set_name]
    reg = pair[0]
    rng = random.Random(f"same-answers {set_name}")
    payloads = _payloads(reg, rng)
    assert len(payloads) >= 2 * len(reg.type_names)
    names = reg.type_names
    for true_type, data in payloads:
        same(pair, data)
        same(pair, data, hints=Hints(amqp_type=true_type))
        same(pair, data, hints=Hints(amqp_type=rng.choice(names), content_type="application/x-protobuf; proto=nope.X"))
        same(pair, data, as_type=true_type)
        for other in _others(reg, data, true_type, limit=2):
            same(pair, data, as_type=other)
        if len(data) > 2:
            same(pair, data[: rng.randrange(1, len(data))])


# -- bytes from hypothesis ----------------------------------------------------------------------------------

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(data=st.binary(max_size=400))
def test_random_bytes_get_the_same_answers(pairs: dict[str, Pair], data: bytes) -> None:
    same(pairs["edge cases"], data)
    same(pairs["public: googleapis-common-protos"], data)


@SETTINGS
@given(draw=st.data())
def test_mutated_messages_get_the_same_answers(pairs: dict[str, Pair], draw: st.DataObject) -> None:
    set_name = draw.draw(st.sampled_from(["edge cases", "protobuf unittest", "public: opentelemetry-proto"]))
    pair = pairs[set_name]
    reg = pair[0]
    name = draw.draw(st.sampled_from(reg.type_names))
    msg = reg.message_class(name)()
    randmsg.fill(msg, random.Random(draw.draw(st.integers(0, 2**32))), fill_rate=0.8)
    try:
        base = msg.SerializeToString()
    except EncodeError:
        return
    flips = draw.draw(st.lists(st.tuples(st.integers(0, max(len(base) - 1, 0)), st.integers(0, 255)), max_size=3))
    mutated = bytearray(base)
    for pos, value in flips:
        if pos < len(mutated):
            mutated[pos] = value
    same(pair, bytes(mutated))
    same(pair, bytes(mutated), as_type=name)


# -- the fast path against the rules it stands for ----------------------------------------------------------


def test_protobuf_round_trip_never_overrules_the_rules(pairs: dict[str, Pair]) -> None:
    """Wherever protobuf's own parse-and-write-back says "clean and canonical as T" (the fast path of
    PayloadScan.single), the rules alone say so too: random messages (maps in upb's hash order, and again
    written deterministically, keys sorted), their non-canonical rewrites, cuts, and every other type
    knowing their fields, over every schema set."""
    from proto_registry.score import PayloadScan

    checked = positive = 0
    disagreements: list[str] = []
    for set_name, (reg, _) in pairs.items():
        rng = random.Random(f"round trip {set_name}")
        idx = reg.index
        for true_type, data in _payloads(reg, rng):
            variants = [data, data[: len(data) // 2]]
            with contextlib.suppress(DecodeError, EncodeError):
                variants.append(reg.message_class(true_type).FromString(data).SerializeToString(deterministic=True))
            for data2 in variants:
                for name in [true_type, *_others(reg, data2, true_type, limit=4)]:
                    tid = idx.by_name[name]
                    ps = PayloadScan(idx, data2)
                    if not ps._round_trips(0, len(data2), tid, 0):  # noqa: SLF001 - the fast path itself
                        continue
                    positive += 1
                    clean, canon = PayloadScan(idx, data2)._clean_and_canonical(0, len(data2), 1 << tid, 0)  # noqa: SLF001
                    if not (clean and canon):
                        disagreements.append(f"{set_name}: {data2.hex()} as {name}")
                    checked += 1
    assert not disagreements, f"{len(disagreements)} of {checked}, e.g.\n" + "\n".join(disagreements[:10])
    assert positive > 1000, positive  # the fast path is exercised in earnest


def test_heights_bound_the_nesting(pairs: dict[str, Pair]) -> None:
    """Index.height (how deep below a type a payload can nest; recursive: unbounded; an extension range
    below: not checkable by protobuf's round trip) against a brute-force walk of protobuf's test protos."""
    from proto_registry.index import NOT_CHECKABLE, UNBOUNDED

    reg, _ = pairs["protobuf unittest"]
    idx = reg.index

    def children(t: int) -> list[int]:
        return [k[1] for k in idx.types[t].fields.values() if len(k) == 2 and k[0] in ("m", "g")]  # type: ignore[misc]

    def below(t: int) -> set[int]:
        seen: set[int] = set()
        todo = children(t)
        while todo:
            c = todo.pop()
            if c not in seen:
                seen.add(c)
                todo.extend(children(c))
        return seen

    def height(t: int) -> int:
        return 1 + max(height(c) for c in children(t)) if children(t) else 0

    kinds: set[object] = set()
    for t in range(len(idx.types)):
        reach = below(t) | {t}
        if any(idx.types[x].descriptor.extension_ranges for x in reach):
            want = NOT_CHECKABLE
        elif any(x in below(x) for x in reach):
            want = UNBOUNDED
        else:
            want = height(t)
        assert idx.height(t) == want, idx.types[t].name
        kinds.add("unbounded" if want == UNBOUNDED else min(want, 2))
    assert {NOT_CHECKABLE, "unbounded", 0, 1, 2} <= kinds  # every case is there
