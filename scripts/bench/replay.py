#!/usr/bin/env python3
"""Benchmark: `dlxtool replay` vs the shovel plugin's "Move messages" on the same dead letters.

    .venv/bin/python scripts/bench/replay.py                 # 100,000 messages, rate ratio
    .venv/bin/python scripts/bench/replay.py --rss 1000000   # also peak RSS of a 1M-message replay
    .venv/bin/python scripts/bench/replay.py --codecs all    # each wire codec: c, python, pika
    .venv/bin/python scripts/bench/replay.py --baseline DIR  # also an older source tree, same rounds: before/after
    .venv/bin/python scripts/bench/replay.py --baseline DIR --args=--no-brake  # ... at equal work (no brake)
    .venv/bin/python scripts/bench/replay.py --replayed      # dead letters dlxtool replayed before
    .venv/bin/python scripts/bench/replay.py --guard -n 20000 --skip-compare   # what the canary and brake cost

Dead letters are made by the broker (publish to an origin with a DLX, reject in bulk), 200-byte
bodies, real x-death headers. dlxtool runs as a subprocess (`dlxtool replay DLQ --yes`, count reset,
to origin); new dead letters are made the same way and moved by a dynamic shovel (src-delete-after
queue-length, ack-mode on-confirm). Ratio > 1 means dlxtool was faster. Where the broker has them (RabbitMQ
4.2 and later), a `local` shovel (src-protocol and dest-protocol `local`: inside the node, no AMQP connection)
moves the same dead letters too, a second anchor; where the broker refuses one it is left out, and said.
Every run gets new dead letters:
with --replayed, every run moves the same messages instead, dead-lettered again by the broker after each
run, so that from the second run on dlxtool replays messages that carry its own provenance (the copy check
keeps each of them: more work per message) and the shovel moves them with that header too.
--codecs runs dlxtool once per wire codec each round (DLXTOOL_CODEC: `c` with the C extension, `python`
without it, `pika` on pika's own frame reader and basic_publish) against the same round's shovel run.
--guard: what replay's guard costs (docs/canary.md), on the same dead letters each time, with a consumer on the
origin that takes everything (the fix works): a plain replay (--no-brake), the default (the brake: a tap on the
DLQ's exchanges), and --canary 20 (the canary's pass, its wait — the origin empty for 2 s — then the rest, braked);
ratios to the plain replay (< 1: slower).
Timings on a shared machine are noisy: run it more than once (--rounds).

On a machine whose cores the broker shares with dlxtool (this bench's usual setting), total CPU sets a bound:
the broker's work per message plus dlxtool's, against the broker's alone for the shovel (the shovel runs inside
the broker). The summary prints that bound; in the README's runs the broker and dlxtool together used about 1.6
of 2 cores, so it is a bound, not a prediction. --pin (Linux, a local broker) puts the
broker node on the first CPU and dlxtool on the others, as where dlxtool runs on another machine: the
broker keeps the same CPU budget in both runs, and dlxtool's own CPU no longer takes from it.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pika  # noqa: E402

from dlxtool.broker.publisher import Publisher  # noqa: E402
from dlxtool.broker.wire.codec import NAMES as CODECS  # noqa: E402
from tests.support.broker import open_vhost  # noqa: E402
from tests.support.retry_topologies import reject_all  # noqa: E402

ORIGIN, DLQ, DLX = "bench.orders", "bench.dlq", "bench.dlx"
PORTS = {"amqp": 5672, "http": 15672}  # the broker the bench runs on (--port, --http-port)


def bench_vhost():
    return open_vhost("localhost", PORTS["amqp"], PORTS["http"], f"bench-{uuid.uuid4().hex[:8]}")


def setup(env) -> None:
    with env.channel() as ch:
        ch.exchange_declare(DLX, "fanout")
        ch.queue_declare(DLQ, durable=True)
        ch.queue_bind(DLQ, DLX)
        ch.queue_declare(ORIGIN, arguments={"x-dead-letter-exchange": DLX}, durable=True)


def publish(env, n: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(env.url))
    pub = Publisher(conn, window=2000)
    props = pika.BasicProperties(content_type="application/octet-stream", delivery_mode=2,
                                 headers={"tenant": "acme"})
    for i in range(n):
        while not pub.has_room():
            pub.pump(0.002)
            pub.take_settled()
        pub.publish("", ORIGIN, f"{i:012d}".encode().ljust(200, b"."), props, i)
    pub.flush(60)
    conn.close()


def dead_letter_all(env, n: int) -> None:
    with env.channel() as ch:
        reject_all(ch, ORIGIN, n, batch=5000)
    wait_for(env, DLQ, n)


def wait_for(env, queue: str, n: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while env.queue_depth(queue) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"{queue} never reached {n}")
        time.sleep(0.02)


def broker_cpu_reader(env):
    """A function giving the broker node's CPU seconds so far (from /proc), or None where it cannot be read
    (another machine). On a machine whose cores the broker shares with dlxtool, the run is bound by total
    CPU: broker + client per message, against the broker alone for the shovel."""
    pid = node_pid(env)
    if pid is None:
        return None
    try:
        tick = os.sysconf("SC_CLK_TCK")

        def seconds() -> float:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick

        seconds()
        return seconds
    except Exception:  # noqa: BLE001 - not local, or no /proc: the figure is simply left out
        return None


def node_pid(env) -> int | None:
    """The local broker node's OS process, from its management API, where /proc shows it is an Erlang VM."""
    try:
        pid = int(env.mgmt.get("nodes")[0]["os_pid"])
        return pid if b"beam" in Path(f"/proc/{pid}/cmdline").read_bytes() else None
    except Exception:  # noqa: BLE001 - not local, or no /proc
        return None


