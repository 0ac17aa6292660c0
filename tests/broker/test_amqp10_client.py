"""AMQP 1.0 messages from RabbitMQ's own AMQP 1.0 client (rabbitmq-amqp-python-client), dead-lettered by the broker,
read back by dlxtool (issue 39). RabbitMQ 4.x only: skipped on 3.x (AMQP 1.0 is a plugin there, address format v1).

- a table of application property types, properties and annotations published by the client, dead-lettered by
  `discard` and by `modified` with annotations (discard_with_annotations) from a quorum queue to a quorum DLQ, read
  by `peek --protocol 1.0` and compared field by field and type by type; the death history from x-opt-deaths; the
  consumer's words (x-opt-*) as history's error and attempts;
- the unconvertible message (a char application property): the 0.9.1 read names it by position (exit 5) and says
  what a rerun costs, the 1.0 read reads it;
- a quorum DLQ with a delivery limit: peeks over 1.0 spend no attempt where the table says so (4.3), and are refused
  without --spend-attempts where every give-back counts (4.0).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from dlxtool.broker import versions

pytestmark = pytest.mark.broker

client = pytest.importorskip("rabbitmq_amqp_python_client")



def _connection(broker) -> Any:
    env = client.Environment(uri=f"amqp://guest:guest@localhost:{broker.amqp_port}/{broker.vhost}")
    conn = env.connection()
    conn.dial()
    return env, conn


def _queues(broker, qname: str, limit: int | None = None) -> tuple[str, str]:
    work, dlq = f"{qname}.work", f"{qname}.dlq"
    with broker.channel() as ch:
        args: dict[str, Any] = {"x-queue-type": "quorum"}
        if limit is not None:
            args["x-delivery-limit"] = limit
        ch.queue_declare(dlq, durable=True, arguments=args)
        ch.queue_declare(work, durable=True, arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": dlq})
    return work, dlq


# What the client publishes (its publisher takes data bodies only) and what must come back, type by type.
APP_PROPERTIES: list[tuple[str, Any, str, Any]] = [
    # name, value as given to the client (its proton types), AMQP type expected, value expected in the record's JSON
    ("text", "a string", "string", "a string"),
    ("sym", "SYMBOL", "symbol", "sym"),
    ("big", "ULONG_MAX", "ulong", 2**64 - 1),
    ("small", 7, "long", 7),
    ("int32", "INT32", "int", -5),
    ("when", "TIMESTAMP", "timestamp", 1_700_000_000_123),
    ("flag", True, "boolean", True),
    ("ratio", 1.25, "double", 1.25),
    ("nothing", None, "null", None),
    ("blob", b"\x00\xff", "binary", "AP8="),
]


def _client_value(value: Any) -> Any:
    from rabbitmq_amqp_python_client.qpid.proton import int32, symbol, timestamp, ulong

    return {"SYMBOL": symbol("sym"), "ULONG_MAX": ulong(2**64 - 1), "INT32": int32(-5),
            "TIMESTAMP": timestamp(1_700_000_000_123)}.get(value, value) if isinstance(value, str) else value


def _publish(conn: Any, queue: str, n: int, *, poison: bool = False) -> list[str]:
    from rabbitmq_amqp_python_client import AddressHelper, Message
    from rabbitmq_amqp_python_client.qpid.proton import char, ulong

    publisher = conn.publisher(AddressHelper.queue_address(queue))
    ids = []
    try:
        for i in range(n):
            props = {name: _client_value(v) for name, v, _t, _e in APP_PROPERTIES}
            if poison and i == n - 1:
                props["c"] = char("x")
            msg = Message(body=b"body-%d" % i, id=ulong(1000 + i), subject="orders.created", reply_to="/queues/r",
                          group_id="g", group_sequence=3, creation_time=1_700_000_000.5, application_properties=props,
                          durable=True)
            msg.annotations = {"x-opt-tenant": "acme"}
            publisher.publish(msg)
            ids.append(str(1000 + i))
    finally:
        publisher.close()
    return ids


def _dead_letter(broker, queue: str, n: int, *, annotations: dict[str, Any] | None) -> None:
    """Settle `n` messages as the client's DeliveryContext.discard (rejected) or discard_with_annotations (modified:
    delivery-failed, undeliverable-here, the annotations) does — the outcomes its delivery_context.py sends. (Its
    consumer.run()/stop() leaves the connection unable to close within a test's time: the outcomes are sent here.)"""
    from dlxtool.amqp10_message import Typed
    from dlxtool.broker.amqp10 import outcomes
    from dlxtool.broker.amqp10.addresses import queue_address
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.broker.amqp10.links import HeadReader

    typed = {k: Typed("long", v) if isinstance(v, int) else Typed("string", v) for k, v in (annotations or {}).items()}
    outcome = outcomes.REJECT if annotations is None else outcomes.modify(
        delivery_failed=True, undeliverable_here=True, annotations=typed)
    conn = open_connection(broker.profile())
    try:
        reader = HeadReader(conn, queue_address(queue), give_back=outcomes.RELEASE)
        for delivery in reader.read(n):
            reader.settle(delivery, outcome)
        reader.close()
    finally:
        conn.close()


def _peek(run, broker, queue: str, *args: str) -> Any:
    """peek as jsonl; --spend-attempts: on 4.0 every give-back of a quorum queue counts (over 0.9.1 and 1.0 alike),
    and a peek is refused without it (the last test proves that refusal)."""
    return run("--url", broker.url, "peek", queue, "--format", "jsonl", "--spend-attempts", *args)


@pytest.mark.parametrize("how", ["discard", "modified"])
def test_the_clients_messages_come_back_whole_over_amqp10(v4, qname, run, how) -> None:
    work, dlq = _queues(v4, qname)
    env, conn = _connection(v4)
    try:
        ids = _publish(conn, work, 2)
    finally:
        conn.close()
        env.close()
    annotations = {"x-opt-failure-reason": "card declined", "x-opt-attempt": 3} if how == "modified" else None
    _dead_letter(v4, work, 2, annotations=annotations)
    assert v4.wait_depth(dlq, 2) == 2
    result = _peek(run, v4, dlq, "--protocol", "1.0", "-n", "5")
    assert result.exit_code == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["properties"]["message_id"] for r in records] == ids
    # what a move over 0.9.1 would change is said before anything moves (the subject, the milliseconds, the symbol)
    assert "2 of the 2 message(s) shown would not come back whole from a move over AMQP 0.9.1" in result.stderr
    assert "subject" in result.stderr and "loses its milliseconds" in result.stderr, result.stderr
    assert "'sym' (symbol) becomes a string" in result.stderr
    for i, record in enumerate(records):
        m = record["amqp10"]
        assert m["body"] == {"kind": "data", "sections": [__import__("base64").b64encode(b"body-%d" % i).decode()]}
        assert m["properties"]["message_id"] == {"ulong": 1000 + i}
        assert m["properties"]["subject"] == {"string": "orders.created"}
        assert m["properties"]["group_sequence"] == {"uint": 3}
        assert m["properties"]["creation_time"] == {"timestamp": 1_700_000_000_500}
        for name, _given, amqp_type, expected in APP_PROPERTIES:
            assert m["application_properties"][name] == {amqp_type: expected}, name
        annotations = m["message_annotations"]
        assert annotations["x-opt-tenant"] == {"string": "acme"}
        deaths = annotations["x-opt-deaths"]["array"]["items"]
        assert len(deaths) == 1
        assert record["deaths"][0]["queue"] == work and record["deaths"][0]["reason"] == "rejected"
        if how == "modified":
            assert annotations["x-opt-failure-reason"] == {"string": "card declined"}
            assert annotations["x-opt-attempt"] == {"long": 3}
    # the consumer's words, as history shows them
    if how == "modified":
        hist = run("--url", v4.url, "history", dlq, "--protocol", "1.0", "--format", "json", "--spend-attempts")
        assert hist.exit_code == 0, hist.stderr
        assert "card declined" in hist.stdout
    # and the same messages over 0.9.1 lose what the conversion loses: the types say it
    plain = _peek(run, v4, dlq, "-n", "5", "--protocol", "0-9-1")
    assert plain.exit_code == 0, plain.stderr
    first = json.loads(plain.stdout.splitlines()[0])
    assert "amqp10" not in first and first["properties"]["message_id"] == ids[0]
    assert "2 of the 2 message(s) shown were published over AMQP 1.0" in plain.stderr, plain.stderr
    assert "--protocol 1.0 shows them as published" in plain.stderr


