"""What dlxtool does where RabbitMQ versions differ, asserted on the broker under test.

scripts/test runs the suite on 3.10.8 (Debian bookworm), 4.0.5 (Debian trixie) and 4.3.6 (Debian sid). The facts
themselves are dlxtool/broker/versions.py's table, each measured on every broker by tests/broker/test_versions.py;
the tests here take what the broker does from that table (by the version it reports) and check what dlxtool does
about it. README "RabbitMQ versions" lists the same facts.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import pika
import pytest

from dlxtool.broker import versions
from dlxtool.cli.output import ExitStatus

pytestmark = pytest.mark.broker


def _quorum(broker, queue: str, **args: Any) -> None:
    with broker.channel() as ch:
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum", **args})
    broker.publish(queue, [b"only"], properties=pika.BasicProperties(delivery_mode=2))


def _take_and_give_back(conn: pika.BlockingConnection, queue: str, how: str) -> Any:
    """Take the head of `queue` unacked and give it back by `how`; its x-delivery-count ("gone": no message)."""
    ch = conn.channel()
    if how == "cancel":
        got: list[Any] = []
        ch.basic_qos(prefetch_count=1)
        tag = ch.basic_consume(queue, lambda _c, _m, props, _b: got.append(props))
        deadline = time.monotonic() + 2
        while not got and time.monotonic() < deadline:
            conn.process_data_events(0.05)
        ch.basic_cancel(tag)  # the unacked delivery goes back when the channel closes
        ch.close()
        return (got[0].headers or {}).get("x-delivery-count") if got else "gone"
    # a quorum queue applies a give-back through its log: the message may be a moment away from the head again
    deadline = time.monotonic() + 2
    method, props, _body = ch.basic_get(queue, auto_ack=False)
    while method is None and time.monotonic() < deadline:
        time.sleep(0.05)
        method, props, _body = ch.basic_get(queue, auto_ack=False)
    if method is None:
        ch.close()
        return "gone"
    if how == "nack":
        ch.basic_nack(method.delivery_tag, requeue=True)
    elif how == "reject":
        ch.basic_reject(method.delivery_tag, requeue=True)
    ch.close()  # "close": what a classic peek does to give back
    return (props.headers or {}).get("x-delivery-count")


def _peeks_spend_attempts(broker) -> bool:
    """Whether a peek's give-back (basic.nack, 32 at a time) uses a delivery attempt on this broker (3.x, 4.0-4.2)."""
    return versions.quorum_give_back_counts(broker.version, "nack")


def test_quorum_default_delivery_limit(run, broker, qname) -> None:
    """A quorum queue declared without a limit: 3.x has none (the message survives any number of
    returns); 4.x has 20 (the 20th return drops it here, as the queue has no dead-letter exchange).
    dlxtool reads the limit as 20 on 4.x and refuses a peek without --spend-attempts on 4.0; on 3.x
    it refuses without --allow-reorder (returns go to the back); on 4.3 a peek spends no attempt and
    needs no flag."""
    _quorum(broker, qname)
    peeked = run("peek", qname, "--url", broker.url, "-f", "jsonl")
    default = versions.default_delivery_limit(broker.version)
    if not _peeks_spend_attempts(broker):
        assert peeked.exit_code == 0, peeked.output
        assert "delivery limit 20" in peeked.stderr and "use no delivery attempt" in peeked.stderr
    elif default is not None:
        assert peeked.exit_code == ExitStatus.REFUSED, peeked.output
        assert f"delivery limit {default}" in peeked.stderr and "--spend-attempts" in peeked.stderr
    else:
        assert peeked.exit_code == ExitStatus.REFUSED, peeked.output
        assert "without a delivery limit" in peeked.stderr and "--allow-reorder" in peeked.stderr

    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        deliveries = 0
        while deliveries < 25 and _take_and_give_back(conn, qname, "close") != "gone":
            deliveries += 1
    finally:
        conn.close()
    assert deliveries == (25 if default is None else default + 1)


