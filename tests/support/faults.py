"""The fault matrix harness: one dlxtool command as a subprocess, cut at a random moment, then an oracle.

A run (`run_scenario`) sets up durable queues holding persistent messages on the dedicated `faults`
node (scripts/dev-broker faults — restarted at will, so no other test's broker is disturbed), starts
`dlxtool --format json COMMAND ...` through a CuttingProxy, watches how far it got, and injects its
fault when that reaches a random fraction of the run:

    reset         every proxied TCP connection dropped with RST
    restart       rabbitmqctl stop_app / start_app of the node (durable queues, persistent messages)
    sigint        Ctrl-C to the dlxtool process
    sigterm       SIGTERM (kill, timeout, kubectl, CI cancellations) — tests/cli/test_stop_signals.py
    sighup        SIGHUP with the terminal gone: stdout and stderr on a pty whose master is closed first,
                  so every write fails (EIO) and the summary must reach a file — tests/cli/test_stop_signals.py
    dest-deleted  the destination queue deleted by "an operator"
    dest-full     the destination declared with x-max-length K and overflow reject-publish (K = the
                  random fraction of what the run would put there): it refuses from then on

The oracle then takes every message out of every queue and reads every file the command wrote, and
checks the multiset of (body, message_id): nothing lost, nothing foreign, and no more extra copies
than the command's JSON summary reported as `possible_duplicates`. Messages the operator deleted with
a queue are seen by a tap: an auto-ack consumer on the destination that does the deletion itself, on
its own channel, so its delete-ok counts exactly the messages it did not see.

Everything a run does follows from its seed (command, fault, message count, moment, prefetch…); the
moment itself is approximate (a running broker, a shared machine), which is the point of a matrix.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pika.exceptions

from dlxtool.ops.record_files import TornRecord, iter_records
from dlxtool.record import MessageRecord
from tests.support.broker import BrokerEnv
from tests.support.proxy import CuttingProxy
from tests.support.retry_topologies import reject_all

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("replay", "purge-backup", "purge-move", "load", "dump-remove")
FAULTS = ("reset", "restart", "sigint", "dest-deleted", "dest-full")
STOP_SIGNALS = {"sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sighup": signal.SIGHUP}
WITH_DESTINATION = ("replay", "purge-move", "load")  # the others write to a file, not to a queue
COMBOS = [(c, f) for f in FAULTS for c in COMMANDS if c in WITH_DESTINATION or not f.startswith("dest-")]
PASSWORD_ENV = "DLXTOOL_FAULTS_PASSWORD"
REPORTS: list[RunReport] = []  # this session's runs, for the summary at the end (tests/conftest.py)
Key = tuple[bytes, str]  # (body, message_id): what the oracle counts


# -- the node ------------------------------------------------------------------------------------------


@dataclass
class FaultNode:
    env: BrokerEnv  # direct AMQP (not proxied) and a vhost of this session
    node: str       # Erlang node name for rabbitmqctl -n

    def ctl(self, *args: str) -> None:
        subprocess.run(["rabbitmqctl", "-q", "-n", self.node, *args], check=True, capture_output=True,
                       timeout=120)

    def restart(self, during: Callable[[], None] = lambda: None) -> None:
        """stop_app / start_app, then wait until our vhost serves AMQP again. `during` runs while
        stop_app is under way (rabbitmqctl takes ~0.6 s to boot before the node drops connections)."""
        stop = subprocess.Popen(["rabbitmqctl", "-q", "-n", self.node, "stop_app"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            during()
        finally:
            _, err = stop.communicate(timeout=120)
        assert stop.returncode == 0, f"stop_app failed: {err.decode(errors='replace')}"
        self.ctl("start_app")
        deadline = time.monotonic() + 90
        while True:
            try:
                with self.env.channel():
                    return
            except pika.exceptions.AMQPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def connection(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.URLParameters(self.env.url))


# -- scenarios -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    seed: int
    command: str
    fault: str
    messages: int
    at: float       # the fault's moment, as a fraction of what a clean run would do
    pause: float    # restart: how long dlxtool stays frozen (SIGSTOP) once stop_app is launched
    prefetch: int   # replay only (--prefetch / --window)
    window: int
    second: float | None = None  # stop signals: a second one this many seconds after the first

    @classmethod
    def from_seed(cls, seed: int, *, long: bool = False) -> Scenario:
        """Consecutive seeds cycle through every (command, fault) pair; the rest is drawn from the seed."""
        command, fault = COMBOS[seed % len(COMBOS)]
        rng = random.Random(seed)
        return cls(seed, command, fault, messages=rng.randint(200, 4000 if long else 1200),
                   at=round(rng.uniform(0.05, 0.9), 3), pause=round(rng.uniform(0.4, 1.2), 2),
                   prefetch=rng.choice((50, 500, 2000)), window=rng.choice((20, 300, 1000)))

    @classmethod
    def stop_signal(cls, seed: int, command: str, fault: str) -> Scenario:
        """A stop signal at a random moment of a small run; one run in three gets a second signal."""
        rng = random.Random(seed)
        return cls(seed, command, fault, messages=rng.randint(200, 600), at=round(rng.uniform(0.05, 0.9), 3),
                   pause=0.0, prefetch=rng.choice((50, 500)), window=rng.choice((20, 300, 1000)),
                   second=round(rng.uniform(0.0, 0.3), 3) if rng.random() < 1 / 3 else None)

    @property
    def prefix(self) -> str:
        return f"fm{self.seed}"


@dataclass
class Stage:
    """What a scenario set up: the messages, where the oracle looks, and the command line."""

    originals: Counter[Key]
    queues: list[str]             # drained by the oracle
    files: list[Path]             # record files the command wrote
    args: list[str]
    destination: str | None       # the queue the dest-* faults hit
    progress: Callable[[], int]   # how far the run is (records written, messages arrived)
    expected: int                 # progress of a clean run


def _bodies(sc: Scenario, marker: Callable[[int], str] = lambda _i: "") -> list[tuple[bytes, str]]:
    rng = random.Random(sc.seed)
    return [(f"{sc.prefix}-{i:05d}-{marker(i)}".encode() + b"x" * rng.randint(10, 300), f"{sc.prefix}-{i}")
            for i in range(sc.messages)]


def _props(message_id: str, i: int) -> pika.BasicProperties:
    return pika.BasicProperties(delivery_mode=2, message_id=message_id, content_type="text/plain",
                                headers={"i": i, "tenant": "acme"})


def _fill(node: FaultNode, queue: str, items: list[tuple[bytes, str]]) -> None:
    """Publish persistent messages without a confirm per message, then wait for the depth."""
    expected = node.env.queue_depth(queue) + len(items)
    conn = node.connection()
    try:
        ch = conn.channel()
        for i, (body, mid) in enumerate(items):
            ch.basic_publish("", queue, body, _props(mid, i))
    finally:
        conn.close()
    assert node.env.wait_depth(queue, expected, timeout=30) == expected


def _declare(ch: Any, queue: str, full_at: int | None = None, **args: Any) -> None:
    if full_at is not None:
        args.update({"x-max-length": full_at, "x-overflow": "reject-publish"})
    ch.queue_declare(queue, durable=True, arguments=args or None)


class Probe:
    """Progress of a run, read without disturbing it: queue depths (passive declares on a connection
    of its own) and lines of record files."""

    def __init__(self, node: FaultNode) -> None:
        self.node = node
        self.conn: pika.BlockingConnection | None = None
        self.ch: Any = None
        self.tap: Tap | None = None

    def depth(self, *queues: str) -> int:
        total = self.tap.count if self.tap else 0
        for queue in queues:
            try:
                if self.ch is None or not self.ch.is_open:
                    self.conn = self.conn if self.conn and self.conn.is_open else self.node.connection()
                    self.ch = self.conn.channel()
                total += self.ch.queue_declare(queue, passive=True).method.message_count
            except pika.exceptions.ChannelClosedByBroker:
                continue  # deleted
        return total

    @staticmethod
    def lines(path: Path) -> int:
        try:
            return path.read_bytes().count(b"\n")
        except FileNotFoundError:
            return 0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.conn and self.conn.is_open:
                self.conn.close()


def set_up(node: FaultNode, sc: Scenario, tmp: Path, probe: Probe) -> Stage:
    return {"replay": _replay, "purge-backup": _purge_backup, "purge-move": _purge_move, "load": _load,
            "dump-remove": _dump_remove}[sc.command](node, sc, tmp, probe)


def _full_at(sc: Scenario, expected: int) -> int | None:
    return max(1, int(expected * sc.at)) if sc.fault == "dest-full" else None


def _replay(node: FaultNode, sc: Scenario, tmp: Path, probe: Probe) -> Stage:
    """Broker-made dead letters from two origins (rejected) in one DLQ; replay sends them back."""
    p = sc.prefix
    items = _bodies(sc)
    dlx, dlq, origins = f"{p}.dlx", f"{p}.dlq", [f"{p}.o0", f"{p}.o1"]
    halves = [items[0::2], items[1::2]]
    with node.env.channel() as ch:
        ch.exchange_declare(dlx, "fanout", durable=True)
        _declare(ch, dlq)
        ch.queue_bind(dlq, dlx)
        for origin in origins:
            _declare(ch, origin, **{"x-dead-letter-exchange": dlx})
    for origin, half in zip(origins, halves, strict=True):
        _fill(node, origin, half)
        with node.env.channel() as ch:
            reject_all(ch, origin, len(half))
    assert node.env.wait_depth(dlq, len(items), timeout=30) == len(items)
    destination = origins[sc.seed % 2]
    full_at = _full_at(sc, len(items) // 2)
    if full_at is not None:
        with node.env.channel() as ch:  # empty now: redeclare it with a max length
            ch.queue_delete(destination)
            _declare(ch, destination, full_at)
    return Stage(Counter(items), [dlq, *origins], [], ["replay", dlq, "--yes", "--prefetch", str(sc.prefetch),
                 "--window", str(sc.window)], destination, lambda: probe.depth(*origins), len(items))


def _purge_backup(node: FaultNode, sc: Scenario, tmp: Path, probe: Probe) -> Stage:
    src, backup = f"{sc.prefix}.q", tmp / "backup.jsonl"
    items = _source(node, src, _bodies(sc))
    return Stage(Counter(items), [src], [backup], ["purge", src, "--backup", str(backup), "--yes"], None,
                 lambda: probe.lines(backup), len(items))


def _purge_move(node: FaultNode, sc: Scenario, tmp: Path, probe: Probe) -> Stage:
    """Selective: two thirds (-drop-) move to the parking queue, the rest stays (republished to the tail)."""
    src, dest = f"{sc.prefix}.q", f"{sc.prefix}.parked"
    items = _source(node, src, _bodies(sc, lambda i: "keep-" if i % 3 == 0 else "drop-"))
    selected = sum(b"-drop-" in body for body, _ in items)
    with node.env.channel() as ch:
        _declare(ch, dest, _full_at(sc, selected))
    return Stage(Counter(items), [src, dest], [],
                 ["purge", src, "--body-contains", "-drop-", "--move-to", dest, "--yes"], dest,
                 lambda: probe.depth(dest), selected)


def _load(node: FaultNode, sc: Scenario, tmp: Path, probe: Probe) -> Stage:
    dest, records, failed = f"{sc.prefix}.q", tmp / "in.jsonl", tmp / "failed.jsonl"
    items = _bodies(sc)
    with open(records, "wb") as f:
        for i, (body, mid) in enumerate(items):
            f.write(MessageRecord(queue=dest, body=body, properties={"delivery_mode": 2, "message_id": mid},
                                  headers={"i": i}).to_jsonl())
    with node.env.channel() as ch:
        _declare(ch, dest, _full_at(sc, len(items)))
    # The input file stays whatever happens: the oracle counts the queue and the --failed file only.
    return Stage(Counter(items), [dest], [failed], ["load", str(records), "--yes", "--failed", str(failed)], dest,
                 lambda: probe.depth(dest), len(items))


def _dump_remove(node: FaultNode, sc: Scenario, tmp: Path, probe: Probe) -> Stage:
    src, out = f"{sc.prefix}.q", tmp / "drained.jsonl"
    items = _source(node, src, _bodies(sc))
    return Stage(Counter(items), [src], [out], ["dump", src, "--remove", "-o", str(out), "--yes"], None,
                 lambda: probe.lines(out), len(items))


def _source(node: FaultNode, queue: str, items: list[tuple[bytes, str]]) -> list[tuple[bytes, str]]:
    with node.env.channel() as ch:
        _declare(ch, queue)
    _fill(node, queue, items)
    return items


# -- the operator's deletion ---------------------------------------------------------------------------


class Tap(threading.Thread):
    """An auto-ack consumer on the destination that, when told, deletes the queue on its own channel.

    Every message the destination received before the deletion was either delivered to the tap
    (`seen`) or counted by the delete-ok (`deleted`): the oracle knows where everything went."""

    def __init__(self, node: FaultNode, queue: str) -> None:
        super().__init__(daemon=True)
        self.node, self.queue = node, queue
        self.seen: list[Key] = []
        self.deleted = 0
        self.fire = threading.Event()
        self.done = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None

    @property
    def count(self) -> int:
        return len(self.seen)

    def run(self) -> None:
        conn = self.node.connection()
        try:
            ch = conn.channel()
            ch.basic_consume(self.queue, self._on_message, auto_ack=True)
            self.ready.set()
            while not self.fire.is_set():
                conn.process_data_events(0.005)
            self.deleted = ch.queue_delete(self.queue).method.message_count
            conn.process_data_events(0.3)  # deliveries that came before the delete-ok
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.error = exc
        finally:
            self.ready.set()
            self.done.set()
            with contextlib.suppress(Exception):
                conn.close()

    def _on_message(self, _ch: Any, _method: Any, props: Any, body: bytes) -> None:
        self.seen.append((bytes(body), props.message_id))


# -- running -------------------------------------------------------------------------------------------


@dataclass
class RunReport:
    seed: int
    command: str
    fault: str
    messages: int
    when: str               # the moment: target fraction and where the run really was
    exit_code: int | None
    lost: int = 0
    foreign: int = 0
    duplicates_found: int = 0
    duplicates_reported: int = 0
    deleted_by_operator: int = 0
    delete_ok: int = 0      # of which the destination's delete-ok counted
    summary: dict[str, Any] | None = None
    stderr: str = ""
    seconds: float = 0.0
    injected: bool = False  # the fault hit the command while it ran (not after it ended)
    summary_file: str = ""  # sighup: what dlxtool saved when its terminal was gone
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (f"seed={self.seed} {self.command:<12} {self.fault:<12} when={self.when:<22} "
                f"messages={self.messages:<5} lost={self.lost} duplicates found={self.duplicates_found} "
                f"reported={self.duplicates_reported} exit={self.exit_code} {self.seconds:.1f}s"
                + (f" deleted with the destination={self.deleted_by_operator} (delete-ok {self.delete_ok})"
                   if self.deleted_by_operator else ""))


def cli_env(tmp: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("DLXTOOL_")}
    env.update(HOME=str(tmp), XDG_CONFIG_HOME=str(tmp / "config"), XDG_CACHE_HOME=str(tmp / "cache"),
               XDG_STATE_HOME=str(tmp / "state"),
               PYTHONPATH=str(ROOT), **{PASSWORD_ENV: "guest"})
    return env


def write_config(node: FaultNode, port: int, path: Path) -> None:
    path.write_text(f'[brokers.faults]\nurl = "amqp://guest@{node.env.host}:{port}/"\n'
                    f'vhost = "{node.env.vhost}"\npassword_env = "{PASSWORD_ENV}"\n'
                    # 15 s: on a loaded CI machine a 4.x node behind the proxy took more than 5 s to open a
                    # connection before any fault was injected (exit 3, a flake, not a finding)
                    f'management_url = "{node.env.management_url}"\ntimeout = 15\n')


def run_scenario(node: FaultNode, sc: Scenario, tmp: Path) -> RunReport:
    started = time.monotonic()
    probe = Probe(node)
    tap: Tap | None = None
    try:
        stage = set_up(node, sc, tmp, probe)
        if sc.fault == "dest-deleted":
            assert stage.destination
            tap = probe.tap = Tap(node, stage.destination)
            tap.start()
            tap.ready.wait(10)
        with CuttingProxy(node.env.host, node.env.amqp_port) as proxy:
            config = tmp / "config.toml"
            write_config(node, proxy.port, config)
            report = _drive(node, sc, stage, proxy, tap, config, tmp)
    finally:
        probe.close()
    _check(node, stage, tap, report)
    _clean_up(node, stage)
    report.seconds = time.monotonic() - started
    return report


def _drive(node: FaultNode, sc: Scenario, stage: Stage, proxy: CuttingProxy, tap: Tap | None, config: Path,
           tmp: Path) -> RunReport:
    """Start the command, inject the fault at the chosen moment, wait for the command to end."""
    out, err = tmp / "stdout", tmp / "stderr"
    threshold = max(1, int(stage.expected * sc.at))
    report = RunReport(sc.seed, sc.command, sc.fault, sc.messages, when="", exit_code=None)
    with open(out, "wb") as fo, open(err, "wb") as fe, Terminal(fo) as term:
        streams = {"stdout": term.slave, "stderr": term.slave} if sc.fault == "sighup" else \
            {"stdout": fo, "stderr": fe}
        proc = subprocess.Popen([sys.executable, "-m", "dlxtool", "--config", str(config), "--broker", "faults",
                                 "--format", "json", *stage.args], env=cli_env(tmp), **streams)
        term.started()
        try:
            if sc.fault == "dest-full":
                report.injected, report.when = True, f"full at {threshold}/{stage.expected}"
            else:
                _inject_when_due(node, sc, stage, proxy, tap, proc, threshold, report, term)
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                report.notes.append("killed: the command did not end within 120 s")
    report.exit_code = proc.returncode
    report.stderr = err.read_text(errors="replace")
    text = out.read_text(errors="replace")
    if sc.fault == "sighup":  # the terminal took what came before the hang-up; the file has the rest
        saved = sorted((tmp / "state" / "dlxtool").glob("summary-*.log"))
        report.summary_file = "".join(p.read_text(errors="replace") for p in saved)
        report.stderr = text + report.summary_file
        # A hang-up just as the run ended finds the summary already on the terminal; the file then holds
        # only what came after it (the exit line).
        text = report.summary_file if _summary(report.summary_file) is not None else text
    report.summary = _summary(text)
    if report.summary is not None:
        report.duplicates_reported = int(report.summary.get("possible_duplicates") or 0)
    return report


class Terminal:
    """A pty for sighup runs: a thread copies what the command shows on it into `copy` (the stdout file)
    until `hang_up()` closes the master — from then on the command's writes to it fail with EIO. What the
    command wrote before the hang-up reached the terminal (a terminal reads as it comes): the reader takes it
    all before the master closes. (Closing first discarded what the reader had not read yet: a summary written
    whole just before the hang-up arrived cut, and its run looked like one with no summary.)"""

    def __init__(self, copy: Any) -> None:
        self.copy = copy
        self.master = self.slave = -1
        self._reader: threading.Thread | None = None
        self._closing = False

    def __enter__(self) -> Terminal:
        import os
        import pty

        self.master, self.slave = pty.openpty()
        self._os = os
        return self

    def started(self) -> None:
        """The command has the slave: close ours, and copy the terminal's output."""
        self._os.close(self.slave)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        import select

        while True:
            closing = self._closing  # read before the wait: what was written until then is taken below
            try:
                ready, _, _ = select.select([self.master], [], [], 0 if closing else 0.005)
                data = self._os.read(self.master, 65536) if ready else b""
            except OSError:
                return
            if not ready:
                if closing:
                    return
                continue
            if not data:
                return
            self.copy.write(data)
            self.copy.flush()

    def hang_up(self) -> None:
        if self._reader is not None:
            self._closing = True
            self._reader.join(5)  # it takes what is written so far, then stops
            self._reader = None
        if self.master >= 0:
            self._os.close(self.master)
            self.master = -1

    def __exit__(self, *_exc: Any) -> None:
        self.hang_up()