def test_a_message_091_cannot_be_given_is_named_and_read_over_amqp10(v4, qname, run) -> None:
    """A char application property: the 0.9.1 read stops there (exit 5), shows the healthy one before it, names the
    position and does not advise a rerun over 0.9.1; the 1.0 read reads both."""
    with v4.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum"})
    env, conn = _connection(v4)
    try:
        _publish(conn, qname, 2, poison=True)
    finally:
        conn.close()
        env.close()
    result = _peek(run, v4, qname, "-n", "5", "--protocol", "0-9-1")
    assert result.exit_code == 5, result.stderr
    assert "position 1" in result.stderr and "cannot be delivered over AMQP 0.9.1" in result.stderr
    assert "do not run this again over 0.9.1" in result.stderr and "--protocol 1.0" in result.stderr
    assert [json.loads(line)["position"] for line in result.stdout.splitlines()] == [0]
    assert v4.wait_depth(qname, 2) == 2
    whole = _peek(run, v4, qname, "--protocol", "1.0", "-n", "5")
    assert whole.exit_code == 0, whole.stderr
    records = [json.loads(line) for line in whole.stdout.splitlines()]
    assert records[1]["amqp10"]["application_properties"]["c"] == {"char": "x"}


def test_peeks_over_amqp10_of_a_limited_quorum_dlq(v4, qname, run) -> None:
    """A quorum DLQ with delivery limit 3: five peeks over 1.0 on 4.3 leave every message there with no attempt
    spent (x-delivery-count as it was); on 4.0, where every give-back counts, the peek is refused (exit 6) and
    changes nothing."""
    work, dlq = _queues(v4, qname, limit=3)
    env, conn = _connection(v4)
    try:
        _publish(conn, work, 2)
    finally:
        conn.close()
        env.close()
    _dead_letter(v4, work, 2, annotations=None)
    assert v4.wait_depth(dlq, 2) == 2
    uncounted = versions.amqp10_peek_give_back(v4.version) is not None
    before = None
    for _ in range(5):
        result = run("--url", v4.url, "peek", dlq, "--format", "jsonl", "--protocol", "1.0", "-n", "5")
        if not uncounted:
            assert result.exit_code == 6, result.stderr
            break
        assert result.exit_code == 0, result.stderr
        counts = [json.loads(line)["headers"].get("x-delivery-count") for line in result.stdout.splitlines()]
        assert before is None or counts == before
        before = counts
        time.sleep(0.2)
    assert v4.wait_depth(dlq, 2) == 2
    uuid.uuid4()


