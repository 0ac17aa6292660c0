"""Differential test: dlxtool's verdict "this payload is a clean, canonical T" against protobuf's own.

protobuf's verdict: ``T.FromString(payload)`` succeeds, no unknown field anywhere in the parsed
message, and ``SerializeToString()`` gives back exactly ``payload``. dlxtool's: ``identify_as`` says
clean and canonical. Payloads are seeded random messages plus rewrites a non-standard producer makes
(fields swapped or repeated, defaults written, padded varints), checked against their own type and
against every other type that knows their top-level fields, over several public schema sets.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from google.protobuf import unknown_fields
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, EncodeError, Message

from proto_registry import Registry, wire
from proto_registry.compile import well_known_include
from tests.proto_registry import public_sets, randmsg

EDGE_CASES = """
syntax = "proto2";
package edge.v1;

enum Color { RED = 1; GREEN = 2; }
message Legacy {
  required int32 id = 1;
  optional string name = 2;
  repeated int32 plain = 3;
  repeated sint64 packed = 4 [packed = true];
  optional Color color = 5;
  repeated Color colors = 6;
  optional group Extra = 7 { optional uint32 a = 8; repeated string b = 9; }
  optional bool flag = 10 [default = true];
  map<int32, string> names = 11;
  optional fixed64 f64 = 12;
  optional bytes raw = 13;
}
message Holder { optional Legacy legacy = 1; repeated Legacy many = 2; optional uint32 small = 3; }
"""

EDGE_CASES_3 = """
syntax = "proto3";
package edge.v3;

enum Mood { MOOD_UNSPECIFIED = 0; HAPPY = 1; }
message Modern {
  int32 count = 1;
  string name = 2;
  repeated int64 values = 3;
  repeated uint32 unpacked = 4 [packed = false];
  optional int32 maybe = 5;
  oneof pick { string text = 6; int64 number = 7; Modern child = 8; }
  map<string, Modern> children = 9;
  map<bool, int32> flags = 10;
  Mood mood = 11;
  repeated Mood moods = 12;
  double ratio = 13;
  float weight = 14;
  bool on = 15;
  sint32 delta = 16;
  bytes blob = 17;
  repeated double samples = 18;
  fixed32 f32 = 19;
}
"""

EDGE_CASES_EDITIONS = """
edition = "2023";
package edge.ed;

option features.field_presence = IMPLICIT;

