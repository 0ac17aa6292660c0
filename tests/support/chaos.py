"""The fault campaign (issue 35): every command that moves or removes messages, run as the user runs it
(`dlxtool --format json …`, a subprocess) through a fault proxy (tests/support/faultproxy.py), hit at a seeded
random moment by one fault, then the accounting of every message id.

Commands (`COMMANDS`):

    replay            broker-made dead letters from two origins, back to each origin (the temporary fanout route)
    replay-dx         the same with --default-exchange
    replay-to         replay --to a third queue
    replay-select     replay --body-contains -drop- (the rest republished to the DLQ's tail)
    replay-edit       replay --edit through $EDITOR (tests/support/editor.py, saving a document with one body
                      changed): the messages are read, given back, found again and replayed
    purge-backup      purge --backup FILE --yes
    purge-move        purge --body-contains -drop- --move-to Q --yes (the rest republished to the tail)
    purge-plain       purge --yes (queue.purge: removes everything, nothing kept by design)
    purge-select      purge --body-contains -drop- --yes (the selected removed for good, the rest kept)
    dump-remove       dump --remove -o FILE --yes
    (move             move SRC DST --yes: tests/chaos/test_chaos_move.py, one trial per fault; not in COMMANDS)
    load              load FILE --failed FILE2 --yes

Faults (`FAULTS`): the proxy's reset, half-open, refuse (reset, then every reconnect reset), stall (for good, or
resumed after a seeded 0.3-2 s), delay (every chunk 5-60 ms late from then on); kill -9, SIGINT, SIGTERM of the
dlxtool process; broker-close (the broker closes the command's connections: DELETE /api/connections/NAME).

The moment is a seeded fraction of what a clean run would do (records written, messages arrived), read while the
command runs; a fault that comes after the command ended is counted as such (`injected` False).

Accounting: once the command has ended, the queue(s) it read are counted at once (a passive declare: what a rerun
would see now), then the proxy resets whatever it still holds (the broker side of a half-open connection) and the
broker must let go of the command's connections (they leave the management API's list; any left after 10 s are
closed through it). Then every queue of the trial is drained and every file read: each message id is counted.

    lost        an id found nowhere that the command may not remove (purge-plain: none; purge-select: the
                unselected ones)
    dups found  copies beyond the first, over queues and files
    dups rep.   the summary's possible_duplicates (replay-edit: the same)

A trial fails (`Result.failures`) when: anything is lost; more duplicates are found than reported (kill -9: more
than docs/stop-signals.md promises, see KILL9_BOUND); the exit code is not one the fault allows; exit 0 while the
source still holds what the command was to take (it did not reach the end); the summary claims more moved or
removed than arrived; a lost connection's words ("unfinished messages are still in Q") were false when said — the
queue held fewer ready than the settled count and the summary did not say how many the broker still held for the
lost connection (held_when_lost); a traceback or "internal error"; no summary after a caught fault.

Every trial follows from its seed (`Trial.from_seed`); a failure's text names the seed and the command that reruns
it: `.venv/bin/pytest -q tests/chaos --chaos-seed SEED -s` or `scripts/chaos --seed SEED`.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika
import pika.exceptions

from dlxtool.record import MessageRecord
from tests.support.broker import BrokerEnv
from tests.support.faultproxy import FaultProxy
from tests.support.faults import ROOT, FaultNode, Probe, _summary, cli_env, drain, read_file, write_config
from tests.support.retry_topologies import reject_all

COMMANDS = ("replay", "replay-dx", "replay-to", "replay-select", "replay-edit", "purge-backup", "purge-move",
            "purge-plain", "purge-select", "dump-remove", "load")
FAULTS = ("reset", "half-open", "refuse", "stall", "delay", "kill9", "sigint", "sigterm", "broker-close")
SIGNALS = {"kill9": signal.SIGKILL, "sigint": signal.SIGINT, "sigterm": signal.SIGTERM}
# The exit codes each fault allows (0: it came too late to matter, or the command rode it out).
EXITS = {"reset": {0, 3}, "half-open": {0, 3}, "refuse": {0, 3}, "stall": {0, 3}, "delay": {0},
         "kill9": {0, -9}, "sigint": {0, 130}, "sigterm": {0, 143}, "broker-close": {0, 3}}
EDITOR = Path(__file__).parent / "editor.py"
TIMEOUT = 5  # the trials' --timeout (config `timeout`, dlxtool's default): a stall for good costs about 3 of them
# A command ends within this long of its fault (the stop signals' 30 s wait for confirms aside, never reached here):
# --timeout bounds every wait, a silent connection is dropped after one (issue 35: a stall held replay 155 s).
EXIT_WITHIN = 10 * TIMEOUT


DEFAULT_WINDOW = 1000  # the engine's --window where the command has none (purge --move-to)
RECORD_BATCH = 200     # dlxtool.ops.engine.TAKE_BATCH: records written before their acks go


def kill9_bound(trial: Trial) -> int:
    """What docs/stop-signals.md promises a kill -9 leaves twice at most: twice --window for a move or a load,
    the records written since the last ack for dump --remove / purge --backup (a batch; twice, for acks under way)."""
    if trial.command in ("purge-backup", "dump-remove"):
        return 2 * RECORD_BATCH
    if trial.command == "purge-move":
        return 2 * DEFAULT_WINDOW
    return 2 * trial.window


@dataclass(frozen=True)
class Trial:
    seed: int
    command: str
    fault: str
    messages: int
    at: float        # the fault's moment, a fraction of what a clean run does
    prefetch: int    # replay's --prefetch
    window: int      # replay's and load's --window
    stall_for: float | None = None  # stall: resumed after this many seconds; None: for good
    delay: float = 0.0              # delay: seconds per chunk
    by_time: bool = False           # the moment is `at` x 1.5 s after the start, not a fraction of the work

    @classmethod
    def from_seed(cls, seed: int, command: str | None = None, fault: str | None = None, *,
                  big: bool = False) -> Trial:
        """Consecutive seeds cycle through the commands and, for each, through the faults; the rest is drawn from
        the seed. `command`/`fault` force one (the CI tests give each command its own seeds)."""
        rng = random.Random(seed)
        command = command or COMMANDS[seed % len(COMMANDS)]
        fault = fault or FAULTS[(seed // len(COMMANDS)) % len(FAULTS)]
        n = rng.randint(60, 100) if command == "replay-edit" else rng.randint(100, 1500 if big else 600)
        return cls(seed, command, fault, messages=n, at=round(rng.uniform(0.02, 0.95), 3),
                   prefetch=rng.choice((20, 100, 500, 2000)), window=rng.choice((10, 50, 200, 1000)),
                   stall_for=rng.choice((None, round(rng.uniform(0.3, 2.0), 2))),
                   delay=round(rng.uniform(0.005, 0.06), 3),
                   by_time=command == "purge-plain" or rng.random() < 0.25)

    @property
    def prefix(self) -> str:
        return f"ch{self.seed}"

    def rerun(self) -> str:
        return (f"rerun: .venv/bin/pytest -q tests/chaos --chaos-seed {self.seed} -s   "
                f"or: scripts/chaos --seed {self.seed}   ({self.command} / {self.fault})")


@dataclass
class Stage:
    ids: list[str]                 # every message id of the trial
    source: str | None             # the queue the command takes from (None: load)
    queues: list[str]              # drained by the oracle
    files: list[Path]              # record files the command writes
    args: list[str]
    progress: Callable[[], int]
    expected: int                  # progress of a clean run
    removable: set[str] = field(default_factory=set)  # ids the command may remove for good
    to_take: set[str] = field(default_factory=set)    # ids a finished run leaves nowhere in the source
    arrive: list[str] = field(default_factory=list)   # where taken messages arrive (queues), for the claims
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    trial: Trial
    exit_code: int | None = None
    injected: bool = False
    when: str = ""
    lost: int = 0
    removed: int = 0           # ids gone that the command may remove (purge-plain, purge-select)
    not_sent: int = 0          # load: records neither in the queue nor in --failed, said not sent (input file)
    dups_found: int = 0
    dups_reported: int = 0
    left_in_source: int = 0    # of what the command was to take, still in the source after settling
    unfinished: int = 0        # ids in the source after settling and nowhere else
    arrived: int = 0           # ids found where the command puts what it takes (queues, its output file)
    ready_at_exit: int | None = None
    held_when_lost: int = 0
    words: str = ""            # the stderr's last line
    summary: dict[str, Any] | None = None
    stderr: str = ""
    seconds: float = 0.0
    exit_after: float | None = None  # seconds from the fault to the command's end
    startup: bool = False      # a stop signal that came before any code of dlxtool's ran (Python's own handling)
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        t = self.trial
        return (f"seed={t.seed} {t.command:<13} {t.fault:<12} {self.when:<24} n={t.messages:<4} lost={self.lost} "
                f"dups found={self.dups_found} reported={self.dups_reported} exit={self.exit_code} "
                f"{self.seconds:.1f}s" + (f"  FAILED: {'; '.join(self.failures)}" if self.failures else ""))


# -- set-up --------------------------------------------------------------------------------------------


def _items(t: Trial, marker: Callable[[int], str] = lambda _i: "") -> list[tuple[bytes, str]]:
    rng = random.Random(t.seed)
    return [(f"{t.prefix}-{i:05d}-{marker(i)}".encode() + b"x" * rng.randint(10, 300), f"{t.prefix}-{i}")
            for i in range(t.messages)]


def _drop(i: int) -> str:
    return "keep-" if i % 3 == 0 else "drop-"


def _fill(env: BrokerEnv, queue: str, items: list[tuple[bytes, str]]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(env.url))
    try:
        ch = conn.channel()
        for i, (body, mid) in enumerate(items):
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2, message_id=mid,
                                                                   content_type="text/plain", headers={"i": i}))
    finally:
        conn.close()
    assert env.wait_depth(queue, len(items), timeout=30) == len(items)


def _dead_letters(env: BrokerEnv, t: Trial, items: list[tuple[bytes, str]]) -> tuple[str, list[str]]:
    """Broker-made dead letters (rejected) from two origins in one DLQ."""
    p = t.prefix
    dlx, dlq, origins = f"{p}.dlx", f"{p}.dlq", [f"{p}.o0", f"{p}.o1"]
    with env.channel() as ch:
        ch.exchange_declare(dlx, "fanout", durable=True)
        ch.queue_declare(dlq, durable=True)
        ch.queue_bind(dlq, dlx)
        for origin in origins:
            ch.queue_declare(origin, durable=True, arguments={"x-dead-letter-exchange": dlx})
    for origin, half in zip(origins, (items[0::2], items[1::2]), strict=True):
        _fill(env, origin, half)
        with env.channel() as ch:
            reject_all(ch, origin, len(half))
    assert env.wait_depth(dlq, len(items), timeout=30) == len(items)
    return dlq, origins


def _queue(env: BrokerEnv, name: str, items: list[tuple[bytes, str]] | None = None) -> str:
    with env.channel() as ch:
        ch.queue_declare(name, durable=True)
    if items:
        _fill(env, name, items)
    return name


def set_up(env: BrokerEnv, t: Trial, tmp: Path, probe: Probe) -> Stage:
    c = t.command
    if c.startswith("replay"):
        marker = _drop if c == "replay-select" else (lambda _i: "")
        items = _items(t, marker)
        ids = [mid for _, mid in items]
        dlq, origins = _dead_letters(env, t, items)
        args = ["replay", dlq, "--yes", "--prefetch", str(t.prefetch), "--window", str(t.window)]
        arrive = origins
        selected = set(ids)
        if c == "replay-dx":
            args.append("--default-exchange")
        elif c == "replay-to":
            arrive = [_queue(env, f"{t.prefix}.to")]
            args += ["--to", arrive[0]]
        elif c == "replay-select":
            args += ["--body-contains", "-drop-"]
            selected = {mid for body, mid in items if b"-drop-" in body}
        elif c == "replay-edit":
            plan = tmp / "editor-plan.json"
            first = items[0][0].decode()
            plan.write_text(json.dumps({"seen": str(tmp / "seen.txt"),
                                        "replace": [[first, first.replace("-", "_", 1)]]}))
            args += ["--edit", "--limit", str(len(items))]
        return Stage(ids, dlq, [dlq, *origins, *(arrive if c == "replay-to" else [])], [], args,
                     lambda: probe.depth(*arrive), len(selected), to_take=selected, arrive=arrive,
                     env={"EDITOR": f"{sys.executable} {EDITOR} {tmp / 'editor-plan.json'}"}
                     if c == "replay-edit" else {})
    if c == "load":
        dest, records, failed = f"{t.prefix}.q", tmp / "in.jsonl", tmp / "failed.jsonl"
        items = _items(t)
        with open(records, "wb") as f:
            for i, (body, mid) in enumerate(items):
                f.write(MessageRecord(queue=dest, body=body, properties={"delivery_mode": 2, "message_id": mid},
                                      headers={"i": i}).to_jsonl())
        _queue(env, dest)
        return Stage([mid for _, mid in items], None, [dest], [failed],
                     ["load", str(records), "--yes", "--failed", str(failed), "--window", str(t.window)],
                     lambda: probe.depth(dest), len(items), arrive=[dest])
    src = f"{t.prefix}.q"
    marker = _drop if c in ("purge-move", "purge-select") else (lambda _i: "")
    items = _items(t, marker)
    ids = [mid for _, mid in items]
    selected = {mid for body, mid in items if b"-drop-" in body} if c in ("purge-move", "purge-select") else set(ids)
    _queue(env, src, items)
    out = tmp / "out.jsonl"
    if c == "purge-backup":
        return Stage(ids, src, [src], [out], ["purge", src, "--backup", str(out), "--yes"],
                     lambda: probe.lines(out), len(ids), to_take=selected)
    if c == "dump-remove":
        return Stage(ids, src, [src], [out], ["dump", src, "--remove", "-o", str(out), "--yes"],
                     lambda: probe.lines(out), len(ids), to_take=selected)
    if c == "move":  # `dlxtool move SRC DST`: every message, SRC to DST (not in COMMANDS: seeds keep their commands)
        dest = _queue(env, f"{t.prefix}.dst")
        return Stage(ids, src, [src, dest], [], ["move", src, dest, "--yes", "--prefetch", str(t.prefetch),
                                                 "--window", str(t.window)],
                     lambda: probe.depth(dest), len(ids), to_take=set(ids), arrive=[dest])
    if c == "purge-move":
        dest = _queue(env, f"{t.prefix}.parked")
        return Stage(ids, src, [src, dest], [], ["purge", src, "--body-contains", "-drop-", "--move-to", dest,
                                                 "--yes"],
                     lambda: probe.depth(dest), len(selected), to_take=selected, arrive=[dest])
    if c == "purge-select":
        return Stage(ids, src, [src], [], ["purge", src, "--body-contains", "-drop-", "--yes"],
                     lambda: len(ids) - probe.depth(src), len(selected), removable=selected, to_take=selected)
    assert c == "purge-plain", c
    return Stage(ids, src, [src], [], ["purge", src, "--yes"], lambda: len(ids) - probe.depth(src), len(ids),
                 removable=set(ids), to_take=set(ids))


# -- the run -------------------------------------------------------------------------------------------


def run_trial(env: BrokerEnv, t: Trial, tmp: Path) -> Result:
    started = time.monotonic()
    node = FaultNode(env=env, node="")
    probe = Probe(node)
    result = Result(t)
    stage = set_up(env, t, tmp, probe)
    try:
        with FaultProxy(env.host, env.amqp_port) as proxy:
            config = tmp / "config.toml"
            write_config(node, proxy.port, config)
            text = config.read_text().replace("timeout = 15", f"timeout = {TIMEOUT}")
            config.write_text(text)
            proc = _drive(env, t, stage, proxy, config, tmp, result)
            result.ready_at_exit = _ready_now(env, stage.source)
        # The proxy is closed: whatever it still held (a half-open broker side, a stalled link) is reset.
        _let_go(env, proc.pid)
    finally:
        probe.close()
    _account(env, t, stage, result)
    _judge(t, stage, result)
    _clean_up(env, stage)
    result.seconds = time.monotonic() - started
    return result


def _drive(env: BrokerEnv, t: Trial, stage: Stage, proxy: FaultProxy, config: Path, tmp: Path,
           result: Result) -> subprocess.Popen[bytes]:
    out, err = tmp / "stdout", tmp / "stderr"
    threshold = max(1, int(stage.expected * t.at))
    cli = cli_env(tmp)
    cli.update(stage.env)
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen([sys.executable, "-m", "dlxtool", "--config", str(config), "--broker", "faults",
                                 "--format", "json", *stage.args], env=cli, stdout=fo, stderr=fe,
                                cwd=str(ROOT))
        try:
            _inject_when_due(env, t, stage, proxy, proc, threshold, result)
            fault_at = time.monotonic()
            proc.wait(timeout=90)
            if result.injected:
                result.exit_after = time.monotonic() - fault_at
        except subprocess.TimeoutExpired:
            result.failures.append("the command did not end within 90 s of the fault (killed)")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    result.exit_code = proc.returncode
    result.stderr = err.read_text(errors="replace")
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("  hint:")]
    result.words = lines[-1] if lines else ""
    result.summary = _summary(out.read_text(errors="replace"))
    if result.summary is not None:
        result.dups_reported = int(result.summary.get("possible_duplicates") or 0)
        # what the words say the broker may still hold for the lost connection (and by when it gives them back)
        result.held_when_lost = int(result.summary.get("held_when_lost") or 0) + int(
            result.summary.get("held_on_the_way") or 0)
    return proc


def _inject_when_due(env: BrokerEnv, t: Trial, stage: Stage, proxy: FaultProxy, proc: subprocess.Popen[bytes],
                     threshold: int, result: Result) -> None:
    start = time.monotonic()
    progress = 0
    if t.by_time:
        # A moment in time (start-up, connecting, planning, the one queue.purge of a plain purge included).
        while proc.poll() is None and time.monotonic() < start + t.at * 1.5:
            time.sleep(0.003)
        progress = stage.progress()
    else:
        while proc.poll() is None and time.monotonic() < start + 60:
            progress = stage.progress()
            if progress >= threshold:
                break
            time.sleep(0.003)
    result.injected = proc.poll() is None
    at = f"+{time.monotonic() - start:.2f}s {progress}/{stage.expected}" if t.by_time else \
        f"at {progress}/{stage.expected}"
    result.when = at if result.injected else f"after end ({at})"
    if not result.injected:
        return
    f = t.fault
    if f in SIGNALS:
        proc.send_signal(SIGNALS[f])
    elif f == "broker-close":
        closed = close_connections(env, proc.pid, "chaos: broker-side close", wait=3.0)
        result.when += f" closed {closed}"
        result.injected = closed > 0  # none listed yet (start-up) or any more: the broker closed nothing
    elif f == "delay":
        proxy.inject("delay", delay=t.delay)
    elif f == "stall" and t.stall_for is not None:
        proxy.inject("stall")
        time.sleep(t.stall_for)
        proxy.resume()
        result.when += f" {t.stall_for}s"
    else:
        proxy.inject(f)


def _ready_now(env: BrokerEnv, queue: str | None) -> int | None:
    """The source's ready count right after the command ended: what a rerun would find now."""
    if queue is None:
        return None
    try:
        with env.channel() as ch:
            return int(ch.queue_declare(queue, passive=True).method.message_count)
    except pika.exceptions.AMQPError:
        return None