def test_quorum_peek_with_spend_attempts_uses_one_attempt_on_4x_default_limit(run, broker, qname) -> None:
    """The --spend-attempts path on a queue whose limit is 4.x's default: one attempt used, said so (3.x, 4.0);
    none on 4.3, said so too."""
    if broker.major < 4:
        _quorum(broker, qname, **{"x-delivery-limit": 20})  # the same situation, set by hand on 3.x
    else:
        _quorum(broker, qname)
    result = run("peek", qname, "--url", broker.url, "-f", "jsonl", "--spend-attempts")
    assert result.exit_code == 0, result.stderr
    [(_m, props, _b)] = broker.drain(qname)
    if _peeks_spend_attempts(broker):
        assert "used one delivery attempt of each of the 1 messages given back" in result.stderr
        assert props.headers["x-delivery-count"] == 1
    else:
        assert "using no delivery attempt" in result.stderr
        assert "x-delivery-count" not in props.headers and props.headers["x-acquired-count"] == 1


def _republish_loop(broker, prefix: str, rounds: int, *, retry_header: bool) -> tuple[str, str]:
    """An application's retry loop: it rejects the message (→ DLQ), takes it from the DLQ and
    republishes it with the headers it received (x-death included), `rounds` times. The message ends
    in the DLQ having died `rounds` times. With `retry_header` the app also counts its republishes in
    x-retry-count."""
    work, dlx, dlq = f"{prefix}.work", f"{prefix}.dlx", f"{prefix}.dlq"
    with broker.channel() as ch:
        ch.exchange_declare(dlx, "fanout")
        ch.queue_declare(dlq, durable=True)
        ch.queue_bind(dlq, dlx)
        ch.queue_declare(work, arguments={"x-dead-letter-exchange": dlx}, durable=True)
        ch.basic_publish("", work, b"poison", pika.BasicProperties(message_id="p-1"), mandatory=True)
        for done in range(rounds):
            method = _wait_get(ch, work)
            ch.basic_reject(method[0].delivery_tag, requeue=False)
            if done == rounds - 1:
                break
            dead, props, body = _wait_get(ch, dlq)
            headers = dict(props.headers or {})
            if retry_header:
                headers["x-retry-count"] = done + 1
            ch.basic_publish("", work, body, pika.BasicProperties(message_id="p-1", headers=headers),
                             mandatory=True)
            ch.basic_ack(dead.delivery_tag)
    assert broker.wait_depth(dlq, 1) == 1
    return work, dlq


def _wait_get(ch: Any, queue: str) -> tuple[Any, Any, bytes]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=False)
        if method is not None:
            return method, props, body
        time.sleep(0.02)
    raise AssertionError(f"nothing came to {queue}")


def _history(run, broker, queue: str, *args: str) -> tuple[Any, str]:
    result = run("history", queue, "--url", broker.url, "-f", "json", *args)
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout), result.stderr


def test_app_republished_message_x_death_count(run, broker, qname) -> None:
    """Three reject-republish rounds: 3.x counts 3 deaths; 4.x starts x-death afresh at each death of a
    message a client published with one (count 1) and writes x-last-death-*. dlxtool shows the count
    as a minimum on 4.x (deaths_may_be_low, '1+' in tables) and says why, instead of a silent 1."""
    _work, dlq = _republish_loop(broker, qname, 3, retry_header=False)
    [item], err = _history(run, broker, dlq)
    [summary], _ = _history(run, broker, dlq, "--summary")
    table = run("history", dlq, "--url", broker.url, "-f", "table", "--summary")
    if broker.major >= 4:
        assert [d["count"] for d in item["deaths"]] == [1]
        assert item["last_death"]["queue"] == _work
        assert item["total_deaths"] == 1 and item["deaths_at_least"] == 1 and item["deaths_may_be_low"]
        assert "restart x-death" in item["deaths_note"]
        assert "restart x-death when an application republishes" in err
        assert (summary["deaths"], summary["deaths_may_be_low"]) == (1, 1)
        assert " 1 rejected+ " in table.stdout  # deaths by reason, "+": at least
    else:
        assert [d["count"] for d in item["deaths"]] == [3]
        assert item["last_death"] == {}
        assert item["total_deaths"] == item["deaths_at_least"] == 3 and not item["deaths_may_be_low"]
        assert item["deaths_note"] is None and "restart" not in err
        assert (summary["deaths"], summary["deaths_may_be_low"]) == (3, 0)


