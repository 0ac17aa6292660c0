"""Real dead letters from real framework libraries (Dramatiq and Celery from PyPI, rascal on amqplib from npm).

These need the libraries, which are not test dependencies: installing them is a network install that
must not happen on every CI run. `scripts/framework-libs DIR` installs both into DIR (a venv and a
node_modules, ~20 s) and prints the two variables to export; without them these tests are skipped:

    DLXTOOL_TEST_DRAMATIQ_PYTHON   a python with dramatiq[rabbitmq] (2.x)
    DLXTOOL_TEST_RASCAL_DIR        a directory with node_modules/rascal and node_modules/amqplib
    DLXTOOL_TEST_CELERY_PYTHON     a python with celery (5.x)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pika
import pytest

pytestmark = [pytest.mark.broker, pytest.mark.framework]
HERE = Path(__file__).parent.parent / "support" / "frameworks"


def _needs(var: str) -> str:
    value = os.environ.get(var)
    if not value or not Path(value).exists():
        pytest.skip(f"{var} not set: scripts/framework-libs installs the library into a temp dir")
    return value


def wait_for(broker, queue: str, n: int, timeout: float = 60) -> int:
    """The queue's depth once it holds n messages (or at the timeout); the framework declares it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            depth = broker.queue_depth(queue)
        except pika.exceptions.ChannelClosedByBroker:  # not declared yet
            depth = -1
        if depth >= n or time.monotonic() > deadline:
            return depth
        time.sleep(0.2)


