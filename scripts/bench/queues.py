#!/usr/bin/env python3
"""Whole-process wall time of `dlxtool queues` on a vhost of --queues queues (default 10,001), next to the
`rabbitmqadmin list queues` that the broker's management plugin serves (issue 28), in the same rounds.

In a vhost of its own (deleted afterwards) it creates the queues in one definitions import, downloads
rabbitmqadmin from the broker (http://HOST:HTTP_PORT/cli/rabbitmqadmin: the 3.x management plugin's), waits
for the queues' first statistics sample, then runs, in rounds:

    admin   python3 rabbitmqadmin -V VHOST list queues     one unpaged GET (columns name,messages), a table
    table   dlxtool --url URL --management-url API queues -f table    the API proven first over AMQP (a probe queue)
    json    dlxtool --url URL --management-url API queues -f json

Each round runs every command once, in a shuffled order, so a burst of load from the other users of a shared
machine hits a round, not one command. Per round it takes each command's ratio to rabbitmqadmin's time of that
round; it prints the median wall time of each command, the median of its per-round ratios (target <= 1.0),
the CPU seconds of the command and, when the broker runs on this machine, of the broker (its beam process, found
by the port it listens on; other users of a shared broker add to it), the load average before and after, and how
many runs listed every queue exactly once (each json run is checked: the count and no name twice; each table run:
the number of lines). On a shared machine the broker's CPU is the steadier figure: wall times wait for cores.

    .venv/bin/python scripts/bench/queues.py [--queues 10001] [--rounds 7] [--keep-vhost]
        [--baseline DIR]     # also run an older dlxtool source tree (e.g. `git archive REV | tar -x -C DIR`)
                             # as `python -m dlxtool` in the same rounds: before/after, paired

The broker is DLXTOOL_TEST_AMQP_PORT / DLXTOOL_TEST_HTTP_PORT's (5672 / 15672). Where other people's tests use
that one, a node of its own makes the broker's CPU this bench's alone (a dev-broker node with a state directory,
name and ports of its own; `... scripts/dev-broker stop second` with the same variables stops it):

    mkdir -p /tmp/bench-broker && chown rabbitmq: /tmp/bench-broker   # as root: the node runs as rabbitmq
    DLXTOOL_DEV_BROKER_DIR=/tmp/bench-broker DLXTOOL_SECOND_PORT=5690 DLXTOOL_SECOND_HTTP_PORT=15690 \
        DLXTOOL_SECOND_NODE=dlxtool-bench@localhost scripts/dev-broker second
    DLXTOOL_TEST_AMQP_PORT=5690 DLXTOOL_TEST_HTTP_PORT=15690 .venv/bin/python scripts/bench/queues.py
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dlxtool.broker.management import ManagementClient  # noqa: E402

HOST = os.environ.get("DLXTOOL_BENCH_HOST", "127.0.0.1")
AMQP_PORT = int(os.environ.get("DLXTOOL_TEST_AMQP_PORT", "5672"))
HTTP_PORT = int(os.environ.get("DLXTOOL_TEST_HTTP_PORT", "15672"))
PYTHON = ROOT / ".venv" / "bin" / "python"
DLXTOOL = ROOT / ".venv" / "bin" / "dlxtool"
STATS_INTERVAL = 5.0  # the broker's collect_statistics_interval (default): the queues' first sample


def create_queues(mgmt: ManagementClient, vhost: str, n: int) -> float:
    """n queues in one definitions import (a queue.declare each over AMQP takes minutes for 10,000)."""
    started = time.monotonic()
    queues = [{"name": f"bench.{i:06d}", "vhost": vhost, "durable": False, "auto_delete": False, "arguments": {}}
              for i in range(n)]
    mgmt.request("POST", f"definitions/{quote(vhost, safe='')}", {"queues": queues})
    while len(mgmt.queues(vhost, columns=["name"])) < n:
        time.sleep(0.5)
    return time.monotonic() - started


def rabbitmqadmin(tmp: Path) -> Path:
    path = tmp / "rabbitmqadmin"
    with urllib.request.urlopen(f"http://{HOST}:{HTTP_PORT}/cli/rabbitmqadmin", timeout=30) as resp:
        path.write_bytes(resp.read())
    return path


def commands(admin: Path, vhost: str, url: str) -> dict[str, list[str]]:
    # --management-url: ad hoc, so proven over AMQP first as a derived one is (and right on any port)
    dlxtool = [str(DLXTOOL), "--url", url, "--management-url", f"http://{HOST}:{HTTP_PORT}/", "queues"]
    return {
        "admin": ["python3", str(admin), "-H", HOST, "-P", str(HTTP_PORT), "-u", "guest", "-p", "guest",
                  "-V", vhost, "list", "queues"],
        "table": [*dlxtool, "-f", "table"],  # (jsonl is the default off a terminal)
        "json": [*dlxtool, "-f", "json"],
    }


def listener_pid(port: int) -> int | None:
    """The local process listening on TCP `port` (the broker's management listener), or None (not local, no
    /proc, not allowed to look)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return int(proc.name)
        except OSError:
            continue
    return None


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) the process has used so far; 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(cmd: list[str], env: dict[str, str], broker: int | None = None, *, check: bool = True
        ) -> tuple[float, float, float, bytes | None]:
    """Wall time, the command's CPU, the broker's CPU meanwhile, and stdout (None when it failed and not `check`:
    a listing that timed out under load, say, is counted as not complete and its time kept)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    broker_before = process_cpu(broker)
    # stdout into a file (`> FILE`), not a pipe: 5 MB of JSON through a 64 KiB pipe waits for this process to be
    # scheduled at every refill, which on a loaded machine took seconds; cwd "/": `python -m dlxtool` would import
    # the dlxtool of the working directory before PYTHONPATH's.
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, env=env, check=False, cwd="/")
        wall = time.perf_counter() - started
        broker_cpu = process_cpu(broker) - broker_before
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        stdout = out.read()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        failure = f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}"
        if check:
            raise SystemExit(failure)
        print(failure.strip(), flush=True)
        return wall, cpu, broker_cpu, None
    return wall, cpu, broker_cpu, stdout


def complete(name: str, output: bytes | None, n: int) -> bool:
    """Every queue listed once: json by name, tables by line count (header lines: admin 4, dlxtool 2)."""
    if output is None:
        return False
    if name.startswith("json"):
        names = [row["queue"] for row in json.loads(output)]
        return len(names) == n and len(set(names)) == n and all(q.startswith("bench.") for q in names)
    return len(output.splitlines()) == n + (4 if name == "admin" else 2)


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queues", type=int, default=10_001)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--keep-vhost", action="store_true", help="do not delete the vhost at the end")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="an older dlxtool source tree to run in the same rounds (before/after)")
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "dlxtool", quiet=1)  # as an install does (pip compiles)
    mgmt = ManagementClient(f"http://{HOST}:{HTTP_PORT}/", "guest", "guest", timeout=600)
    vhost = f"dlxtool-queues-{uuid.uuid4().hex[:8]}"
    url = f"amqp://guest:guest@{HOST}:{AMQP_PORT}/{quote(vhost, safe='')}"
    mgmt.request("PUT", f"vhosts/{quote(vhost, safe='')}", {})
    mgmt.request("PUT", f"permissions/{quote(vhost, safe='')}/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    try:
        with tempfile.TemporaryDirectory(prefix="dlxtool-queues-") as tmp:
            measure(args, mgmt, vhost, url, Path(tmp))
    finally:
        if not args.keep_vhost:
            started = time.monotonic()
            mgmt.request("DELETE", f"vhosts/{quote(vhost, safe='')}")
            print(f"vhost deleted: {time.monotonic() - started:.1f} s")


def measure(args: argparse.Namespace, mgmt: ManagementClient, vhost: str, url: str, tmp: Path) -> None:
    print(f"creating {args.queues:,} queues: {create_queues(mgmt, vhost, args.queues):.1f} s", flush=True)
    time.sleep(STATS_INTERVAL + 1)  # until their first statistics sample: the listings then carry them
    cmds = commands(rabbitmqadmin(tmp), vhost, url)
    # No user config (--url and --management-url, ad hoc): the API is proven over AMQP first.
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLXTOOL_")}
    env.update(NO_COLOR="1", XDG_CONFIG_HOME=str(tmp / "config"))
    envs = {name: env for name in cmds}
    if args.baseline:
        compileall.compile_dir(args.baseline, quiet=1)
        base_env = {**env, "PYTHONPATH": str(args.baseline)}
        where = subprocess.run([str(PYTHON), "-c", "import dlxtool; print(dlxtool.__file__)"], env=base_env, cwd="/",
                               capture_output=True, text=True, check=True).stdout.strip()
        if not Path(where).resolve().is_relative_to(args.baseline.resolve()):
            raise SystemExit(f"{args.baseline}: dlxtool came from {where} instead (not a source tree?)")
        for name in ("table", "json"):
            cmds[f"{name}@base"] = [str(PYTHON), "-m", "dlxtool", *cmds[name][1:]]
            envs[f"{name}@base"] = base_env
    for name, cmd in cmds.items():  # warm the caches
        run(cmd, envs[name])
    broker = listener_pid(HTTP_PORT)
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    broker_cpus: dict[str, list[float]] = {name: [] for name in cmds}
    ratios: dict[str, list[float]] = {name: [] for name in cmds if name != "admin"}
    whole: dict[str, int] = dict.fromkeys(cmds, 0)
    load_before = loadavg()
    rng = random.Random(28)
    for r in range(args.rounds):
        order = list(cmds)
        rng.shuffle(order)
        got: dict[str, float] = {}
        for name in order:
            wall, cpu, broker_cpu, out = run(cmds[name], envs[name], broker, check=False)
            got[name] = wall
            walls[name].append(wall)
            cpus[name].append(cpu)
            broker_cpus[name].append(broker_cpu)
            whole[name] += complete(name, out, args.queues)
        for name in ratios:
            ratios[name].append(got[name] / got["admin"])
        print(f"round {r + 1}: " + "  ".join(f"{name} {got[name]:.2f}s" for name in cmds), flush=True)
    print(f"load average before: {load_before}   after: {loadavg()}   ({os.cpu_count()} CPUs)")
    print(f"{args.queues:,} queues; medians of {args.rounds} paired rounds; x admin: median of the per-round ratios")
    print(f"{'command':11} {'wall s':>7} {'x admin':>8} {'cpu s':>6} {'broker cpu s':>13}  complete")
    for name in cmds:
        ratio = f"{statistics.median(ratios[name]):8.2f}" if name in ratios else f"{'1':>8}"
        shown = f"{statistics.median(broker_cpus[name]):13.2f}" if broker else f"{'?':>13}"
        print(f"{name:11} {statistics.median(walls[name]):7.2f} {ratio} {statistics.median(cpus[name]):6.2f} "
              f"{shown}  {whole[name]}/{args.rounds}")
    print("target: table and json <= 0.6 x admin (wall; issue 40), every run complete")


if __name__ == "__main__":
    main()
