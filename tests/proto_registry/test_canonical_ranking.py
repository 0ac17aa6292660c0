"""A type that fits canonically beats one that only parses; non-canonical producers still decode.

Each pair of types below parses the same bytes cleanly (no unknown field, right wire types); only
one of them is what protobuf's serializer writes for those bytes. Before the canonical evidence,
each pair was a tie broken arbitrarily (issue 16).
"""

from __future__ import annotations

import pytest

from proto_registry import MATCH, Registry

PAIRS = """
syntax = "proto3";
package pairs.v1;

// 08 00: an implicit-presence int32 is never written at its default; an explicit one is.
message Implicit { int32 n = 1; string pad_a = 20; string pad_b = 21; }
message Explicit { optional int32 n = 1; string pad_c = 22; }

// 0a 01 61 0a 01 62: a singular string is written once; a repeated one may repeat.
message Single { string s = 1; int64 pad_d = 23; }
message Many { repeated string s = 1; }

// 18 05 18 06: proto3 packs repeated scalars; unpacked ones appear one per value.
message Packed { repeated int32 v = 3; }
message Unpacked { repeated int32 v = 3 [packed = false]; }

// 22 00: an empty packed list is not written; an empty sub-message is.
message PackedNums { repeated int32 w = 4; }
message Holder { Empty w = 4; }
message Empty {}
"""


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    root = tmp_path_factory.mktemp("pairs")
    (root / "pairs.proto").write_text(PAIRS)
    return Registry.load([root], include_defaults=False, cache_dir=root / "cache")


@pytest.mark.parametrize(
    ("payload", "canonical_type", "parses_only"),
    [
        ("0800", "pairs.v1.Explicit", "pairs.v1.Implicit"),
        ("0a01610a0162", "pairs.v1.Many", "pairs.v1.Single"),
        ("18051806", "pairs.v1.Unpacked", "pairs.v1.Packed"),
        ("2200", "pairs.v1.Holder", "pairs.v1.PackedNums"),
    ],
)
def test_canonical_fit_beats_a_mere_parse(pairs: Registry, payload: str, canonical_type: str, parses_only: str) -> None:
    data = bytes.fromhex(payload)
    # Both parse cleanly: the old verdict could not tell them apart.
    assert pairs.identify_as(data, parses_only).best.clean  # type: ignore[union-attr]
    assert not pairs.identify_as(data, parses_only).best.canonical  # type: ignore[union-attr]
    res = pairs.identify(data)
    assert res.status == MATCH and res.best is not None
    assert res.best.type == canonical_type and res.best.canonical
    assert not res.ambiguous and res.equivalent_count == 1


def test_non_canonical_producer_still_decodes_at_lower_confidence(pairs: Registry) -> None:
    """Fields out of number order: no type is canonical, the bytes still decode, less surely."""
    in_order = bytes.fromhex("0a0161" + "b80107")  # Single: s = "a", pad_d = 7
    swapped = bytes.fromhex("b80107" + "0a0161")
    good, odd = pairs.identify(in_order), pairs.identify(swapped)
    assert good.best is not None and good.best.type == "pairs.v1.Single" and good.best.canonical
    assert odd.status == MATCH and odd.best is not None and odd.best.type == "pairs.v1.Single"
    assert not odd.best.canonical and odd.best.confidence <= good.best.confidence / 2
    assert any("canonical" in n for n in odd.notes)
    assert any("number order" in d for d in odd.best.defects)


def test_several_canonical_fits_raise_the_flag(pairs: Registry) -> None:
    res = pairs.identify(bytes.fromhex("0a0161"))  # s = "a": Single and Many write exactly this
    assert res.ambiguous and {"pairs.v1.Single", "pairs.v1.Many"} <= set(res.equivalent)
    assert res.best is not None and res.best.confidence < 0.9


def test_padded_varint_is_not_canonical_and_says_why(pairs: Registry) -> None:
    """A padded varint (longer than needed) is not canonical for any type, and says why."""
    res = pairs.identify_as(bytes.fromhex("088100"), "pairs.v1.Explicit")
    assert res.best is not None and res.best.clean and not res.best.canonical
    assert any("longer than needed" in d for d in res.best.defects)
