from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from proto_registry import (
    CompileError,
    DescriptorSetError,
    Registry,
    SchemaConflictError,
    SourceNotFoundError,
)
from proto_registry.cache import cache_dir

PROTO = """syntax = "proto3";
package acme.v1;
import "google/protobuf/timestamp.proto";
message Ping { string id = 1; google.protobuf.Timestamp at = 2; int64 seq = 3; }
message Outer { message Inner { bool ok = 1; } Inner inner = 1; map<string, int32> counts = 2; }
"""


def write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_loads_a_proto_dir_with_well_known_imports(tmp_path: Path) -> None:
    write(tmp_path / "protos", "acme/v1/ping.proto", PROTO)
    reg = Registry.load([tmp_path / "protos"], include_defaults=False, cache_dir=tmp_path / "c")
    assert {"acme.v1.Ping", "acme.v1.Outer", "acme.v1.Outer.Inner"} <= set(reg.type_names)
    assert "shop.orders.v1.OrderPlaced" not in reg


def test_cache_is_keyed_by_content(tmp_path: Path) -> None:
    src = write(tmp_path / "protos", "acme/v1/ping.proto", PROTO)
    cache = tmp_path / "c"
    Registry.load([src.parent.parent.parent], include_defaults=False, cache_dir=cache)
    entries = list(cache.glob("*.binpb"))
    assert len(entries) == 1
    reg = Registry.load([tmp_path / "protos"], include_defaults=False, cache_dir=cache)
    assert reg.loaded.cache_hits == 1 and reg.loaded.compiled == 0
    src.write_text(PROTO.replace("int64 seq = 3;", "int64 seq = 3; string extra = 4;"))
    reg = Registry.load([tmp_path / "protos"], include_defaults=False, cache_dir=cache)
    assert reg.loaded.compiled == 1
    assert len(list(cache.glob("*.binpb"))) == 2


def test_cache_dir_resolution(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DLXTOOL_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    monkeypatch.delenv("DLXTOOL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "dlxtool" / "proto"


def test_compile_error_names_file_and_line(tmp_path: Path) -> None:
    bad = write(tmp_path / "protos", "bad.proto", 'syntax = "proto3";\nmessage A {\n  string x = 1\n}\n')
    with pytest.raises(CompileError) as e:
        Registry.load([tmp_path / "protos"], include_defaults=False, cache_dir=tmp_path / "c")
    assert e.value.file == str(bad)
    assert e.value.line in (3, 4)
    assert str(bad) in e.value.message and e.value.hint


def test_descriptor_set_with_and_without_imports(tmp_path: Path) -> None:
    write(tmp_path / "protos", "acme/v1/ping.proto", PROTO)
    out = tmp_path / "ping.desc"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{tmp_path / 'protos'}",
            f"--descriptor_set_out={out}",
            "acme/v1/ping.proto",
        ],
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    # Without --include_imports the well-known types are filled in from protobuf itself.
    reg = Registry.load([out], include_defaults=False, cache_dir=tmp_path / "c")
    assert "acme.v1.Ping" in reg and "google.protobuf.Timestamp" in reg


def test_same_file_twice_is_fine_conflict_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "a", "acme/v1/ping.proto", PROTO)
    write(tmp_path / "b", "acme/v1/ping.proto", PROTO)
    reg = Registry.load([tmp_path / "a", tmp_path / "b"], include_defaults=False, cache_dir=tmp_path / "c")
    assert "acme.v1.Ping" in reg
    write(tmp_path / "b", "acme/v1/ping.proto", PROTO.replace("seq = 3", "seq = 4"))
    with pytest.raises(SchemaConflictError) as e:
        Registry.load([tmp_path / "a", tmp_path / "b"], include_defaults=False, cache_dir=tmp_path / "c")
    assert "acme/v1/ping.proto" in e.value.message and e.value.hint


def test_same_type_in_two_files_is_a_clear_error(tmp_path: Path) -> None:
    write(tmp_path / "a", "one.proto", 'syntax = "proto3";\npackage acme;\nmessage Dup { string a = 1; }\n')
    write(tmp_path / "a", "two.proto", 'syntax = "proto3";\npackage acme;\nmessage Dup { int32 b = 1; }\n')
    with pytest.raises((SchemaConflictError, CompileError)) as e:
        Registry.load([tmp_path / "a"], include_defaults=False, cache_dir=tmp_path / "c")
    assert "Dup" in e.value.message