def _send_stop_signal(sc: Scenario, proc: subprocess.Popen, term: Terminal | None) -> None:
    if sc.fault == "sighup" and term is not None:
        term.hang_up()  # the terminal goes first, then its session is told
    proc.send_signal(STOP_SIGNALS[sc.fault])
    if sc.second is not None:
        time.sleep(sc.second)
        if proc.poll() is None:
            proc.send_signal(STOP_SIGNALS[sc.fault])


def _inject_when_due(node: FaultNode, sc: Scenario, stage: Stage, proxy: CuttingProxy, tap: Tap | None,
                     proc: subprocess.Popen, threshold: int, report: RunReport,
                     term: Terminal | None = None) -> None:
    deadline = time.monotonic() + 120
    progress = 0
    while proc.poll() is None and time.monotonic() < deadline:
        progress = stage.progress()
        if progress >= threshold:
            break
        time.sleep(0.003)
    running = proc.poll() is None
    report.injected = running
    report.when = (f"at {progress}/{stage.expected}" + (f" +{sc.pause}s" if sc.fault == "restart" else "")
                   if running else f"after the end ({progress}/{stage.expected})")
    if sc.fault == "reset":
        proxy.cut()
    elif sc.fault in STOP_SIGNALS:
        if running:
            _send_stop_signal(sc, proc, term)
    elif sc.fault == "restart" and running:
        # A whole run takes about as long as rabbitmqctl needs before the node drops its connections: freeze
        # dlxtool where it is, launch stop_app, and let it go on after `pause` s, shortly before or after
        # the node goes down (both kinds of moment: frozen mid-run, or busy while the node stops).
        proc.send_signal(signal.SIGSTOP)

        def resume() -> None:
            time.sleep(sc.pause)
            proc.send_signal(signal.SIGCONT)

        try:
            node.restart(during=resume)
        finally:
            proc.send_signal(signal.SIGCONT)
    elif sc.fault == "restart":
        node.restart()
    elif sc.fault == "dest-deleted":
        assert tap is not None
        tap.fire.set()
        tap.done.wait(30)
        if tap.error:
            raise tap.error


