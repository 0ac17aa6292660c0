"""peek against the real broker: the queue is the same afterwards, or the peek is refused (exit 6)."""

from __future__ import annotations

import re
import time

import orjson
import pika
import pytest

from dlxtool.broker import versions
from dlxtool.cli.output import ExitStatus

# Bodies and headers a naive tool mangles: binary, control characters, escapes, unicode.
BODIES = [b"plain", bytes(range(256)), b"\x1b[31mred\x1b[0m\n\r", "héllo ✓".encode(), b""] * 2


def publish_all(broker, queue: str) -> None:
    with broker.channel() as ch:
        for i, body in enumerate(BODIES):
            props = pika.BasicProperties(message_id=f"m-{i}", headers={"n": i, "raw": b"\xff\x00"}, delivery_mode=2)
            ch.basic_publish("", queue, body, props, mandatory=True)


def declare(broker, queue: str, **args) -> str:
    dlq = queue + ".dlq"
    with broker.channel() as ch:
        ch.exchange_declare(dlq, "fanout")
        ch.queue_declare(dlq, durable=True)
        ch.queue_bind(dlq, dlq)
        ch.queue_declare(queue, durable=True, arguments={"x-dead-letter-exchange": dlq, **args})
    return dlq


def drained(broker, queue: str) -> list[tuple[bytes, dict]]:
    """Everything in the queue, in order, taken away: the final look for quorum queues (without the headers the
    queue adds: x-delivery-count, and 4.3's x-acquired-count)."""
    added = ("x-delivery-count", "x-acquired-count")
    return [(body, {k: v for k, v in (props.headers or {}).items() if k not in added})
            for _m, props, body in broker.drain(queue)]


def spends(broker) -> bool:
    """Whether a peek's give-back uses a delivery attempt on this broker (3.x, 4.0-4.2; not 4.3: the version table)."""
    return versions.quorum_give_back_counts(broker.version, "nack")


def to_back(broker, limit: int | None) -> bool:
    """Whether a peek's give-back moves messages to the back of a quorum queue with this limit (None: none)."""
    return versions.quorum_nack_to_back(broker.version, limit)


def delivery_counts(broker, queue: str) -> list[int]:
    return [(props.headers or {}).get("x-delivery-count", 0) for _m, props, _b in broker.drain(queue)]


EXPECTED = [(body, {"n": i, "raw": b"\xff\x00"}) for i, body in enumerate(BODIES)]


def peek(run, broker, queue: str, *args: str):
    return run("peek", queue, "--url", broker.url, "-f", "jsonl", *args)


def test_classic_five_peeks_leave_queue_byte_for_byte(run, broker, qname) -> None:
    dlq = declare(broker, qname)
    publish_all(broker, qname)
    before = broker.snapshot(qname)
    for n in ("3", "10", "25", "1", "10"):
        result = peek(run, broker, qname, "-n", n)
        assert result.exit_code == 0, result.stderr
        records = [orjson.loads(line) for line in result.stdout.splitlines()]
        assert len(records) == min(int(n), len(BODIES))
        assert [r["position"] for r in records] == list(range(len(records)))
    assert broker.snapshot(qname) == before
    assert [(b, h) for b, h in before] == EXPECTED
    assert broker.queue_depth(dlq) == 0
    assert "unacked by consumers" in result.stderr and "0 consumers" in result.stderr


def test_classic_peek_records_are_exact(run, broker, qname) -> None:
    declare(broker, qname)
    publish_all(broker, qname)
    result = peek(run, broker, qname, "-n", "5")
    from dlxtool.record import MessageRecord

    records = [MessageRecord.from_json(orjson.loads(line)) for line in result.stdout.splitlines()]
    assert [(r.body, r.headers) for r in records] == EXPECTED[:5]
    assert records[0].properties["message_id"] == "m-0"


def test_classic_refuses_more_than_the_unacked_bound_and_says_the_cost(run, broker, qname) -> None:
    declare(broker, qname)
    publish_all(broker, qname)
    result = peek(run, broker, qname, "-n", "8", "--max-unacked", "5")
    assert result.exit_code == ExitStatus.REFUSED
    assert "holding all of them unacked" in result.stderr and "bound is 5" in result.stderr
    assert result.stdout == ""
    assert broker.snapshot(qname) == EXPECTED


