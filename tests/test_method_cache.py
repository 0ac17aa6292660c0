"""dlxtool.method_cache: dataclasses' methods compiled once and kept (issue 40's start-up). Pure logic, no broker: each
test routes dataclasses' compiling through a cache of its own and puts the builtin back afterwards."""

from __future__ import annotations

import dataclasses
import marshal
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dlxtool import method_cache
from dlxtool.method_cache import MethodCache, cache_path, load


@pytest.fixture
def routed() -> Iterator[list[MethodCache]]:
    """Install with the caches the test makes; dataclasses' own exec back afterwards."""
    caches: list[MethodCache] = []
    yield caches
    if "exec" in vars(dataclasses):
        delattr(dataclasses, "exec")


def route(cache: MethodCache) -> None:
    setattr(dataclasses, "exec", cache.exec)  # noqa: B010 (as install does)


def make_class() -> type:
    @dataclasses.dataclass(frozen=True)
    class Point:
        x: int
        y: int = 2
        tags: tuple[str, ...] = ()

    return Point


def test_a_class_made_from_kept_code_behaves_as_one_compiled_now(tmp_path: Path, routed: list[MethodCache]) -> None:
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


def test_a_save_with_nothing_new_writes_nothing(tmp_path: Path, routed: list[MethodCache]) -> None:
    path = tmp_path / "m.marshal"
    cache = MethodCache(path, {})
    cache.save()
    assert not path.exists()


def test_a_file_others_may_write_or_not_ours_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "m.marshal"
    marshal.dump({"x = 1": marshal.dumps(compile("x = 1", "<string>", "exec"))}, path.open("wb"))
    path.chmod(0o644)
    assert set(load(path)) == {"x = 1"}
    path.chmod(0o664)
    assert load(path) == {}, "a group-writable file holds code anyone in the group could have put there"
    path.chmod(0o646)
    assert load(path) == {}


@pytest.mark.parametrize("content", [b"", b"not marshal", marshal.dumps(["a list"]), marshal.dumps({1: b"x"}),
                                     marshal.dumps({"x = 1": "not bytes"})])
def test_a_damaged_file_is_an_empty_cache(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "m.marshal"
    path.write_bytes(content)
    path.chmod(0o600)
    assert load(path) == {}


def test_a_kept_entry_that_does_not_unmarshal_is_compiled_again(tmp_path: Path, routed: list[MethodCache]) -> None:
    first = MethodCache(tmp_path / "m.marshal", {})
    route(first)
    make_class()
    damaged = dict.fromkeys(first.kept, b"\x00garbage")
    second = MethodCache(tmp_path / "m.marshal", damaged)
    route(second)
    point = make_class()
    assert second.added and point(1) == point(1, 2, ())
    assert all(data != b"\x00garbage" for data in second.kept.values())


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path: Path, routed: list[MethodCache]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = MethodCache(blocker / "sub" / "m.marshal", {})
    route(cache)
    make_class()
    cache.save()  # the parent is a file: no directory can be made there
    assert not (tmp_path / "file" / "sub").exists() and list(tmp_path.iterdir()) == [blocker]


def test_the_path_follows_the_schema_cache_variables(tmp_path: Path) -> None:
    name = f"methods-1-{sys.implementation.cache_tag}-{sys.hexversion:x}-O{sys.flags.optimize}.marshal"
    assert cache_path({"DLXTOOL_CACHE_DIR": str(tmp_path)}) == tmp_path / name
    assert cache_path({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "dlxtool" / name


def test_a_whole_process_writes_the_file_once_and_then_only_reads_it(tmp_path: Path) -> None:
    env = {**os.environ, "DLXTOOL_CACHE_DIR": str(tmp_path)}
    env.pop("DLXTOOL_DEBUG", None)
    path = method_cache.cache_path(env)
    command = [sys.executable, "-m", "dlxtool", "--help"]
    subprocess.run(command, env=env, check=True, capture_output=True)
    assert path.exists() and not path.stat().st_mode & 0o022
    written = path.stat().st_mtime_ns, path.read_bytes()
    assert len(load(path)) > 10, "the classes --help loads"
    subprocess.run(command, env=env, check=True, capture_output=True)
    assert (path.stat().st_mtime_ns, path.read_bytes()) == written, "nothing new: the file is not written again"
    assert [p.name for p in tmp_path.iterdir()] == [path.name], "no temporary file left behind"


def test_kept_code_is_compiled_as_dataclasses_compiles_it(tmp_path: Path, routed: list[MethodCache]) -> None:
    # dataclasses' own exec compiles with no __future__ flags; method_cache.py (like this file) has
    # `from __future__ import annotations`, which a plain compile() there would pass on: __init__'s annotations
    # would become the names of dataclasses' locals ('_type_x'), not the field's annotation.
    plain = make_class()
    route(MethodCache(tmp_path / "m.marshal", {}))
    routed_class = make_class()
    assert routed_class.__init__.__annotations__ == plain.__init__.__annotations__  # type: ignore[misc]
    assert routed_class.__init__.__annotations__["x"] == "int"  # type: ignore[misc]