def test_min_deaths_on_an_app_republished_message(run, broker, qname) -> None:
    """`--min-deaths 2` on the message above: 3.x selects it (x-death 3). 4.x's x-death says 1: it is
    not selected (a purge never takes more than was asked for), and the output says its count may be low."""
    _work, dlq = _republish_loop(broker, qname, 3, retry_header=False)
    result = run("purge", dlq, "--url", broker.url, "--min-deaths", "2", "--dry-run", "-f", "json")
    assert result.exit_code == 0, result.stderr
    plan = orjson.loads(result.stdout)
    if broker.major >= 4:
        assert (plan["would_remove"], plan["would_keep"]) == (0, 1)
        assert "may have died more often than x-death says" in result.stderr
    else:
        assert (plan["would_remove"], plan["would_keep"]) == (1, 0)
        assert "may have died more often" not in result.stderr


def test_app_retry_counter_is_the_count_where_x_death_restarts(run, broker, qname) -> None:
    """The same loop with the app counting its republishes in x-retry-count (2 after three deaths): on
    4.x history shows at least 2 deaths from that counter (x-death says 1) and --min-deaths 2 selects
    the message; on 3.x x-death's 3 is the count."""
    _work, dlq = _republish_loop(broker, qname, 3, retry_header=True)
    [item], err = _history(run, broker, dlq)
    result = run("purge", dlq, "--url", broker.url, "--min-deaths", "2", "--dry-run", "-f", "json")
    assert result.exit_code == 0, result.stderr
    assert orjson.loads(result.stdout)["would_remove"] == 1
    if broker.major >= 4:
        assert (item["total_deaths"], item["deaths_at_least"], item["deaths_may_be_low"]) == (1, 2, False)
        assert "x-retry-count says 2" in item["deaths_note"]
        assert "fewer deaths than the application's retry counter" in err
        table = run("history", dlq, "--url", broker.url, "-f", "table")
        assert "at least 2 deaths (x-retry-count says 2, x-death 1)" in table.stdout
    else:
        assert (item["total_deaths"], item["deaths_at_least"], item["deaths_note"]) == (3, 3, None)


def test_replay_keep_history_then_another_death(run, broker, qname) -> None:
    """replay --keep-history publishes the message with the x-death it had. 3.x keeps counting on it at
    the next death (count 2); 4.x delivers it as published but drops it at the next death and starts
    afresh (count 1): --keep-history cannot carry counts across a replay on 4.x (README says so)."""
    work, dlq = _republish_loop(broker, qname, 1, retry_header=False)
    replay = run("replay", dlq, "--yes", "--keep-history", "--url", broker.url, "-f", "json")
    assert replay.exit_code == 0, replay.stderr
    with broker.channel() as ch:
        method, props, _body = _wait_get(ch, work)
        assert [d["count"] for d in props.headers["x-death"]] == [1]  # as published, on both
        ch.basic_reject(method.delivery_tag, requeue=False)
    assert broker.wait_depth(dlq, 1) == 1
    [(_m, props, _b)] = broker.drain(dlq)
    assert [d["count"] for d in props.headers["x-death"]] == ([1] if broker.major >= 4 else [2])


def test_negative_delivery_limit(run, broker, qname) -> None:
    """x-delivery-limit -1: 4.x reads it as "no limit" (a message survives any number of returns); 3.x
    has no such switch and drops (or dead-letters) a message at its first return, as with a limit of 0.
    dlxtool read -1 as "no limit" everywhere, so on 3.10 a peek with --allow-reorder emptied the queue;
    now it refuses there, with or without the flags, and leaves the message in place."""
    _quorum(broker, qname, **{"x-delivery-limit": -1})
    result = run("peek", qname, "--url", broker.url, "-f", "jsonl", "--allow-reorder", "--spend-attempts")
    if broker.major >= 4:
        assert result.exit_code == 0, result.stderr
        assert "no delivery limit" in result.stderr
    else:
        assert result.exit_code == ExitStatus.REFUSED, result.output
        assert "delivery limit 0" in result.stderr and "first return" in result.stderr
    assert broker.queue_depth(qname) == 1

    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        deliveries = 0
        while deliveries < 25 and _take_and_give_back(conn, qname, "close") != "gone":
            deliveries += 1
    finally:
        conn.close()
    assert deliveries == (25 if broker.major >= 4 else 1)


