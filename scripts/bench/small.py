#!/usr/bin/env python3
"""A run of a few messages spends its time on them (issue 40): whole-process wall time of `replay` and `purge` of
--messages broker-made dead letters (default 10), next to the fair floor of scripts/bench/startup.py (click, one
management GET, ten basic.gets and a nack) in the same rounds, and what each run said it waited for (`-v`:
dlxtool.waits names every wait that is not for the messages).

In a vhost of its own (deleted afterwards): `orig` dead-letters to `dlq` through a fanout exchange; before each
dlxtool run the bench rejects --messages fresh messages from `orig` (broker-made dead letters). Per round, in a
shuffled order:

    floor   python FLOOR_SCRIPT URL HTTP_PORT dlq      reads the ten at the head of the DLQ, gives them back
    replay  dlxtool replay dlq --yes -v                moves them back to orig
    purge   dlxtool purge dlq --yes -v                 removes them
    purge-selected  dlxtool purge dlq --yes -v --reason rejected   reads each one (the consuming path)

    .venv/bin/python scripts/bench/small.py [--messages 10] [--rounds 7] [--json]
        [--baseline DIR ...]   # an older dlxtool tree (`git archive REV | tar -x -C DIR`) in the same rounds,
                               # as `python -m dlxtool` (this tree then runs that way too, @head)
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pika

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

from startup import FLOOR_SCRIPT  # noqa: E402

from dlxtool.broker.management import ManagementClient  # noqa: E402

HOST = os.environ.get("DLXTOOL_BENCH_HOST", "127.0.0.1")
AMQP_PORT = int(os.environ.get("DLXTOOL_TEST_AMQP_PORT", "5672"))
HTTP_PORT = int(os.environ.get("DLXTOOL_TEST_HTTP_PORT", "15672"))
PYTHON = ROOT / ".venv" / "bin" / "python"
DLXTOOL = ROOT / ".venv" / "bin" / "dlxtool"
WAITED = re.compile(r"^waited ([0-9.]+) s for (.*?) \(at most", re.MULTILINE)


def dead_letters(url: str, n: int) -> None:
    """`n` messages rejected from orig into dlq by the broker (dlq emptied first), waited for until counted."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.exchange_declare("dlx", "fanout", durable=True)
    ch.queue_declare("dlq", durable=True)
    ch.queue_bind("dlq", "dlx")
    ch.queue_declare("orig", durable=True, arguments={"x-dead-letter-exchange": "dlx"})
    ch.queue_purge("orig")
    ch.queue_purge("dlq")
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", "orig", b"small-%d" % i, pika.BasicProperties(message_id=f"small-{i}"))
    rejected = 0
    while rejected < n:
        method, _props, _body = ch.basic_get("orig")
        if method is not None:
            ch.basic_reject(method.delivery_tag, requeue=False)
            rejected += 1
    while ch.queue_declare("dlq", passive=True).method.message_count < n:
        time.sleep(0.01)
    ch.queue_purge("orig")
    conn.close()


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, env=env, cwd=env.get("PYTHONPATH") or None)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stderr.decode()


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline", type=Path, metavar="DIR", action="append", default=[])
    parser.add_argument("--json", dest="json_out", action="store_true", help="also print the figures as one JSON line")
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "dlxtool", quiet=1)  # as an install does (pip compiles)
    compileall.compile_dir(ROOT / "proto_registry", quiet=1)
    mgmt = ManagementClient(f"http://{HOST}:{HTTP_PORT}/", "guest", "guest", timeout=120)
    vhost = f"dlxtool-small-{uuid.uuid4().hex[:8]}"
    url = f"amqp://guest:guest@{HOST}:{AMQP_PORT}/{quote(vhost, safe='')}"
    mgmt.request("PUT", f"vhosts/{quote(vhost, safe='')}", {})
    mgmt.request("PUT", f"permissions/{quote(vhost, safe='')}/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    try:
        with tempfile.TemporaryDirectory(prefix="dlxtool-small-") as tmp:
            measure(args, url, Path(tmp))
    finally:
        mgmt.request("DELETE", f"vhosts/{quote(vhost, safe='')}")


def measure(args: argparse.Namespace, url: str, tmp: Path) -> None:
    floor = tmp / "floor.py"
    floor.write_text(FLOOR_SCRIPT)
    # PYTHONDONTWRITEBYTECODE would keep dlxtool's methods cache from being written (dlxtool.method_cache), as .pyc
    # files are not: measured as an engineer's machine runs
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLXTOOL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(NO_COLOR="1", XDG_CONFIG_HOME=str(tmp / "config"), XDG_STATE_HOME=str(tmp / "state"),
               DLXTOOL_URL=url, DLXTOOL_MANAGEMENT_URL=f"http://guest:guest@{HOST}:{HTTP_PORT}/")
    dlx = {"": ([str(DLXTOOL)], env)}
    for tree in args.baseline:
        compileall.compile_dir(tree, quiet=1)
        dlx[f"@{tree.name}"] = ([str(PYTHON), "-m", "dlxtool"], {**env, "PYTHONPATH": str(tree)})
    if args.baseline:
        dlx["@head"] = ([str(PYTHON), "-m", "dlxtool"], {**env, "PYTHONPATH": str(ROOT)})
    cmds: dict[str, tuple[list[str], dict[str, str]]] = {
        "floor": ([str(PYTHON), str(floor), url, str(HTTP_PORT), "dlq"], env)}
    for suffix, (prefix, tree_env) in dlx.items():
        cmds[f"replay{suffix}"] = ([*prefix, "-v", "replay", "dlq", "--yes"], tree_env)
        cmds[f"purge{suffix}"] = ([*prefix, "-v", "purge", "dlq", "--yes"], tree_env)
        cmds[f"purge-selected{suffix}"] = ([*prefix, "-v", "purge", "dlq", "--yes", "--reason", "rejected"], tree_env)
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    ratios: dict[str, list[float]] = {name: [] for name in cmds}
    waited: dict[str, dict[str, list[float]]] = {name: {} for name in cmds}
    load_before = loadavg()
    rng = random.Random(40)
    for _ in range(args.rounds + 1):  # the first round warms the caches and is not counted
        order = list(cmds)
        rng.shuffle(order)
        got: dict[str, float] = {}
        for name in order:
            dead_letters(url, args.messages if name != "floor" else max(args.messages, 10))
            cmd, cmd_env = cmds[name]
            wall, cpu, err = run(cmd, cmd_env)
            got[name] = wall
            walls[name].append(wall)
            cpus[name].append(cpu)
            for seconds, what in WAITED.findall(err):
                waited[name].setdefault(what, []).append(float(seconds))
        for name in cmds:
            ratios[name].append(got[name] / got["floor"])
    for series in (walls, cpus, ratios):
        for name in series:
            del series[name][0]
    load_after = loadavg()
    print(f"load average before: {load_before}   after: {load_after}   ({os.cpu_count()} CPUs)")
    print(f"{args.messages} dead letters per run; medians of {args.rounds} paired rounds (x floor: median of the "
          "per-round ratios)")
    print(f"{'command':22} {'wall ms':>8} {'x floor':>8} {'cpu ms':>7}   waits said with -v (s per run, over all the "
          "runs that said it)")
    figures: dict[str, dict[str, object]] = {}
    for name in cmds:
        waits_said = {what: round(sum(v) / (args.rounds + 1), 2) for what, v in waited[name].items()}
        figures[name] = {"wall_ms": statistics.median(walls[name]) * 1000,
                         "x_floor": statistics.median(ratios[name]),
                         "cpu_ms": statistics.median(cpus[name]) * 1000, "waits": waits_said}
        f = figures[name]
        said = "; ".join(f"{v:.2f} s {w}" for w, v in waits_said.items()) or "-"
        print(f"{name:22} {f['wall_ms']:8.0f} {f['x_floor']:8.2f} {f['cpu_ms']:7.0f}   {said}")
    if args.json_out:
        print(json.dumps({"bench": "small", "messages": args.messages, "rounds": args.rounds,
                          "load_before": load_before, "load_after": load_after, "figures": figures}))


if __name__ == "__main__":
    main()