def test_quorum_with_limit_refuses_five_times_and_nothing_changes(run, broker, qname) -> None:
    dlq = declare(broker, qname, **{"x-queue-type": "quorum", "x-delivery-limit": 3})
    publish_all(broker, qname)
    for _ in range(5):
        result = peek(run, broker, qname)
        if spends(broker):
            assert result.exit_code == ExitStatus.REFUSED
            assert "delivery limit 3" in result.stderr and "--spend-attempts" in result.stderr
        else:  # 4.3: nothing to refuse, and still nothing changes
            assert result.exit_code == 0, result.stderr
            assert "use no delivery attempt" in result.stderr
    assert broker.queue_depth(dlq) == 0
    assert delivery_counts(broker, qname) == [0] * len(BODIES)


def test_quorum_with_limit_spend_attempts_stops_at_the_first_message_left_without_a_spare(run, broker, qname) -> None:
    dlq = declare(broker, qname, **{"x-queue-type": "quorum", "x-delivery-limit": 3})
    publish_all(broker, qname)
    if not spends(broker):  # 4.3: --spend-attempts has nothing to spend; peeks never stop, nothing is counted
        for _ in range(4):
            result = peek(run, broker, qname, "-n", "4", "--spend-attempts")
            assert result.exit_code == 0, result.stderr
            assert [orjson.loads(line)["headers"].get("x-delivery-count") for line in result.stdout.splitlines()] \
                == [None] * 4
        assert broker.queue_depth(dlq) == 0
        assert drained(broker, qname) == EXPECTED and delivery_counts(broker, qname) == []
        return
    for expected_count in (0, 1):  # safely below the limit: allowed, one attempt each
        result = peek(run, broker, qname, "-n", "4", "--spend-attempts")
        assert result.exit_code == 0, result.stderr
        records = [orjson.loads(line) for line in result.stdout.splitlines()]
        # 4.x sends no x-delivery-count before a message's first return (tests/cli/test_versions.py)
        assert [r["headers"].get("x-delivery-count", 0) for r in records] == [expected_count] * 4
        assert "used one delivery attempt of each of the" in result.stderr
    # The head has used 2 of 3: giving it back leaves it no attempt to spare. The third peek
    # takes it, sees that, takes nothing more (no hidden reads) and stops: the read changed the queue before it
    # could know (one attempt spent, the head moved), so that is said with exit 5 — never "refused" (issue 27).
    result = peek(run, broker, qname, "-n", "4", "--spend-attempts")
    assert result.exit_code == ExitStatus.PARTIAL
    assert "position 0" in result.stderr and "used 2 of its 3" in result.stderr
    assert "each used one of its delivery attempts" in result.stderr
    assert "also took" not in result.stderr
    assert "behind" in result.stderr  # given back alone, it went behind the rest of the returned block
    assert broker.queue_depth(dlq) == 0
    remaining = broker.drain(qname)
    counts = [(p.headers or {}).get("x-delivery-count", 0) for _m, p, _b in remaining]
    bodies = [b for _m, _p, b in remaining]
    assert bodies == BODIES[1:5] + BODIES[:1] + BODIES[5:]
    assert counts == [2, 2, 2, 1, 3] + [0] * 5  # one message at its limit, every other one has a spare


def test_quorum_repeated_spend_attempts_peeks_refuse_and_touch_one_message_each(run, broker, qname) -> None:
    """Reviewer's repro: limit 3, 5 messages, `peek -n 2 --spend-attempts` again and again."""
    dlq = declare(broker, qname, **{"x-queue-type": "quorum", "x-delivery-limit": 3})
    broker.publish(qname, [str(i).encode() for i in range(5)])
    if not spends(broker):  # 4.3: the same peeks, as often as you like, touch nothing
        for _ in range(4):
            assert peek(run, broker, qname, "-n", "2", "--spend-attempts").exit_code == 0
        assert broker.queue_depth(dlq) == 0
        assert [(b, (p.headers or {}).get("x-delivery-count", 0)) for _m, p, b in broker.drain(qname)] == [
            (str(i).encode(), 0) for i in range(5)]
        return
    exits, dead = [], []
    for _ in range(4):
        result = peek(run, broker, qname, "-n", "2", "--spend-attempts")
        exits.append(result.exit_code)
        dead.append(broker.queue_depth(dlq))
        if result.exit_code == ExitStatus.PARTIAL:
            assert "no attempt to spare" in result.stderr and "also took" not in result.stderr
            assert "position 0 were read and given back" in result.stderr  # what changed is named
    assert exits == [0, 0, ExitStatus.PARTIAL, ExitStatus.PARTIAL]
    assert dead == [0, 0, 0, 0]
    counts = {b: (p.headers or {}).get("x-delivery-count", 0) for _m, p, b in broker.drain(qname)}
    assert counts == {b"0": 3, b"1": 3, b"2": 1, b"3": 0, b"4": 0}