def test_a_quorum_dead_letter_carries_no_delivery_count(run, broker, qname) -> None:
    """x-delivery-count is added when a quorum queue delivers, not stored with the message: a message that
    reached its delivery limit arrives in the DLQ without it, on 3.10 and 4.0 alike (its x-death count is 1,
    not the attempts). So it cannot raise a dead letter's death count; `history` reads it only for messages
    still in a quorum queue (their attempts there)."""
    dlq = f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
    _quorum(broker, qname, **{"x-delivery-limit": 1, "x-dead-letter-exchange": "",
                              "x-dead-letter-routing-key": dlq})
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:  # a reject counts on every version (a nack no longer does on 4.3)
        seen = [_take_and_give_back(conn, qname, "reject") for _ in range(3)]
    finally:
        conn.close()
    assert "gone" in seen
    assert broker.wait_depth(dlq, 1) == 1
    [(_body, headers)] = broker.snapshot(dlq)
    assert "x-delivery-count" not in headers
    [death] = headers["x-death"]
    assert (death["reason"], death["count"]) == ("delivery_limit", 1)
    result = run("history", dlq, "--url", broker.url, "--format", "json")
    assert result.exit_code == 0, result.output
    [entry] = orjson.loads(result.stdout)
    assert entry["deaths"][0]["reason"] == "delivery_limit"