@contextmanager
def pinned(env, enabled: bool) -> Iterator[str]:
    """--pin: the broker node's threads on the first CPU this process may use, this process (and the dlxtool
    it starts) on the others; put back as they were at the end (threads the node starts meanwhile keep the
    first CPU)."""
    if not enabled:
        yield ""
        return
    pid = node_pid(env)
    cpus = sorted(os.sched_getaffinity(0))
    if pid is None or len(cpus) < 2:
        raise SystemExit("--pin needs a local broker node (its os_pid under /proc) and two CPUs")
    before: dict[int, set[int]] = {}
    for t in (int(t) for t in os.listdir(f"/proc/{pid}/task")):
        with suppress(ProcessLookupError):  # a thread that ended meanwhile
            before[t] = os.sched_getaffinity(t)
    own = os.sched_getaffinity(0)
    try:
        for t in before:
            try:
                os.sched_setaffinity(t, {cpus[0]})
            except ProcessLookupError:
                continue
            except PermissionError as exc:
                raise SystemExit(f"--pin: cannot set the broker node's CPUs ({exc}): run as root or as its user") \
                    from exc
        os.sched_setaffinity(0, set(cpus[1:]))
        yield f"--pin: broker node on CPU {cpus[0]}, dlxtool on CPU {','.join(map(str, cpus[1:]))}"
    finally:
        for t, mask in before.items():
            with suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(t, mask)
        os.sched_setaffinity(0, own)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


BASELINE = "baseline"  # the --baseline tree's run, beside the codecs'
BASELINE_TREE: list[Path] = []  # --baseline DIR (set by main)
HEAD_ARGS: list[str] = []  # --args: more arguments of this tree's runs (e.g. --no-brake, beside an older baseline)


def run_dlxtool(env, n: int, codec: str | None = None, extra: tuple[str, ...] = ()) -> tuple[float, int, dict]:
    """One replay of the n dead letters on `codec` (None: dlxtool's default; BASELINE: the --baseline tree's dlxtool,
    run as `python -m dlxtool` from that tree), with `extra` arguments."""
    environ = {k: v for k, v in os.environ.items() if k not in ("DLXTOOL_CODEC", "DLXTOOL_NO_HOTPATH")}
    command, cwd = [str(ROOT / ".venv/bin/dlxtool")], None
    if codec == BASELINE:
        tree = BASELINE_TREE[0]
        command, cwd = [str(ROOT / ".venv/bin/python"), "-m", "dlxtool"], str(tree)
        environ["PYTHONPATH"] = str(tree)
    else:
        extra = (*HEAD_ARGS, *extra)
        if codec is not None:
            environ["DLXTOOL_CODEC"] = codec
    cpu = children_cpu()
    started = time.monotonic()
    proc = subprocess.run([*command, "replay", DLQ, "--yes", "--url", env.url,
                           "--management-url", f"http://localhost:{PORTS['http']}/", "--format", "json", *extra],
                          capture_output=True, text=True, check=False, env=environ, cwd=cwd)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"dlxtool failed ({proc.returncode}): {proc.stderr}")
    summary = json.loads(proc.stdout)
    assert summary["moved_total"] == n, summary
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    summary["cpu_us_per_msg"] = (children_cpu() - cpu) / n * 1e6  # whole process, startup included
    return elapsed, rss_kb, summary


