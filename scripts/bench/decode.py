#!/usr/bin/env python3
"""Benchmark of `dlxtool decode`: identify-and-decode vs the oracle (type given) and the naive loop.

Schemas: real public ones installed from PyPI (pip install -e '.[bench]'):
  - googleapis-common-protos and grpc-google-iam-v1 .proto files, compiled at run time with protoc
    (grpcio-tools' well-known types on the include path);
  - dbt-protos and opentelemetry-proto, whose generated *_pb2.py embed serialized file descriptors:
    they are written out as FileDescriptorSet files (.binpb) and loaded as descriptor sets.

Workload: random valid messages of every type inside realistic log lines, six styles (base64 in JSON
logs, logfmt and plain text, URL-safe base64, an Elixir <<..>> binary, a Python b'..' repr), --lines
of them (default 100,000).

Measured in the same run:
  - ours:   dlxtool.decode_lines.decode_line (extract candidates, identify, decode, JSON mapping)
  - oracle: same extractor, then FromString with the right type and the JSON mapping
  - naive:  same extractor, then parse with every type, keep the one with fewest unknown fields
            (measured on --naive-lines lines because it is slow; says so)
Accuracy against a ground truth computed with protobuf itself: the types a payload is the canonical
encoding of — it parses with no unknown field anywhere, and SerializeToString() gives the payload
back (up to the order of map entries, which upb writes in hash order). A payload that exactly one
type explains so is "uniquely decidable": top-1 and the ambiguity flag are measured on those; on the
others the flag must be raised with the true type among the alternatives.
Calibration: of the answers with confidence >= 0.9, the share whose type is right.
Held-out corpus: a second set of public schemas never used while tuning (xds-protos: Envoy/xDS,
tensorflow-metadata, onnx; fetched with `pip download --no-deps`, pinned), same measurements, on
the types in neither the tuning registry nor the tests' public sets (tests/proto_registry/public_sets).
If it cannot be fetched the run fails at once (exit 1, `heldout_error` in --json) unless --no-heldout.
Unregistered types: the held-out payloads decoded against the tuning registry (their types are not
in it): the share given confidence >= 0.9 (goal: essentially never).
Registry load time: cold (empty cache, protoc runs) and cached, each in a fresh process.

Issue 40's ratios, each against an anchor measured in the same run, medians of paired rounds:
  - protobuf's golden TestMaps message (13,619 bytes, map-heavy; tests/proto_registry/golden.py rebuilds it
    from protobuf's own test) among protobuf's test protos (77 files, 650 types, vendored in
    tests/proto_registry/public_sets/protobuf-unittest.binpb): `decode` (decode_body: identify every type,
    decode, JSON mapping) and `--type` over protobuf's FromString + MessageToDict of TestMaps (goal <= 5x);
    CPU time of this process, best of 3 per round;
  - generated big payloads (>= 8 KB) the same way, of protobuf's test protos (tuning side) and of the held-out
    corpus's types (never looked at while tuning): median and worst;
  - identify every type vs --type over log lines (lines/s, decode_line), tuning and held-out registries
    (goal >= 1.0x);
  - each also for the code as it was before issue 40 (tests/proto_registry/baseline, the frozen copy the
    tests compare answers with), with whether its answer is the same; --no-before leaves it out.

Usage: python scripts/bench/decode.py [--lines N] [--naive-lines N] [--per-type K] [--seed S] [--rounds R]
                                     [--big N] [--ratio-rounds R] [--held-lines N] [--no-before]
                                     [--no-heldout] [--json]
"""

from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from google.protobuf import descriptor_pb2, json_format, unknown_fields  # noqa: E402
from google.protobuf.descriptor import FieldDescriptor  # noqa: E402
from google.protobuf.message import DecodeError, EncodeError  # noqa: E402

from dlxtool import extract  # noqa: E402
from dlxtool.decode_lines import decode_line  # noqa: E402
from proto_registry import Registry, wire  # noqa: E402
from proto_registry.index import bits  # noqa: E402


# -- schemas ------------------------------------------------------------------------------------
def site_dir(module_name: str) -> Path:
    mod = __import__(module_name, fromlist=["_"])
    return Path(next(iter(mod.__path__)))


def build_sources(work: Path) -> list[Path]:
    """A .proto tree (googleapis common + IAM) and descriptor sets (dbt, OpenTelemetry)."""
    google_dir = site_dir("google.api").parent  # .../site-packages/google
    proto_root = work / "protos"
    n = 0
    for src in google_dir.rglob("*.proto"):
        rel = src.relative_to(google_dir.parent)
        if rel.parts[:2] == ("google", "protobuf"):
            continue  # well-known types come from grpcio-tools' include path
        dst = proto_root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        n += 1
    sets = []
    for name, pkg in (("dbt", "dbtlabs"), ("otel", "opentelemetry.proto")):
        fds = descriptor_pb2.FileDescriptorSet()
        for py in sorted(site_dir(pkg).rglob("*_pb2.py")):
            blob = serialized_descriptor(py)
            if blob is not None:
                fds.file.add().ParseFromString(blob)
        out = work / f"{name}.binpb"
        out.write_bytes(fds.SerializeToString())
        sets.append(out)
    print(
        f"schemas: {n} .proto files (googleapis-common-protos, grpc-google-iam-v1) + {', '.join(p.name for p in sets)}",
        file=sys.stderr,
    )
    return [proto_root, *sets]


def serialized_descriptor(py: Path) -> bytes | None:
    tree = ast.parse(py.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile":
            return ast.literal_eval(node.args[0])
    return None


def timed_load(paths: list[Path], cache: Path) -> tuple[float, float, int]:
    """Load in a fresh process: (seconds in Registry.load, seconds for the whole process, types)."""
    code = (
        "import sys, time, pathlib\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "t0 = time.perf_counter()\n"
        "from proto_registry import Registry\n"
        "t1 = time.perf_counter()\n"
        "r = Registry.load(sys.argv[3:], cache_dir=pathlib.Path(sys.argv[2]))\n"
        "t2 = time.perf_counter()\n"
        "print(t2 - t1, t2 - t0, len(r))\n"
    )
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT), str(cache), *map(str, paths)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    wall = time.perf_counter() - start
    return float(out[0]), wall, int(out[2])