def _summary(stdout: str) -> dict[str, Any] | None:
    """The command's JSON summary (the last JSON object in the text), None if it printed none. The text
    may hold other lines around it (a summary file also has the stderr lines and its own header)."""
    text = stdout.strip()
    if not text:
        return None
    decoder = json.JSONDecoder()
    found = None
    at = 0 if text.startswith("{") else text.find("\n{")
    while at != -1:
        start = text.index("{", at)
        with contextlib.suppress(ValueError):
            obj, _end = decoder.raw_decode(text, start)
            if isinstance(obj, dict):
                found = obj
        at = text.find("\n{", start)
    return found


# -- the oracle ----------------------------------------------------------------------------------------


def _check(node: FaultNode, stage: Stage, tap: Tap | None, report: RunReport) -> None:
    found: Counter[Key] = Counter()
    for path in stage.files:
        found.update(read_file(path))
    if tap is not None:
        found.update(tap.seen)
        report.deleted_by_operator = _deleted_with_destination(tap, report.summary)
        report.delete_ok = tap.deleted
    in_files = sum(found.values())
    found.update(drain(node, stage.queues, at_least=len(stage.originals) - in_files - report.deleted_by_operator))
    missing = sum(1 for key in stage.originals if not found[key])
    report.foreign = sum(n for key, n in found.items() if key not in stage.originals)
    # Messages the operator deleted with the destination are not the command's loss; they are the only
    # ones the oracle cannot name, so they count against `missing` (and as copies for the duplicates).
    report.lost = max(0, missing - report.deleted_by_operator)
    copies = sum(n for key, n in found.items() if key in stage.originals) + report.deleted_by_operator
    report.duplicates_found = copies - (len(stage.originals) - report.lost)


