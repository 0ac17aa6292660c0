"""Benchmark: `dlxtool replay` of two source trees on the same dead letters, in alternating rounds (before/after).

    git archive REV dlxtool proto_registry | tar -x -C /tmp/base    # the older tree
    cp dlxtool/broker/wire/_hotpath*.so /tmp/base/dlxtool/broker/wire/   # if _hotpath.c did not change
    .venv/bin/python scripts/bench/replay_ab.py /tmp/base [-n 50000] [--rounds 6]

Each round replays the N broker-made dead letters with one tree (`python -m dlxtool` from it), dead-letters
them again (real rejects) and replays them with the other, alternating which goes first; it prints each
round's rates and the medians. On a shared machine the paired rounds say more than two separate bench runs.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import replay as bench  # noqa: E402 - the replay bench's dead-letter helpers

from tests.support.broker import open_vhost  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", type=Path, help="the other dlxtool source tree")
    parser.add_argument("-n", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    trees = {"base": args.base.resolve(), "head": ROOT}
    for tree in trees.values():
        compileall.compile_dir(tree / "dlxtool", quiet=1)
    rates: dict[str, list[float]] = {name: [] for name in trees}
    cpus: dict[str, list[float]] = {name: [] for name in trees}
    with open_vhost("localhost", 5672, 15672, f"dlxtool-ab-{uuid.uuid4().hex[:8]}") as env:
        bench.make_dead_letters(env, args.n)
        for round_ in range(args.rounds):
            for name in ("base", "head") if round_ % 2 == 0 else ("head", "base"):
                cpu = bench.children_cpu()
                started = time.monotonic()
                proc = subprocess.run([sys.executable, "-m", "dlxtool", "replay", bench.DLQ, "--yes", "--url",
                                       env.url, "--format", "json"], capture_output=True, text=True,
                                      env={**os.environ, "PYTHONPATH": str(trees[name])}, cwd=trees[name], check=False)
                elapsed = time.monotonic() - started
                if proc.returncode != 0 or json.loads(proc.stdout)["moved_total"] != args.n:
                    raise SystemExit(f"{name}: replay failed ({proc.returncode}): {proc.stderr[-2000:]}")
                rates[name].append(args.n / elapsed)
                cpus[name].append((bench.children_cpu() - cpu) / args.n * 1e6)
                bench.dead_letter_all(env, args.n)
            print(f"round {round_ + 1}: " + ", ".join(f"{k} {v[-1]:,.0f} msg/s ({cpus[k][-1]:.1f} µs CPU/msg)"
                                                      for k, v in rates.items()), flush=True)
    base, head = (statistics.median(rates[k]) for k in ("base", "head"))
    base_cpu, head_cpu = (statistics.median(cpus[k]) for k in ("base", "head"))
    print(f"median: base {base:,.0f} msg/s, head {head:,.0f} msg/s, head/base {head / base:.3f}; client CPU per "
          f"message (start-up included) base {base_cpu:.1f} µs, head {head_cpu:.1f} µs "
          f"(load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
