"""dlxtool.method_cache: dataclasses' methods compiled once and kept (issue 40's start-up). Pure logic, no broker: each
test routes dataclasses' compiling through a cache of its own and puts the builtin back afterwards."""

from __future__ import annotations

import binascii
import dataclasses
import marshal
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlxtool import method_cache
from dlxtool.method_cache import MethodCache, cache_path, load


@pytest.fixture
def routed() -> Iterator[None]:
    """The test routes dataclasses' compiling through caches of its own (route); dataclasses' own exec back after."""
    yield
    if "exec" in vars(dataclasses):
        delattr(dataclasses, "exec")


def route(cache: MethodCache) -> None:
    setattr(dataclasses, "exec", cache.exec)  # noqa: B010 (as install does)


def write_kept(path: Path, kept: dict[object, object] | list[str]) -> None:
    """A file as MethodCache.save writes it: the CRC-32 of the marshalled map, then the map."""
    data = marshal.dumps(kept)
    path.write_bytes(binascii.crc32(data).to_bytes(4, "big") + data)


def make_class() -> type:
    @dataclasses.dataclass(frozen=True)
    class Point:
        x: int
        y: int = 2
        tags: tuple[str, ...] = ()

    return Point


def test_a_class_made_from_kept_code_behaves_as_one_compiled_now(tmp_path: Path, routed: None) -> None:
    first = MethodCache(tmp_path / "m.marshal", {})
    route(first)
    compiled = make_class()
    assert first.added and first.kept
    first.save()

    second = MethodCache(tmp_path / "m.marshal", load(tmp_path / "m.marshal"))
    route(second)
    kept = make_class()
    assert not second.added, "every text was in the file: nothing compiled again"
    assert second.used == set(first.kept)

    a, b = kept(1, tags=("t",)), compiled(1, tags=("t",))
    assert repr(a) == repr(b) == "make_class.<locals>.Point(x=1, y=2, tags=('t',))"
    assert a == kept(1, 2, ("t",)) and a != kept(3) and hash(a) == hash(kept(1, 2, ("t",)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.x = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        kept()


def test_a_save_with_nothing_new_writes_nothing(tmp_path: Path, routed: None) -> None:
    path = tmp_path / "m.marshal"
    cache = MethodCache(path, {})
    cache.save()
    assert not path.exists()


def test_a_file_others_may_write_or_not_ours_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.marshal"
    write_kept(path, {"x = 1": marshal.dumps(compile("x = 1", "<string>", "exec"))})
    path.chmod(0o644)
    assert set(load(path)) == {"x = 1"}
    path.chmod(0o664)
    assert load(path) == {}, "a group-writable file holds code anyone in the group could have put there"
    path.chmod(0o646)
    assert load(path) == {}
    path.chmod(0o600)
    assert set(load(path)) == {"x = 1"}
    monkeypatch.setattr(os, "getuid", lambda: path.stat().st_uid + 1)
    assert load(path) == {}, "another user's file: they could have put any code in it"


def test_a_fifo_in_the_files_place_is_not_waited_on(tmp_path: Path) -> None:
    path = tmp_path / "m.marshal"
    os.mkfifo(path, 0o600)
    assert load(path) == {}  # opened without blocking, and not a regular file


@pytest.mark.parametrize("content", [b"", b"\x00\x00\x00\x00", b"not marshal", marshal.dumps({"x = 1": b"c"})])
def test_a_file_that_fails_its_check_is_an_empty_cache(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "m.marshal"
    path.write_bytes(content)
    path.chmod(0o600)
    assert load(path) == {}


@pytest.mark.parametrize("kept", [["a list"], {1: b"x"}, {"x = 1": "not bytes"}])
def test_a_file_that_is_not_a_map_of_text_to_bytes_is_an_empty_cache(
        tmp_path: Path, kept: dict[object, object] | list[str]) -> None:
    path = tmp_path / "m.marshal"
    write_kept(path, kept)
    path.chmod(0o600)
    assert load(path) == {}


def test_a_damaged_byte_anywhere_in_a_saved_file_makes_it_an_empty_cache(tmp_path: Path, routed: None) -> None:
    # marshal is not made for damaged data (a damaged code object can crash the interpreter): the file's CRC-32 is
    # checked before anything in it is unmarshalled
    path = tmp_path / "m.marshal"
    cache = MethodCache(path, {})
    route(cache)
    make_class()
    cache.save()
    good = path.read_bytes()
    assert set(load(path)) == set(cache.kept)
    for at in (0, 5, len(good) // 2, len(good) - 1):
        path.write_bytes(good[:at] + bytes([good[at] ^ 0x01]) + good[at + 1:])
        assert load(path) == {}, at


@pytest.mark.parametrize("entry", [b"\x00garbage", marshal.dumps(("a", "tuple")), b""])
def test_an_entry_that_is_not_code_is_compiled_again(tmp_path: Path, routed: None, entry: bytes) -> None:
    first = MethodCache(tmp_path / "m.marshal", {})
    route(first)
    make_class()
    second = MethodCache(tmp_path / "m.marshal", dict.fromkeys(first.kept, entry))
    route(second)
    point = make_class()
    assert second.added and point(1) == point(1, 2, ()) and repr(point(1)).endswith("Point(x=1, y=2, tags=())")
    assert second.kept == first.kept, "each entry was compiled again, to the same code"


def test_past_max_entries_a_save_keeps_only_what_this_run_used(tmp_path: Path, routed: None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    old = {"x = 1": marshal.dumps(compile("x = 1", "<string>", "exec")),
           "y = 2": marshal.dumps(compile("y = 2", "<string>", "exec"))}
    cache = MethodCache(tmp_path / "m.marshal", dict(old))
    route(cache)
    make_class()
    monkeypatch.setattr(method_cache, "MAX_ENTRIES", len(cache.kept) - 1)
    cache.save()
    assert set(load(tmp_path / "m.marshal")) == cache.used and not set(old) & cache.used


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path: Path, routed: None) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = MethodCache(blocker / "sub" / "m.marshal", {})
    route(cache)
    make_class()
    cache.save()  # the parent is a file: no directory can be made there
    assert not (tmp_path / "file" / "sub").exists() and list(tmp_path.iterdir()) == [blocker]


def test_the_path_follows_the_schema_cache_variables(tmp_path: Path) -> None:
    name = f"methods-2-{sys.implementation.cache_tag}-{sys.hexversion:x}-O{sys.flags.optimize}.marshal"
    assert cache_path({"DLXTOOL_CACHE_DIR": str(tmp_path)}) == tmp_path / name
    assert cache_path({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "dlxtool" / name


def dlxtool_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DLXTOOL_DEBUG", "PYTHONDONTWRITEBYTECODE")}
    return {**env, "DLXTOOL_CACHE_DIR": str(tmp_path)}


def test_a_whole_process_writes_the_file_once_and_then_only_reads_it(tmp_path: Path) -> None:
    env = dlxtool_env(tmp_path)
    path = method_cache.cache_path(env)
    command = [sys.executable, "-m", "dlxtool", "--help"]

    def run() -> None:  # umask 002 (per-user groups): the file must still be 0600, or it would never be read back
        subprocess.run(command, env=env, check=True, capture_output=True, preexec_fn=lambda: os.umask(0o002))

    run()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    written = path.stat().st_mtime_ns, path.read_bytes()
    assert len(load(path)) > 10, "the classes --help loads"
    run()
    assert (path.stat().st_mtime_ns, path.read_bytes()) == written, "nothing new: the file is not written again"
    assert [p.name for p in tmp_path.iterdir()] == [path.name], "no temporary file left behind"


def test_nothing_is_written_where_python_writes_no_bytecode(tmp_path: Path) -> None:
    env = {**dlxtool_env(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}
    subprocess.run([sys.executable, "-m", "dlxtool", "--help"], env=env, check=True, capture_output=True)
    assert list(tmp_path.iterdir()) == []


def test_kept_code_is_compiled_as_dataclasses_compiles_it(tmp_path: Path, routed: None) -> None:
    # dataclasses' own exec compiles with no __future__ flags; method_cache.py (like this file) has
    # `from __future__ import annotations`, which a plain compile() there would pass on: __init__'s annotations
    # would become the names of dataclasses' locals ('_type_x'), not the field's annotation.
    plain = make_class()
    route(MethodCache(tmp_path / "m.marshal", {}))
    routed_class = make_class()
    assert routed_class.__init__.__annotations__ == plain.__init__.__annotations__  # type: ignore[misc]
    assert routed_class.__init__.__annotations__["x"] == "int"  # type: ignore[misc]