# -- random messages ----------------------------------------------------------------------------
WORDS = [
    "order",
    "customer",
    "alpha",
    "beta",
    "prod-eu",
    "retry",
    "queue",
    "gamma",
    "user@example.com",
    "2024-05-01",
    "ok",
    "failed",
    "worker",
    "eu-west-1",
    "dead letter",
    "x",
    "Zürich",
    "日本",
]


def _timestamp(rng: random.Random, msg) -> None:
    msg.seconds = rng.randint(1_500_000_000, 1_800_000_000)
    msg.nanos = rng.choice([0, rng.randint(0, 999_999_999)])


def _duration(rng: random.Random, msg) -> None:
    msg.seconds = rng.randint(0, 86_400)


def _field_mask(rng: random.Random, msg) -> None:
    msg.paths.extend(rng.sample(["order_id", "customer.name", "items", "status"], 2))


def _leave_empty(rng: random.Random, msg) -> None:
    msg.SetInParent()


# JSON mapping constraints of the well-known types (valid ranges, Any needs a resolvable type).
WELL_KNOWN = {
    "google.protobuf.Timestamp": _timestamp,
    "google.protobuf.Duration": _duration,
    "google.protobuf.FieldMask": _field_mask,
    "google.protobuf.Any": _leave_empty,
}


class Generator:
    def __init__(self, rng: random.Random, fill: float = 0.8, max_depth: int = 3) -> None:
        self.rng = rng
        self.fill = fill
        self.max_depth = max_depth

    def fill_message(self, msg, depth: int = 0) -> None:
        d = msg.DESCRIPTOR
        special = WELL_KNOWN.get(d.full_name)
        if special is not None:
            special(self.rng, msg)
            return
        for f in d.fields:
            if not f.is_required and self.rng.random() > self.fill:
                continue
            if f.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP) and depth >= self.max_depth:
                continue
            if f.is_repeated:
                if f.message_type is not None and f.message_type.GetOptions().map_entry:
                    self.fill_map(msg, f, depth)
                    continue
                for _ in range(self.rng.randint(1, 3)):
                    if f.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
                        self.fill_message(getattr(msg, f.name).add(), depth + 1)
                    else:
                        getattr(msg, f.name).append(self.scalar(f))
            elif f.type in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
                sub = getattr(msg, f.name)
                self.fill_message(sub, depth + 1)
                sub.SetInParent()
            else:
                setattr(msg, f.name, self.scalar(f))

    def fill_map(self, msg, f, depth: int) -> None:
        key_f = f.message_type.fields_by_name["key"]
        val_f = f.message_type.fields_by_name["value"]
        container = getattr(msg, f.name)
        for _ in range(self.rng.randint(1, 2)):
            k = self.scalar(key_f)
            if val_f.type == FieldDescriptor.TYPE_MESSAGE:
                if depth < self.max_depth:
                    self.fill_message(container[k], depth + 1)
            else:
                container[k] = self.scalar(val_f)

    def scalar(self, f):
        t = f.type
        r = self.rng
        if t == FieldDescriptor.TYPE_STRING:
            return r.choice(WORDS) + ("-" + str(r.randint(0, 99999)) if r.random() < 0.5 else "")
        if t == FieldDescriptor.TYPE_BYTES:
            return r.randbytes(r.randint(1, 24))
        if t == FieldDescriptor.TYPE_BOOL:
            return True
        if t == FieldDescriptor.TYPE_ENUM:
            values = [v.number for v in f.enum_type.values if v.number != 0] or [f.enum_type.values[0].number]
            return r.choice(values)
        if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
            return round(r.uniform(-1e4, 1e4), 2)
        if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
            return r.randint(-1000, 100000)
        if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            return r.randint(1, 100000)
        if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
            return r.randint(-(10**6), 10**12)
        return r.randint(1, 10**12)


# -- log lines ----------------------------------------------------------------------------------
def log_line(rng: random.Random, i: int, payload: bytes) -> str:
    b64 = base64.b64encode(payload).decode()
    style = i % 6
    ts = f"2024-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z"
    q = rng.choice(["orders", "billing.dlq", "events", "audit"])
    if style == 0:
        return json.dumps(
            {
                "ts": ts,
                "level": "error",
                "logger": "consumer",
                "msg": "handler raised, rejecting",
                "queue": q,
                "redelivered": True,
                "payload": b64,
            }
        ).replace("/", "\\/")
    if style == 1:
        return f'ts={ts} level=warn msg="nack requeue=false" queue={q} delivery_tag={i} body={b64}'
    if style == 2:
        url = base64.urlsafe_b64encode(payload).decode().rstrip("=")
        return f"{ts} ERROR [worker-{i % 8}] poison message on {q}: {url} (attempt 3)"
    if style == 3:
        return f"{ts} WARN dead-lettered message_id=m-{i} bytes={len(payload)} data={b64}"
    if style == 4:  # an Elixir consumer's log: the body as a binary literal
        return f"{ts} [error] GenServer #PID<0.{i}.0> rejected message: <<{', '.join(map(str, payload))}>>"
    return f"{ts} ERROR rejecting body={payload!r} queue={q}"  # Python: bytes repr


# -- ground truth with protobuf itself ----------------------------------------------------------
def canonical_as(cls, payload: bytes) -> bool:
    """Parses, no unknown field anywhere, re-encodes to the payload (map entries in any order)."""
    try:
        msg = cls.FromString(payload)
        if has_unknown(msg):
            return False
        again = msg.SerializeToString()
    except (DecodeError, EncodeError):  # EncodeError when a required field is missing
        return False
    except UnicodeDecodeError:
        # A proto2 map<string, ...> key that is not UTF-8: upb parses it, Python cannot iterate the
        # map. Counted as not this type (protobuf's Python API cannot give it back either).
        return False
    return again == payload or maps_sorted(cls.DESCRIPTOR, again) == maps_sorted(cls.DESCRIPTOR, payload)


def has_unknown(msg) -> bool:
    if len(unknown_fields.UnknownFieldSet(msg)):
        return True
    for f, value in msg.ListFields():
        if f.message_type is None:
            continue
        if f.message_type.GetOptions().map_entry:
            has_messages = f.message_type.fields_by_name["value"].message_type is not None
            if has_messages and any(has_unknown(v) for v in value.values()):
                return True
        elif f.is_repeated:
            if any(has_unknown(v) for v in value):
                return True
        elif has_unknown(value):
            return True
    return False


