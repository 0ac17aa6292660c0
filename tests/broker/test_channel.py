"""AsyncChannel against a real broker: cancelling a consumer while deliveries are on their way, and
closing a channel (the close-ok is what proves earlier acks).

Deliveries are made to wait in the socket on purpose: the consumer's frames are sent, then the test
waits — on another connection, without reading ours — until the queue counts them delivered, and only
then cancels. Everything the broker sent is then read while the cancel-ok is awaited."""

from __future__ import annotations

import time
from typing import Any

import pika
import pytest

from dlxtool.broker.channel import AsyncChannel, ChannelClosed
from dlxtool.broker.giveback import close_channel
from dlxtool.broker.wire.frames import fast_deliveries
from tests.support.fill import fill, take_all

KINDS = {
    "classic": {},
    "quorum": {"x-queue-type": "quorum"},
    "quorum-limit": {"x-queue-type": "quorum", "x-delivery-limit": 5},
}


def wait_until(broker, queue: str, ready: int, timeout: float = 30.0) -> None:
    assert broker.wait_depth(queue, ready, timeout=timeout) == ready, f"{queue}: the broker never sent them"


@pytest.mark.parametrize("fast", [True, False], ids=["fast-deliveries", "pika-deliveries"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_deliveries_arriving_before_the_cancel_ok_are_held_and_given_back_in_place(broker, qname, kind,
                                                                                   fast) -> None:
    """pika's basic_cancel rejects them one by one: a quorum queue put them back scrambled (with a
    delivery limit) or at the back (without one), each ahead of the in-order give-back of the close."""
    bodies = [f"m-{i:05d}".encode() for i in range(300)]
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments=KINDS[kind])
    fill(broker, qname, bodies)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = AsyncChannel(conn)
        channel.call("basic_qos", prefetch_count=200)
        if fast:
            fast_deliveries(conn, channel.impl)
        got: list[Any] = []
        tag = channel.impl.basic_consume(qname, lambda _c, m, _p, body: got.append(body), auto_ack=False)
        conn.process_data_events(time_limit=0)  # sends basic.consume; the deliveries come after it
        wait_until(broker, qname, 100)  # all 200 sent to us, still unread in the socket
        read_before_cancel = len(got)
        channel.cancel_consumer(tag)
        assert read_before_cancel < 200, "nothing was in flight at the cancel: the test proves nothing"
        assert got == bodies[:200]  # none rejected behind our back
        assert close_channel(channel)  # the close-ok came
    finally:
        conn.close()
    wait_until(broker, qname, 300)
    left = take_all(broker, qname)
    assert [b for _p, b in left] == bodies
    if kind.startswith("quorum"):
        counts = [int((p.headers or {}).get("x-delivery-count", 0)) for p, _b in left]
        assert counts == [1] * 200 + [0] * 100  # one return each: the close's


def test_cancelling_a_consumer_the_broker_cancelled_already_returns_at_once(broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = AsyncChannel(conn, timeout=5)
        cancelled: list[Any] = []
        channel.impl.add_on_cancel_callback(cancelled.append)
        ok: list[Any] = []
        tag = channel.impl.basic_consume(qname, lambda *_a: None, auto_ack=False, callback=ok.append)
        channel.wait_for(lambda: bool(ok), "basic.consume")
        with broker.channel() as ch:
            ch.queue_delete(qname)  # the broker cancels our consumer
        channel.wait_for(lambda: bool(cancelled), "the broker's basic.cancel")
        channel.cancel_consumer(tag)  # no cancel-ok will come: must not wait for one
        assert channel.is_open
    finally:
        conn.close()


def test_close_waits_for_the_close_ok(broker, qname) -> None:
    """The close-ok proves the acks sent before it (the transfer engine counts on it)."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    fill(broker, qname, [b"a", b"b", b"c"])
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = AsyncChannel(conn)
        box: list[Any] = []
        channel.impl.basic_get(qname, lambda _c, m, _p, _b: box.append(m), auto_ack=False)
        channel.wait_for(lambda: bool(box), "basic.get")
        channel.impl.basic_ack(box[0].delivery_tag)
        channel.close()
        assert channel.impl.is_closed and channel.close_answered  # not merely "closing"
    finally:
        conn.close()
    assert broker.queue_depth(qname) == 2


def test_waiting_for_a_reply_never_sleeps_out_a_time_limit(broker, qname) -> None:
    """process_data_events(time_limit) sleeps the whole limit on these channels however soon the reply
    comes; a command waits for a dozen replies before its first message, so wait_for must not use it."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    limits: list[Any] = []
    real = conn.process_data_events

    def recording(time_limit: Any = 0) -> None:
        limits.append(time_limit)
        real(time_limit=time_limit)

    conn.process_data_events = recording
    try:
        channel = AsyncChannel(conn)
        channel.call("queue_declare", qname, durable=True)
        channel.call("basic_qos", prefetch_count=10)
        assert limits, "nothing was waited for: the test proves nothing"
        assert set(limits) == {0}
    finally:
        conn.close()


def test_pump_reads_deliveries_and_raises_when_the_connection_drops(broker, qname) -> None:
    """pump() does the plain-TCP I/O itself, outside pika's loop (channel.process_io): it must deliver the
    same messages, run pika's loop now and then, and still raise on a lost connection."""
    from tests.ops.test_purge_faults import through_proxy
    from tests.support.proxy import CuttingProxy

    bodies = [f"m-{i:04d}".encode() for i in range(500)]
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    fill(broker, qname, bodies)
    with CuttingProxy(broker.host, broker.amqp_port) as proxy:
        conn = through_proxy(broker, proxy)
        full_loops: list[Any] = []
        real = conn.process_data_events
        conn.process_data_events = lambda time_limit=0: (full_loops.append(time_limit), real(time_limit))
        channel = AsyncChannel(conn)
        fast_deliveries(conn, channel.impl)
        got: list[bytes] = []
        channel.impl.basic_consume(qname, lambda _c, _m, _p, body: got.append(body), auto_ack=True)
        deadline = time.monotonic() + 30
        full_loops.clear()
        pumps = 0
        while (len(got) < len(bodies) or pumps < 50) and time.monotonic() < deadline:
            channel.pump(0.002 if len(got) < len(bodies) else 0)
            pumps += 1
        assert got == bodies
        # pika's loop runs every FULL_LOOP_EVERY (50 ms) or when needed, not on every pump
        assert len(full_loops) < pumps // 2, "pumps ran pika's whole loop: the lean path was not taken"
        proxy.cut()
        with pytest.raises(Exception) as lost:  # pika's StreamLostError / ConnectionClosed
            while time.monotonic() < deadline:
                channel.pump(0.002)
        assert isinstance(lost.value, (pika.exceptions.AMQPConnectionError, ChannelClosed)), lost.value
