"""The engine's prefetch under a byte budget, against the real broker.

RabbitMQ ignores basic.qos prefetch_size, and applies a new basic.qos prefetch_count only to consumers started
after it: so the engine changes its prefetch by starting a new consumer. Big bodies narrow the window (the
broker's own view of the consumer says so), nothing is given back for it (no delivery attempt on a quorum
queue), every message moves once, in order."""

from __future__ import annotations

import time
import uuid
from urllib.parse import quote

import pika
import pytest

from dlxtool.ops.actions import Action, Deciding, Decision
from dlxtool.ops.engine import RunHooks, Transfer, TransferOptions
from dlxtool.record import MessageRecord

KIB = 1024


def connect(broker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


def test_rabbitmq_applies_a_new_qos_to_new_consumers_only(broker, qname) -> None:
    """The fact _change_prefetch rests on, on every broker the suite runs: a basic.qos sent while a consumer runs
    leaves that consumer's window as it was."""
    conn = connect(broker)
    try:
        ch = conn.channel()
        ch.queue_declare(qname, durable=True)
        for _ in range(40):
            ch.basic_publish("", qname, b"x")
        ch.basic_qos(prefetch_count=10)
        got: list[int] = []
        ch.basic_consume(qname, lambda _c, m, _p, _b: got.append(m.delivery_tag))
        wait_for(conn, lambda: len(got) == 10)
        ch.basic_qos(prefetch_count=2)
        ch.basic_ack(got[-1], multiple=True)
        wait_for(conn, lambda: len(got) == 20)
        assert len(got) == 20  # ten more, not two: the running consumer kept its prefetch of 10
    finally:
        conn.close()


def wait_for(conn: pika.BlockingConnection, ready, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not ready() and time.monotonic() < deadline:
        conn.process_data_events(0.05)
    conn.process_data_events(0.3)  # and a little more: anything beyond would show


def consumer_prefetch(broker, queue: str, not_: int, seconds: float = 15) -> int | None:
    """The prefetch of the queue's consumer as the broker reports it (management API), once it is not `not_` (the
    API shows a new consumer a few seconds late)."""
    deadline = time.monotonic() + seconds
    seen = None
    while time.monotonic() < deadline:
        details = broker.mgmt.get(f"queues/{quote(broker.vhost, safe='')}/{quote(queue, safe='')}")
        seen = [c.get("prefetch_count") for c in details.get("consumer_details") or []]
        if seen and not_ not in seen:
            return seen[0]
        time.sleep(0.3)
    return seen[0] if seen else None


@pytest.mark.parametrize("qtype", ["classic", "quorum"])
def test_big_bodies_narrow_the_window(broker, qname, qtype) -> None:
    source, target = f"{qname}.src", f"{qname}.dst"
    small = [f"s{i:03d}".encode() + b"." * KIB for i in range(20)]
    big = [f"b{i:03d}".encode() + b"#" * (64 * KIB - 4) for i in range(40)]  # 64 KiB each
    arguments = {"x-queue-type": "quorum", "x-delivery-limit": 5} if qtype == "quorum" else {}
    with broker.channel() as ch:
        ch.queue_declare(source, durable=True, arguments=arguments)
        ch.queue_declare(target, durable=True)
    broker.publish(source, small + big)
    seen: dict[str, int | None] = {}

    def decide(record: MessageRecord) -> Decision:
        if record.position == 45:  # well into the big bodies: the broker's view of our consumer now
            seen["prefetch"] = consumer_prefetch(broker, source, not_=10)
        return Decision(Action.MOVE, target, "", target)

    conn = connect(broker)
    try:
        transfer = Transfer(conn, source, Deciding(decide), options=TransferOptions(
            prefetch=10, window=50, max_bytes=256 * KIB, handle_sigint=False))
        result = transfer.run()
    finally:
        conn.close()
    # unknown sizes: one at a time; small bodies: wider, doubling up to the --prefetch ceiling; then 64 KiB bodies:
    # 256 KiB / (2 x 64 KiB), at once
    assert transfer.prefetches == [1, 2, 4, 8, 10, 2]
    assert seen["prefetch"] == 2
    assert result.moved_total == 60 and not result.requeued and not result.left and not result.error
    moved = broker.drain(target)
    assert [body for _m, _p, body in moved] == small + big  # in order, each once
    # nothing went back to the source on the way (a return is a delivery attempt on a quorum queue)
    assert not any({"x-delivery-count", "x-acquired-count"} & set(p.headers or {}) for _m, p, _b in moved)
    assert broker.queue_depth(source) == 0


def test_the_average_from_the_api_sets_the_first_window(broker, qname) -> None:
    """With the queue's average body known before the first delivery, the first consumer's window fits it."""
    source, target = f"{qname}.src", f"{qname}.dst"
    bodies = [f"b{i:03d}".encode() + b"#" * (64 * KIB) for i in range(12)]
    with broker.channel() as ch:
        ch.queue_declare(source, durable=True)
        ch.queue_declare(target, durable=True)
    broker.publish(source, bodies)
    conn = connect(broker)
    try:
        move = Deciding(lambda _r: Decision(Action.MOVE, target, "", target))
        transfer = Transfer(conn, source, move, options=TransferOptions(
            prefetch=2000, max_bytes=1024 * KIB, handle_sigint=False), hooks=RunHooks(size_hint=64 * KIB))
        result = transfer.run()
    finally:
        conn.close()
    assert transfer.prefetches[0] == 4  # 1 MiB / (2 x twice the average of 64 KiB)
    assert result.moved_total == 12 and [b for _m, _p, b in broker.drain(target)] == bodies


def test_without_a_budget_the_prefetch_is_the_ceiling(broker) -> None:
    """No max_bytes (a caller of the ops layer that sets none): the engine as it was, one consumer."""
    qname = f"nobudget-{uuid.uuid4().hex[:6]}"
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.queue_declare(qname + ".dst", durable=True)
    broker.publish(qname, [b"y" * (64 * KIB)] * 5)
    conn = connect(broker)
    try:
        transfer = Transfer(conn, qname, Deciding(lambda _r: Decision(Action.MOVE, qname + ".dst", "", qname + ".dst")),
                            options=TransferOptions(prefetch=300, handle_sigint=False))
        assert transfer.run().moved_total == 5
    finally:
        conn.close()
    assert transfer.prefetches == [5]  # min(prefetch, snapshot), as before


def test_a_narrow_window_still_gives_back_in_place_what_stays(broker, qname) -> None:
    """A classic queue's messages that stay are held (given back in place at the end) until something moves: a run
    that moves nothing changes nothing. Held ones keep no bytes; when they fill a narrow window, a new consumer
    takes over (held deliveries of a classic queue go back in order whatever consumer had them)."""
    bodies = [f"k{i:03d}".encode() + b"=" * (64 * KIB - 4) for i in range(12)]
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, bodies)
    conn = connect(broker)
    try:
        transfer = Transfer(conn, qname, Deciding(lambda _r: Decision.keep()), options=TransferOptions(
            max_bytes=128 * KIB, handle_sigint=False), hooks=RunHooks(hold_stays=True))
        result = transfer.run()
    finally:
        conn.close()
    assert max(transfer.prefetches) == 1  # 128 KiB / (2 x 64 KiB)
    assert result.kept == {"not selected": 12} and result.republished == 0 and not result.left
    assert [body for body, _h in broker.snapshot(qname)] == bodies