def _connections(env: BrokerEnv, pid: int) -> list[str]:
    rows = env.mgmt.get(f"vhosts/{quote(env.vhost, safe='')}/connections") or []
    return [row["name"] for row in rows
            if f":{pid} " in str((row.get("client_properties") or {}).get("connection_name") or "")]


def close_connections(env: BrokerEnv, pid: int, reason: str, *, wait: float = 0.0) -> int:
    """Close (through the management API, as an operator would) every connection dlxtool process `pid` has; with
    `wait`, look for them that long (a connection opened a moment ago may not be listed yet)."""
    deadline = time.monotonic() + wait
    while True:
        names = _connections(env, pid)
        if names or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for name in names:
        with contextlib.suppress(Exception):
            _api_delete(env, f"connections/{quote(name, safe='')}", reason)
    return len(names)


def _api_delete(env: BrokerEnv, path: str, reason: str) -> None:
    import base64
    import urllib.request

    request = urllib.request.Request(env.management_url.rstrip("/") + "/api/" + path, method="DELETE", headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode(), "X-Reason": reason})
    with urllib.request.urlopen(request, timeout=10):
        pass


def _let_go(env: BrokerEnv, pid: int) -> None:
    """Wait until the broker has let go of the command's connections (gone from the API's list); close any left
    after 10 s. Only then is what they held back in its queue."""
    deadline = time.monotonic() + 10
    while _connections(env, pid):
        if time.monotonic() > deadline:
            close_connections(env, pid, "chaos: the trial is over")
            deadline = time.monotonic() + 10
            while _connections(env, pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            return
        time.sleep(0.1)


# -- the accounting ------------------------------------------------------------------------------------


def _account(env: BrokerEnv, t: Trial, stage: Stage, result: Result) -> None:
    node = FaultNode(env=env, node="")
    by_place: dict[str, Counter[str]] = {}
    for path in stage.files:
        by_place[str(path)] = Counter(mid for (_body, mid), n in read_file(path).items() for _ in range(n))
    for queue in stage.queues:
        got = drain(node, [queue], at_least=0)
        by_place[queue] = Counter(mid for (_body, mid), n in got.items() for _ in range(n))
    found: Counter[str] = Counter()
    for counts in by_place.values():
        found.update(counts)
    missing = {mid for mid in stage.ids if not found[mid]}
    result.removed = len(missing & stage.removable)
    result.lost = len(missing - stage.removable)
    if t.command == "load":
        # The input file stays whatever happens: a record never published is not lost, it is not sent — said in
        # the summary (not_sent); after a kill -9 (no summary) nothing is said, and a rerun of the file sends it.
        said = int((result.summary or {}).get("not_sent") or 0) if result.summary is not None else result.lost
        result.not_sent = min(result.lost, said)
        result.lost -= result.not_sent
    result.dups_found = sum(n - 1 for mid, n in found.items() if n > 1)
    foreign = sum(n for mid, n in found.items() if mid not in set(stage.ids))
    if foreign:
        result.failures.append(f"{foreign} foreign message(s)")
    if stage.source is not None:
        src = by_place.get(stage.source, Counter())
        result.left_in_source = sum(1 for mid in stage.to_take if src[mid])
        # unfinished: in the source and nowhere else (a message also copied elsewhere is a duplicate, said as such)
        result.unfinished = sum(1 for mid in stage.ids if src[mid] and found[mid] == src[mid])
    arrived = set()
    for place in (*stage.arrive, *(str(p) for p in stage.files if p.name == "out.jsonl")):
        arrived |= set(by_place.get(place, Counter()))
    result.arrived = len(arrived)


def _claimed(t: Trial, summary: dict[str, Any] | None) -> int | None:
    """What the summary says reached its destination (moved, removed into the file, published)."""
    if not summary:
        return None
    c = t.command
    if c == "load":
        return int(summary.get("published_total") or 0)
    if c in ("purge-backup", "dump-remove"):
        return int(summary.get("removed") or 0)
    if c in ("purge-plain", "purge-select"):
        return None
    moved = summary.get("moved_total", summary.get("moved"))
    if isinstance(moved, dict):
        return sum(int(v) for v in moved.values())
    return int(moved) if moved is not None else None


def _judge(t: Trial, stage: Stage, r: Result) -> None:
    f = r.failures
    if r.lost:
        f.append(f"{r.lost} lost")
    if t.fault == "kill9" and r.injected:
        if r.dups_found > max(r.dups_reported, kill9_bound(t)):
            f.append(f"kill -9 left {r.dups_found} twice, more than 2 x --window ({kill9_bound(t)})")
    elif r.dups_found > r.dups_reported:
        f.append(f"{r.dups_found} duplicates found, {r.dups_reported} reported")
    allowed = EXITS[t.fault] if r.injected else {0}
    changed = r.arrived or r.removed or r.dups_found or r.left_in_source < len(stage.to_take)
    if r.injected and not changed and _in_interpreter_start(t, r):
        r.startup = True  # before any code of dlxtool's ran: Python's own handling (docs/stop-signals.md)
        allowed = allowed | {r.exit_code}
    if r.exit_code == 6 and not changed and "management API" in r.words and "not reachable" in r.words:
        # A refusal changes nothing: the API did not answer within --timeout (a loaded machine), so the limits a
        # replay must read were unknown. Not the fault's doing, and true.
        allowed = allowed | {6}
    if r.exit_code not in allowed:
        f.append(f"exit {r.exit_code} (allowed {sorted(allowed)}): {r.words}")
    if r.exit_code == 0 and r.left_in_source:
        f.append(f"exit 0 with {r.left_in_source} still in {stage.source} (the source did not reach its end)")
    if r.exit_code == 0 and t.command == "load" and r.arrived < len(stage.ids):
        f.append(f"exit 0 with {len(stage.ids) - r.arrived} not loaded")
    claimed = _claimed(t, r.summary)
    if claimed is not None and claimed > r.arrived:
        f.append(f"the summary claims {claimed} moved, {r.arrived} arrived")
    if t.command == "purge-plain" and r.summary is not None and r.summary.get("purged") is not None \
            and int(r.summary["purged"]) != r.removed:
        f.append(f"purged {r.summary['purged']} said, {r.removed} gone")
    if r.exit_after is not None and r.exit_after > EXIT_WITHIN:
        f.append(f"ended {r.exit_after:.0f} s after the fault (--timeout {TIMEOUT}: more than {EXIT_WITHIN} s)")
    if ("Traceback" in r.stderr and not r.startup) or "internal error" in r.stderr:
        f.append("traceback / internal error: " + r.words)
    if r.exit_code not in (0, -9) and r.injected and r.summary is None and r.exit_code != 3 and changed:
        f.append(f"no JSON summary (exit {r.exit_code})")
    if r.exit_code == 3 and "still in" in r.stderr and r.ready_at_exit is not None and stage.source is not None:
        # "unfinished messages are still in Q": true then only if they were ready, or said held for the connection
        unseen = r.unfinished - r.ready_at_exit - r.held_when_lost
        if unseen > 0:
            f.append(f"said 'still in {stage.source}' with {r.ready_at_exit} ready and "
                     f"{r.held_when_lost} said held; "
                     f"{r.unfinished} unfinished were there once the broker let go")


def _in_interpreter_start(t: Trial, r: Result) -> bool:
    """A stop signal that came while the Python interpreter itself was starting, before dlxtool.entry: SIGTERM's
    default action (-15, nothing said); SIGINT: Python's own KeyboardInterrupt — killed by it (-2), or exit 1 with
    a traceback from `site` (reading the installed packages' .pth files). Seen in CI under load 0.34 s in."""
    if t.fault == "sigterm":
        return r.exit_code == -signal.SIGTERM and not r.stderr.strip()
    if t.fault == "sigint":
        return r.exit_code == -signal.SIGINT or (r.exit_code == 1 and "<frozen site>" in r.stderr
                                                   and r.stderr.rstrip().endswith("KeyboardInterrupt"))
    return False


def _clean_up(env: BrokerEnv, stage: Stage) -> None:
    with env.channel() as ch:
        for queue in stage.queues:
            with contextlib.suppress(pika.exceptions.ChannelClosedByBroker):
                ch.queue_delete(queue)
    with contextlib.suppress(Exception), env.channel() as ch:
        ch.exchange_delete(stage.queues[0].rsplit(".", 1)[0] + ".dlx")


# -- the table -----------------------------------------------------------------------------------------


def table(results: list[Result]) -> list[str]:
    """Per command: trials, faults hit while running, lost, duplicates found / reported, the longest time from a
    fault to the command's end (max s), exit codes, failures with their seeds."""
    lines = [f"{'command':<14}{'trials':>7}{'hit':>6}{'lost':>6}{'dups found':>12}{'dups rep.':>11}{'max s':>7}  "
             f"{'exit codes':<34}failed (seeds)"]
    for command in [*COMMANDS, "all"]:
        rs = [r for r in results if command in ("all", r.trial.command)]
        if not rs:
            continue
        exits = Counter(r.exit_code for r in rs)
        failed = [r.trial.seed for r in rs if r.failures]
        lines.append(f"{command:<14}{len(rs):>7}{sum(r.injected for r in rs):>6}{sum(r.lost for r in rs):>6}"
                     f"{sum(r.dups_found for r in rs):>12}{sum(r.dups_reported for r in rs):>11}"
                     f"{max((r.exit_after or 0 for r in rs), default=0):>7.1f}  "
                     f"{' '.join(f'{k}:{n}' for k, n in sorted(exits.items(), key=lambda kv: str(kv[0]))):<34}"
                     f"{len(failed)}" + (f" ({' '.join(map(str, failed[:12]))}{' …' if len(failed) > 12 else ''})"
                                         if failed else ""))
    by_fault = Counter(r.trial.fault for r in rs)
    lines.append("faults: " + ", ".join(f"{k} {n}" for k, n in sorted(by_fault.items())))
    return lines


# -- the CI tests --------------------------------------------------------------------------------------

CI_BASE = 50006  # a multiple of len(COMMANDS) (11): seed CI_BASE + 11 j + k is command k's trial j
CI_TRIALS = 9    # per command in CI (DLXTOOL_CHAOS_TRIALS / --chaos-trials): the 9 faults cycle with j, one trial each
CI_AT_ONCE = 3   # trials of one test run at once (threads): they mostly wait on the broker and on timeouts
RESULTS: list[Result] = []  # this session's trials, for the table at the end (tests/conftest.py)


def ci_seeds(command: str, trials: int, base: int = CI_BASE) -> list[int]:
    k = COMMANDS.index(command)
    return [base + len(COMMANDS) * j + k for j in range(trials)]


def run_trials(env: BrokerEnv, seeds: list[int], tmp: Path, at_once: int = CI_AT_ONCE) -> list[Result]:
    """Trials of `seeds` (their command and fault follow from each), `at_once` at a time, each with a management
    client of its own (one client's kept-alive connection is not shared between threads)."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    from dlxtool.broker.management import ManagementClient

    def one(seed: int) -> Result:
        own = dataclasses.replace(env, mgmt=ManagementClient(env.management_url, "guest", "guest", timeout=30))
        trial = Trial.from_seed(seed)
        where = tmp / str(seed)
        where.mkdir()
        try:
            return run_trial(own, trial, where)
        except Exception as exc:  # noqa: BLE001 - the harness's trouble is a failed trial, with its seed
            r = Result(trial, failures=[f"harness error: {exc!r}"])
            return r

    with ThreadPoolExecutor(max_workers=at_once) as pool:
        results = list(pool.map(one, seeds))
    RESULTS.extend(results)
    return results