def test_a_091_message_1_0_cannot_be_given_is_named_and_read_over_091(v4, qname, run) -> None:
    """The mirror image: a message published over 0.9.1 with a decimal header ends the AMQP 1.0 session it is
    delivered to (4.0.5, 4.3.6). The 1.0 read shows the messages before it, names its position and says to read over
    0.9.1 (exit 5); the 0.9.1 read reads it."""
    from decimal import Decimal

    import pika

    with v4.channel() as ch:
        ch.queue_declare(qname, durable=True)
    v4.publish(qname, [b"a", b"b"], properties=pika.BasicProperties(message_id="ok"))
    v4.publish(qname, [b"c"], properties=pika.BasicProperties(message_id="poison",
                                                                headers={"price": Decimal("12.345")}))
    v4.publish(qname, [b"d"], properties=pika.BasicProperties(message_id="ok"))
    result = _peek(run, v4, qname, "--protocol", "1.0", "-n", "10")
    assert result.exit_code == 5, result.stderr
    assert "position 2" in result.stderr and "cannot be delivered over AMQP 1.0" in result.stderr
    assert "decimal header" in result.stderr and "leave --protocol out" in result.stderr
    assert [json.loads(line)["body"] for line in result.stdout.splitlines()] == ["YQ==", "Yg=="]
    assert v4.wait_depth(qname, 4) == 4
    whole = _peek(run, v4, qname, "--protocol", "0-9-1", "-n", "10")
    assert whole.exit_code == 0, whole.stderr
    assert len(whole.stdout.splitlines()) == 4