def maps_sorted(desc, data: bytes) -> bytes:
    """``data`` with each run of map entries sorted (recursively), the other bytes as they are."""
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
            inner = maps_sorted(fd.message_type, data[vstart:vend])
            chunk = data[start:vstart] + inner
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


def ground_truth(registry: Registry, payloads: list[bytes]) -> dict[bytes, set[str]]:
    """payload -> every type it is the canonical encoding of. Only types knowing each top-level
    tag can be (the others would see an unknown field), so only those are parsed."""
    idx = registry.index
    classes: dict[int, object] = {}
    truth: dict[bytes, set[str]] = {}
    for data in payloads:
        if data in truth:
            continue
        mask = idx.candidate_mask
        for f in wire.scan(data) or ():
            mask &= idx.known.get(f[0], 0)
        got = set()
        for tid in bits(mask):
            cls = classes.get(tid)
            if cls is None:
                cls = classes[tid] = registry.message_class(idx.types[tid].name)
            if canonical_as(cls, data):
                got.add(idx.types[tid].name)
        truth[data] = got
    return truth


def unknown_count(cls, payload: bytes) -> int:
    try:
        msg = cls.FromString(payload)
    except DecodeError:
        return 1 << 30
    return len(unknown_fields.UnknownFieldSet(msg)) + (0 if msg.IsInitialized() else 1)


def oracle_decode(registry: Registry, lines: list[tuple[str, str, bytes]]) -> None:
    """Right type given: the first candidate that parses as it with no unknown field (else the first
    that parses at all), then the JSON mapping. Same extractor as ours."""
    for line, name, _ in lines:
        cls = registry.message_class(name)
        chosen = None
        for cand in extract.candidates(line):
            try:
                msg = cls.FromString(cand.data)
            except DecodeError:
                continue
            if not len(unknown_fields.UnknownFieldSet(msg)):
                chosen = msg
                break
            chosen = chosen or msg
        if chosen is not None:
            with contextlib.suppress(Exception):
                json_format.MessageToDict(chosen, descriptor_pool=registry.pool)


def ours_decode(registry: Registry, lines: list[tuple[str, str, bytes]]) -> list[Compact | None]:
    out: list[Compact | None] = []
    for line, _, _ in lines:
        res = decode_line(registry, line)
        # Keep only what the accuracy count needs: holding 100k result objects slows the GC.
        out.append(
            None
            if res is None
            else Compact(
                res.decoded.type,
                res.decoded.ambiguous,
                tuple(res.decoded.alternatives),
                res.decoded.alternatives_count,
                res.candidate.data,
                res.decoded.confidence,
            )
        )
    return out


class Compact(NamedTuple):
    type: str | None
    ambiguous: bool
    alternatives: tuple[str, ...]
    alternatives_count: int
    data: bytes
    confidence: float


# -- held-out corpus ----------------------------------------------------------------------------
# Never used while tuning the scorer: only this script reads it, for the figures it reports. The
# test suite's public schemas (tuning side) are kept out of it, type by type.
TEST_SETS = ROOT / "tests" / "proto_registry" / "public_sets"


def test_set_types(cache: Path) -> set[str]:
    """Every message type of the descriptor sets the tests tune and check on."""
    sets = sorted(TEST_SETS.glob("*.binpb"))
    if not sets:
        return set()
    return set(Registry.load(sets, include_defaults=False, cache_dir=cache).type_names)

HELDOUT = ("xds-protos==1.85.0", "tensorflow-metadata==1.21.0", "onnx==1.23.2")


class HeldOutUnavailable(Exception):
    """The held-out corpus could not be built: the run fails unless --no-heldout says to skip it."""