def run_shovel(env, n: int, protocol: str = "amqp091") -> float | None:
    """The shovel moving the n dead letters to the origin: its time, None where the broker refuses `protocol`
    (`local`: from RabbitMQ 4.2)."""
    from dlxtool.errors import DlxtoolError

    vhost = quote(env.vhost, safe="")
    name = f"bench-{uuid.uuid4().hex[:6]}"
    value = {"src-protocol": protocol, "src-uri": f"amqp:///{vhost}", "src-queue": DLQ,
             "dest-protocol": protocol, "dest-uri": f"amqp:///{vhost}", "dest-queue": ORIGIN,
             "src-delete-after": "queue-length", "ack-mode": "on-confirm"}
    started = time.monotonic()
    try:
        env.mgmt.request("PUT", f"parameters/shovel/{vhost}/{name}", {"value": value})
    except DlxtoolError:
        if protocol == "amqp091":
            raise
        return None
    wait_for(env, ORIGIN, n)
    return time.monotonic() - started


def make_dead_letters(env, n: int) -> None:
    setup(env)
    t = time.monotonic()
    publish(env, n)
    dead_letter_all(env, n)
    print(f"made {n} dead letters in {time.monotonic() - t:.1f}s", file=sys.stderr)


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def fresh_dead_letters(env, n: int) -> None:
    """n new dead letters, never replayed: both queues emptied, n messages published to the origin and rejected."""
    with env.channel() as ch:
        ch.queue_purge(ORIGIN)
        ch.queue_purge(DLQ)
    publish(env, n)
    dead_letter_all(env, n)


def compare(n: int, rounds: int, codecs: list[str | None], pin: bool = False, replayed: bool = False) -> None:
    """Each round: dlxtool on each codec, then the shovel, each run on n new dead letters; with `replayed`, on the
    same n messages all along, dead-lettered again by the broker after every run (from the second run on, what
    dlxtool reads carries its own provenance: a replay of messages replayed before)."""
    with bench_vhost() as env, pinned(env, pin) as pinning:
        if pinning:
            print(pinning, file=sys.stderr)
        make_dead_letters(env, n)
        renew = (lambda: dead_letter_all(env, n)) if replayed else (lambda: fresh_dead_letters(env, n))
        print("each run on the same messages, dead-lettered again (replayed before)" if replayed else
              "each run on new dead letters (never replayed)", file=sys.stderr)
        broker_cpu = broker_cpu_reader(env) or (lambda: float("nan"))
        rates: dict[str | None, list[float]] = {c: [] for c in codecs}
        ratios: dict[str | None, list[float]] = {c: [] for c in codecs}
        cpus: dict[str | None, list[float]] = {c: [] for c in codecs}
        brokers: dict[str | None, list[float]] = {c: [] for c in [*codecs, "shovel"]}
        local: dict[str | None, list[float]] = {c: [] for c in codecs}  # ratios to the local shovel, where it runs
        local_rates: list[float] = []
        for r in range(rounds):
            runs = []
            for codec in codecs:
                b0 = broker_cpu()
                d, _rss, summary = run_dlxtool(env, n, codec)  # DLQ -> origin, history reset
                b1 = broker_cpu()
                renew()
                runs.append((codec, d, summary["cpu_us_per_msg"], (b1 - b0) / n * 1e6))
            b2 = broker_cpu()
            s = run_shovel(env, n)                           # DLQ -> origin by the shovel
            b3 = broker_cpu()
            assert s is not None
            renew()
            ls = run_shovel(env, n, "local")                 # the same by a local shovel (4.2+), None elsewhere
            if ls is not None:
                local_rates.append(n / ls)
                renew()
            parts = []
            for codec, d, cpu, broker_us in runs:
                rates[codec].append(n / d)
                ratios[codec].append((n / d) / (n / s))
                if ls is not None:
                    local[codec].append((n / d) / (n / ls))
                cpus[codec].append(cpu)
                brokers[codec].append(broker_us)
                parts.append(f"dlxtool{'' if codec is None else f' [{codec}]'} {n / d:,.0f} msg/s ({d:.2f}s, "
                             f"{cpu:.1f} µs CPU/msg, broker {broker_us:.0f} µs/msg), ratio {ratios[codec][-1]:.2f}x")
            brokers["shovel"].append((b3 - b2) / n * 1e6)
            print(f"round {r + 1}: " + "; ".join(parts) + f"; shovel {n / s:,.0f} msg/s ({s:.2f}s, broker "
                  f"{(b3 - b2) / n * 1e6:.0f} µs/msg)"
                  + (f"; local shovel {n / ls:,.0f} msg/s ({ls:.2f}s)" if ls is not None else
                     "; local shovel: not on this broker"), flush=True)
        for codec in codecs:
            label = "dlxtool" if codec is None else f"dlxtool [{codec}]"
            print(f"{label}: rate ratio to the shovel best {max(ratios[codec]):.2f}x, median "
                  f"{median(ratios[codec]):.2f}x ({median(rates[codec]):,.0f} msg/s), CPU median "
                  f"{median(cpus[codec]):.1f} µs/msg")
        for codec in codecs:
            if local[codec]:
                label = "dlxtool" if codec is None else f"dlxtool [{codec}]"
                print(f"{label}: rate ratio to the local shovel best {max(local[codec]):.2f}x, median "
                      f"{median(local[codec]):.2f}x (local shovel {median(local_rates):,.0f} msg/s)")
        shovel_us = median(brokers["shovel"])
        for codec in codecs:
            total = median(brokers[codec]) + median(cpus[codec])
            label = "dlxtool" if codec is None else f"dlxtool [{codec}]"
            print(f"{label}: CPU per message, broker {median(brokers[codec]):.0f} + dlxtool {median(cpus[codec]):.0f} "
                  f"= {total:.0f} µs against the shovel's {shovel_us:.0f} µs (broker): where they share busy cores, "
                  f"the ratio tends to {shovel_us / total:.2f}x")
        print(f"(target >= 1.0x on the default codec; load average {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores)")