def test_missing_path_and_bad_descriptor_set(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError):
        Registry.load([tmp_path / "nope"], cache_dir=tmp_path / "c")
    junk = tmp_path / "junk.desc"
    junk.write_bytes(b"\xff\xff\xff\xff")
    with pytest.raises(DescriptorSetError) as e:
        Registry.load([junk], include_defaults=False, cache_dir=tmp_path / "c")
    assert str(junk) in e.value.message


def _descriptor_set(tmp_path: Path, out: Path) -> Path:
    write(tmp_path / "src", "acme/v1/ping.proto", PROTO)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path / 'src'}", "--include_imports"]
        + [f"--descriptor_set_out={out}", "acme/v1/ping.proto"],
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    return out


def test_directory_holding_descriptor_sets_loads_them(tmp_path: Path) -> None:
    sets = tmp_path / "sets"
    (sets / "deep").mkdir(parents=True)
    _descriptor_set(tmp_path, sets / "deep" / "ping.binpb")
    (sets / "model.pb").write_bytes(b"\xff\xff\xff\xff")  # some other protobuf data: skipped, noted
    reg = Registry.load([sets], include_defaults=False, cache_dir=tmp_path / "c")
    assert "acme.v1.Ping" in reg and "acme.v1.Outer.Inner" in reg
    assert any("model.pb" in n and "skipped" in n for n in reg.loaded.notes)


def test_path_yielding_no_types_is_an_error_naming_it(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    (empty / "README.txt").write_text("nothing here")
    # The demo's bundled schemas are off by default; loaded here on purpose: the types they bring must
    # not hide that the user's own path brought none.
    with pytest.raises(SourceNotFoundError) as e:
        Registry.load([empty], include_defaults=True, cache_dir=tmp_path / "c")
    assert str(empty) in e.value.message and "no message types" in e.value.message
    enums_only = write(tmp_path / "enums", "e.proto", 'syntax = "proto3";\nenum E { E_UNSPECIFIED = 0; }\n')
    with pytest.raises(SourceNotFoundError) as e:
        Registry.load([enums_only.parent], include_defaults=False, cache_dir=tmp_path / "c")
    assert str(enums_only.parent) in e.value.message


def _graph_def() -> bytes:
    """A TensorFlow GraphDef (node {name op input} versions {producer}), the way TF writes a model.pb:
    its field 1 is length-delimited, so it parses as a FileDescriptorSet holding a "file" named
    conv1/weights that imports "init"."""

    def ld(tag: int, body: bytes) -> bytes:
        return bytes([tag, len(body)]) + body

    node = ld(0x0A, b"conv1/weights") + ld(0x12, b"VariableV2") + ld(0x1A, b"init")
    return ld(0x0A, node) + ld(0x22, b"\x08\x1b")


def test_protobuf_data_that_parses_as_a_descriptor_set_is_skipped_in_a_directory(tmp_path: Path) -> None:
    sets = tmp_path / "sets"
    sets.mkdir()
    _descriptor_set(tmp_path, sets / "ping.binpb")
    (sets / "model.pb").write_bytes(_graph_def())
    reg = Registry.load([sets], include_defaults=False, cache_dir=tmp_path / "c")
    assert "acme.v1.Ping" in reg
    assert [n for n in reg.loaded.notes if "model.pb" in n] == [
        f"{sets / 'model.pb'} skipped: {sets / 'model.pb'} is not a FileDescriptorSet (it parses as one, but"
        " names a file 'conv1/weights', not a .proto)"
    ]
    # Alone in its directory: that path yields no types, and the error says what was skipped.
    (sets / "ping.binpb").unlink()
    with pytest.raises(SourceNotFoundError) as e:
        Registry.load([sets], include_defaults=False, cache_dir=tmp_path / "c")
    assert "no message types" in e.value.message and "model.pb is not a FileDescriptorSet" in e.value.message
    # Named on its own, it is an error about that file.
    with pytest.raises(DescriptorSetError) as e2:
        Registry.load([sets / "model.pb"], include_defaults=False, cache_dir=tmp_path / "c")
    assert str(sets / "model.pb") in e2.value.message and "not a FileDescriptorSet" in e2.value.message
