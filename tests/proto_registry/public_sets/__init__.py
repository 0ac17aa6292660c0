"""Descriptor sets of public schemas, vendored so the tests always have them offline (see README.md).

Tuning side only: scripts/bench/decode.py keeps its held-out corpus disjoint from these.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
NAMES = ("googleapis-common-protos", "opentelemetry-proto")


def paths() -> dict[str, Path]:
    """Each set that is present, by package name (a missing file is left out: the tests count them)."""
    return {name: HERE / f"{name}.binpb" for name in NAMES if (HERE / f"{name}.binpb").is_file()}


PROTOBUF_UNITTEST = HERE / "protobuf-unittest.binpb"


def protobuf_unittest() -> Path:
    """protobuf's own test schemas (v35.1, src/google/protobuf/*.proto): the golden TestMaps message's
    registry (tests/proto_registry/golden.py). Not among paths(): the tests that walk every type of
    every set would take minutes more on its 650 types."""
    return PROTOBUF_UNITTEST
