#!/usr/bin/env python3
"""Whole-process wall time of the incident commands next to the fair floor and a bare pika script (issues 17, 40).

In a vhost of its own (deleted afterwards) it fills a classic queue with --messages protobuf bodies
(default 300,000), writes a config that loads the demo schemas and a schema directory of its own
(both compiled once first: a warm cache, as on an engineer's machine), then runs, in rounds:

    floor   python FLOOR_SCRIPT URL HTTP_PORT big         the anchor (issue 40): click parses the command line, one
                                                          management GET of the queue (its type), basic_get x10,
                                                          nack multiple, print JSON (below)
    floor-pb  the floor that also decodes the ten bodies with protobuf, told the type (FLOOR_PB_SCRIPT): a second
                                                          anchor, the work a peek of protobuf bodies cannot skip
    bare    python BARE_SCRIPT URL big                    the same without click and without the GET (issue 17)
    peek    dlxtool peek big -n 10 -f json                bodies decoded against both schema sets
    peek-raw  the same peek with no schemas configured    dlxtool's own start-up against the floor: no protobuf
    history dlxtool history big -n 10 -f json
    queues  dlxtool queues -f json
    help    dlxtool --help
    decode  echo 'payload=…' | dlxtool decode             one line, warm cache (target: <= 0.25 s)

Each round runs every command once, in a shuffled order, so a burst of load from the other users
of a shared machine hits a round, not one command. Per round it takes each command's ratio to the
floor of that round (and to the bare script); it prints the median wall time of each command, the median of its
per-round ratios (target: peek <= 1.1x the floor), the CPU seconds, and the
load average before and after: on a shared 2-core machine absolute times are noisy, the paired
ratios less so.

    .venv/bin/python scripts/bench/startup.py [--messages 300000] [--rounds 9] [--keep-vhost] [--quick] [--json]
        [--rtt MS]           # a broker MS ms away (a delaying proxy): the round trips each command makes
        [--baseline DIR]     # also run an older dlxtool source tree (e.g. `git archive REV | tar -x -C DIR`)
                             # as `python -m dlxtool` in the same rounds: before/after, paired
"""

from __future__ import annotations

import argparse
import base64
import compileall
import contextlib
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pika

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dlxtool.broker.management import ManagementClient  # noqa: E402

HOST = os.environ.get("DLXTOOL_BENCH_HOST", "127.0.0.1")
AMQP_PORT = int(os.environ.get("DLXTOOL_TEST_AMQP_PORT", "5672"))
HTTP_PORT = int(os.environ.get("DLXTOOL_TEST_HTTP_PORT", "15672"))
PYTHON = ROOT / ".venv" / "bin" / "python"
DLXTOOL = ROOT / ".venv" / "bin" / "dlxtool"
QUEUE = "big"
TYPE = "benchco.orders.v1.Ping"

# What an engineer would write instead of `dlxtool peek QUEUE -n 10 -f json`: 12 lines.
BARE_SCRIPT = """\
import json, sys
import pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
out, last = [], None
for _ in range(10):
    method, props, body = ch.basic_get(sys.argv[2])
    if method is None:
        break
    last = method.delivery_tag
    out.append({"routing_key": method.routing_key, "type": props.type, "body": body.hex()})
if last is not None:
    ch.basic_nack(last, multiple=True, requeue=True)
conn.close()
print(json.dumps(out))
"""

