"""Compile ``.proto`` directories to a FileDescriptorSet with grpc_tools' bundled protoc.

protoc runs in a child process (``python -m grpc_tools.protoc``) so its diagnostics can be captured
and turned into a :class:`CompileError` naming the file, line and protoc's message. Results are
cached on disk, keyed by the content of every input file and the protoc version.

A cache hit must stay cheap (every `dlxtool peek` that decodes a body loads the schemas): it imports
neither grpc_tools nor importlib.metadata nor subprocess; those come in only when protoc runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from proto_registry import cache
from proto_registry.errors import CompileError, SchemaConflictError, SourceNotFoundError

_DIAG = re.compile(r"^(?P<file>[^:\n]+\.proto):(?P<line>\d+):(?P<col>\d+): (?P<msg>.*)$", re.M)
_FILE_DIAG = re.compile(r"^(?P<file>[^:\n]+\.proto): (?P<msg>.*)$", re.M)
PROTOC_TIMEOUT = 300


@dataclass(frozen=True, slots=True)
class CompileResult:
    """The compiled descriptor set of some .proto files, and whether it came from the cache."""

    descriptor_set: bytes  # serialized FileDescriptorSet, imports included
    cache_hit: bool
    files: dict[str, Path]  # import name (e.g. shop/orders/v1/events.proto) -> file on disk


def _grpc_tools_dir() -> Path | None:
    """Where grpc_tools is installed, without importing it (find_spec of a top-level package does not)."""
    spec = importlib.util.find_spec("grpc_tools")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def well_known_include() -> Path | None:
    """grpc_tools' directory of the well-known types (google/protobuf/*.proto), without importing it."""
    root = _grpc_tools_dir()
    path = root / "_proto" if root else None
    return path if path and path.is_dir() else None


def _protoc_version() -> str:
    """Which protoc compiles: a digest of grpc_tools' version file (its VERSION line changes with every
    release), read as bytes; importlib.metadata would cost ~15 ms of imports on every cache hit."""
    root = _grpc_tools_dir()
    try:
        data = (root / "grpc_version.py").read_bytes() if root else b""
    except OSError:
        data = b""
    return hashlib.sha256(data).hexdigest()[:16] if data else "unknown"


def collect(dirs: list[Path]) -> tuple[dict[str, Path], dict[str, bytes]]:
    """Map import names to files for every ``.proto`` under ``dirs``.

    The same import name in two directories is fine when the contents are the same; different
    contents are a conflict (protoc would silently pick the first one)."""
    files: dict[str, Path] = {}
    contents: dict[str, bytes] = {}
    for d in dirs:
        if not d.is_dir():
            raise SourceNotFoundError(f"proto path {d} is not a directory", "check --proto-path")
        for path in sorted(d.rglob("*.proto")):
            if not path.is_file():
                continue
            name = path.relative_to(d).as_posix()
            try:
                data = path.read_bytes()
            except OSError as e:
                raise SourceNotFoundError(f"cannot read {path}: {e.strerror}") from e
            if name in contents:
                if contents[name] != data:
                    raise SchemaConflictError(
                        f"{name} is defined differently in {files[name]} and {path}",
                        "keep one of the two directories in the proto path, or make the files identical",
                    )
                continue
            files[name] = path
            contents[name] = data
    return files, contents


def compile_dirs(dirs: list[Path], *, use_cache: bool = True, cache_root: Path | None = None) -> CompileResult:
    """Compile every ``.proto`` under ``dirs`` (each directory is also an include root)."""
    files, contents = collect(dirs)
    wkt = well_known_include()
    key = cache.content_key(list(contents.items()), salt=f"protoc-{_protoc_version()}")
    root = cache_root if cache_root is not None else cache.cache_dir()
    if use_cache and files:
        hit = cache.read(root, key)
        if hit is not None:
            return CompileResult(hit, True, files)
    if not files:
        from google.protobuf import descriptor_pb2

        return CompileResult(descriptor_pb2.FileDescriptorSet().SerializeToString(), False, files)
    data = _run_protoc(dirs, wkt, files)
    if use_cache:
        cache.write(root, key, data)
    return CompileResult(data, False, files)


def _run_protoc(dirs: list[Path], wkt: Path | None, files: dict[str, Path]) -> bytes:
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="proto_registry-") as tmp:
        out = Path(tmp) / "set.binpb"
        args = [f"--proto_path={d}" for d in dirs]
        if wkt is not None:
            args.append(f"--proto_path={wkt}")
        args += ["--include_imports", f"--descriptor_set_out={out}", *sorted(files)]
        argfile = Path(tmp) / "args"
        argfile.write_text("\n".join(args), encoding="utf-8")
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "grpc_tools.protoc", f"@{argfile}"],
                capture_output=True,
                timeout=PROTOC_TIMEOUT,
                env={**os.environ, "PYTHONWARNINGS": "ignore"},
            )
        except subprocess.TimeoutExpired as e:
            raise CompileError(f"protoc took more than {PROTOC_TIMEOUT}s", "try fewer proto paths") from e
        stderr = proc.stderr.decode("utf-8", "replace")
        if proc.returncode != 0 or not out.exists():
            raise _compile_error(stderr, files, proc.returncode)
        return out.read_bytes()


def _compile_error(stderr: str, files: dict[str, Path], code: int) -> CompileError:
    if "No module named grpc_tools" in stderr:
        return CompileError(
            "cannot compile .proto files: grpcio-tools is not installed",
            "pip install grpcio-tools, or give a prebuilt descriptor set (.desc/.binpb/.pb)",
            protoc_output=stderr,
        )
    m = _DIAG.search(stderr)
    if m:
        name = m.group("file")
        where = files.get(name, Path(name))
        line, col = int(m.group("line")), int(m.group("col"))
        return CompileError(
            f"{where}:{line}:{col}: {m.group('msg').strip()}",
            "fix the .proto file, or remove it from the proto path",
            file=str(where),
            line=line,
            column=col,
            protoc_output=stderr,
        )
    m = _FILE_DIAG.search(stderr)
    if m:
        name = m.group("file")
        where = files.get(name, Path(name))
        return CompileError(
            f"{where}: {m.group('msg').strip()}",
            "add the directory holding its imports to the proto path",
            file=str(where),
            protoc_output=stderr,
        )
    first = stderr.strip().splitlines()[-1] if stderr.strip() else f"protoc exited with status {code}"
    return CompileError(f"protoc failed: {first}", protoc_output=stderr)
