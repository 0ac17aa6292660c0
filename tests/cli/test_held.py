"""Messages held unacked elsewhere, decided from live facts (issue 35; dlxtool.ops.held): the management API's
unacked count of a consumer that just went is no refusal, and a connection an earlier dlxtool run left behind
(its process gone, the broker still holding its deliveries) is closed so that they come back now."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from urllib.parse import quote

import pika
import pytest

from dlxtool.cli.output import ExitStatus


def _dead_letters(broker, qname: str, n: int) -> tuple[str, str]:
    """`n` dead letters in `qname`.dlq, rejected from `qname` (its origin)."""
    dlq = f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(qname, durable=True,
                         arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        for i in range(n):
            ch.basic_publish("", qname, b"%d" % i, pika.BasicProperties(message_id=f"m-{i}", delivery_mode=2),
                             mandatory=True)
        for _ in range(n):
            method = None
            while method is None:
                method, _p, _b = ch.basic_get(qname, auto_ack=False)
            ch.basic_reject(method.delivery_tag, requeue=False)
    assert broker.wait_depth(dlq, n) == n
    return qname, dlq


def _api_unacked(broker, queue: str) -> int:
    row = broker.mgmt.get(f"queues/{quote(broker.vhost, safe='')}/{quote(queue, safe='')}")
    return int(row.get("messages_unacknowledged") or 0)


def _api_consumer_named(broker, queue: str) -> bool:
    row = broker.mgmt.get(f"queues/{quote(broker.vhost, safe='')}/{quote(queue, safe='')}")
    return any(isinstance(c.get("channel_details"), dict) and c["channel_details"].get("connection_name")
               for c in row.get("consumer_details") or [])


def _wait(predicate, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout:g}s")
        time.sleep(0.2)


# not `metrics`: its premise is the API's sample, which a node without metrics collection has not
def test_a_consumer_that_just_went_is_no_holder(run, broker, qname) -> None:
    """A consumer takes the whole DLQ, the API samples it holding them, it acks them all and goes: the queue is empty
    and the API's last sample still counts them unacked (3.10: for up to a statistics interval). replay says there
    is nothing to replay (exit 0); it refused before, "held unacked by a consumer the API does not name" (exit 7)."""
    _origin, dlq = _dead_letters(broker, qname, 30)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=100)
    got: list[int] = []
    ch.basic_consume(dlq, lambda _c, method, _p, _b: got.append(method.delivery_tag))
    _wait(lambda: (conn.process_data_events(0.1), len(got) == 30)[1], "all 30 delivered")
    _wait(lambda: _api_unacked(broker, dlq) == 30, "sampled as unacked")
    ch.basic_ack(got[-1], multiple=True)
    conn.close()
    result = run("--url", broker.url, "replay", dlq, "--yes")
    assert result.exit_code == 0, result.stderr
    assert "held unacked" not in result.stderr


def test_a_dead_dlxtool_run_s_connection_is_closed_and_what_it_held_replayed(run, broker, qname) -> None:
    """An earlier dlxtool run on this host left a connection open on the broker (killed, or cut off half-open: the
    broker keeps it until its heartbeat gives up) holding every dead letter unacked. Its process is gone: the next
    replay closes that connection through the API, says so, and replays what it held — instead of "nothing to
    replay"."""
    origin, dlq = _dead_letters(broker, qname, 20)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    dead_pid = int(gone.stdout)
    with pytest.raises(ProcessLookupError):
        os.kill(dead_pid, 0)
    host = os.uname().nodename.split(".")[0]
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": f"dlxtool tester replay {host}:{dead_pid} {os.urandom(8).hex()}"}
    left = pika.BlockingConnection(params)  # the broker's view of the dead run: open, holding what it took
    ch = left.channel()
    ch.basic_qos(prefetch_count=100)
    got: list[int] = []
    ch.basic_consume(dlq, lambda _c, method, _p, _b: got.append(method.delivery_tag))
    _wait(lambda: (left.process_data_events(0.1), len(got) == 20)[1], "all 20 taken by the left-over run")
    assert broker.queue_depth(dlq) == 0
    _wait(lambda: any(c.get("user_provided_name", "").startswith("dlxtool tester")
                      for c in broker.mgmt.get(f"vhosts/{quote(broker.vhost, safe='')}/connections") or []),
          "the left-over connection listed by the API")
    try:
        result = run("--url", broker.url, "replay", dlq, "--yes")
        assert result.exit_code == 0, result.stderr
        assert "closed 1 connection(s) of earlier dlxtool runs on this host whose process is gone" in result.stderr
        assert broker.queue_depth(dlq) == 0
        assert sorted(int(b) for _m, _p, b in broker.drain(origin)) == list(range(20))
        assert not left.is_open or _closed_by_broker(left)
    finally:
        if left.is_open:
            left.close()


def _closed_by_broker(conn: pika.BlockingConnection) -> bool:
    try:
        conn.process_data_events(0.5)
    except pika.exceptions.AMQPConnectionError:
        return True
    return not conn.is_open


def test_a_connection_of_a_run_still_going_is_named_not_closed(run, broker, qname) -> None:
    """The same left-over connection, but its process (this test) still runs: never closed; the DLQ's messages are
    held by it, and replay says so (exit 7) naming it."""
    _origin, dlq = _dead_letters(broker, qname, 5)
    host = os.uname().nodename.split(".")[0]
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": f"dlxtool tester replay {host}:{os.getpid()} "
                                                   f"{os.urandom(8).hex()}"}
    alive = pika.BlockingConnection(params)
    try:
        ch = alive.channel()
        ch.basic_qos(prefetch_count=100)
        got: list[int] = []
        ch.basic_consume(dlq, lambda _c, method, _p, _b: got.append(method.delivery_tag))
        _wait(lambda: (alive.process_data_events(0.1), len(got) == 5)[1], "all 5 taken")
        _wait(lambda: _api_unacked(broker, dlq) == 5 and _api_consumer_named(broker, dlq),
              "sampled as unacked by a consumer the API names")
        result = run("--url", broker.url, "replay", dlq, "--yes")
        assert result.exit_code == ExitStatus.UNAVAILABLE, result.stderr
        assert "held unacked by" in result.stderr and "dlxtool tester replay" in result.stderr
        assert "closed" not in result.stderr
        alive.process_data_events(0.2)
        assert alive.is_open
    finally:
        alive.close()