def _deleted_with_destination(tap: Tap, summary: dict[str, Any] | None) -> int:
    """How many messages went down with the deleted destination.

    The queue's delete-ok counts those it held; but RabbitMQ also *confirms* publishes that were on their way
    into the queue as it was deleted (a normal queue exit settles them as delivered), and those appear
    nowhere. Every message confirmed into the queue was either seen by the tap or destroyed with it, so
    the command's own count of what the destination confirmed, minus what the tap saw, is the number
    destroyed (at least the delete-ok's). Only ever used to excuse messages missing from a
    dest-deleted run."""
    confirmed = (summary or {}).get("moved") or (summary or {}).get("published") or {}
    return max(tap.deleted, int(confirmed.get(tap.queue, 0)) - tap.count)


def read_file(path: Path) -> Counter[Key]:
    found: Counter[Key] = Counter()
    if not path.exists():
        return found
    with open(path, "rb") as f:
        try:
            for _where, record in iter_records(f, str(path)):
                found[(record.body, record.properties.get("message_id"))] += 1
        except TornRecord:
            pass  # a record cut short: its message was never acked away (the multiset shows it)
    return found


def drain(node: FaultNode, queues: list[str], at_least: int) -> Counter[Key]:
    """Every message of the queues, once the broker has taken back what the command's connection held."""
    depths = _settled_depths(node, queues, at_least)
    found: Counter[Key] = Counter()
    conn = node.connection()
    try:
        for queue, depth in depths.items():
            if depth:
                found.update(_take(conn, queue, depth))
    finally:
        conn.close()
    return found