message Event {
  int32 id = 1;
  string label = 2 [features.field_presence = EXPLICIT];
  repeated int32 codes = 3 [features.repeated_field_encoding = EXPANDED];
  repeated int32 packed_codes = 4;
  Inner inner = 5 [features.message_encoding = DELIMITED];
  message Inner { uint64 big = 1; }
}
"""


def _write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def schema_sets(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Registry]:
    root = tmp_path_factory.mktemp("differential")
    sets: dict[str, Registry] = {}
    wkt = well_known_include()
    if wkt is not None:  # google/protobuf/*.proto of grpcio-tools: proto2 descriptor.proto, editions features
        sets["well-known"] = Registry.load([wkt], include_defaults=False, cache_dir=cache_dir)
    edge = root / "edge"
    _write(edge, "edge/v1/legacy.proto", EDGE_CASES)
    _write(edge, "edge/v3/modern.proto", EDGE_CASES_3)
    _write(edge, "edge/ed/event.proto", EDGE_CASES_EDITIONS)
    sets["edge cases"] = Registry.load([edge], include_defaults=False, cache_dir=cache_dir)
    sets["bundled shop"] = Registry.load(include_defaults=True, cache_dir=cache_dir)
    for name, path in public_sets.paths().items():
        sets[f"public: {name}"] = Registry.load([path], include_defaults=False, cache_dir=cache_dir)
    return sets


def test_public_schema_sets_are_there(schema_sets: dict[str, Registry]) -> None:
    """The differential test below proves little on our own schemas alone: it must not quietly run
    without the public ones (vendored under public_sets/, so always there offline)."""
    public = {name: len(r) for name, r in schema_sets.items() if name.startswith("public: ")}
    assert len(public) >= 2 and all(n >= 50 for n in public.values()), public


def protobuf_verdict(cls: type[Message], data: bytes) -> bool:
    """Parses, no unknown field anywhere, and re-encodes to exactly ``data`` — up to the order of
    map entries: upb writes a map in its hash table's order, which no other producer shares (Go
    randomises it, C++ has its own), so that order says nothing about the type."""
    try:
        msg = cls.FromString(data)
        if _has_unknown(msg):
            return False
        again = msg.SerializeToString()
    except (DecodeError, EncodeError):  # EncodeError: a required field missing
        return False
    return again == data or _maps_sorted(cls.DESCRIPTOR, again) == _maps_sorted(cls.DESCRIPTOR, data)


def _maps_sorted(desc, data: bytes) -> bytes:
    """``data`` with each run of map entries sorted (recursively); other bytes as they are."""
    fields = wire.scan(data)
    if fields is None:
        return data
    out: list[bytes] = []
    run: list[bytes] = []
    run_number = 0
    for tag, _, start, vstart, vend, end in fields:
        fd = desc.fields_by_number.get(tag >> 3)
        is_msg = fd is not None and fd.message_type is not None and tag & 7 == wire.LEN
        chunk = data[start:end]
        if is_msg:
            inner = _maps_sorted(fd.message_type, data[vstart:vend])
            if inner != data[vstart:vend]:
                chunk = data[start:vstart] + inner  # same length: only the order changed
        if is_msg and fd.message_type.GetOptions().map_entry:
            if run and run_number != tag >> 3:
                out.extend(sorted(run))
                run = []
            run_number = tag >> 3
            run.append(chunk)
            continue
        out.extend(sorted(run))
        run = []
        out.append(chunk)
    out.extend(sorted(run))
    return b"".join(out)


def _has_unknown(msg: Message) -> bool:
    if len(unknown_fields.UnknownFieldSet(msg)):
        return True
    for f, value in msg.ListFields():
        if f.message_type is None:
            continue
        if f.message_type.GetOptions().map_entry:
            has_messages = f.message_type.fields_by_name["value"].message_type is not None
            if has_messages and any(_has_unknown(v) for v in value.values()):
                return True
        elif f.is_repeated:
            if any(_has_unknown(v) for v in value):
                return True
        elif _has_unknown(value):
            return True
    return False


def _candidates(registry: Registry, data: bytes, true_type: str, limit: int = 25) -> list[str]:
    """The true type and other types knowing every top-level tag (the ones worth disagreeing on)."""
    idx = registry.index
    fields = wire.scan(data) or []
    mask = idx.candidate_mask
    for f in fields:
        mask &= idx.known.get(f[0], 0)
    names = [true_type] + [n for n in idx.names(mask) if n != true_type]
    return names[:limit]


def _payloads(registry: Registry, rng: random.Random, per_type: int) -> list[tuple[str, bytes]]:
    out = []
    for name in registry.type_names:
        cls = registry.message_class(name)
        for _ in range(per_type):
            msg = cls()
            randmsg.fill(msg, rng)
            try:
                data = msg.SerializeToString()
            except EncodeError:  # a required field left unset deep down
                continue
            out.append((name, data))
            out.extend((name, d) for d in randmsg.rewrites(data, rng, cls.DESCRIPTOR))
    return out


def test_clean_canonical_agrees_with_protobuf(schema_sets: dict[str, Registry]) -> None:
    rng = random.Random(16)
    disagreements: list[str] = []
    checked = {"canonical": 0, "not": 0}
    for set_name, registry in schema_sets.items():
        for true_type, data in _payloads(registry, rng, per_type=6):
            for name in _candidates(registry, data, true_type):
                expected = protobuf_verdict(registry.message_class(name), data)
                m = registry.identify_as(data, name).best
                got = m is not None and m.clean and m.canonical
                checked["canonical" if expected else "not"] += 1
                if got != expected:
                    disagreements.append(f"{set_name}: {data.hex()} as {name}: protobuf {expected}, dlxtool {got}")
    assert not disagreements, f"{len(disagreements)} disagreements, e.g.\n" + "\n".join(disagreements[:15])
    # The corpus exercises both verdicts in earnest.
    assert checked["canonical"] > 500 and checked["not"] > 500, checked


def test_schema_sets_cover_the_encodings(schema_sets: dict[str, Registry]) -> None:
    """The sets hold what the canonical rules are about (else the test above proves little)."""
    kinds = set()
    for registry in schema_sets.values():
        for info in registry.index.types:
            d = info.descriptor
            kinds.add(registry.loaded.files[d.file.name].syntax or "proto2")
            for f in d.fields:
                kinds.add("group" if f.type == FieldDescriptor.TYPE_GROUP else None)
                kinds.add("packed" if f.is_repeated and f.is_packed else None)
                kinds.add("implicit" if not f.is_repeated and not f.has_presence else None)
                kinds.add("required" if f.is_required else None)
                kinds.add("closed enum" if f.enum_type is not None and f.enum_type.is_closed else None)
    assert {"group", "packed", "implicit", "required", "closed enum", "proto2", "proto3", "editions"} <= kinds