@contextmanager
def consumer(env, queue: str) -> Iterator[list[int]]:
    """A consumer taking everything from `queue` (auto-ack: the fix works) on a thread of its own; yields its count,
    and ends once the queue is empty."""
    import threading

    count = [0]
    stop = threading.Event()
    ready = threading.Event()

    def take() -> None:
        conn = pika.BlockingConnection(pika.URLParameters(env.url))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1000)

        def on_message(*_args) -> None:
            count[0] += 1

        ch.basic_consume(queue, on_message, auto_ack=True)
        ready.set()
        while not stop.is_set():
            conn.process_data_events(time_limit=0.05)
        conn.close()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    ready.wait(30)
    try:
        yield count
    finally:
        deadline = time.monotonic() + 120
        while env.queue_depth(queue) and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        thread.join(30)


GUARDS = (("plain (--no-brake)", ("--no-brake",)), ("brake (default)", ()), ("--canary 20 + brake", ("--canary", "20")))


def guard_costs(n: int, rounds: int) -> None:
    """Each round, on n new dead letters each time (made the same way): a plain replay, the brake, a canary."""
    with bench_vhost() as env:
        make_dead_letters(env, n)
        times: dict[str, list[float]] = {label: [] for label, _a in GUARDS}
        cpus: dict[str, list[float]] = {label: [] for label, _a in GUARDS}
        waits: list[float] = []
        for r in range(rounds):
            parts = []
            for label, extra in GUARDS:
                with consumer(env, ORIGIN):
                    d, _rss, summary = run_dlxtool(env, n, None, extra)
                guard = summary.get("guard") or {}
                if guard.get("canary"):
                    waits.append(guard["canary"]["waited_s"])
                assert not guard.get("stopped"), guard
                times[label].append(d)
                cpus[label].append(summary["cpu_us_per_msg"])
                parts.append(f"{label} {n / d:,.0f} msg/s ({d:.2f}s, {summary['cpu_us_per_msg']:.1f} µs CPU/msg)")
                fresh_dead_letters(env, n)
            print(f"round {r + 1}: " + "; ".join(parts), flush=True)
        plain = median(times[GUARDS[0][0]])
        for label, _a in GUARDS:
            t = median(times[label])
            print(f"{label}: median {t:.2f}s ({n / t:,.0f} msg/s), {t - plain:+.2f}s against the plain replay, rate "
                  f"ratio {plain / t:.2f}x; CPU median {median(cpus[label]):.1f} µs/msg")
        if waits:
            print(f"canary: waited median {median(waits):.1f}s for its verdict (the origin empty for 2 s)")
        print(f"(n={n:,}, {rounds} round(s); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: a "
              "shared machine, noisy)")