def heldout_sources(work: Path) -> list[Path]:
    """One descriptor set of every *_pb2.py in the held-out wheels (``pip download``, no install)."""
    dest = work / "heldout"
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check", "-d", str(dest)]
    got = subprocess.run([*cmd, *HELDOUT], capture_output=True, text=True)
    if got.returncode != 0:
        raise HeldOutUnavailable(f"pip download {' '.join(HELDOUT)} failed: {got.stderr.strip()[-300:]}")
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
    for wheel in sorted(dest.glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith("_pb2.py"):
                    blob = serialized_descriptor_text(z.read(name).decode())
                    if blob is not None:
                        fdp = descriptor_pb2.FileDescriptorProto.FromString(blob)
                        files.setdefault(fdp.name, fdp)
    # Imports that no wheel carries (well-known types are added by the registry): drop their users.
    wkt = {f"google/protobuf/{m}.proto" for m in ("any", "api", "descriptor", "duration", "empty")}
    wkt |= {f"google/protobuf/{m}.proto" for m in ("field_mask", "source_context", "struct", "timestamp")}
    wkt |= {"google/protobuf/type.proto", "google/protobuf/wrappers.proto"}
    dropped = 0
    while True:
        bad = [n for n, f in files.items() if any(d not in files and d not in wkt for d in f.dependency)]
        if not bad:
            break
        for n in bad:
            del files[n]
            dropped += 1
    if not files:
        raise HeldOutUnavailable(f"no descriptor in the wheels of {' '.join(HELDOUT)}")
    fds = descriptor_pb2.FileDescriptorSet(file=list(files.values()))
    out = work / "heldout.binpb"
    out.write_bytes(fds.SerializeToString())
    print(
        f"held-out schemas: {len(files)} files from {', '.join(HELDOUT)}"
        + (f" ({dropped} left out: an import in no wheel)" if dropped else ""),
        file=sys.stderr,
    )
    return [out]


def serialized_descriptor_text(text: str) -> bytes | None:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile":
            return ast.literal_eval(node.args[0])
    return None


# -- workload and accuracy ----------------------------------------------------------------------
def make_lines(
    registry: Registry, names: list[str], rng: random.Random, per_type: int, n_lines: int
) -> tuple[list[tuple[str, str, bytes]], dict[bytes, set[str]], int]:
    gen = Generator(rng)
    samples: list[tuple[str, bytes]] = []
    for name in names:
        cls = registry.message_class(name)
        seen: set[bytes] = set()
        for _ in range(per_type * 3):
            if len(seen) >= per_type:
                break
            msg = cls()
            gen.fill_message(msg)
            try:
                data = msg.SerializeToString()
            except EncodeError:  # a required field deep down left unset
                continue
            if data and data not in seen:
                seen.add(data)
                samples.append((name, data))
    t = time.perf_counter()
    truth = ground_truth(registry, [d for _, d in samples])
    print(
        f"  {len(samples)} random non-empty messages of {len(names)} types; ground truth in"
        f" {time.perf_counter() - t:.1f}s",
        file=sys.stderr,
    )
    lines: list[tuple[str, str, bytes]] = []
    for i in range(n_lines):
        name, data = samples[i % len(samples)] if i < len(samples) else rng.choice(samples)
        lines.append((log_line(rng, i, data), name, data))
    rng.shuffle(lines)
    return lines, truth, len(samples)


def accuracy(
    registry: Registry, lines: list[tuple[str, str, bytes]], results: list[Compact | None], truth: dict
) -> dict[str, object]:
    st = dict.fromkeys(
        ("total", "top1", "unique", "unique_top1", "unique_flagged", "several", "several_flagged", "several_in"), 0
    )
    st["several_listed"] = 0
    st.update(confident=0, confident_right=0, not_canonical=0, missed=0)
    wrong: list[str] = []
    for (_line, name, data), res in zip(lines, results, strict=True):
        st["total"] += 1
        eq = truth[data]
        got = res.type if res is not None else None
        flagged = bool(res and res.ambiguous)
        st["top1"] += got == name
        if res is not None and res.confidence >= 0.9:
            st["confident"] += 1
            st["confident_right"] += got == name
        if name not in eq:
            st["not_canonical"] += 1  # protobuf itself does not give the payload back as its type
            continue
        if res is None:
            st["missed"] += 1  # the extractor saw no payload in the line (identification never ran)
            continue
        if len(eq) == 1:
            st["unique"] += 1
            st["unique_top1"] += got == name
            st["unique_flagged"] += flagged
            if got != name and len(wrong) < 5:
                wrong.append(f"{name} -> {got}")
        else:
            alts = {got, *res.alternatives} if res is not None else set()
            st["several_listed"] += name in alts  # what the user sees without --top
            if res is not None and len(alts) < res.alternatives_count + 1:
                alts = set(registry.identify(res.data, max_equivalent=10**6).equivalent)
            st["several"] += 1
            st["several_flagged"] += flagged
            st["several_in"] += flagged and name in alts

    def pct(a: int, b: int) -> float | None:
        return round(100 * a / b, 2) if b else None

    return {
        "lines": st["total"],
        "unique_lines": st["unique"],
        "top1_unique_pct": pct(st["unique_top1"], st["unique"]),
        "flag_on_unique_pct": pct(st["unique_flagged"], st["unique"]),
        "several_lines": st["several"],
        "flag_on_several_pct": pct(st["several_flagged"], st["several"]),
        "true_in_alternatives_pct": pct(st["several_in"], st["several"]),
        "true_listed_pct": pct(st["several_listed"], st["several"]),
        "confident_lines": st["confident"],
        "precision_at_0_9_pct": pct(st["confident_right"], st["confident"]),
        "top1_all_pct": pct(st["top1"], st["total"]),
        "not_canonical_lines": st["not_canonical"],
        "no_payload_found_lines": st["missed"],
        "wrong_examples": wrong,
    }


def accuracy_report(label: str, a: dict) -> list[str]:
    def f(v: object) -> str:
        return "n/a" if v is None else f"{v:.2f}%"

    out = [
        f"  {label}:",
        f"    top-1 on uniquely decidable payloads: {f(a['top1_unique_pct'])} of {a['unique_lines']} lines"
        " (goal >= 99.5%)",
        f"    ambiguity flag on those: {f(a['flag_on_unique_pct'])} (goal <= 1%)",
        f"    payloads several types explain canonically: {a['several_lines']} lines, flag raised on"
        f" {f(a['flag_on_several_pct'])}, true type among the alternatives {f(a['true_in_alternatives_pct'])}"
        f" (listed: {f(a['true_listed_pct'])}; the rest counted in alternatives_count, ranked by --top)",
        f"    calibration: {f(a['precision_at_0_9_pct'])} right of {a['confident_lines']} answers with"
        " confidence >= 0.9 (goal >= 99%)",
        f"    top-1 on all lines: {f(a['top1_all_pct'])}",
    ]
    if a["no_payload_found_lines"]:
        out.append(
            f"    ({a['no_payload_found_lines']} lines where the extractor found no payload — tiny payloads"
            " that read as words: left out of the figures above)"
        )
    if a["not_canonical_lines"]:
        out.append(f"    ({a['not_canonical_lines']} lines protobuf does not re-encode as their own type: left out)")
    if a["wrong_examples"]:
        out.append("    wrong top-1, e.g. " + "; ".join(a["wrong_examples"]))
    return out


def check_bench_dependencies() -> str | None:
    """The tuning corpus's packages (the `bench` extra), or what is missing."""
    import importlib

    for name in ("dbtlabs", "google.api", "google.iam.v1", "opentelemetry.proto"):
        try:
            importlib.import_module(name)
        except ImportError as e:
            return f"missing benchmark dependency ({e.name}): pip install -e '.[bench]'"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=100_000, help="log lines to decode (default 100000)")
    ap.add_argument("--naive-lines", type=int, default=300, help="lines for the slow naive loop (default 300)")
    ap.add_argument("--per-type", type=int, default=4, help="distinct random messages per type (default 4)")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds; medians are reported (default 3)")
    ap.add_argument(
        "--no-heldout", action="store_true", help="skip the held-out corpus (else failing to fetch it fails the run)"
    )
    ap.add_argument("--big", type=int, default=12, help="generated big payloads per schema side (default 12)")
    ap.add_argument("--ratio-rounds", type=int, default=7, help="paired rounds of single-payload ratios (default 7)")
    ap.add_argument("--held-lines", type=int, default=5000, help="held-out lines timed for identify vs --type")
    ap.add_argument("--no-before", action="store_true", help="skip the figures of the code before issue 40")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="dlxtool-bench-"))
    try:
        held_paths: list[Path] = []
        if not args.no_heldout:
            # First, before minutes of measuring: without it the run would report half its figures.
            try:
                held_paths = heldout_sources(work)
            except HeldOutUnavailable as e:
                print(f"decode bench: HELD-OUT CORPUS MISSING: {e} (--no-heldout to run without it)", file=sys.stderr)
                if args.json:
                    print(json.dumps({"heldout": None, "heldout_error": str(e)}, indent=2))
                return 1
        missing = check_bench_dependencies()
        if missing:
            print(f"decode bench: {missing}", file=sys.stderr)
            return 2
        return run(args, rng, work, held_paths)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def timed_round(
    registry: Registry, lines: list[tuple[str, str, bytes]], before: object | None = None
) -> tuple[dict[str, float], list]:
    """One pass of each decoder over the same chunks of lines in turn, so a change in machine load
    (other processes) weighs on all of them alike: lines per second for each. ``before``: the same
    registry as the code was before issue 40 (tests/proto_registry/baseline), timed alike."""
    phases = ["oracle", "ours", "ours_no_memo", "ours_type_given"]
    if before is not None:
        phases += ["before", "before_type_given"]
    spent = dict.fromkeys(phases, 0.0)
    results: list[Compact | None] = []
    chunk = 1000
    for i in range(0, len(lines), chunk):
        part = lines[i : i + chunk]
        t = time.perf_counter()
        oracle_decode(registry, part)
        spent["oracle"] += time.perf_counter() - t
        registry._memo.clear()  # noqa: SLF001 - each phase times cold decodes: no memo from the one before
        t = time.perf_counter()
        results.extend(ours_decode(registry, part))
        spent["ours"] += time.perf_counter() - t
        registry.memo_size = 0
        t = time.perf_counter()
        ours_decode(registry, part)
        spent["ours_no_memo"] += time.perf_counter() - t
        registry.memo_size = 4096
        t = time.perf_counter()
        for line, name, _ in part:
            decode_line(registry, line, type_name=name)
        spent["ours_type_given"] += time.perf_counter() - t
        if before is not None:
            before._memo.clear()  # type: ignore[attr-defined]  # noqa: SLF001 - cold, as ours
            t = time.perf_counter()
            for line, _, _ in part:
                decode_line(before, line)  # type: ignore[arg-type]
            spent["before"] += time.perf_counter() - t
            t = time.perf_counter()
            for line, name, _ in part:
                decode_line(before, line, type_name=name)  # type: ignore[arg-type]
            spent["before_type_given"] += time.perf_counter() - t
    return {k: len(lines) / v for k, v in spent.items()}, results