def test_quorum_delivery_limit_of_one_is_refused_without_reading(run, broker, qname) -> None:
    dlq = declare(broker, qname, **{"x-queue-type": "quorum", "x-delivery-limit": 1})
    publish_all(broker, qname)
    result = peek(run, broker, qname, "-n", "1", "--spend-attempts")
    if spends(broker):
        assert result.exit_code == ExitStatus.REFUSED
        assert "delivery limit 1" in result.stderr and result.stdout == ""
    else:  # 4.3: a limit of 1 is no reason to refuse: the give-back does not count
        assert result.exit_code == 0, result.stderr
        assert len(result.stdout.splitlines()) == 1
    assert broker.queue_depth(dlq) == 0
    assert delivery_counts(broker, qname) == [0] * len(BODIES)


def numbered(n: int) -> list[bytes]:
    return [str(i).encode() for i in range(n)]


def drained_bodies(broker, queue: str) -> list[bytes]:
    return [body for _m, _p, body in broker.drain(queue)]


def test_quorum_with_limit_peek_of_more_than_32_keeps_order(run, broker, qname) -> None:
    """rabbit_fifo_client stashes returns past 32 in flight and sends them back in map order."""
    declare(broker, qname, **{"x-queue-type": "quorum", "x-delivery-limit": 10})
    broker.publish(qname, numbered(150))
    result = peek(run, broker, qname, "-n", "100", "--spend-attempts")
    assert result.exit_code == 0, result.stderr
    assert [orjson.loads(line)["position"] for line in result.stdout.splitlines()] == list(range(100))
    remaining = broker.drain(qname)
    assert [b for _m, _p, b in remaining] == numbered(150)
    spent = 1 if spends(broker) else 0
    assert [(p.headers or {}).get("x-delivery-count", 0) for _m, p, _b in remaining] == [spent] * 100 + [0] * 50


@pytest.mark.parametrize("count, order", [
    ("200", numbered(120)),  # the whole queue read and given back: order kept
    ("50", numbered(120)[50:] + numbered(120)[:50]),  # the 50 peeked go to the back, in their order
])
def test_quorum_without_limit_more_than_32_go_back_in_order(run, broker, qname, count, order) -> None:
    declare(broker, qname, **broker.quorum_without_limit())
    broker.publish(qname, numbered(120))
    result = peek(run, broker, qname, "-n", count, "--allow-reorder")
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == min(int(count), 120)
    assert drained_bodies(broker, qname) == (order if to_back(broker, None) else numbered(120))  # 4.3: in place


def test_quorum_with_limit_partial_peek_of_returned_block_keeps_order(run, broker, qname) -> None:
    declare(broker, qname, **{"x-queue-type": "quorum", "x-delivery-limit": 5})
    publish_all(broker, qname)
    assert peek(run, broker, qname, "-n", "6", "--spend-attempts").exit_code == 0
    result = peek(run, broker, qname, "-n", "2", "--spend-attempts")  # head block: 6 returned messages
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2
    assert drained(broker, qname) == EXPECTED


def test_quorum_without_limit_refuses_five_times_order_kept(run, broker, qname) -> None:
    dlq = declare(broker, qname, **broker.quorum_without_limit())
    publish_all(broker, qname)
    for _ in range(5):
        result = peek(run, broker, qname, "-n", "3")
        if to_back(broker, None):
            assert result.exit_code == ExitStatus.REFUSED
            assert "BACK of the queue" in result.stderr and "--allow-reorder" in result.stderr
        else:  # 4.3: given back in place, nothing to refuse
            assert result.exit_code == 0, result.stderr
    assert broker.queue_depth(dlq) == 0
    assert drained(broker, qname) == EXPECTED


