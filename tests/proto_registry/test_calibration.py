"""Calibration of `dlxtool decode`'s answers, judged on what the user sees (the JSON output's type,
confidence, ambiguous, alternatives, alternatives_count, and --top), over seeded random messages of
the vendored public schema sets (tests/proto_registry/public_sets: googleapis-common-protos,
opentelemetry-proto), serialized by protobuf itself.

These sets are the tuning side; scripts/bench/decode.py reports the same figures on a held-out corpus
of other public schemas that no test reads.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from google.protobuf.message import EncodeError

from dlxtool.decoding import DecodedBody, decode_body
from proto_registry import Registry
from tests.proto_registry import public_sets, randmsg

FILL_RATES = (0.6, 0.9)  # sparse messages (many fit several types) and full ones
PER_TYPE = 8
CONFIDENT = 0.9


@pytest.fixture(scope="module")
def public(cache_dir: Path) -> dict[str, Registry]:
    paths = public_sets.paths()
    assert len(paths) >= 2, f"public schema sets missing (see {public_sets.HERE}/README.md): {paths}"
    sets = {name: Registry.load([p], cache_dir=cache_dir) for name, p in paths.items()}
    sets["all"] = Registry.load(list(paths.values()), cache_dir=cache_dir)
    return sets


def corpus(registry: Registry, names: list[str], seed: int) -> list[tuple[str, bytes]]:
    """(type, payload): PER_TYPE random messages of each type at each fill rate, empty ones left out
    (an empty payload is every type's: there is no answer to judge)."""
    rng = random.Random(seed)
    out = []
    for fill_rate in FILL_RATES:
        for name in names:
            cls = registry.message_class(name)
            for _ in range(PER_TYPE):
                msg = cls()
                randmsg.fill(msg, rng, fill_rate=fill_rate)
                try:
                    data = msg.SerializeToString()
                except EncodeError:  # a required field left unset deep down
                    continue
                if data:
                    out.append((name, data))
    return out


def _shown_or_counted(registry: Registry, data: bytes, true_type: str, d: DecodedBody) -> bool:
    """The true type is listed (type + alternatives); or more types fit than are listed, the output
    says how many (alternatives_count: "+N more" in the table) and --top ranks the true type among them."""
    if true_type in [d.type, *d.alternatives]:
        return True
    if not d.ambiguous or d.alternatives_count <= len(d.alternatives):
        return False
    ranked = decode_body(registry, data, top=d.alternatives_count + 1)
    assert ranked is not None
    return true_type in [m["type"] for m in ranked.top]


def test_confident_answers_are_right_and_doubtful_ones_show_the_true_type(public: dict[str, Registry]) -> None:
    registry = public["all"]
    confident = right = doubtful = listed = 0
    wrong_confident: list[str] = []
    lost: list[str] = []
    for name, data in corpus(registry, registry.type_names, seed=16):
        d = decode_body(registry, data)
        assert d is not None
        if d.confidence >= CONFIDENT:
            confident += 1
            right += d.type == name
            if d.type != name:
                wrong_confident.append(f"{name} -> {d.type} ({d.confidence:.3f}): {data.hex()}")
        if d.type != name or d.ambiguous:
            doubtful += 1
            listed += name in [d.type, *d.alternatives]
            if not _shown_or_counted(registry, data, name, d):
                lost.append(f"{name} -> {d.type} ambiguous={d.ambiguous} {d.alternatives_count}: {data.hex()}")
    # Both halves of the corpus are there in earnest (else the assertions below prove little).
    assert confident >= 500 and doubtful >= 500, (confident, doubtful)
    assert right >= 0.99 * confident, f"{confident - right} of {confident} wrong: {wrong_confident[:5]}"
    assert not lost, f"{len(lost)} answers hide the true type, e.g. {lost[:5]}"
    # Most doubtful answers list the true type outright (the tightest fits come first).
    assert listed >= 0.7 * doubtful, (listed, doubtful)


@pytest.mark.parametrize(
    ("registered", "foreign"),
    [("googleapis-common-protos", "opentelemetry-proto"), ("opentelemetry-proto", "googleapis-common-protos")],
)
def test_payloads_of_unregistered_types_are_not_confident(
    public: dict[str, Registry], registered: str, foreign: str
) -> None:
    """A queue carries messages of schemas nobody loaded: their bytes often fit some registered type
    canonically, and must not be passed off as that type with confidence >= 0.9."""
    registry = public[registered]
    names = [n for n in public[foreign].type_names if n not in registry]
    payloads = corpus(public[foreign], names, seed=7)
    confident = []
    for name, data in payloads:
        d = decode_body(registry, data)
        assert d is not None
        if d.confidence >= CONFIDENT:
            confident.append(f"{name} read as {d.type} ({d.confidence:.3f}): {data.hex()}")
    typed = sum(1 for _, data in payloads if (d := decode_body(registry, data)) is not None and d.type is not None)
    assert len(payloads) >= 800 and typed >= 0.5 * len(payloads), (len(payloads), typed)  # they do fit something
    assert len(confident) <= 0.002 * len(payloads), f"{len(confident)} of {len(payloads)}: {confident[:5]}"