def warm_up(registry: object, lines: list[tuple[str, str, bytes]]) -> None:
    """Every distinct payload identified once and scored as its type: message classes and the index's
    lazy tables are made on first use, and no timed phase should pay for them."""
    for data, name in {d: n for _, n, d in lines}.items():
        registry.identify(data, limit=10)  # type: ignore[attr-defined]
        registry.identify_as(data, name)  # type: ignore[attr-defined]
    registry._memo.clear()  # type: ignore[attr-defined]  # noqa: SLF001 - timed phases start cold


def baseline_of(registry: Registry) -> object | None:
    """The registry as identification was before issue 40 (the frozen copy the tests compare with), over
    the same schemas; None when that copy is gone (then no "before" figures)."""
    try:
        from tests.proto_registry.baseline import baseline_of as make
    except ImportError:
        return None
    return make(registry)


# -- issue 40: a big payload, and identify vs --type, against anchors of the same run ---------------------
# protobuf's golden TestMaps message (13.6 KB, map-heavy) in protobuf's own test schemas (77 files,
# vendored): tests/proto_registry/golden.py rebuilds it from protobuf's recipe.
PROTOBUF_UNITTEST = TEST_SETS / "protobuf-unittest.binpb"
BIG_BYTES = 8 * 1024  # a "big" payload, for the generated ones


def cpu_ratio_rounds(fns: dict[str, object], anchor: str, rounds: int, reps: int = 3) -> dict[str, list[float]]:
    """Per round, each function run ``reps`` times in turn (best of them: the CPU time of this process, so
    other users of the machine weigh little), and its ratio to ``anchor`` in that round."""
    ratios: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        best = {}
        for k, f in fns.items():
            times = []
            for _ in range(reps):
                t = time.process_time()
                f()  # type: ignore[operator]
                times.append(time.process_time() - t)
            best[k] = min(times)
        for k in fns:
            ratios[k].append(best[k] / best[anchor] if best[anchor] else float("nan"))
    return ratios


def payload_ratios(
    registry: Registry, before: object | None, data: bytes, type_name: str, rounds: int
) -> dict[str, float]:
    """Median over paired rounds of: decode (identify every type, decode, JSON mapping: decode_body, the
    CLI's path), --type, and the same before issue 40, each over protobuf's FromString + MessageToDict
    of the known type."""
    from dlxtool.decoding import decode_body

    cls = registry.message_class(type_name)
    registry.memo_size = 0

    def anchor() -> None:
        json_format.MessageToDict(cls.FromString(data), descriptor_pool=registry.pool)

    fns: dict[str, object] = {
        "anchor": anchor,
        "decode": lambda: decode_body(registry, data),
        "type_given": lambda: decode_body(registry, data, type_name=type_name),
    }
    if before is not None:
        before.memo_size = 0  # type: ignore[attr-defined]
        fns["before"] = lambda: decode_body(before, data)  # type: ignore[arg-type]
        fns["before_type_given"] = lambda: decode_body(before, data, type_name=type_name)  # type: ignore[arg-type]
    for f in fns.values():  # warm: message classes, the index's lazy tables
        f()  # type: ignore[operator]
    got = cpu_ratio_rounds(fns, "anchor", rounds)
    registry.memo_size = 4096
    return {k: statistics.median(v) for k, v in got.items() if k != "anchor"}


def same_answer(registry: Registry, before: object | None, data: bytes) -> bool | None:
    """Whether today's identification says exactly what the code before issue 40 said (None: no before)."""
    if before is None:
        return None
    a = registry.identify(data, limit=10)
    b = before.identify(data, limit=10)  # type: ignore[attr-defined]
    fields = ("status", "matches", "ambiguous", "equivalent", "equivalent_count", "source", "notes")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