def rss(n: int, replayed: bool = False) -> None:
    """Peak RSS of an n-message replay; `replayed`: then of a second one, of the same messages dead-lettered
    again (each carries a provenance: the copy check keeps every one of them for the run)."""
    with bench_vhost() as env:
        make_dead_letters(env, n)
        d, rss_kb, _s = run_dlxtool(env, n)
        print(f"{n:,}-message replay: {n / d:,.0f} msg/s, peak RSS {rss_kb / 1024:.1f} MB (target <= 100 MB)")
        if replayed:
            dead_letter_all(env, n)
            d, rss_kb, _s = run_dlxtool(env, n)  # ru_maxrss: the larger of the two runs
            print(f"{n:,} messages replayed before, replayed again: {n / d:,.0f} msg/s, peak RSS "
                  f"{rss_kb / 1024:.1f} MB")


def precompile() -> None:
    """Byte-compile dlxtool as an installed package is (pip compiles at install). Without it, where
    PYTHONDONTWRITEBYTECODE is set, every dlxtool run would compile its sources first: ~50 ms."""
    compileall.compile_dir(ROOT / "dlxtool", quiet=1)


def codec_list(parser: argparse.ArgumentParser, value: str | None) -> list[str | None]:
    if value is None:
        return [None]
    names = list(CODECS) if value == "all" else [v.strip() for v in value.split(",") if v.strip()]
    unknown = [name for name in names if name not in CODECS]
    if unknown or not names:
        parser.error(f"--codecs: {', '.join(unknown) or 'empty'}: not a codec (c, python, pika, all)")
    return list(dict.fromkeys(names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=100_000, help="messages for the rate comparison")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--rss", type=int, metavar="N", help="also measure peak RSS of an N-message replay")
    parser.add_argument("--rss-replayed", action="store_true",
                        help="with --rss: also replay the same messages again once they died again")
    parser.add_argument("--replayed", action="store_true",
                        help="every run on the same messages, dead-lettered again after each run: dlxtool then "
                             "replays messages it replayed before (default: new dead letters for every run)")
    parser.add_argument("--port", type=int, default=5672, help="the local broker's AMQP port (default 5672; "
                        "scripts/dev-broker v4: 5674, v43: 5679)")
    parser.add_argument("--http-port", type=int, default=15672, help="its management API's port (default 15672)")
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--guard", action="store_true",
                        help="also measure what the canary and the brake cost against a plain replay (same data)")
    parser.add_argument("--pin", action="store_true",
                        help="broker node on the first CPU, dlxtool on the others (Linux, local broker)")
    parser.add_argument("--codecs", metavar="LIST", default=None,
                        help="run dlxtool on each of these wire codecs every round: comma-separated c, python, "
                             "pika, or 'all' (default: dlxtool's default codec only)")
    parser.add_argument("--baseline", metavar="DIR", type=Path,
                        help="also run an older dlxtool source tree (e.g. `git archive REV | tar -x -C DIR`, with the "
                             "C extension copied in) every round, against the same round's shovel: before/after")
    parser.add_argument("--args", dest="head_args", metavar="ARGS", default="",
                        help="more arguments of this tree's replays (not the baseline's), e.g. '--no-brake': compare "
                             "with a baseline from before a feature at equal work")
    args = parser.parse_args()
    HEAD_ARGS.extend(args.head_args.split())
    PORTS.update(amqp=args.port, http=args.http_port)
    precompile()
    codecs = codec_list(parser, args.codecs)
    if args.baseline is not None:
        if not (args.baseline / "dlxtool" / "__main__.py").is_file():
            parser.error(f"--baseline {args.baseline}: no dlxtool source tree there")
        BASELINE_TREE.append(args.baseline.resolve())
        compileall.compile_dir(args.baseline / "dlxtool", quiet=1)
        codecs.append(BASELINE)
    if not args.skip_compare:
        compare(args.n, args.rounds, codecs, args.pin, args.replayed)
    if args.guard:
        guard_costs(args.n, args.rounds)
    if args.rss:
        rss(args.rss, args.rss_replayed)


if __name__ == "__main__":
    main()