@contextmanager
def running(args: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_dramatiq_dead_letters_show_the_traceback_as_error(run, broker, qname) -> None:
    python = _needs("DLXTOOL_TEST_DRAMATIQ_PYTHON")
    queue, n = qname.replace(".", "_"), 4
    with running([python, str(HERE / "dramatiq_fail.py"), broker.url, queue, str(n)]) as proc:
        depth = wait_for(broker, f"{queue}.XQ", n)
    assert depth == n, proc.stderr.read() if proc.stderr else ""
    result = run("history", f"{queue}.XQ", "--url", broker.url, "--summary", "--ungrouped", "-f", "json")
    assert result.exit_code == 0, result.stderr
    groups = sorted((g["origin"], g["convention"], g["reason"], g["error"], g["messages"])
                    for g in orjson.loads(result.stdout))
    assert groups == [(queue, "x-death", "rejected", "ValueError: card declined for order 0", 2),
                      (queue, "x-death", "rejected", "ValueError: card declined for order 1", 2)]
    # grouped (the default, issue 37): one failure — the same exception at the same frame — with one example
    grouped = orjson.loads(run("history", f"{queue}.XQ", "--url", broker.url, "--summary", "-f", "json").stdout)
    assert [(g["origin"], g["messages"]) for g in grouped] == [(queue, 4)]
    assert grouped[0]["error"].startswith("ValueError: card declined for order ")
    [item, *_] = orjson.loads(run("history", f"{queue}.XQ", "--url", broker.url, "-f", "json").stdout)
    assert item["error_from"] == "dramatiq" and item["conventions"] == ["x-death", "dramatiq"]
    # Dramatiq's topology (issue 30): the queue and its delay queue dead-letter to .XQ, which is their DLQ
    assert roles(run, broker, queue) == {queue: (None, None), f"{queue}.DQ": (None, None),
                                         f"{queue}.XQ": ("dlq", f"target of {queue}, {queue}.DQ")}


def test_rascal_forwarded_dead_letters_have_origin_error_and_attempts(run, broker, qname) -> None:
    modules = _needs("DLXTOOL_TEST_RASCAL_DIR")
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    n = 3
    node_path = str(Path(modules) / "node_modules")
    with running(["node", str(HERE / "rascal_fail.js"), broker.url, qname, str(n)], {"NODE_PATH": node_path}) as p:
        depth = wait_for(broker, f"{qname}.dlq", n)
    assert depth == n, p.stderr.read() if p.stderr else ""
    result = run("history", f"{qname}.dlq", "--url", broker.url, "-f", "json")
    assert result.exit_code == 0, result.stderr
    items = orjson.loads(result.stdout)
    assert {(i["origin"], i["origin_from"], i["attempts"]) for i in items} == {(f"{qname}.work", "rascal", 3)}
    assert sorted(i["error"] for i in items) == [f"E_BAD: bad payload order {k}" for k in range(n)]
    summary = orjson.loads(run("history", f"{qname}.dlq", "--url", broker.url, "--summary", "-f", "json").stdout)
    assert {(g["origin"], g["convention"]) for g in summary} == {(f"{qname}.work", "rascal")}
    # rascal forwards by publishing (issue 30): no queue dead-letters into its DLQ, which the messages say
    assert roles(run, broker, qname) == {f"{qname}.work": (None, None), f"{qname}.dlq": (None, None)}
    # rascal's own headers name the origin (a convention history reads); the API knows the queues' policies now
    peeked = run("history", f"{qname}.dlq", "--url", broker.url, "-f", "json")
    assert (f"{n} of the {n} dead letter(s) read here came from {qname}.work, whose dead-letter route does not "
            f"lead to {qname}.dlq") in peeked.stderr


def test_celery_rejected_tasks_show_their_attempts(run, broker, qname) -> None:
    python = _needs("DLXTOOL_TEST_CELERY_PYTHON")
    queue, n = qname, 3
    env = {"CELERY_TEST_URL": broker.url.replace("amqp://", "pyamqp://"), "CELERY_TEST_QUEUE": queue,
           "CELERY_TEST_N": str(n), "PYTHONPATH": str(HERE)}
    celery = str(Path(python).parent / "celery")
    with broker.channel() as ch:
        ch.queue_declare(f"{queue}.dlq", durable=True)  # Celery declares its queue (our DLX arguments), not the DLQ
    with running([celery, "-A", "celery_fail", "worker", "--pool=solo", "-Q", queue, "--without-gossip",
                  "--without-mingle", "--without-heartbeat", "-l", "warning"], env) as worker:
        subprocess.run([python, str(HERE / "celery_fail.py")], env={**os.environ, **env}, check=True, timeout=60)
        depth = wait_for(broker, f"{queue}.dlq", n)
    assert depth == n, worker.stderr.read() if worker.stderr else ""
    items = orjson.loads(run("history", f"{queue}.dlq", "--url", broker.url, "-f", "json").stdout)
    assert {(i["origin"], i["origin_from"], i["attempts"], i["attempts_from"]) for i in items} == {
        (queue, "x-death", 3, "celery: Celery retries + 1")}
    # The queue as Celery declared it (issue 30): its DLQ by its dead-letter routing key on the default exchange
    assert roles(run, broker, queue)[f"{queue}.dlq"] == ("dlq", f"target of {queue}")


def _sampled(q: dict) -> bool:
    """The API's row has the queue's counts and its policies (both come with its first statistics sample)."""
    return "messages_unacknowledged" in q and q.get("effective_policy_definition") is not None


def roles(run, broker, prefix: str) -> dict[str, tuple[str | None, str | None]]:
    """queue -> (role, role_reason) from `queues --format json`, once the API has sampled the queues."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(_sampled(q) for q in broker.mgmt.queues(
            broker.vhost) if q["name"].startswith(prefix)):
        time.sleep(0.5)
    result = run("queues", "--url", broker.url, "--match", f"{prefix}*", "--format", "json")
    assert result.exit_code == 0, result.stderr
    return {r["queue"]: (r["role"], r["role_reason"]) for r in orjson.loads(result.stdout)}


def attempts(log: Path) -> dict[str, int]:
    """Attempts per message from the worker's log (and a fresh log for the next round)."""
    lines = log.read_text().splitlines() if log.exists() else []
    log.write_text("")
    counts: dict[str, int] = {}
    for line in lines:
        key = line.split()[1]
        counts[key] = counts.get(key, 0) + 1
    return counts


def test_dramatiq_replayed_messages_get_their_retries_back_only_with_reset_body_retries(
        run, broker, qname, tmp_path) -> None:
    python = _needs("DLXTOOL_TEST_DRAMATIQ_PYTHON")
    queue, n, log = qname.replace(".", "_"), 2, tmp_path / "attempts.log"
    xq = f"{queue}.XQ"
    everyone = {str(i): 2 for i in range(n)}  # max_retries=1: a first attempt and one retry
    with running([python, str(HERE / "dramatiq_fail.py"), broker.url, queue, str(n)],
                 {"FRAMEWORK_TEST_LOG": str(log)}) as proc:
        assert wait_for(broker, xq, n) == n, proc.stderr.read() if proc.stderr else ""
        assert attempts(log) == everyone
        # Without the option the body is not touched: options.retries says the retries are used up.
        result = run("replay", xq, "--url", broker.url, "--yes")
        assert result.exit_code == 0, result.stderr
        assert wait_for(broker, xq, n) == n
        assert attempts(log) == {str(i): 1 for i in range(n)}
        result = run("replay", xq, "--url", broker.url, "--yes", "--reset-body-retries")
        assert result.exit_code == 0, result.stderr
        assert wait_for(broker, xq, n) == n
        assert attempts(log) == everyone
    with broker.channel() as ch:
        method, _, body = ch.basic_get(xq, auto_ack=False)
        assert method is not None
        ch.basic_nack(method.delivery_tag, requeue=True)
    # The rewritten body is Dramatiq's again (its keys in order), and Dramatiq counted from 0: it dead-letters
    # the body it received, which carries the retries before the last failure (max_retries=1).
    message = orjson.loads(body)
    assert list(message)[:2] == ["queue_name", "actor_name"] and message["options"]["retries"] == 1


def test_celery_replayed_tasks_get_their_full_attempts_back(run, broker, qname, tmp_path) -> None:
    python = _needs("DLXTOOL_TEST_CELERY_PYTHON")
    queue, n, log = qname, 3, tmp_path / "attempts.log"
    env = {"CELERY_TEST_URL": broker.url.replace("amqp://", "pyamqp://"), "CELERY_TEST_QUEUE": queue,
           "CELERY_TEST_N": str(n), "PYTHONPATH": str(HERE), "FRAMEWORK_TEST_LOG": str(log)}
    celery = str(Path(python).parent / "celery")
    worker_args = [celery, "-A", "celery_fail", "worker", "--pool=solo", "-Q", queue, "--without-gossip",
                   "--without-mingle", "--without-heartbeat", "-l", "warning"]
    with broker.channel() as ch:
        ch.queue_declare(f"{queue}.dlq", durable=True)
    with running(worker_args, env) as worker:
        subprocess.run([python, str(HERE / "celery_fail.py")], env={**os.environ, **env}, check=True, timeout=60)
        assert wait_for(broker, f"{queue}.dlq", n) == n, worker.stderr.read() if worker.stderr else ""
        first = log.read_text().splitlines()
        assert sorted(first) == sorted(f"attempt {i} retries {r}" for i in range(n) for r in range(3))
        log.write_text("")
        # A premature replay (the task still fails): each task runs its three attempts again.
        result = run("replay", f"{queue}.dlq", "--url", broker.url, "--yes")
        assert result.exit_code == 0, result.stderr
        assert wait_for(broker, f"{queue}.dlq", n) == n
        assert sorted(log.read_text().splitlines()) == sorted(first)
        log.write_text("")
    # After the fix: every task is processed.
    with running(worker_args, {**env, "CELERY_TEST_FIXED": "1"}):
        result = run("replay", f"{queue}.dlq", "--url", broker.url, "--yes")
        assert result.exit_code == 0, result.stderr
        deadline = time.monotonic() + 60
        while len(log.read_text().splitlines()) < n and time.monotonic() < deadline:
            time.sleep(0.2)
    assert sorted(log.read_text().splitlines()) == sorted(f"attempt {i} retries 0" for i in range(n))
    assert broker.queue_depth(f"{queue}.dlq") == 0


def _rascal(modules: str, broker, qname: str, n: int, log: Path, *mode: str):
    return running(["node", str(HERE / "rascal_fail.js"), broker.url, qname, str(n), *mode],
                   {"NODE_PATH": str(Path(modules) / "node_modules"), "FRAMEWORK_TEST_LOG": str(log)})


def _lines(log: Path, n: int, timeout: float = 60) -> list[str]:
    """The log's lines once it has at least n (or at the timeout), and a fresh log for the next round."""
    deadline = time.monotonic() + timeout
    while (len(log.read_text().splitlines()) if log.exists() else 0) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    lines = log.read_text().splitlines() if log.exists() else []
    log.write_text("")
    return sorted(lines)


def test_rascal_history_replay_then_a_fixed_subscriber_processes_every_message(run, broker, qname, tmp_path) -> None:
    """rascal's own headers name the origin (rascal.originalQueue) and count its recoveries: replay sends each
    message home with those counts reset (a still-failing subscriber retries it all over again, where stale
    counts would forward it at once) and keeps what rascal restores on receipt (the original routing)."""
    modules = _needs("DLXTOOL_TEST_RASCAL_DIR")
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    n, log, dlq = 3, tmp_path / "attempts.log", f"{qname}.dlq"
    every_attempt = sorted(f"attempt order {i}" for i in range(n) for _ in range(3))  # first + 2 republished
    with _rascal(modules, broker, qname, n, log) as p:
        assert wait_for(broker, dlq, n) == n, p.stderr.read() if p.stderr else ""
        assert _lines(log, 3 * n) == every_attempt
        items = orjson.loads(run("history", dlq, "--url", broker.url, "-f", "json").stdout)
        assert {(i["origin"], i["origin_from"]) for i in items} == {(f"{qname}.work", "rascal")}
        result = run("replay", dlq, "--url", broker.url, "--dry-run", "-f", "json")
        [origin] = orjson.loads(result.stdout)["plan"]["origins"]
        assert (origin["queue"], origin["messages"], origin["route_text"]) == (
            f"{qname}.work", n, "original routing key, from rascal headers")
        # A premature replay (the handler still fails): every message gets its three attempts again.
        result = run("replay", dlq, "--url", broker.url, "--yes")
        assert result.exit_code == 0, result.stderr
        assert _lines(log, 3 * n) == every_attempt
        assert wait_for(broker, dlq, n) == n
    # After the fix: every message processed, as rascal restores its routing (exchange and key it was published to).
    with _rascal(modules, broker, qname, 0, log, "fixed") as p:
        result = run("replay", dlq, "--url", broker.url, "--yes")
        assert result.exit_code == 0, result.stderr
        processed = _lines(log, n)
    assert processed == [f"processed order {i} {qname}.ex order.created" for i in range(n)], \
        p.stderr.read() if p.stderr else ""
    assert broker.queue_depth(dlq) == 0 and broker.queue_depth(f"{qname}.work") == 0


def test_dramatiq_history_replay_then_the_fixed_worker_processes_every_message(run, broker, qname, tmp_path) -> None:
    python = _needs("DLXTOOL_TEST_DRAMATIQ_PYTHON")
    queue, n, log = qname.replace(".", "_"), 3, tmp_path / "attempts.log"
    xq = f"{queue}.XQ"
    with running([python, str(HERE / "dramatiq_fail.py"), broker.url, queue, str(n)],
                 {"FRAMEWORK_TEST_LOG": str(log)}) as proc:
        assert wait_for(broker, xq, n) == n, proc.stderr.read() if proc.stderr else ""
    items = orjson.loads(run("history", xq, "--url", broker.url, "-f", "json").stdout)
    assert {(i["origin"], i["origin_from"], i["error_from"]) for i in items} == {(queue, "x-death", "dramatiq")}
    [origin] = orjson.loads(run("replay", xq, "--url", broker.url, "--dry-run", "-f", "json").stdout)["plan"]["origins"]
    assert (origin["queue"], origin["messages"], origin["convention"]) == (queue, n, "x-death")
    log.write_text("")
    with running([python, str(HERE / "dramatiq_fail.py"), broker.url, queue, "0", "fixed"],
                 {"FRAMEWORK_TEST_LOG": str(log)}) as worker:
        result = run("replay", xq, "--url", broker.url, "--yes")
        assert result.exit_code == 0, result.stderr
        processed = _lines(log, n)
    assert processed == [f"attempt {i}" for i in range(n)], worker.stderr.read() if worker.stderr else ""
    assert broker.queue_depth(xq) == 0 and broker.queue_depth(queue) == 0