def _read_whole(broker, queue: str, n: int) -> list[tuple[bytes, Any]]:
    """The queue's messages in order with their x-delivery-count, read without removing them: basic.get all n, then
    nack them back 32 at a time, each chunk applied before the next (the consumer count drops by it). On a version
    where such nacks count nothing and keep the messages' place (4.3: tests/broker/test_versions.py) this leaves
    the queue as it was but for x-acquired-count; elsewhere it would spend an attempt, so it is used on 4.3 only."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        seen, tags = [], []
        for _ in range(n):
            method, props, body = ch.basic_get(queue, auto_ack=False)
            assert method is not None, f"{queue} has fewer than {n} messages"
            tags.append(method.delivery_tag)
            seen.append((body, (props.headers or {}).get("x-delivery-count")))
        assert ch.basic_get(queue, auto_ack=False)[0] is None, f"{queue} has more than {n} messages"
        for start in range(0, n, 32):
            end = min(start + 32, n)
            ch.basic_nack(tags[end - 1], multiple=True, requeue=True)
            deadline = time.monotonic() + 10
            while ch.queue_declare(queue, passive=True).method.consumer_count > n - end:
                assert time.monotonic() < deadline, "the nacks were not applied"
                time.sleep(0.005)
        ch.close()
        return seen
    finally:
        conn.close()


QUORUM_SHAPES = {
    "limit 3": {"x-delivery-limit": 3},
    "default limit": {},  # 4.x: 20; 3.x: none
    "no limit": None,  # broker.quorum_without_limit(): 4.x -1; 3.x none
}


@pytest.mark.parametrize("shape", list(QUORUM_SHAPES))
def test_peek_history_dump_of_a_quorum_queue_where_a_give_back_costs_nothing(run, broker, qname, shape,
                                                                                tmp_path) -> None:
    """RabbitMQ 4.3 gives a peek's nacks back in place without counting them: peek, history and dump of a quorum
    queue, with a limit, with the default one or without one, need no flag there, keep the order and leave every
    x-delivery-count as it was — read whole before and after. The head holds a block of messages a consumer
    rejected once (counted: x-delivery-count 1), which a partial peek must not reorder. On 3.x and 4.0 the same reads
    are refused with today's reasons and the queue is left as it was (drained at the end)."""
    args = QUORUM_SHAPES[shape] if QUORUM_SHAPES[shape] is not None else broker.quorum_without_limit()
    args = {k: v for k, v in args.items() if k != "x-queue-type"}
    _quorum(broker, qname, **args)
    n = 40
    broker.publish(qname, [str(i).encode() for i in range(1, n)])  # "only" and 1..39: 40 messages
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:  # a consumer rejects the first three once each: a block of returned messages at the head
        ch = conn.channel()
        tags = [ch.basic_get(qname, auto_ack=False)[0].delivery_tag for _ in range(3)]
        for tag in tags:
            ch.basic_reject(tag, requeue=True)
        ch.close()
    finally:
        conn.close()
    assert broker.wait_depth(qname, n) == n
    limit = versions.effective_delivery_limit(broker.version, args.get("x-delivery-limit"), None)
    rejected = [(b"only", 1), (b"1", 1), (b"2", 1)]
    rest = [(str(i).encode(), 0) for i in range(3, n)]
    # where a return goes is the table's: the back without a limit on 3.x and 4.0, else in place (a block at the head)
    expected = rest + rejected if versions.quorum_nack_to_back(broker.version, limit) else rejected + rest
    free = not _peeks_spend_attempts(broker)
    if free:
        before = _read_whole(broker, qname, n)
        assert [(body, count or 0) for body, count in before] == expected

    reads = [("peek", "-n", "2"), ("peek", "-n", "5"), ("history", "-n", "10"), ("dump", "-o", str(tmp_path / "d"))]
    for command, *rest in reads:
        result = run(command, qname, "--url", broker.url, "-f", "json", *rest)
        if free:
            assert result.exit_code == 0, f"{command}: {result.stderr}"
            assert "use no delivery attempt" in result.stderr and "--spend-attempts" not in result.stderr
        else:
            assert result.exit_code == ExitStatus.REFUSED, f"{command}: {result.output}"
            if limit is None:
                assert "without a delivery limit" in result.stderr and "--allow-reorder" in result.stderr
            else:
                assert f"delivery limit {limit}" in result.stderr and "--spend-attempts" in result.stderr
    if free:
        assert len((tmp_path / "d").read_text().splitlines()) == n
        assert _read_whole(broker, qname, n) == before  # same order, same x-delivery-count
    after = broker.drain(qname)
    assert [(body, (props.headers or {}).get("x-delivery-count") or 0) for _m, props, body in after] == expected


def test_the_count_reset_removes_the_delivery_counters_a_quorum_dlq_carried(run, broker, qname) -> None:
    """4.3: a message peeked in a quorum DLQ is delivered again with x-acquired-count (+ 1 per give-back), and a
    client's x-acquired-count survives a publish: the replay's count reset takes it off with x-delivery-count, so the
    origin's consumer does not meet a stale counter on its first delivery (3.x, 4.0: no such header)."""
    dlq, work = f"{qname}.dlq", f"{qname}.work"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_declare(work, durable=True, arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": dlq})
        ch.basic_publish("", work, b"order", pika.BasicProperties(message_id="m-1"), mandatory=True)
        method, _props, _body = _wait_get(ch, work)
        ch.basic_reject(method.delivery_tag, requeue=False)
    assert broker.wait_depth(dlq, 1) == 1
    for _ in range(2):  # given back twice: x-acquired-count 2 on 4.3
        peeked = run("peek", dlq, "--url", broker.url, "-f", "jsonl", "--spend-attempts", "--allow-reorder")
        assert peeked.exit_code == 0, peeked.stderr
    result = run("replay", dlq, "--url", broker.url, "--yes", "-f", "json")
    assert result.exit_code == 0, result.stderr
    [(_m, props, body)] = broker.drain(work)
    assert body == b"order"
    assert "x-acquired-count" not in props.headers, props.headers
    # the origin's own count of its first delivery (3.x: 0; 4.x: none), not the DLQ's
    assert props.headers.get("x-delivery-count", 0) == 0, props.headers