def golden_figures(cache: Path, rounds: int) -> dict[str, object]:
    from tests.proto_registry import golden

    registry = Registry.load([PROTOBUF_UNITTEST], include_defaults=False, cache_dir=cache)
    before = baseline_of(registry)
    data = golden.build(registry.message_class(golden.TYPE))
    best = registry.identify(data).best
    ratios = payload_ratios(registry, before, data, golden.TYPE, rounds)
    return {
        "bytes": len(data),
        "types": len(registry),
        "files": len(registry.loaded.files),
        "answer": None if best is None else {"type": best.type, "confidence": best.confidence},
        "same_answer_as_before": same_answer(registry, before, data),
        "ratios": {k: round(v, 2) for k, v in ratios.items()},
    }


def big_payloads(registry: Registry, names: list[str], rng: random.Random, count: int) -> list[tuple[str, bytes]]:
    """Random messages of at least BIG_BYTES, one per type, of the types that reach that size first."""
    gen = Generator(rng, fill=1.0, max_depth=4)
    out: list[tuple[str, bytes]] = []
    for name in names:
        cls = registry.message_class(name)
        for _ in range(3):
            msg = cls()
            gen.fill_message(msg)
            try:
                data = msg.SerializeToString()
            except EncodeError:
                continue
            if len(data) >= BIG_BYTES:
                out.append((name, data))
                break
        if len(out) >= count:
            break
    return out


def big_figures(
    registry: Registry, names: list[str], rng: random.Random, count: int, rounds: int
) -> dict[str, object] | None:
    """payload_ratios over generated big payloads: the median and the worst of each ratio."""
    before = baseline_of(registry)
    # Types with the most fields first: the ones that grow big.
    names = sorted(names, key=lambda n: -len(registry.message_class(n).DESCRIPTOR.fields))
    payloads = big_payloads(registry, names, rng, count)
    if not payloads:
        return None
    per: dict[str, list[float]] = {}
    same = 0
    for name, data in payloads:
        for k, v in payload_ratios(registry, before, data, name, rounds).items():
            per.setdefault(k, []).append(v)
        same += bool(same_answer(registry, before, data))
    return {
        "payloads": len(payloads),
        "bytes_median": int(statistics.median(len(d) for _, d in payloads)),
        "same_answer_as_before": same if before is not None else None,
        "median": {k: round(statistics.median(v), 2) for k, v in per.items()},
        "worst": {k: round(max(v), 2) for k, v in per.items()},
    }


def lines_ratio(registry: Registry, lines: list[tuple[str, str, bytes]], rounds: int) -> dict[str, float]:
    """Identify every type vs --type over log lines (decode_line, lines/s), each round over the same
    chunks in turn; the median of the per-round ratios. With the code before issue 40 too."""
    before = baseline_of(registry)
    for reg in (registry, before):
        if reg is not None:
            warm_up(reg, lines)
    per: dict[str, list[float]] = {}
    for _ in range(rounds):
        spent = {"ours": 0.0, "type_given": 0.0, "before": 0.0, "before_type_given": 0.0}
        for i in range(0, len(lines), 500):
            part = lines[i : i + 500]
            for key, reg, typed in (("ours", registry, False), ("type_given", registry, True),
                                    ("before", before, False), ("before_type_given", before, True)):
                if reg is None:
                    continue
                reg._memo.clear()  # type: ignore[attr-defined]  # noqa: SLF001 - cold decodes
                t = time.perf_counter()
                for line, name, _ in part:
                    decode_line(reg, line, type_name=name if typed else None)  # type: ignore[arg-type]
                spent[key] += time.perf_counter() - t
        per.setdefault("identify_vs_type", []).append(spent["type_given"] / spent["ours"])
        if before is not None:
            per.setdefault("before_identify_vs_type", []).append(spent["before_type_given"] / spent["before"])
            per.setdefault("identify_vs_before_type", []).append(spent["before_type_given"] / spent["ours"])
    return {k: round(statistics.median(v), 3) for k, v in per.items()}


SHAPE_BUCKETS = ((1, 1, "1"), (2, 49, "2-49"), (50, 1 << 30, "50+"))


def shape_figures(registry: Registry, lines: list[tuple[str, str, bytes]]) -> dict[str, object]:
    """Whether identification could be cached per wire shape (a payload's top-level field-number/wire-type
    sequence) without changing answers, and where identifying costs more than --type: CPU time of identify and of
    identify_as per distinct payload (no memo), by how many registered types the shape allows (the types that
    accept every top-level tag: what a shape alone can tell)."""
    payloads = {d: n for _, n, d in lines}
    idx = registry.index
    memo_size, registry.memo_size = registry.memo_size, 0
    answers: dict[tuple[int, ...] | None, set[tuple[object, ...]]] = {}
    printed: dict[tuple[int, ...] | None, set[tuple[object, ...]]] = {}
    count: dict[tuple[int, ...] | None, int] = {}
    spent = {label: [0, 0.0, 0.0] for _, _, label in SHAPE_BUCKETS}
    try:
        for data, name in payloads.items():
            fields = wire.scan(data)
            shape = None if fields is None else tuple(f[0] for f in fields)
            allowed = idx.candidate_mask
            for tag in set(shape or ()):
                allowed &= idx.known.get(tag, 0)
            t = time.process_time()
            got = registry.identify(data, limit=10)
            identify_s = time.process_time() - t
            t = time.process_time()
            registry.identify_as(data, name)
            typed_s = time.process_time() - t
            best = got.best
            said = (got.status, None if best is None else best.type, got.ambiguous, got.equivalent_count)
            printed.setdefault(shape, set()).add(said)
            count[shape] = count.get(shape, 0) + 1
            answers.setdefault(shape, set()).add((*said, None if best is None else best.confidence))
            n = allowed.bit_count()
            label = next(lab for lo, hi, lab in SHAPE_BUCKETS if lo <= n <= hi) if n else "1"
            row = spent[label]
            row[0] += 1
            row[1] += identify_s
            row[2] += typed_s
    finally:
        registry.memo_size = memo_size
    shared = [s for s, n in count.items() if n > 1]
    return {
        "payloads": len(payloads),
        "shapes": len(answers),
        "shared_shapes": len(shared),
        "shared_shapes_other_type": sum(1 for s in shared if len(printed[s]) > 1),
        "shared_shapes_other_answer": sum(1 for s in shared if len(answers[s]) > 1),
        "by_allowed_types": {
            label: {"payloads": c, "identify_us": round(1e6 * a / c), "type_given_us": round(1e6 * b / c)}
            for label, (c, a, b) in spent.items() if c
        },
    }