# The fair floor (issue 40): what peek cannot do without, written the shortest way — a click command line, one
# management GET of the queue (peek must know its type before it takes a message), the ten basic.gets and the nack.
FLOOR_SCRIPT = """\
import base64, http.client, json
from urllib.parse import quote, unquote, urlsplit
import click
import pika


@click.command()
@click.argument("url")
@click.argument("http_port", type=int)
@click.argument("queue")
def main(url, http_port, queue):
    parts = urlsplit(url)
    vhost = unquote(parts.path[1:]) or "/"
    api = http.client.HTTPConnection(parts.hostname, http_port, timeout=10)
    auth = base64.b64encode(f"{parts.username}:{parts.password}".encode()).decode()
    api.request("GET", f"/api/queues/{quote(vhost, safe='')}/{quote(queue, safe='')}",
                headers={"Authorization": f"Basic {auth}"})
    queue_type = json.loads(api.getresponse().read())["type"]
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    out, last = [], None
    for _ in range(10):
        method, props, body = ch.basic_get(queue)
        if method is None:
            break
        last = method.delivery_tag
        out.append({"routing_key": method.routing_key, "type": props.type, "queue_type": queue_type,
                    "body": body.hex()})
    if last is not None:
        ch.basic_nack(last, multiple=True, requeue=True)
    conn.close()
    click.echo(json.dumps(out))


main()
"""

# The same floor with peek's one task the floor leaves out, where the user configured schemas: the ten bodies decoded
# by protobuf itself, told the type (the message's `type` property) from a compiled descriptor set, as JSON. Its
# imports (google.protobuf's pool, message factory and JSON mapping) are ~9 ms of a 2-core machine's start-up that
# no peek of protobuf bodies can skip; the ratio to it says what dlxtool adds beyond the work (issue 40's note).
FLOOR_PB_SCRIPT = FLOOR_SCRIPT.replace("import click\n", """import click
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
""").replace('@click.argument("queue")\n', """@click.argument("queue")
@click.argument("descriptors")
""").replace("def main(url, http_port, queue):", "def main(url, http_port, queue, descriptors):").replace(
    '                    "body": body.hex()})',
    """                    "body": body.hex(), "message": decode(descriptors, props.type, body)})""").replace(
    "\n\nmain()", """

def decode(descriptors, type_name, body):
    pool = POOL.get("pool")
    if pool is None:
        pool = POOL["pool"] = descriptor_pool.DescriptorPool()
        with open(descriptors, "rb") as f:
            for file in descriptor_pb2.FileDescriptorSet.FromString(f.read()).file:
                pool.Add(file)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(type_name))
    return json_format.MessageToDict(cls.FromString(body))


POOL = {}
main()""")

USER_PROTO = """\
syntax = "proto3";
package benchco.orders.v1;
message Ping {
  string id = 1;
  int64 seq = 2;
  string note = 3;
}
"""


def make_body(schema_dir: Path, cache: Path, seq: int) -> bytes:
    from proto_registry import Registry

    registry = Registry.load([schema_dir], cache_dir=cache)
    msg = registry.message_class(TYPE)(id=f"ping-{seq}", seq=seq, note="bench")
    return msg.SerializeToString()


def fill(url: str, n: int, body: bytes) -> float:
    """Publish n messages fast (no per-message confirm); wait until the queue counts them all."""
    started = time.monotonic()
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare(QUEUE, durable=True)
    props = pika.BasicProperties(content_type="application/x-protobuf", type=TYPE)
    for i in range(n):
        ch.basic_publish("", QUEUE, body, props)
        if i % 20_000 == 0:
            conn.process_data_events(0)  # let heartbeats and flow control through
    while ch.queue_declare(QUEUE, passive=True).method.message_count < n:
        time.sleep(0.2)
    conn.close()
    return time.monotonic() - started


def commands(url: str, http_port: int, bare: Path, floor: Path, floor_pb: Path, descriptors: Path,
             line: str) -> dict[str, tuple[list[str], bytes | None]]:
    dlx = str(DLXTOOL)
    return {
        "floor": ([str(PYTHON), str(floor), url, str(http_port), QUEUE], None),
        "floor-pb": ([str(PYTHON), str(floor_pb), url, str(http_port), QUEUE, str(descriptors)], None),
        "bare": ([str(PYTHON), str(bare), url, QUEUE], None),
        **dlxtool_commands([dlx], line),
    }


