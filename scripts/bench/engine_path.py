#!/usr/bin/env python3
"""Benchmark: the Python work replay does per message, without a broker or a socket (µs per message).

    .venv/bin/python scripts/bench/engine_path.py                 # this tree
    .venv/bin/python scripts/bench/engine_path.py /tmp/base       # and an older tree, alternating, same process kind

What is timed is one replay engine (dlxtool.ops.engine.Transfer) with the replay decider and its routes check,
on the `c` codec (DLXTOOL_CODEC=c), over 100,000 broker-shaped dead letters (one x-death entry, 200-byte bodies),
in batches of 200 as the engine takes them: decide, the publish (the publisher's own sender: frames built by the
C extension and queued on a stand-in for pika's transport, dropped after each batch instead of written to a
socket), a multiple confirm for the batch, the settle and the multiple ack (dropped too). Not timed: pika's
transport, the frame reader, syscalls, start-up — see scripts/bench/replay.py for the whole run. Every letter has
the same x-death shape (one failure, one routing key): replay's per-shape plan is always found, its best case;
--unique-keys gives every letter a routing key of its own (in x-death too): a shape per message, its worst.

On a shared machine `scripts/bench/replay.py` moves by several µs per message from one run to the next; this
path does not (a few percent), so a change to the per-message Python shows here first. It reaches into the
engine's and the publisher's insides to leave the broker out: keep it in step with them.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
N = 100_000
BATCH = 200


def measure(rounds: int, unique_keys: bool = False) -> float:
    """Best µs per message of `rounds` runs, in this process (sys.path set to the tree to measure)."""
    import pika

    from dlxtool.broker import publisher
    from dlxtool.broker.wire import codec, hotpath
    from dlxtool.broker.wire.frames import encode_properties
    from dlxtool.ops import engine
    try:
        from dlxtool.ops.replay_decision import ReplayDecider, ReplaySettings
    except ImportError:  # a tree from before the decision had a module of its own
        from dlxtool.ops.replay import ReplayDecider, ReplaySettings  # type: ignore[attr-defined,no-redef]
    from dlxtool.ops.routes import Routes

    accelerator = hotpath.load()
    if accelerator is None:
        raise SystemExit("the C extension is not built: .venv/bin/python setup.py build_ext --inplace")
    at = datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC)

    def props_with(key: str) -> bytes:
        death = {"count": 1, "reason": "rejected", "queue": "bench.orders", "time": at, "exchange": "",
                 "routing-keys": [key]}
        return encode_properties(pika.BasicProperties(
            content_type="application/octet-stream", delivery_mode=2,
            headers={"tenant": "acme", "x-death": [death], "x-first-death-exchange": "",
                     "x-first-death-queue": "bench.orders", "x-first-death-reason": "rejected"}))

    deliver = collections.namedtuple("deliver", "consumer_tag delivery_tag redelivered exchange routing_key")
    shared = props_with("bench.orders")
    letters = []
    for i in range(N):
        key = f"order.{i}" if unique_keys else "bench.orders"
        letters.append((deliver("ctag", i + 1, False, "", key), props_with(key) if unique_keys else shared,
                        f"{i:012d}".encode().ljust(200, b".")))

    class Impl:  # what the engine and the publisher call on pika's channel: recorded, never sent
        def basic_ack(self, tag: int, multiple: bool = False) -> None:
            self.last_ack = (tag, multiple)

        def basic_qos(self, prefetch_count: int, callback: Any = None) -> None:
            self.qos_ok = callback

    class Channel:
        def __init__(self) -> None:
            self.impl = Impl()
            self.is_open = True

        def ack(self, tag: int, *, multiple: bool = False) -> None:
            self.impl.basic_ack(tag, multiple=multiple)

        def qos(self, prefetch: int, callback: Any = None) -> None:
            self.impl.basic_qos(prefetch, callback)

        def check(self) -> None:
            pass

    class Confirm:  # a basic.ack for every publish so far
        def __init__(self, tag: int) -> None:
            self.method = type("Ack", (), {"delivery_tag": tag, "multiple": True})()

    class Transport:  # what frames._emit appends to while a send is pending
        _STATE_ACTIVE = 1

        def __init__(self) -> None:
            self._state = self._STATE_ACTIVE
            self._tx_buffers: collections.deque[bytes] = collections.deque([b""])
            self._tx_buffered_byte_count = 0

    class Connection:  # a BlockingConnection as the sender sees it
        def __init__(self) -> None:
            self._impl = type("Impl", (), {"_body_max_length": 131072 - 8, "bytes_sent": 0, "frames_sent": 0,
                                           "_transport": Transport()})()

    class PikaChannel:
        channel_number = 1

        def _raise_if_not_open(self) -> None:
            pass

    connection = Connection()
    send = codec.current().sender(connection, PikaChannel())  # the Publisher's (Publisher.__init__)
    sent = connection._impl._transport._tx_buffers  # noqa: SLF001

    def once() -> float:
        routes = Routes(False, exchanges=lambda _queue: "dlxtool.bench", router=None, allow_drop=True)
        transfer = engine.Transfer(None, "bench.dlq", routes.checked(ReplayDecider(ReplaySettings("bench.dlq"),
                                                                                     routes=routes)))
        pub = publisher.Publisher.__new__(publisher.Publisher)  # its __init__ opens a channel: set by hand
        pub.__dict__.update(channel=Channel(), window=1000, _seq=0, _pending={}, _settled=collections.deque(),
                            published=0, _maybe_marked=0, _maybe_returns=0, _send=send,
                            _by_key=None if hasattr(pub, "_returns_index") else {})
        transfer.__dict__.update(channel=Channel(), mover=pub, keeper=pub, prefetch=2000, consumer_tag=None)
        transfer.result.snapshot = N
        started = time.perf_counter()
        for start in range(0, N, BATCH):
            transfer._incoming.extend(letters[start:start + BATCH])  # noqa: SLF001 - what the consumer does
            transfer._take_incoming()  # noqa: SLF001
            pub._on_ack_nack(Confirm(pub._seq))  # noqa: SLF001 - what the frame reader does
            transfer._settle_outcomes()  # noqa: SLF001
            transfer._ack_ready()  # noqa: SLF001
            sent.clear()  # what a socket write would take; a send stays pending (_emit appends)
            sent.append(b"")
            qos_ok = getattr(transfer.channel.impl, "qos_ok", None)
            proof = getattr(transfer, "acks", transfer)  # the ack proof: AckProof, or the engine itself in older trees
            if qos_ok is not None and getattr(proof, "_marker", None) is not None:
                qos_ok(None)  # the broker's qos-ok: the acks before it are proven
        elapsed = time.perf_counter() - started
        assert transfer.result.moved_total == N, transfer.result
        return elapsed / N * 1e6

    return min(once() for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", nargs="?", type=Path, help="another dlxtool source tree, measured alternately")
    parser.add_argument("--rounds", type=int, default=5, help="measurements per tree (default 5)")
    parser.add_argument("--unique-keys", action="store_true",
                        help="every letter a routing key of its own (a shape each: the fast path's worst case)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:  # one measurement of one tree, in a process of its own
        sys.path.insert(0, str(args.child))
        import dlxtool

        if not Path(dlxtool.__file__).resolve().is_relative_to(args.child.resolve()):
            raise SystemExit(f"{args.child}: dlxtool came from {dlxtool.__file__} instead (not a source tree?)")
        print(measure(3, args.unique_keys))
        return
    trees = {"head": ROOT} if args.base is None else {"base": args.base.resolve(), "head": ROOT}
    results: dict[str, list[float]] = {name: [] for name in trees}
    for r in range(args.rounds):
        for name in (list(trees) if r % 2 == 0 else list(trees)[::-1]):
            out = subprocess.run([sys.executable, __file__, "--child", str(trees[name]),
                                  *(["--unique-keys"] if args.unique_keys else [])], capture_output=True,
                                 text=True, check=False, cwd="/", env={**os.environ, "DLXTOOL_CODEC": "c"})
            if out.returncode != 0:
                raise SystemExit(f"{name} ({trees[name]}): {out.stderr.strip()}")
            results[name].append(float(out.stdout))
    for name, values in results.items():
        print(f"{name}: {statistics.median(values):.2f} µs per message (median of {len(values)}; "
              f"{min(values):.2f}–{max(values):.2f})")
    if args.base is not None:
        print(f"head/base: {statistics.median(results['head']) / statistics.median(results['base']):.3f}")


if __name__ == "__main__":
    main()
