#!/usr/bin/env python3
"""Benchmark of `dlxtool decode`: identify-and-decode vs the oracle (type given) and the naive loop.

Schemas: real public ones installed from PyPI (pip install -e '.[bench]'):
  - googleapis-common-protos and grpc-google-iam-v1 .proto files, compiled at run time with protoc
    (grpcio-tools' well-known types on the include path);
  - dbt-protos and opentelemetry-proto, whose generated *_pb2.py embed serialized file descriptors:
    they are written out as FileDescriptorSet files (.binpb) and loaded as descriptor sets.

Workload: random valid messages of every type, base64 inside realistic log lines (JSON logs, logfmt,
plain text; standard and URL-safe base64), --lines of them (default 100,000).

Measured in the same run:
  - ours:   dlxtool.decoding.decode_line (extract candidates, identify, decode, JSON mapping)
  - oracle: same extractor, then FromString with the right type and the JSON mapping
  - naive:  same extractor, then parse with every type, keep the one with fewest unknown fields
            (measured on --naive-lines lines because it is slow; says so)
Accuracy against a ground truth computed with protobuf itself: the types a payload parses as with no
unknown field anywhere, required fields present, string fields valid UTF-8 and no oneof given two
members (= indistinguishable from the true type). The last two are checked by hand because the
runtime does not report them (proto2 strings come back as bytes; a second oneof member silently
replaces the first).
Registry load time: cold (empty cache, protoc runs) and cached, each in a fresh process.

Usage: python scripts/bench/decode.py [--lines N] [--naive-lines N] [--per-type K] [--seed S] [--json]
"""

from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import gc
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

try:
    import dbtlabs  # noqa: F401  (namespace package: only checks it is installed)
    import google.api
    import google.iam.v1  # noqa: F401
    import opentelemetry.proto  # noqa: F401
    from google.protobuf import descriptor_pb2, json_format, unknown_fields
    from google.protobuf.descriptor import FieldDescriptor
    from google.protobuf.message import DecodeError
except ImportError as e:  # pragma: no cover
    sys.exit(f"missing benchmark dependency ({e.name}): pip install -e '.[bench]'")

from dlxtool import extract  # noqa: E402
from dlxtool.decoding import decode_line  # noqa: E402
from proto_registry import Registry, wire  # noqa: E402


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
    style = i % 4
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
    return f"{ts} WARN dead-lettered message_id=m-{i} bytes={len(payload)} data={b64}"


# -- ground truth with protobuf itself ----------------------------------------------------------
def clean_as(cls, payload: bytes) -> bool:
    try:
        msg = cls.FromString(payload)
    except DecodeError:
        return False
    return msg.IsInitialized() and not has_unknown(msg) and not oneof_clash(msg.DESCRIPTOR, payload)


def oneof_clash(desc, payload: bytes) -> bool:
    """Two members of one oneof on the wire: protobuf keeps the last and silently drops the other
    (unknown fields inside it included), so the parse alone cannot see it."""
    fields = wire.scan(payload)
    if fields is None:
        return False
    numbers = {f[0] >> 3 for f in fields}
    for o in desc.oneofs:
        if len(o.fields) > 1 and len(numbers & {f.number for f in o.fields}) > 1:
            return True
    for tag, _, _, vstart, vend, _ in fields:
        fd = desc.fields_by_number.get(tag >> 3)
        is_msg = fd is not None and fd.message_type is not None and tag & 7 == 2
        if is_msg and oneof_clash(fd.message_type, payload[vstart:vend]):
            return True
    return False


def has_unknown(msg) -> bool:
    """Unknown fields anywhere, or a string field that is not UTF-8 (proto3 rejects those at parse
    time; for proto2 the runtime hands back bytes, which the scorer counts as a defect too)."""
    if len(unknown_fields.UnknownFieldSet(msg)):
        return True
    for f, value in msg.ListFields():
        if f.type == FieldDescriptor.TYPE_STRING:
            if isinstance(value, bytes) or (f.is_repeated and any(isinstance(v, bytes) for v in value)):
                return True
            continue
        if f.is_repeated and f.message_type is not None and f.message_type.GetOptions().map_entry:
            k_f, v_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            if k_f.type == FieldDescriptor.TYPE_STRING and any(isinstance(k, bytes) for k in value):
                return True
            if v_f.type == FieldDescriptor.TYPE_STRING and any(isinstance(v, bytes) for v in value.values()):
                return True
        if f.type not in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
            continue
        if f.is_repeated:
            items = value.values() if f.message_type.GetOptions().map_entry else value
            if f.message_type.GetOptions().map_entry:
                val_f = f.message_type.fields_by_name["value"]
                if val_f.type != FieldDescriptor.TYPE_MESSAGE:
                    continue
            if any(has_unknown(v) for v in items):
                return True
        elif has_unknown(value):
            return True
    return False


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
            )
        )
    return out


