#!/usr/bin/env python3
"""Peak memory (RSS) of `dlxtool peek` and `dlxtool replay` on dead letters with big bodies.

    .venv/bin/python scripts/bench/memory.py                        # 24 bodies of 8-64 MB (about 640 MiB)
    .venv/bin/python scripts/bench/memory.py -n 6 --min-mb 1 --max-mb 4   # smaller, quicker
    .venv/bin/python scripts/bench/memory.py --port 5679 --http-port 15679 --min-mb 2 --max-mb 16   # 4.3

Works in a vhost of its own (deleted afterwards). RabbitMQ 4.x refuses bodies over 16 MiB unless its
max_message_size is raised (3.10: 128 MiB): --max-mb 16 there. The dead letters are the broker's: bodies
published to a work queue whose dead-letter exchange leads to the DLQ, then taken and rejected. dlxtool
runs as a subprocess each time, and its peak RSS is read with os.wait4 (that child's own ru_maxrss, the child
forked from a small helper process: see MEASURE):

- `peek DLQ -n N -f jsonl` (stdout to /dev/null), with the default byte budget (256 MiB) and any --max-bytes;
- `replay DLQ --yes` (default prefetch, default budget), and the same with --prefetch 1: the anchor, the
  least a replay can hold (one delivery at a time);
- an idle dlxtool (`peek` of an empty queue): the interpreter and its imports, the floor under every figure.

Each replay sends the dead letters back to the work queue; they are rejected again (a new death each) before
the next one. Printed: each figure in MiB, and ratios to the anchors measured in the same run — the replay at
--prefetch 1, and the largest body. The bodies' sizes come from --seed (the same run, the same sizes).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pika  # noqa: E402
import pika.exceptions  # noqa: E402

from tests.support.broker import BrokerEnv, open_vhost  # noqa: E402

WORK, DLQ = "bench.work", "bench.dlq"
MB = 1024 * 1024
DLXTOOL = str(ROOT / ".venv" / "bin" / "dlxtool")


def sizes(n: int, low_mb: float, high_mb: float, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [int(rng.uniform(low_mb, high_mb) * MB) for _ in range(n)]


def connect(env: BrokerEnv) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=env.host, port=env.amqp_port, virtual_host=env.vhost,
        credentials=pika.PlainCredentials("guest", "guest"), heartbeat=0, blocked_connection_timeout=300))


def make_dead_letters(env: BrokerEnv, body_sizes: list[int]) -> None:
    """Publish the bodies to the work queue (confirmed), then reject each: the broker dead-letters it to the DLQ."""
    block = os.urandom(MB)
    conn = connect(env)
    try:
        ch = conn.channel()
        ch.queue_declare(DLQ, durable=True)
        ch.queue_declare(WORK, durable=True, arguments={"x-dead-letter-exchange": "",
                                                        "x-dead-letter-routing-key": DLQ})
        ch.confirm_delivery()
        for i, size in enumerate(body_sizes):
            body = (block * (size // MB + 1))[:size]
            try:
                ch.basic_publish("", WORK, body, pika.BasicProperties(message_id=f"m{i}", delivery_mode=2),
                                 mandatory=True)
            except pika.exceptions.ChannelClosedByBroker as exc:  # 4.x: max_message_size is 16 MiB by default
                raise SystemExit(f"the broker refused a body of {size / MB:.1f} MiB: {exc.args[1]}\n"
                                 "use smaller bodies (--max-mb 16 on RabbitMQ 4.x unless its max_message_size "
                                 "is raised)") from None
        reject(ch, len(body_sizes))
    finally:
        conn.close()
    wait_depth(env, DLQ, len(body_sizes))


def reject(ch: object, n: int) -> None:
    """Take the work queue's messages one at a time and reject them (requeue=false): dead letters, reason rejected."""
    for _ in range(n):
        method, _props, _body = ch.basic_get(WORK, auto_ack=False)  # type: ignore[attr-defined]
        if method is None:
            raise SystemExit(f"{WORK}: fewer than {n} messages to reject")
        ch.basic_reject(method.delivery_tag, requeue=False)  # type: ignore[attr-defined]


def again(env: BrokerEnv, n: int) -> None:
    """After a replay (the messages are back in the work queue): reject them again, into the DLQ."""
    wait_depth(env, WORK, n)
    conn = connect(env)
    try:
        reject(conn.channel(), n)
    finally:
        conn.close()
    wait_depth(env, DLQ, n)


