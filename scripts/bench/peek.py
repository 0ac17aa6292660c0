#!/usr/bin/env python3
"""Whole-process time of `dlxtool peek QUEUE -n 10` on 1,000,000 vs 1,000 messages, next to the
management API's own get of 10 messages (ackmode ack_requeue_true) measured in the same run.

Works in a vhost of its own (deleted afterwards). Prints medians and ratios; absolute figures on a
shared 2-core machine are noisy, the ratios are the point: peek must not grow with queue length.

    .venv/bin/python scripts/bench/peek.py [--big 1000000] [--small 1000] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pika

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dlxtool.broker.management import ManagementClient  # noqa: E402

HOST = os.environ.get("DLXTOOL_BENCH_HOST", "127.0.0.1")
AMQP_PORT = int(os.environ.get("DLXTOOL_TEST_AMQP_PORT", "5672"))
HTTP_PORT = int(os.environ.get("DLXTOOL_TEST_HTTP_PORT", "15672"))


def fill(vhost: str, queue: str, n: int) -> float:
    """Publish n small messages fast: no per-message confirm; wait for the depth at the end."""
    started = time.monotonic()
    conn = pika.BlockingConnection(pika.ConnectionParameters(HOST, AMQP_PORT, vhost))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    body = b"x" * 32
    for i in range(n):
        ch.basic_publish("", queue, body)
        if i % 50_000 == 0:
            conn.process_data_events(0)  # let heartbeats and flow control through
    while ch.queue_declare(queue, passive=True).method.message_count < n:
        time.sleep(0.2)
    conn.close()
    return time.monotonic() - started


def peek_process(vhost: str, queue: str) -> float:
    url = f"amqp://guest:guest@{HOST}:{AMQP_PORT}/{quote(vhost, safe='')}"
    cmd = [str(ROOT / ".venv" / "bin" / "dlxtool"), "--url", url, "peek", queue, "-n", "10", "-f", "jsonl"]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True)
    elapsed = time.monotonic() - started
    if proc.returncode != 0 or len(proc.stdout.splitlines()) != 10:
        raise SystemExit(f"peek failed: {proc.stderr.decode()}")
    return elapsed


def management_get(mgmt: ManagementClient, vhost: str, queue: str) -> float:
    started = time.monotonic()
    got = mgmt.request("POST", f"queues/{quote(vhost, safe='')}/{quote(queue, safe='')}/get",
                       {"count": 10, "ackmode": "ack_requeue_true", "encoding": "auto", "truncate": 50000})
    elapsed = time.monotonic() - started
    assert len(got) == 10
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    mgmt = ManagementClient(f"http://{HOST}:{HTTP_PORT}/", "guest", "guest", timeout=120)
    vhost = f"dlxtool-bench-{uuid.uuid4().hex[:8]}"
    mgmt.request("PUT", f"vhosts/{vhost}", {})
    mgmt.request("PUT", f"permissions/{vhost}/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    try:
        for queue, n in (("small", args.small), ("big", args.big)):
            print(f"filling {queue} with {n} messages: {fill(vhost, queue, n):.1f}s", flush=True)
        results: dict[str, float] = {}
        for queue in ("small", "big"):
            peek_process(vhost, queue)  # warm the page cache and the queue process
            results[f"peek {queue}"] = statistics.median(peek_process(vhost, queue) for _ in range(args.runs))
            results[f"mgmt get {queue}"] = statistics.median(
                management_get(mgmt, vhost, queue) for _ in range(args.runs))
        for name, value in results.items():
            print(f"{name:16} {value * 1000:8.1f} ms (median of {args.runs})")
        print(f"ratio peek big/small:           {results['peek big'] / results['peek small']:.2f}")
        print(f"ratio peek big / mgmt get big:  {results['peek big'] / results['mgmt get big']:.2f}")
        print(f"ratio mgmt get big/small:       {results['mgmt get big'] / results['mgmt get small']:.2f}")
        print("target: peek ≤ 1 s whole process; timings on a shared machine are noisy")
    finally:
        mgmt.request("DELETE", f"vhosts/{vhost}")


if __name__ == "__main__":
    main()