class Compact(NamedTuple):
    type: str | None
    ambiguous: bool
    alternatives: tuple[str, ...]
    alternatives_count: int
    data: bytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=100_000, help="log lines to decode (default 100000)")
    ap.add_argument("--naive-lines", type=int, default=300, help="lines for the slow naive loop (default 300)")
    ap.add_argument("--per-type", type=int, default=4, help="distinct random messages per type (default 4)")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON on stdout")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="dlxtool-bench-"))
    try:
        return run(args, rng, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, rng: random.Random, work: Path) -> int:
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

    gen = Generator(rng)
    samples: list[tuple[str, bytes]] = []
    for name in names:
        cls = registry.message_class(name)
        seen: set[bytes] = set()
        for _ in range(args.per_type * 3):
            if len(seen) >= args.per_type:
                break
            msg = cls()
            gen.fill_message(msg)
            data = msg.SerializeToString()
            if data not in seen:
                seen.add(data)
                samples.append((name, data))
    nonempty = [(n, d) for n, d in samples if d]
    print(
        f"payloads: {len(samples)} random messages of {len(names)} types "
        f"({len(samples) - len(nonempty)} empty: types without fields, left out)",
        file=sys.stderr,
    )

    # Ground truth: which types each payload parses as cleanly, by protobuf itself.
    t = time.perf_counter()
    classes = [(n, registry.message_class(n)) for n in names]
    truth: dict[bytes, set[str]] = {}
    for _, data in nonempty:
        if data not in truth:
            truth[data] = {n for n, cls in classes if clean_as(cls, data)}
    print(
        f"ground truth: {len(truth)} payloads x {len(classes)} types in {time.perf_counter() - t:.1f}s",
        file=sys.stderr,
    )

    lines: list[tuple[str, str, bytes]] = []
    for i in range(args.lines):
        name, data = nonempty[i % len(nonempty)] if i < len(nonempty) else rng.choice(nonempty)
        lines.append((log_line(rng, i, data), name, data))
    rng.shuffle(lines)

    # Freeze the setup objects so the collector does not rescan them during the timed loops.
    gc.collect()
    gc.freeze()

    # The three decoders run on the same chunks of lines in turn, so a change in machine load
    # (other processes) weighs on all of them alike; the times are summed per decoder.
    results: list[Compact | None] = []
    oracle_s = ours_s = cold_s = 0.0
    chunk = 1000
    for i in range(0, len(lines), chunk):
        part = lines[i : i + chunk]
        t = time.perf_counter()
        oracle_decode(registry, part)
        oracle_s += time.perf_counter() - t
        t = time.perf_counter()
        results.extend(ours_decode(registry, part))
        ours_s += time.perf_counter() - t
        registry.memo_size = 0
        t = time.perf_counter()
        ours_decode(registry, part)
        cold_s += time.perf_counter() - t
        registry.memo_size = 4096
    oracle_rate = len(lines) / oracle_s
    ours_rate = len(lines) / ours_s
    cold_rate = len(lines) / cold_s

    # Our own --type path (decode_line with the type given), for reference.
    t = time.perf_counter()
    for line, name, _ in lines[: max(1, len(lines) // 5)]:
        decode_line(registry, line, type_name=name)
    typed_rate = max(1, len(lines) // 5) / (time.perf_counter() - t)

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

    # Accuracy.
    stats = dict(
        total=0,
        top1=0,
        found=0,
        distinct=0,
        distinct_top1=0,
        distinct_flagged=0,
        indist=0,
        indist_flagged=0,
        indist_true_in=0,
        resolved=0,
    )
    wrong: list[str] = []
    for (_line, name, data), res in zip(lines, results, strict=True):
        stats["total"] += 1
        eq = truth[data]
        got = res.type if res is not None else None
        flagged = bool(res and res.ambiguous)
        alts = {got, *res.alternatives} if res is not None else set()
        if res is not None and len(alts) < res.alternatives_count + 1:
            full = registry.identify(res.data, max_equivalent=10**6)
            alts = set(full.equivalent)
        if got is not None:
            stats["found"] += 1
        stats["top1"] += got == name
        if len(eq) <= 1:
            stats["distinct"] += 1
            stats["distinct_top1"] += got == name
            stats["distinct_flagged"] += flagged
            if got != name and len(wrong) < 5:
                wrong.append(f"{name} -> {got} (truth {sorted(eq)[:3]})")
        else:
            stats["indist"] += 1
            stats["indist_flagged"] += flagged
            stats["indist_true_in"] += flagged and name in alts
        stats["resolved"] += got == name or (flagged and name in alts)

    def pct(a: int, b: int) -> str:
        return f"{100 * a / b:.2f}%" if b else "n/a"

    figures = {
        "types": n_types,
        "lines": len(lines),
        "load_cold_s": round(cold, 3),
        "load_cached_s": round(warm, 3),
        "lines_per_s": {
            "ours": round(ours_rate),
            "oracle": round(oracle_rate),
            "naive": round(naive_rate),
            "ours_type_given": round(typed_rate),
            "ours_no_memo": round(cold_rate),
        },
        "ratio_vs_oracle": round(ours_rate / oracle_rate, 3),
        "ratio_vs_oracle_no_memo": round(cold_rate / oracle_rate, 3),
        "distinct_payloads": len({d for _, _, d in lines}),
        "ratio_vs_naive": round(ours_rate / naive_rate, 1),
        "naive_sample_lines": len(naive_sample),
        "top1_all": pct(stats["top1"], stats["total"]),
        "top1_distinguishable": pct(stats["distinct_top1"], stats["distinct"]),
        "resolved": pct(stats["resolved"], stats["total"]),
        "distinguishable_payload_lines": stats["distinct"],
        "ambiguous_flag_false_positive": pct(stats["distinct_flagged"], stats["distinct"]),
        "indistinguishable_payload_lines": stats["indist"],
        "ambiguous_flag_raised_when_indistinguishable": pct(stats["indist_flagged"], stats["indist"]),
        "true_type_among_alternatives": pct(stats["indist_true_in"], stats["indist"]),
    }
    distinct = len({d for _, _, d in lines})
    report = [
        f"decode benchmark: {n_types} types, {len(lines)} lines, {distinct} distinct payloads",
        f"  registry load: cold {cold:.2f}s   cached {warm:.3f}s   (Registry.load in a fresh process)",
        f"  throughput: ours {ours_rate:,.0f} lines/s   oracle (type given) {oracle_rate:,.0f} lines/s",
        f"    ours without memo {cold_rate:,.0f} lines/s   our --type path {typed_rate:,.0f} lines/s",
        f"    naive {naive_rate:,.1f} lines/s (measured on {len(naive_sample)} lines: too slow)",
        f"  ratio vs oracle: {ours_rate / oracle_rate:.2f}x   without memo {cold_rate / oracle_rate:.2f}x"
        "   (goal >= 0.5x)",
        f"  ratio vs naive: {ours_rate / naive_rate:,.0f}x   without memo {cold_rate / naive_rate:,.0f}x",
        f"  top-1 correct: {pct(stats['distinct_top1'], stats['distinct'])} of {stats['distinct']} lines"
        " whose payload is distinguishable (goal >= 99%)",
        f"    {pct(stats['top1'], stats['total'])} of all lines (indistinguishable ones included)",
        f"  resolved: {pct(stats['resolved'], stats['total'])} of all lines: top-1 right, or flagged"
        " ambiguous with the true type among the alternatives",
        f"  ambiguous flag: raised on {pct(stats['indist_flagged'], stats['indist'])} of {stats['indist']}"
        " lines with an indistinguishable payload (true type among alternatives:"
        f" {pct(stats['indist_true_in'], stats['indist'])})",
        f"    raised on {pct(stats['distinct_flagged'], stats['distinct'])} of"
        f" {stats['distinct']} lines with a distinguishable payload (should be 0)",
    ]
    print("\n" + "\n".join(report), file=sys.stderr)
    if wrong:
        print("  examples of wrong top-1: " + "; ".join(wrong), file=sys.stderr)
    if args.json:
        print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