def wait_depth(env: BrokerEnv, queue: str, n: int, timeout: float = 120) -> None:
    """Until the queue holds n ready messages, and the management API no longer counts any unacked (its figures
    lag: a replay right after would warn of a consumer holding messages)."""
    deadline = time.monotonic() + timeout
    while env.queue_depth(queue) != n or env.mgmt.queue(env.vhost, queue).messages_unacked:
        if time.monotonic() > deadline:
            raise SystemExit(f"{queue}: expected {n} messages, found {env.queue_depth(queue)}")
        time.sleep(0.2)


# Runs one command and prints its peak RSS (KiB) and exit code. The command is forked from this small process,
# not from the bench: a child's ru_maxrss counts the memory of the process it was forked from until its exec
# (Linux keeps the old image's high-water mark), and the bench holds a big body by then.
MEASURE = """
import os, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execv(sys.argv[1], sys.argv[1:])
_pid, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def run(env: BrokerEnv, *args: str, ok: tuple[int, ...] = (0,)) -> float:
    """One dlxtool process (stdout to /dev/null); its peak RSS in MiB."""
    cmd = [DLXTOOL, "--url", env.url, "--management-url", env.management_url, "--no-journal", "--timeout", "30",
           *args]  # a loaded machine's management API can take more than the default 5 s
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", MEASURE, *cmd], capture_output=True)
    elapsed = time.monotonic() - started
    kib, code = (int(word) for word in proc.stdout.split())
    err = proc.stderr.decode(errors="replace").strip().splitlines()
    if code not in ok:
        raise SystemExit(f"{' '.join(args)}: exit {code}\n" + "\n".join(err))
    said = next((line for line in reversed(err) if "budget" in line), err[-1] if err else "")
    print(f"  {' '.join(args)}: exit {code}, {kib / 1024:.0f} MiB, {elapsed:.1f}s  [{said[:120]}]", flush=True)
    return kib / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--count", type=int, default=24, help="dead letters (default 24)")
    parser.add_argument("--min-mb", type=float, default=8, help="smallest body, MiB (default 8)")
    parser.add_argument("--max-mb", type=float, default=64, help="largest body, MiB (default 64)")
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--max-bytes", help="also run peek and replay with this --max-bytes (e.g. 64MiB)")
    parser.add_argument("--host", default=os.environ.get("DLXTOOL_BENCH_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("DLXTOOL_TEST_AMQP_PORT", "5672")))
    parser.add_argument("--http-port", type=int, default=int(os.environ.get("DLXTOOL_TEST_HTTP_PORT", "15672")))
    args = parser.parse_args()

    body_sizes = sizes(args.count, args.min_mb, args.max_mb, args.seed)
    total, largest = sum(body_sizes), max(body_sizes)
    print(f"{args.count} dead letters of {args.min_mb:g}-{args.max_mb:g} MiB: {total / MB:.0f} MiB in all, "
          f"largest {largest / MB:.1f} MiB", flush=True)
    vhost = f"dlxtool-bench-memory-{uuid.uuid4().hex[:8]}"
    with open_vhost(args.host, args.port, args.http_port, vhost) as env:
        make_dead_letters(env, body_sizes)
        with connect(env) as conn:
            conn.channel().queue_declare("bench.empty", durable=True)
        rss: dict[str, float] = {}
        rss["idle dlxtool (peek of an empty queue)"] = run(env, "peek", "bench.empty", "-f", "jsonl")
        n = str(args.count)
        rss[f"peek -n {n}"] = run(env, "peek", DLQ, "-n", n, "-f", "jsonl", ok=(0, 5))
        if args.max_bytes:
            rss[f"peek -n {n} --max-bytes {args.max_bytes}"] = run(
                env, "peek", DLQ, "-n", n, "-f", "jsonl", "--max-bytes", args.max_bytes, ok=(0, 5))
        rss["replay --prefetch 1 (anchor)"] = run(env, "replay", DLQ, "--yes", "--prefetch", "1",
                                                       "-f", "json")
        again(env, args.count)
        rss["replay (defaults)"] = run(env, "replay", DLQ, "--yes", "-f", "json")
        if args.max_bytes:
            again(env, args.count)
            rss[f"replay --max-bytes {args.max_bytes}"] = run(
                env, "replay", DLQ, "--yes", "-f", "json", "--max-bytes", args.max_bytes)
    anchor = rss["replay --prefetch 1 (anchor)"]
    print(f"\npeak RSS; anchors: replay --prefetch 1 = {anchor:.0f} MiB, largest body = {largest / MB:.1f} MiB")
    for name, value in rss.items():
        print(f"  {name:44} {value:7.0f} MiB  {value / anchor:5.2f}x prefetch-1 replay  "
              f"{value * MB / largest:6.2f}x largest body")


if __name__ == "__main__":
    main()