def shape_report(s: dict[str, object]) -> list[str]:
    by = s["by_allowed_types"]
    assert isinstance(by, dict)
    costs = "; ".join(f"{k} types: {v['payloads']} payloads, identify {v['identify_us']} us vs --type"
                      f" {v['type_given_us']} us" for k, v in by.items())
    return [
        f"  wire shapes (top-level field/wire-type sequence): {s['payloads']} distinct payloads, {s['shapes']} shapes;"
        f" {s['shared_shapes']} shapes shared by several payloads, of which {s['shared_shapes_other_type']} give"
        f" another type, ambiguity or alternatives count ({s['shared_shapes_other_answer']} with confidence): a"
        " cache of the answer per shape would change those",
        f"    CPU per payload by the types its shape allows: {costs}",
    ]


def ratio_report(figures: dict[str, object]) -> list[str]:
    """The issue-40 lines of the report."""
    out = ["  issue 40 ratios (anchors of this run; medians of paired rounds; CPU time of this process for"
           " single payloads, wall time for lines):"]
    g = figures.get("golden")
    if isinstance(g, dict):
        r = g["ratios"]
        ans = g["answer"] or {}
        out += [
            f"    protobuf's golden TestMaps ({g['bytes']:,} B) among {g['files']} files ({g['types']} types):"
            f" decode {r['decode']:.2f}x protobuf's FromString + MessageToDict of TestMaps (goal <= 5x);"
            f" --type {r['type_given']:.2f}x"
            + (f"; before issue 40: decode {r['before']:.2f}x, --type {r['before_type_given']:.2f}x" if "before" in r
               else ""),
            f"      answer {ans.get('type')} at {ans.get('confidence')}; the same as before issue 40:"
            f" {g['same_answer_as_before']}",
        ]
    for label, key in (("tuning schemas (protobuf's test protos)", "big_tuning"), ("held-out schemas", "big_heldout")):
        b = figures.get(key)
        if isinstance(b, dict):
            m, w = b["median"], b["worst"]
            line = (f"    big payloads, {label}: {b['payloads']} of median {b['bytes_median']:,} B: decode median"
                    f" {m['decode']:.2f}x (worst {w['decode']:.2f}x), --type {m['type_given']:.2f}x")
            if "before" in m:
                line += f"; before: decode {m['before']:.2f}x (worst {w['before']:.2f}x)"
            if b["same_answer_as_before"] is not None:
                line += f"; same answer as before on {b['same_answer_as_before']} of {b['payloads']}"
            out.append(line)
    for label, key in (("tuning registry", "lines_tuning"), ("held-out registry", "lines_heldout")):
        lr = figures.get(key)
        if isinstance(lr, dict):
            line = f"    identify every type vs --type, {label}: {lr['identify_vs_type']:.2f}x (goal >= 1.0x)"
            if "before_identify_vs_type" in lr:
                line += (f"; before issue 40: {lr['before_identify_vs_type']:.2f}x; identify now vs --type before:"
                         f" {lr['identify_vs_before_type']:.2f}x")
            out.append(line)
    return out