def _settled_depths(node: FaultNode, queues: list[str], at_least: int) -> dict[str, int]:
    deadline = time.monotonic() + 15
    previous: dict[str, int] | None = None
    while True:
        depths = _depths(node, queues)
        if (depths == previous and sum(depths.values()) >= at_least) or time.monotonic() > deadline:
            return depths
        previous = depths
        time.sleep(0.25)


def _depths(node: FaultNode, queues: list[str]) -> dict[str, int]:
    out = {}
    conn = node.connection()
    try:
        for queue in queues:
            try:
                out[queue] = conn.channel().queue_declare(queue, passive=True).method.message_count
            except pika.exceptions.ChannelClosedByBroker:
                out[queue] = 0  # deleted (dest-deleted)
    finally:
        conn.close()
    return out


def _take(conn: pika.BlockingConnection, queue: str, expected: int) -> Counter[Key]:
    found: Counter[Key] = Counter()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    got = 0
    for method, props, body in ch.consume(queue, inactivity_timeout=5):
        if method is None:
            break
        found[(bytes(body), props.message_id)] += 1
        got += 1
        if got % 500 == 0 or got == expected:
            ch.basic_ack(method.delivery_tag, multiple=True)
        if got == expected:
            break
    ch.cancel()
    ch.close()
    assert got == expected, f"{queue}: read {got} of {expected}"
    return found


