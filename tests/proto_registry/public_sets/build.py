#!/usr/bin/env python3
"""Rebuild the public descriptor sets of this directory from their pinned PyPI packages.

Usage (from the repository root, with the project's venv):
    .venv/bin/python tests/proto_registry/public_sets/build.py

Each set is a FileDescriptorSet (imports included, no source info) written next to this script:
  - googleapis-common-protos.binpb: the package's .proto files compiled with grpc_tools' protoc
    (its google/protobuf/*.proto on the include path);
  - opentelemetry-proto.binpb: the package ships no .proto files, only generated *_pb2.py modules;
    each embeds protoc's serialized FileDescriptorProto of its upstream .proto file, which is taken
    as it is (read from the source text, the module is never imported).
The wheels come from `pip download --no-deps` of the pinned versions below: nothing is installed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from google.protobuf import descriptor_pb2

HERE = Path(__file__).resolve().parent
GOOGLEAPIS = "googleapis-common-protos==1.76.0"
OPENTELEMETRY = "opentelemetry-proto==1.45.2"


def download(spec: str, dest: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check", "-d", str(dest)]
        + [spec],
        check=True,
    )
    name = spec.split("==")[0].replace("-", "_")
    (wheel,) = dest.glob(f"{name}-*.whl")
    return wheel


def googleapis(work: Path) -> bytes:
    wheel = download(GOOGLEAPIS, work / "wheels")
    src = work / "googleapis"
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith(".proto") and not n.startswith("google/protobuf/")]
        z.extractall(src, names)
    import grpc_tools

    wkt = Path(next(iter(grpc_tools.__path__))) / "_proto"
    out = work / "googleapis.binpb"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{src}", f"-I{wkt}", "--include_imports",
         f"--descriptor_set_out={out}", *sorted(names)],
        check=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    return out.read_bytes()


def opentelemetry(work: Path) -> bytes:
    wheel = download(OPENTELEMETRY, work / "wheels")
    fds = descriptor_pb2.FileDescriptorSet()
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            if name.endswith("_pb2.py"):
                blob = embedded_descriptor(z.read(name).decode())
                if blob is not None:
                    fds.file.add().ParseFromString(blob)
    return fds.SerializeToString()


def embedded_descriptor(text: str) -> bytes | None:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile":
            return ast.literal_eval(node.args[0])
    return None


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="public-sets-") as tmp:
        work = Path(tmp)
        builds = (("googleapis-common-protos.binpb", googleapis), ("opentelemetry-proto.binpb", opentelemetry))
        for out, build in builds:
            data = build(work)
            (HERE / out).write_bytes(data)
            n = len(descriptor_pb2.FileDescriptorSet.FromString(data).file)
            print(f"{out}: {n} files, {len(data):,} bytes")


if __name__ == "__main__":
    main()