@pytest.mark.parametrize("count, note, order", [
    ("3", "the 3 peeked messages are now at the back", EXPECTED[3:] + EXPECTED[:3]),  # the cost, as announced
    ("50", "read the whole queue", EXPECTED),  # all of it read and given back: order kept
])
def test_quorum_without_limit_allow_reorder_says_what_moved(run, broker, qname, count, note, order) -> None:
    declare(broker, qname, **broker.quorum_without_limit())
    publish_all(broker, qname)
    result = peek(run, broker, qname, "-n", count, "--allow-reorder")
    assert result.exit_code == 0, result.stderr
    if to_back(broker, None):
        assert note in result.stderr
        assert drained(broker, qname) == order
    else:  # 4.3: nothing moved, and it says so
        assert "back at the head, using no delivery attempt" in result.stderr and "in order" in result.stderr
        assert drained(broker, qname) == EXPECTED


def test_stream_reads_from_offsets_without_get(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
    publish_all(broker, qname)
    first = peek(run, broker, qname, "-n", "3", "--wait", "2")
    assert first.exit_code == 0, first.stderr
    assert "0 ready" not in first.stderr and "length: not known" in first.stderr  # streams keep no count
    assert [orjson.loads(line)["headers"]["n"] for line in first.stdout.splitlines()] == [0, 1, 2]
    at = peek(run, broker, qname, "--offset", "7", "--wait", "2")
    assert [orjson.loads(line)["headers"]["n"] for line in at.stdout.splitlines()] == [7, 8, 9]
    past = peek(run, broker, qname, "--offset", "100", "--wait", "0.5")
    assert past.exit_code == 0 and past.stdout == ""
    assert "no message at or after offset 100" in past.stderr  # not a silent empty read
    again = peek(run, broker, qname, "-n", "3", "--wait", "2")
    assert again.stdout == first.stdout  # reading a stream changes nothing
    refused = peek(run, broker, qname + "x", "--offset", "first")
    assert refused.exit_code == ExitStatus.NOT_FOUND


def test_offset_on_a_classic_queue_is_a_usage_error(run, broker, qname) -> None:
    declare(broker, qname)
    result = peek(run, broker, qname, "--offset", "first")
    assert result.exit_code == ExitStatus.USAGE


def test_table_neutralises_control_characters(run, broker, qname) -> None:
    declare(broker, qname)
    with broker.channel() as ch:
        ch.basic_publish("", qname, b"\x1b]0;pwned\x07 text", pika.BasicProperties(type="\x1b[2Jevil"), mandatory=True)
    result = run("peek", qname, "--url", broker.url, "-f", "table")
    assert result.exit_code == 0
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b[2Jevil" in result.stdout
    body = run("peek", qname, "--url", broker.url, "-f", "table", "--body")
    assert "\\x1b]0;pwned\\x07 text" in body.stdout


def config_with_dead_management(broker, tmp_path) -> dict[str, str]:
    path = tmp_path / "config.toml"
    text = broker.config_toml().replace(broker.management_url, "http://127.0.0.1:9/")
    path.write_text(text)
    return {"DLXTOOL_CONFIG": str(path), "DLXTOOL_TEST_PASSWORD": "guest"}


def test_management_unreachable_classic_proceeds_and_says_what_was_not_checked(run, broker, qname, tmp_path) -> None:
    declare(broker, qname)
    publish_all(broker, qname)
    env = config_with_dead_management(broker, tmp_path)
    result = run("peek", qname, "-b", "test", "-f", "jsonl", "-n", "4", env=env)
    assert result.exit_code == 0, result.stderr
    assert "check not made: management API at http://127.0.0.1:9/ not reachable" in result.stderr
    assert "unacked by consumers not counted" in result.stderr
    assert len(result.stdout.splitlines()) == 4
    assert broker.snapshot(qname) == EXPECTED


def test_management_unreachable_quorum_is_refused(run, broker, qname, tmp_path) -> None:
    declare(broker, qname, **{"x-queue-type": "quorum", "x-delivery-limit": 3})
    publish_all(broker, qname)
    env = config_with_dead_management(broker, tmp_path)
    result = run("peek", qname, "-b", "test", "--spend-attempts", env=env)
    if spends(broker):
        assert result.exit_code == ExitStatus.REFUSED
        assert "delivery limit could not be checked" in result.stderr
    else:  # 4.3: whatever the limit, the give-back costs nothing; what was not checked is still said
        assert result.exit_code == 0, result.stderr
        assert "delivery limit (queue arguments and policy) not checked" in result.stderr
        assert "queue type read from an AMQP probe" in result.stderr and "(quorum" in result.stderr
    assert delivery_counts(broker, qname) == [0] * len(BODIES)


def test_management_unreachable_stream_is_probed_and_read(run, broker, qname, tmp_path) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
    publish_all(broker, qname)
    env = config_with_dead_management(broker, tmp_path)
    result = run("peek", qname, "-b", "test", "-f", "jsonl", "-n", "2", "--wait", "2", env=env)
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2


def test_default_exchange_as_dead_letter_exchange_is_not_reported_as_dropped(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname + ".dlq", durable=True)
        ch.queue_declare(qname, durable=True, arguments={
            "x-queue-type": "quorum", "x-delivery-limit": 3,
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": qname + ".dlq"})
    publish_all(broker, qname)
    result = peek(run, broker, qname)
    assert "dropped" not in result.stderr
    if spends(broker):  # the refusal names where the limit would send them
        assert result.exit_code == ExitStatus.REFUSED
        assert "default exchange" in result.stderr
    else:
        assert result.exit_code == 0, result.stderr


def test_quorum_message_at_its_limit_is_the_only_one_taken_and_reported(run, broker, qname) -> None:
    dlq = declare(broker, qname, **{"x-queue-type": "quorum", "x-delivery-limit": 2})
    broker.publish(qname, numbered(3))
    with broker.channel() as ch:  # a consumer rejects the head twice: it has no attempt left
        for _ in range(2):
            method, _p, _b = ch.basic_get(qname, auto_ack=False)
            ch.basic_reject(method.delivery_tag, requeue=True)  # counted on every version (a nack is not on 4.3)
    assert broker.wait_depth(qname, 3) == 3
    if not spends(broker):  # 4.3: the peek's give-back does not count: it stays, at its limit, where it was
        result = peek(run, broker, qname, "-n", "3")
        assert result.exit_code == 0, result.stderr
        assert len(result.stdout.splitlines()) == 3 and broker.queue_depth(dlq) == 0
        assert [(b, (p.headers or {}).get("x-delivery-count", 0)) for _m, p, b in broker.drain(qname)] == \
            [(b"0", 2), (b"1", 0), (b"2", 0)]
        return
    result = peek(run, broker, qname, "-n", "3", "--spend-attempts")
    assert result.exit_code == ExitStatus.PARTIAL
    assert "position 0" in result.stderr and "dead-letter" in result.stderr
    assert "could not confirm" not in result.stderr  # the give-back was seen through
    assert len(result.stdout.splitlines()) == 1  # nothing read past it
    assert broker.wait_depth(dlq, 1) == 1
    assert [(b, (p.headers or {}).get("x-delivery-count", 0)) for _m, p, b in broker.drain(qname)] == \
        [(b"1", 0), (b"2", 0)]


def _hold_the_only_message(broker, queue: str):
    """A pika connection whose consumer holds the queue's one message unacked (close it to give it back)."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=10)
    ch.basic_consume(queue, lambda *_: None, auto_ack=False)
    deadline = time.monotonic() + 15
    # The management API's counts lag by its statistics interval: wait until it sees the consumer's message (where
    # it keeps none, until AMQP counts it gone from the ready ones).
    blind = versions.stats_disabled(broker.mgmt.overview())
    while time.monotonic() < deadline and (
            broker.queue_depth(queue) != 0 if blind else broker.mgmt.queue(broker.vhost, queue).messages_unacked != 1):
        conn.process_data_events(time_limit=0.2)
    return conn


@pytest.mark.metrics
def test_a_queue_whose_only_message_is_held_by_a_consumer_is_not_called_empty(run, broker, qname,
                                                                               tmp_path) -> None:
    """With the API's figures: "1 unacked (API sample): held by consumers". Without them (RabbitMQ 4.3 with
    management_metrics_collection denied, where this printed "(queue is empty)"): the unacked count is unknown."""
    declare(broker, qname)
    broker.publish(qname, [b"held"])
    conn = _hold_the_only_message(broker, qname)
    held = (r"\(0 ready; unacked by consumers: unknown, the management API has no figures"
            if versions.stats_disabled(broker.mgmt.overview())
            else r"\(0 ready, 1 unacked \(API sample, at most \d+ s old\): held by consumers")
    try:
        result = run("peek", qname, "--url", broker.url, "-f", "table")
        assert result.exit_code == 0, result.stderr
        assert re.search(held, result.stdout), result.stdout
        assert "queue is empty" not in result.stdout
        for args in (["--summary"], []):  # history reads the same way and says the same
            history = run("history", qname, "--url", broker.url, "-f", "table", *args)
            assert re.match(held, history.stdout), history.stdout
        # without the management API, AMQP only knows the ready count: say what is not known
        env = config_with_dead_management(broker, tmp_path)
        result = run("peek", qname, "-b", "test", "-f", "table", env=env)
        assert result.exit_code == 0, result.stderr
        assert "(0 ready; unacked by consumers: unknown" in result.stdout
    finally:
        conn.close()
    assert broker.queue_depth(qname) == 1
    empty = run("peek", qname + ".dlq", "--url", broker.url, "-f", "table")
    if versions.stats_disabled(broker.mgmt.overview()):  # not even an empty queue's unacked count is known then
        assert "(0 ready; unacked by consumers: unknown" in empty.stdout
    else:
        assert "(queue is empty)" in empty.stdout


def _rejected_into_quorum_dlq(broker, qname: str, n: int) -> str:
    """`n` dead letters made by real rejects from a quorum queue into a quorum DLQ (4.x carries their delivery
    counters into it: versions.dead_letters_carry_delivery_counts)."""
    dlq = f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 50})
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": dlq})
        for i in range(n):
            ch.basic_publish("", qname, b"%d" % i, pika.BasicProperties(message_id=f"m-{i}", delivery_mode=2),
                             mandatory=True)
        for _ in range(n):
            method = None
            while method is None:
                method, _props, _body = ch.basic_get(qname, auto_ack=False)
            ch.basic_reject(method.delivery_tag, requeue=False)
    assert broker.wait_depth(dlq, n) == n
    return dlq


def _api_returned(broker, queue: str, expected: int, timeout: float = 20.0) -> None:
    """Wait until the management API's sample counts `expected` returned messages at the head (4.x)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = broker.mgmt.get(f"queues/{broker.vhost.replace('/', '%2F')}/{queue}")
        if row.get("messages_ready_returned") == expected:
            return
        time.sleep(0.5)
    raise AssertionError(f"the API never counted {expected} returned messages at the head of {queue}")


def test_a_quorum_dlq_of_rejected_dead_letters_is_peeked_for_what_it_shows(run, broker, qname) -> None:
    """Issue 35: on 4.x a dead letter carries its delivery counters into a quorum DLQ, and a peek that read them as
    "returned before" took the whole queue (-n 5 held 10,000). It reads what it shows; a later, shorter peek takes
    the rest of the block the first one left at the head (as the API counts it on 4.x, the counters on 3.x), so
    the order holds, and each says so in one sentence."""
    dlq = _rejected_into_quorum_dlq(broker, qname, 300)
    extra = ("--spend-attempts",) if spends(broker) else ()
    first = peek(run, broker, dlq, "-n", "5", *extra)
    assert first.exit_code == 0, first.stderr
    assert [orjson.loads(line)["properties"]["message_id"] for line in first.stdout.splitlines()] == \
        [f"m-{i}" for i in range(5)]
    assert "holding up to 5 messages" in first.stderr
    assert "also took" not in first.stderr and "order of the head changed" not in first.stderr
    assert "in order" in first.stderr
    if broker.major >= 4:
        _api_returned(broker, dlq, 5)
    second = peek(run, broker, dlq, "-n", "2", *extra)
    assert second.exit_code == 0, second.stderr
    assert "also took 3 more previously returned messages" in second.stderr, second.stderr
    assert "order of the head changed" not in second.stderr
    assert [props.message_id for _m, props, _b in broker.drain(dlq)] == [f"m-{i}" for i in range(300)]