def _clean_up(node: FaultNode, stage: Stage) -> None:
    conn = node.connection()
    try:
        for queue in stage.queues:
            with contextlib.suppress(pika.exceptions.ChannelClosedByBroker):
                conn.channel().queue_delete(queue)
    finally:
        conn.close()


def summary_lines(reports: list[RunReport]) -> list[str]:
    """One line per run, then the totals: runs, faults by kind, messages checked, lost, duplicates."""
    lines = [r.line() for r in sorted(reports, key=lambda r: r.seed)]
    kinds = Counter(r.fault for r in reports)
    injected = Counter(r.fault for r in reports if r.injected)
    commands = Counter(r.command for r in reports)
    total = {k: sum(getattr(r, k) for r in reports) for k in ("messages", "lost", "foreign", "duplicates_found",
                                                                "duplicates_reported", "deleted_by_operator")}
    lines.append(f"runs: {len(reports)} ({', '.join(f'{c} {n}' for c, n in sorted(commands.items()))})")
    lines.append("faults injected while running / runs: "
                 + ", ".join(f"{k} {injected[k]}/{n}" for k, n in sorted(kinds.items())))
    lines.append(f"messages checked: {total['messages']}; lost: {total['lost']}; foreign: {total['foreign']}; "
                 f"duplicates found {total['duplicates_found']} / reported {total['duplicates_reported']}; "
                 f"deleted by the operator {total['deleted_by_operator']}; "
                 f"time {sum(r.seconds for r in reports):.0f}s")
    return lines
