"""Turning proto paths into one consistent set of file descriptors, then a descriptor pool.

A source is a directory of ``.proto`` files (compiled with protoc) and of prebuilt descriptor sets
(``FileDescriptorSet``: ``.desc``, ``.binpb``, ``.pb``, found at any depth), a ``.proto`` file (its
directory is used) or a descriptor set. A source that yields no message type at all is an error
naming it: a mistyped directory must not decode silently against the bundled schemas only. The same
file from several sources is kept once; a file defined differently by two sources, or a type defined
twice, is a :class:`SchemaConflictError` naming both.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool

from proto_registry.compile import compile_dirs
from proto_registry.errors import DescriptorSetError, SchemaConflictError, SourceNotFoundError

DESCRIPTOR_SET_SUFFIXES = {".desc", ".binpb", ".pb", ".protoset", ".fds"}
DEFAULT_PROTOS = Path(__file__).parent / "protos"  # the demo's shop.* schemas (proto_registry.DEMO_PROTOS)
_WKT_MODULES = (
    "any",
    "api",
    "descriptor",
    "duration",
    "empty",
    "field_mask",
    "source_context",
    "struct",
    "timestamp",
    "type",
    "wrappers",
)


@dataclass(slots=True)
class LoadedFiles:
    """The file descriptors loaded from every source, with where each came from."""

    files: dict[str, descriptor_pb2.FileDescriptorProto] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)  # file name -> where it came from
    cache_hits: int = 0
    compiled: int = 0
    notes: list[str] = field(default_factory=list)

    def add(self, fdp: descriptor_pb2.FileDescriptorProto, origin: str) -> None:
        name = fdp.name
        old = self.files.get(name)
        if old is None:
            self.files[name] = fdp
            self.origins[name] = origin
            return
        if _normalised(old) == _normalised(fdp):
            return
        if name.startswith("google/protobuf/"):
            self.notes.append(f"{name} from {origin} differs from the one in {self.origins[name]}; kept the latter")
            return
        raise SchemaConflictError(
            f"{name} is defined differently in {self.origins[name]} and {origin}",
            "load only one version of this schema (remove one source from the proto path)",
        )


def _normalised(fdp: descriptor_pb2.FileDescriptorProto) -> bytes:
    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(fdp)
    copy.ClearField("source_code_info")
    return copy.SerializeToString(deterministic=True)


def read_descriptor_set(path: Path) -> descriptor_pb2.FileDescriptorSet:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise SourceNotFoundError(f"cannot read descriptor set {path}: {e.strerror}") from e
    try:
        fds = descriptor_pb2.FileDescriptorSet.FromString(data)
    except Exception as e:  # protobuf raises DecodeError or RuntimeWarning-ish errors depending on backend
        raise DescriptorSetError(
            f"{path} is not a FileDescriptorSet ({e})",
            "build one with: protoc --include_imports --descriptor_set_out=FILE your.proto",
        ) from e
    if not fds.file and data:
        raise DescriptorSetError(f"{path} holds no file descriptors", "is it really a descriptor set?")
    # Other protobuf data can parse as a FileDescriptorSet: a TensorFlow GraphDef's nodes (field 1)
    # read as files named after the nodes, importing their inputs. Every compiler names a file
    # descriptor after its .proto file; anything else is not a descriptor set.
    odd = next((f.name for f in fds.file if not f.name.endswith(".proto")), None)
    if odd is not None:
        raise DescriptorSetError(
            f"{path} is not a FileDescriptorSet (it parses as one, but names a file {odd[:60]!r}, not a .proto)",
            "build one with: protoc --include_imports --descriptor_set_out=FILE your.proto",
        )
    return fds


def load_files(
    paths: list[str | Path],
    *,
    include_defaults: bool = False,
    use_cache: bool = True,
    cache_root: Path | None = None,
) -> LoadedFiles:
    loaded = LoadedFiles()
    dirs: list[Path] = [DEFAULT_PROTOS] if include_defaults and DEFAULT_PROTOS.is_dir() else []
    sets: list[Path] = []
    given: list[tuple[Path, list[Path]]] = []  # each user path, and the descriptor sets it brought
    for raw in paths:
        p = Path(raw).expanduser()
        if not p.exists():
            raise SourceNotFoundError(f"proto path {p} does not exist", "check --proto-path / DLXTOOL_PROTO_PATH")
        if p.is_dir():
            dirs.append(p)
            found = descriptor_sets_in(p)
            sets.extend(found)
            given.append((p, found))
        elif p.suffix == ".proto":
            dirs.append(p.parent)
            given.append((p, []))
        else:
            sets.append(p)
            given.append((p, [p]))
    seen: set[Path] = set()
    unique_dirs = [d for d in (x.resolve() for x in dirs) if not (d in seen or seen.add(d))]  # type: ignore[func-returns-value]
    if unique_dirs:
        result = compile_dirs(unique_dirs, use_cache=use_cache, cache_root=cache_root)
        if result.cache_hit:
            loaded.cache_hits += 1
        else:
            loaded.compiled += 1
        fds = descriptor_pb2.FileDescriptorSet.FromString(result.descriptor_set)
        for fdp in fds.file:
            origin = str(result.files.get(fdp.name, fdp.name))
            loaded.add(fdp, origin)
    set_types: dict[Path, int] = {}
    named = {p for p, found in given if found == [p]}
    skipped: dict[Path, str] = {}
    for s in dict.fromkeys(sets):
        try:
            fds = read_descriptor_set(s)
        except DescriptorSetError as e:
            if s in named:
                raise
            # Found by its suffix in a directory (a .pb may be any protobuf data): skipped, said so.
            loaded.notes.append(f"{s} skipped: {e.message}")
            skipped[s] = e.message
            continue
        set_types[s] = sum(_message_count(f) for f in fds.file)
        for fdp in fds.file:
            loaded.add(fdp, str(s))
    _add_missing_well_known(loaded)
    for p, found in given:
        if not _types_from(p, found, set_types, loaded):
            why = [skipped[s] for s in found if s in skipped]
            raise SourceNotFoundError(
                f"proto path {p} yields no message types" + (f" (skipped: {why[0]})" if why else ""),
                "give a directory holding .proto files or descriptor sets ("
                + ", ".join(sorted(DESCRIPTOR_SET_SUFFIXES))
                + "), a .proto file, or a descriptor set",
            )
    return loaded


def descriptor_sets_in(directory: Path) -> list[Path]:
    """Descriptor-set files anywhere under ``directory`` (by suffix), in a stable order."""
    return sorted(f for f in directory.rglob("*") if f.suffix in DESCRIPTOR_SET_SUFFIXES and f.is_file())


def _message_count(fdp: descriptor_pb2.FileDescriptorProto) -> int:
    def count(messages: list[descriptor_pb2.DescriptorProto]) -> int:
        return sum(1 + count(list(m.nested_type)) for m in messages)

    return count(list(fdp.message_type))


def _types_from(p: Path, found: list[Path], set_types: dict[Path, int], loaded: LoadedFiles) -> int:
    """How many message types the user path ``p`` contributed (its .proto files and descriptor sets)."""
    total = sum(set_types.get(s, 0) for s in found)
    if p.is_dir():
        names = [f.relative_to(p).as_posix() for f in p.rglob("*.proto") if f.is_file()]
    elif p.suffix == ".proto":
        names = [p.name]  # its import name, relative to its directory
    else:
        names = []
    return total + sum(_message_count(loaded.files[n]) for n in names if n in loaded.files)


def _add_missing_well_known(loaded: LoadedFiles) -> None:
    # Until nothing more is missing: api.proto, once added, imports type.proto and source_context.proto.
    while True:
        missing = {dep for f in loaded.files.values() for dep in f.dependency if dep not in loaded.files}
        added = False
        for mod in _WKT_MODULES:
            name = f"google/protobuf/{mod}.proto"
            if name in missing:
                module = importlib.import_module(f"google.protobuf.{mod}_pb2")
                loaded.add(descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb), "protobuf")
                added = True
        if not added:
            break
    still = sorted({dep for f in loaded.files.values() for dep in f.dependency if dep not in loaded.files})
    if still:
        users = [n for n, f in loaded.files.items() if still[0] in f.dependency]
        raise DescriptorSetError(
            f"{still[0]} is imported by {users[0]} ({loaded.origins[users[0]]}) but is in no source",
            "rebuild the descriptor set with protoc --include_imports, or add the directory holding it",
        )


def build_pool(loaded: LoadedFiles) -> descriptor_pool.DescriptorPool:
    """Add every file to a fresh pool, dependencies first."""
    pool = descriptor_pool.DescriptorPool()
    done: set[str] = set()

    def add(name: str, stack: tuple[str, ...]) -> None:
        if name in done:
            return
        if name in stack:
            raise SchemaConflictError(f"import cycle: {' -> '.join((*stack, name))}")
        fdp = loaded.files[name]
        for dep in fdp.dependency:
            add(dep, (*stack, name))
        try:
            pool.Add(fdp)
        except Exception as e:
            raise SchemaConflictError(
                f"{name} ({loaded.origins[name]}) cannot be loaded: {e}",
                "a type is probably defined twice under the same name; load only one of the sources",
            ) from e
        done.add(name)

    for name in sorted(loaded.files):
        add(name, ())
    return pool


def message_names(loaded: LoadedFiles) -> tuple[list[str], set[str]]:
    """Every message type's full name (nested included) and the names of map-entry types."""
    names: list[str] = []
    map_entries: set[str] = set()

    def walk(prefix: str, messages: list[descriptor_pb2.DescriptorProto]) -> None:
        for m in messages:
            full = f"{prefix}.{m.name}" if prefix else m.name
            names.append(full)
            if m.options.map_entry:
                map_entries.add(full)
            walk(full, list(m.nested_type))

    for name in sorted(loaded.files):
        fdp = loaded.files[name]
        walk(fdp.package, list(fdp.message_type))
    return names, map_entries