def run(args: argparse.Namespace, rng: random.Random, work: Path, held_paths: list[Path]) -> int:
    load = os.getloadavg()
    paths = build_sources(work)
    cache = work / "cache"
    cold, cold_wall, n_types = timed_load(paths, cache)
    warm, warm_wall, _ = timed_load(paths, cache)
    print(
        f"registry: {n_types} message types; load cold {cold:.2f}s (process {cold_wall:.2f}s), "
        f"cached {warm:.3f}s (process {warm_wall:.2f}s)",
        file=sys.stderr,
    )
    registry = Registry.load(paths, cache_dir=cache)
    names = registry.type_names
    before = None if args.no_before else baseline_of(registry)
    print("tuning corpus:", file=sys.stderr)
    lines, truth, n_samples = make_lines(registry, names, rng, args.per_type, args.lines)
    classes = [(n, registry.message_class(n)) for n in names]

    # Warm: every distinct payload identified once and decoded as its type (message classes and the
    # index's lazy tables are made on first use; no timed phase should pay for them).
    for reg in (registry, before):
        if reg is None:
            continue
        warm_up(reg, lines)
    # Freeze the setup objects so the collector does not rescan them during the timed loops.
    gc.collect()
    gc.freeze()
    rates: dict[str, list[float]] = {}
    results: list[Compact | None] = []
    for _ in range(max(1, args.rounds)):
        got, results = timed_round(registry, lines, before)
        for k, v in got.items():
            rates.setdefault(k, []).append(v)
    med = {k: statistics.median(v) for k, v in rates.items()}

    def paired(a: str, b: str) -> float:
        """Median over rounds of the per-round ratio of two phases' rates (each round timed them alike)."""
        return round(statistics.median(x / y for x, y in zip(rates[a], rates[b], strict=True)), 3)

    lines_tuning = {"identify_vs_type": paired("ours", "ours_type_given")}
    if before is not None:
        lines_tuning["before_identify_vs_type"] = paired("before", "before_type_given")
        lines_tuning["identify_vs_before_type"] = paired("ours", "before_type_given")

    # Naive: every type for every candidate, on a sample.
    naive_sample = lines[: args.naive_lines]
    t = time.perf_counter()
    for line, _, _ in naive_sample:
        best = None
        for cand in extract.candidates(line):
            for n, cls in classes:
                u = unknown_count(cls, cand.data)
                if best is None or u < best[0]:
                    best = (u, n, cls, cand.data)
        if best is not None and best[0] < 1 << 30:
            with contextlib.suppress(Exception):
                json_format.MessageToDict(best[2].FromString(best[3]), descriptor_pool=registry.pool)
    naive_s = time.perf_counter() - t
    naive_rate = len(naive_sample) / naive_s if naive_sample else float("nan")
    gc.unfreeze()

    tuning = accuracy(registry, lines, results, truth)
    shapes = shape_figures(registry, lines)
    print("issue 40 ratios: protobuf's golden TestMaps, big payloads", file=sys.stderr)
    golden_fig = golden_figures(cache, args.ratio_rounds) if PROTOBUF_UNITTEST.is_file() else None
    big_tuning = None
    if PROTOBUF_UNITTEST.is_file():
        unittest_reg = Registry.load([PROTOBUF_UNITTEST], include_defaults=False, cache_dir=cache)
        big_names = [n for n in unittest_reg.type_names if n != "proto2_unittest.TestMaps"]
        big_tuning = big_figures(unittest_reg, big_names, random.Random(args.seed + 2), args.big, args.ratio_rounds)
    heldout = None
    unregistered = None
    held_types = 0
    big_heldout = None
    lines_heldout = None
    if held_paths:
        held = Registry.load(held_paths, include_defaults=False, cache_dir=cache)
        held_types = len(held)
        tested = test_set_types(cache)
        # Disjoint from what was tuned on: neither in the tuning registry nor in the tests' sets.
        own = [n for n in held.type_names if n not in registry and n not in tested]
        print(
            f"held-out corpus: {held_types} types, {len(own)} in neither the tuning corpus nor the tests'"
            f" public sets ({len(tested)} types)",
            file=sys.stderr,
        )
        held_lines, held_truth, _ = make_lines(held, own, random.Random(args.seed + 1), 2, args.lines)
        held_results = ours_decode(held, held_lines)
        heldout = accuracy(held, held_lines, held_results, held_truth)
        # The same payloads against the tuning registry, where their types are not registered.
        unregistered = unregistered_confidence(registry, held_lines)
        print("issue 40 ratios, held-out: big payloads, identify vs --type", file=sys.stderr)
        big_heldout = big_figures(held, own, random.Random(args.seed + 3), args.big, args.ratio_rounds)
        lines_heldout = lines_ratio(held, held_lines[: args.held_lines], max(1, args.rounds))
    load_after = os.getloadavg()

    figures = {
        "types": n_types,
        "lines": len(lines),
        "rounds": args.rounds,
        "load_avg_1min_before_after": [round(load[0], 2), round(load_after[0], 2)],
        "load_cold_s": round(cold, 3),
        "load_cached_s": round(warm, 3),
        "lines_per_s_median": {k: round(v) for k, v in med.items()} | {"naive": round(naive_rate)},
        "ratio_vs_type_given": paired("ours", "ours_type_given"),
        "ratio_vs_type_given_no_memo": paired("ours_no_memo", "ours_type_given"),
        "ratio_vs_oracle": round(med["ours"] / med["oracle"], 3),
        "ratio_vs_oracle_no_memo": round(med["ours_no_memo"] / med["oracle"], 3),
        "distinct_payloads": len({d for _, _, d in lines}),
        "tuning": tuning,
        "heldout": heldout,
        "heldout_types": held_types,
        "heldout_error": None,
        "unregistered": unregistered,
        "golden": golden_fig,
        "big_tuning": big_tuning,
        "big_heldout": big_heldout,
        "lines_tuning": lines_tuning,
        "lines_heldout": lines_heldout,
        "shapes": shapes,
    }
    distinct = figures["distinct_payloads"]
    report = [
        f"decode benchmark: {n_types} types, {len(lines)} lines, {distinct} distinct payloads"
        f" ({n_samples} generated); medians of {args.rounds} rounds;"
        f" 1-min load average {load[0]:.1f} before, {load_after[0]:.1f} after ({os.cpu_count()} CPUs)",
        f"  registry load: cold {cold:.2f}s   cached {warm:.3f}s   (Registry.load in a fresh process)",
        f"  throughput: ours {med['ours']:,.0f} lines/s   our --type path {med['ours_type_given']:,.0f} lines/s"
        f"   oracle (FromString, type given) {med['oracle']:,.0f} lines/s",
        f"    ours from scratch (no memo of repeated payloads) {med['ours_no_memo']:,.0f} lines/s",
        f"    naive {naive_rate:,.1f} lines/s (measured on {len(naive_sample)} lines: too slow)",
        f"  ratio vs our --type path: {figures['ratio_vs_type_given']:.2f}x   from scratch"
        f" {figures['ratio_vs_type_given_no_memo']:.2f}x   (goal >= 1.0x; median of paired rounds)",
        f"  ratio vs oracle: {figures['ratio_vs_oracle']:.2f}x"
        f"   from scratch {figures['ratio_vs_oracle_no_memo']:.2f}x",
        f"  ratio vs naive: {med['ours'] / naive_rate:,.0f}x",
        *([f"    before issue 40 (same run): {med['before']:,.0f} lines/s, --type {med['before_type_given']:,.0f}"
            " lines/s"] if before is not None else []),
        *accuracy_report(f"tuning corpus ({n_types} types)", tuning),
    ]
    if heldout is not None:
        report += accuracy_report(f"held-out corpus ({held_types} types, never tuned on)", heldout)
    if unregistered is not None:
        report.append(
            f"  unregistered types (held-out payloads decoded against the tuning registry, where their types"
            f" are not): {unregistered['confident_pct']:.2f}% of {unregistered['lines']} lines at confidence"
            f" >= 0.9 (goal: essentially never), {unregistered['typed_pct']:.1f}% given some registered type"
        )
    report += ratio_report(figures)
    report += shape_report(shapes)
    print("\n" + "\n".join(report), file=sys.stderr)
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


def unregistered_confidence(registry: Registry, lines: list[tuple[str, str, bytes]]) -> dict[str, object]:
    """How often payloads of types the registry lacks are passed off as a registered type at >= 0.9."""
    results = ours_decode(registry, lines)
    found = [r for r in results if r is not None]
    typed = [r for r in found if r.type is not None]
    confident = [r for r in typed if r.confidence >= 0.9]
    n = len(found) or 1
    return {
        "lines": len(found),
        "typed_pct": round(100 * len(typed) / n, 2),
        "confident_lines": len(confident),
        "confident_pct": round(100 * len(confident) / n, 3),
    }


if __name__ == "__main__":
    sys.exit(main())
