"""Dead-letter topologies built in the test vhost, with the broker making the dead letters.

Each builder declares its queues and exchanges under a unique prefix, pushes messages through real
rejects / TTL expiry / delivery limits / max-length overflow, waits until the DLQ holds them, and
returns the names. Shared by the peek/history tests (and free for replay/purge tests to use).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pika

from tests.support.broker import BrokerEnv


@dataclass
class Topology:
    work: str  # where messages fail (the origin replay should use)
    dlq: str  # where they end up
    wait: str | None = None  # TTL wait queue, if any
    exchange: str = ""  # exchange the messages were first published to
    routing_key: str = ""  # their original routing key


def _props(i: int, **extra: object) -> pika.BasicProperties:
    return pika.BasicProperties(message_id=f"m-{i}", type="shop.orders.v1.OrderPlaced", delivery_mode=2,
                                **extra)  # type: ignore[arg-type]


def _take(ch: object, queue: str, timeout: float = 15.0) -> int:
    """Take one message from `queue` (waiting for it), unacked; its delivery tag."""
    deadline = time.monotonic() + timeout
    while True:
        method, _props, _body = ch.basic_get(queue, auto_ack=False)  # type: ignore[attr-defined]
        if method is not None:
            return method.delivery_tag
        if time.monotonic() > deadline:
            raise AssertionError(f"no message came to {queue}")
        time.sleep(0.02)


def _get_and_settle(ch: object, queue: str, *, requeue: bool) -> None:
    # a reject: a failure on every version (RabbitMQ 4.3 no longer counts a requeueing nack as a delivery attempt)
    ch.basic_reject(_take(ch, queue), requeue=requeue)  # type: ignore[attr-defined]


def _dlx_pair(ch: object, prefix: str, **work_args: object) -> Topology:
    dlx, dlq, work = f"{prefix}.dlx", f"{prefix}.dlq", f"{prefix}.work"
    ch.exchange_declare(dlx, "fanout")  # type: ignore[attr-defined]
    ch.queue_declare(dlq, durable=True)  # type: ignore[attr-defined]
    ch.queue_bind(dlq, dlx)  # type: ignore[attr-defined]
    ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": dlx, **work_args})  # type: ignore
    return Topology(work=work, dlq=dlq, routing_key=work)


def reject_to_dlq(broker: BrokerEnv, prefix: str, n: int = 3, *, error: str | None = None) -> Topology:
    """(1) consumer rejects (requeue=false) → DLX → DLQ. `error` goes in an x-exception-message header."""
    with broker.channel() as ch:
        topo = _dlx_pair(ch, prefix)
        for i in range(n):
            headers = {"x-exception-message": error} if error else None
            ch.basic_publish("", topo.work, f"order {i}".encode(), _props(i, headers=headers), mandatory=True)
        for _ in range(n):
            _get_and_settle(ch, topo.work, requeue=False)
    broker.wait_depth(topo.dlq, n)
    return topo


def ttl_retry_loop(broker: BrokerEnv, prefix: str, n: int = 2, cycles: int = 3) -> Topology:
    """(2) wait queue (per-message expiration first, queue TTL after: the broker strips `expiration`
    when it dead-letters an expired message) --expire--> work --reject--> wait ..., `cycles` rejects;
    before the last one the operator points the wait queue's way out at the DLQ, so the message lands
    there by expiry: x-death = [wait expired×(cycles+1), work rejected×cycles], most recent first.
    """
    work, wait, dlq = f"{prefix}.work", f"{prefix}.wait", f"{prefix}.dlq"
    to_wait, back = f"{prefix}.to-wait", f"{prefix}.back"
    with broker.channel() as ch:
        ch.exchange_declare(to_wait, "fanout")
        ch.exchange_declare(back, "fanout")
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": to_wait})
        ch.queue_declare(wait, durable=True, arguments={"x-dead-letter-exchange": back, "x-message-ttl": 30})
        ch.queue_bind(wait, to_wait)
        ch.queue_bind(work, back)
        for i in range(n):
            ch.basic_publish(to_wait, "", f"retry {i}".encode(), _props(i, expiration="50"), mandatory=True)
        for cycle in range(cycles):
            tags = [_take(ch, work) for _ in range(n)]  # all back in work: no message is waiting now
            if cycle == cycles - 1:
                ch.queue_unbind(work, back)
                ch.queue_bind(dlq, back)
            for tag in tags:
                ch.basic_nack(tag, requeue=False)
    broker.wait_depth(dlq, n)
    return Topology(work=work, dlq=dlq, wait=wait, exchange=to_wait, routing_key="")


def routing_key_override(broker: BrokerEnv, prefix: str, n: int = 2) -> Topology:
    """(3) published to a direct exchange with key order.placed; the work queue's
    x-dead-letter-routing-key replaces it with `parked` on the way to the DLQ."""
    exchange, dlx = f"{prefix}.orders", f"{prefix}.dlx"
    work, dlq = f"{prefix}.work", f"{prefix}.dlq"
    with broker.channel() as ch:
        ch.exchange_declare(exchange, "direct")
        ch.exchange_declare(dlx, "direct")
        ch.queue_declare(dlq, durable=True)
        ch.queue_bind(dlq, dlx, "parked")
        ch.queue_declare(work, durable=True,
                         arguments={"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "parked"})
        ch.queue_bind(work, exchange, "order.placed")
        for i in range(n):
            ch.basic_publish(exchange, "order.placed", f"order {i}".encode(), _props(i), mandatory=True)
        for _ in range(n):
            _get_and_settle(ch, work, requeue=False)
    broker.wait_depth(dlq, n)
    return Topology(work=work, dlq=dlq, exchange=exchange, routing_key="order.placed")


def quorum_delivery_limit(broker: BrokerEnv, prefix: str, n: int = 2, limit: int = 1) -> Topology:
    """(4) quorum queue with x-delivery-limit: a consumer that rejects with requeue until the broker
    dead-letters the message with reason delivery_limit."""
    with broker.channel() as ch:
        topo = _dlx_pair(ch, prefix, **{"x-queue-type": "quorum", "x-delivery-limit": limit})
        for i in range(n):
            ch.basic_publish("", topo.work, f"poison {i}".encode(), _props(i), mandatory=True)
        for _ in range((limit + 1) * n):
            _get_and_settle(ch, topo.work, requeue=True)
    broker.wait_depth(topo.dlq, n)
    return topo


def max_length_overflow(broker: BrokerEnv, prefix: str, n: int = 5, max_length: int = 2) -> Topology:
    """(5) classic queue with x-max-length: the oldest messages are dropped from the head (maxlen)."""
    with broker.channel() as ch:
        topo = _dlx_pair(ch, prefix, **{"x-max-length": max_length})
        for i in range(n):
            ch.basic_publish("", topo.work, f"order {i}".encode(), _props(i), mandatory=True)
    broker.wait_depth(topo.dlq, n - max_length)
    return topo