def dlxtool_commands(dlx: list[str], line: str, suffix: str = "") -> dict[str, tuple[list[str], bytes | None]]:
    return {
        f"peek{suffix}": ([*dlx, "peek", QUEUE, "-n", "10", "-f", "json"], None),
        f"peek-raw{suffix}": ([*dlx, "peek", QUEUE, "-n", "10", "-f", "json"], None),  # RAW_CONFIG: no schemas
        f"history{suffix}": ([*dlx, "history", QUEUE, "-n", "10", "-f", "json"], None),
        f"queues{suffix}": ([*dlx, "queues", "-f", "json"], None),
        f"help{suffix}": ([*dlx, "--help"], None),
        f"decode{suffix}": ([*dlx, "decode"], line.encode() + b"\n"),
    }


def run(cmd: list[str], stdin: bytes | None, env: dict[str, str]) -> tuple[float, float, bytes]:
    """Wall and CPU (user + system) seconds of one whole process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    # `python -m` puts the working directory first on sys.path: a baseline tree runs from its own.
    proc = subprocess.run(cmd, input=stdin, capture_output=True, env=env, cwd=env.get("PYTHONPATH") or None)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def check_outputs(outputs: dict[str, bytes]) -> None:
    """The commands did the work being timed: ten messages, decoded; the line decoded."""
    assert len(json.loads(outputs["bare"])) == 10
    assert len(json.loads(outputs["floor"])) == 10
    assert [m["message"]["id"] for m in json.loads(outputs["floor-pb"])] == ["ping-42"] * 10
    for name, out in outputs.items():
        kind = name.split("@")[0]
        if kind == "peek":
            peeked = json.loads(out)
            assert len(peeked) == 10, f"{name} printed {len(peeked)} records"
            assert all((r.get("decoded") or {}).get("type") == TYPE for r in peeked), f"{name} did not decode"
        elif kind == "peek-raw":
            peeked = json.loads(out)
            assert len(peeked) == 10, f"{name} printed {len(peeked)} records"
            assert not any(r.get("decoded") for r in peeked), f"{name} decoded with no schemas configured"
        elif kind == "history":
            assert len(json.loads(out)) == 10
        elif kind == "queues":
            assert any(q.get("queue") == QUEUE for q in json.loads(out))
        elif kind == "decode":
            assert json.loads(out.splitlines()[0]).get("type") == TYPE, out


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--keep-vhost", action="store_true", help="do not delete the vhost at the end")
    parser.add_argument("--baseline", type=Path, metavar="DIR", action="append", default=[],
                        help="an older dlxtool source tree to run in the same rounds (before/after; named @DIR's "
                             "name; may be repeated); this tree then also runs as `python -m dlxtool` (@head), as "
                             "the baselines do")
    parser.add_argument("--only", metavar="NAMES", help="comma-separated dlxtool commands to run (peek,peek-raw,"
                                                         "history,queues,help,decode; default all); the anchors always "
                                                         "run")
    parser.add_argument("--quick", action="store_true", help="--messages 20000 --rounds 7 unless given")
    parser.add_argument("--json", dest="json_out", action="store_true", help="also print the figures as one JSON line")
    parser.add_argument("--rtt", type=float, metavar="MS", default=0.0,
                        help="a broker MS milliseconds away: every command's AMQP and HTTP go through a proxy that "
                             "forwards each chunk MS/2 late each way (tests/support/faultproxy.py), so that what is "
                             "measured is the round trips each makes, as on-call engineers on a VPN pay them")
    args = parser.parse_args()
    if args.quick:
        args.messages = 20_000 if args.messages == 300_000 else args.messages
        args.rounds = 7 if args.rounds == 9 else args.rounds
    compileall.compile_dir(ROOT / "dlxtool", quiet=1)  # as an install does (pip compiles)
    compileall.compile_dir(ROOT / "proto_registry", quiet=1)
    mgmt = ManagementClient(f"http://{HOST}:{HTTP_PORT}/", "guest", "guest", timeout=120)
    vhost = f"dlxtool-startup-{uuid.uuid4().hex[:8]}"
    url = f"amqp://guest:guest@{HOST}:{AMQP_PORT}/{quote(vhost, safe='')}"
    mgmt.request("PUT", f"vhosts/{quote(vhost, safe='')}", {})
    mgmt.request("PUT", f"permissions/{quote(vhost, safe='')}/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    try:
        with tempfile.TemporaryDirectory(prefix="dlxtool-startup-") as tmp, far_away(args.rtt) as ports:
            if ports is not None:
                url = f"amqp://guest:guest@{HOST}:{ports[0]}/{quote(vhost, safe='')}"
                print(f"a broker {args.rtt:g} ms away: AMQP through 127.0.0.1:{ports[0]}, HTTP through "
                      f"127.0.0.1:{ports[1]}", flush=True)
            measure(args, url, Path(tmp), HTTP_PORT if ports is None else ports[1])
    finally:
        if not args.keep_vhost:
            mgmt.request("DELETE", f"vhosts/{quote(vhost, safe='')}")


@contextlib.contextmanager
def far_away(rtt_ms: float) -> Iterator[tuple[int, int] | None]:
    """With rtt_ms: delaying proxies in front of the broker's AMQP and HTTP ports, (amqp, http) their ports."""
    if not rtt_ms:
        yield None
        return
    from tests.support.faultproxy import FaultProxy

    delay = rtt_ms / 2000
    with FaultProxy(HOST, AMQP_PORT, delay=delay) as amqp, FaultProxy(HOST, HTTP_PORT, delay=delay) as http:
        yield amqp.port, http.port


