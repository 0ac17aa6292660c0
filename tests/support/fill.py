"""Filling queues fast for tests: publishes without per-message confirms, then one wait for the depth."""

from __future__ import annotations

from typing import Any

import pika

from tests.support.broker import BrokerEnv


def fill(broker: BrokerEnv, queue: str, bodies: list[bytes], props: Any = None) -> None:
    """Publish bodies to queue in order (one connection, no confirm round trip per message)."""
    expected = broker.queue_depth(queue) + len(bodies)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        for i, body in enumerate(bodies):
            p = props(i) if callable(props) else props
            ch.basic_publish("", queue, body, p)
        # Open until the queue counts them: closed right after, a quorum queue under load (RabbitMQ
        # 3.10) lost part of them now and then (seen: 436 of 600, for good).
        depth = broker.wait_depth(queue, expected, timeout=30)
    finally:
        conn.close()
    assert depth == expected, f"{queue}: {depth} of {expected}"


def poison_at_head(broker: BrokerEnv, queue: str, poison: list[bytes], deaths: int = 3) -> None:
    """A classic queue whose dead-letter exchange loops back to itself; a consumer rejects the poison
    (requeue=False) `deaths` times, so the broker gives each an x-death count of `deaths`, and the
    poison ends at the head of the (otherwise empty) queue."""
    from tests.support.retry_topologies import reject_all

    with broker.channel() as ch:
        ch.queue_declare(queue, durable=True,
                         arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue})
        for body in poison:
            ch.basic_publish("", queue, body, pika.BasicProperties(type="shop.Poison", message_id=body.decode()),
                             mandatory=True)
        for _ in range(deaths):
            reject_all(ch, queue, len(poison))
            assert broker.wait_depth(queue, len(poison)) == len(poison)


def take_all(broker: BrokerEnv, queue: str) -> list[tuple[Any, bytes]]:
    """Consume (and ack) every message of queue, in order: [(properties, body)]. Much faster than
    basic.get one by one for big queues; destructive, so for the end of a test."""
    expected = broker.queue_depth(queue)
    out: list[tuple[Any, bytes]] = []
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1000)
        for method, props, body in ch.consume(queue, inactivity_timeout=5):
            if method is None:
                break
            out.append((props, body))
            if len(out) % 500 == 0 or len(out) == expected:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if len(out) == expected:
                break
        ch.cancel()
    finally:
        conn.close()
    assert len(out) == expected, f"{queue}: read {len(out)} of {expected}"
    return out