def measure(args: argparse.Namespace, url: str, tmp: Path, http_port: int) -> None:
    schemas = tmp / "schemas"
    (schemas / "benchco" / "orders" / "v1").mkdir(parents=True)
    (schemas / "benchco" / "orders" / "v1" / "ping.proto").write_text(USER_PROTO)
    cache = tmp / "cache"
    config = tmp / "config.toml"
    config.write_text(f"demo_schemas = true\nproto_paths = [{str(schemas)!r}]\n")
    bare = tmp / "bare.py"
    bare.write_text(BARE_SCRIPT)
    floor = tmp / "floor.py"
    floor.write_text(FLOOR_SCRIPT)
    floor_pb = tmp / "floor_pb.py"
    floor_pb.write_text(FLOOR_PB_SCRIPT)
    descriptors = tmp / "ping.binpb"
    subprocess.run([str(PYTHON), "-m", "grpc_tools.protoc", f"-I{schemas}", f"--descriptor_set_out={descriptors}",
                    "benchco/orders/v1/ping.proto"], check=True)
    body = make_body(schemas, tmp / "scratch-cache", 42)
    line = f"ts=2026-11-24T03:12:09Z level=error msg=\"cannot handle\" payload={base64.b64encode(body).decode()}"
    env = {**os.environ, "DLXTOOL_CONFIG": str(config), "DLXTOOL_URL": url, "DLXTOOL_CACHE_DIR": str(cache),
           "DLXTOOL_MANAGEMENT_URL": f"http://{HOST}:{http_port}/", "NO_COLOR": "1"}
    # PYTHONDONTWRITEBYTECODE (set on some machines, this one included) would keep dlxtool from writing its methods
    # cache (dlxtool.method_cache), as it keeps Python from writing .pyc files: measured as an engineer's machine runs
    for key in ("DLXTOOL_BROKER", "DLXTOOL_PROTO_PATH", "DLXTOOL_DEBUG", "PYTHONDONTWRITEBYTECODE"):
        env.pop(key, None)
    print(f"filling {QUEUE!r} with {args.messages:,} messages: {fill(url, args.messages, body):.1f} s", flush=True)
    cmds = commands(url, http_port, bare, floor, floor_pb, descriptors, line)
    if args.only:
        wanted = set(args.only.split(","))
        cmds = {name: cmd for name, cmd in cmds.items() if name in ("floor", "floor-pb", "bare") or name in wanted}
    raw_config = tmp / "raw.toml"  # peek-raw: no schemas, so no protobuf to load; the floor's own work
    raw_config.write_text("")
    envs = {name: {**env, "DLXTOOL_CONFIG": str(raw_config)} if name.startswith("peek-raw") else env
            for name in cmds}
    trees: list[tuple[dict[str, str], str]] = []
    for tree in args.baseline:
        # An older tree loads the demo schemas without being asked (and knows no demo_schemas key).
        tree_env = env
        if "demo_schemas" not in (tree / "dlxtool" / "config.py").read_text():
            base_config = tmp / f"baseline-{tree.name}.toml"
            base_config.write_text(f"proto_paths = [{str(schemas)!r}]\n")
            tree_env = {**env, "DLXTOOL_CONFIG": str(base_config)}
        trees.append(({**tree_env, "PYTHONPATH": str(tree)}, f"@{tree.name}"))
        compileall.compile_dir(tree, quiet=1)
    if trees:
        trees.append(({**env, "PYTHONPATH": str(ROOT)}, "@head"))
        for tree_env, suffix in trees:
            more = dlxtool_commands([str(PYTHON), "-m", "dlxtool"], line, suffix)
            more = {name: cmd for name, cmd in more.items() if not args.only or name.split("@")[0] in wanted}
            cmds.update(more)
            envs.update({name: {**tree_env, "DLXTOOL_CONFIG": str(raw_config)} if name.startswith("peek-raw")
                         else tree_env for name in more})
    outputs = {name: run(cmd, stdin, envs[name])[2] for name, (cmd, stdin) in cmds.items()}  # warm the caches
    check_outputs(outputs)
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    anchors = ("floor", "bare")
    ratios: dict[str, dict[str, list[float]]] = {a: {name: [] for name in cmds} for a in anchors}
    cpu_ratios: dict[str, list[float]] = {name: [] for name in cmds}
    pb_ratios: dict[str, list[float]] = {name: [] for name in cmds}  # x the floor that decodes too (FLOOR_PB_SCRIPT)
    load_before = loadavg()
    rng = random.Random(17)
    for _ in range(args.rounds):
        order = list(cmds)
        rng.shuffle(order)
        got: dict[str, tuple[float, float]] = {}
        for name in order:
            cmd, stdin = cmds[name]
            wall, cpu, _out = run(cmd, stdin, envs[name])
            got[name] = wall, cpu
            walls[name].append(wall)
            cpus[name].append(cpu)
        for name in cmds:
            for anchor in anchors:
                ratios[anchor][name].append(got[name][0] / got[anchor][0])
            cpu_ratios[name].append(got[name][1] / got["floor"][1])
            pb_ratios[name].append(got[name][0] / got["floor-pb"][0])
    load_after = loadavg()
    print(f"load average before: {load_before}   after: {load_after}   ({os.cpu_count()} CPUs)")
    print(f"{'command':12} {'wall ms':>8} {'x floor':>8} {'x bare':>7} {'cpu ms':>7} {'x floor':>8} {'x fl-pb':>8}   "
          f"(medians of {args.rounds} paired rounds; x: median of the per-round ratios)")
    figures: dict[str, dict[str, float]] = {}
    for name in cmds:
        figures[name] = {"wall_ms": statistics.median(walls[name]) * 1000,
                         "x_floor": statistics.median(ratios["floor"][name]),
                         "x_bare": statistics.median(ratios["bare"][name]),
                         "cpu_ms": statistics.median(cpus[name]) * 1000,
                         "cpu_x_floor": statistics.median(cpu_ratios[name]),
                         "x_floor_pb": statistics.median(pb_ratios[name])}
        f = figures[name]
        print(f"{name:12} {f['wall_ms']:8.0f} {f['x_floor']:8.2f} {f['x_bare']:7.2f} {f['cpu_ms']:7.0f} "
              f"{f['cpu_x_floor']:8.2f} {f['x_floor_pb']:8.2f}")
    print("targets: peek <= 1.1 x floor (wall; issue 40); decode <= 250 ms. x fl-pb: wall x floor-pb, the floor that "
          "also decodes the ten bodies with protobuf (told the type)")
    if args.json_out:
        print(json.dumps({"bench": "startup", "rounds": args.rounds, "load_before": load_before,
                          "load_after": load_after, "figures": figures}))

if __name__ == "__main__":
    main()
