"""Retry topologies teams run in production, with dead letters made by the broker itself.

Every builder declares its queues in the per-run vhost and returns the names; the dead letters in the
DLQ get their x-death headers from real rejects, TTL expiry and delivery limits — never by hand.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pika

PROPS = dict(content_type="application/json", delivery_mode=2, message_id="m", type="shop.OrderPlaced",
             app_id="orders-svc", timestamp=1763721005, correlation_id="c-1")


def props(i: int, **headers: Any) -> pika.BasicProperties:
    return pika.BasicProperties(headers={"tenant": "acme", "i": i, **headers},
                                **{**PROPS, "message_id": f"m-{i}"})


@dataclass
class Topology:
    dlq: str
    dlx: str


def dead_letter_target(ch: Any, prefix: str) -> Topology:
    """A fanout DLX and its DLQ: everything dead-lettered to it lands in one queue (mixed origins)."""
    dlx, dlq = f"{prefix}.dlx", f"{prefix}.dlq"
    ch.exchange_declare(dlx, "fanout")
    ch.queue_declare(dlq, durable=True)
    ch.queue_bind(dlq, dlx)
    return Topology(dlq, dlx)


def reject_all(ch: Any, queue: str, n: int, *, requeue: bool = False, batch: int = 2000) -> None:
    """Consume n messages and reject them with multiple-nacks: the broker dead-letters them (reason rejected)."""
    left = n
    while left:
        want = min(batch, left)
        ch.basic_qos(prefetch_count=want)
        last = None
        for got, (method, _props, _body) in enumerate(ch.consume(queue, inactivity_timeout=10), 1):
            if method is None:
                raise AssertionError(f"{queue}: expected {want} more messages, got {got - 1}")
            last = method.delivery_tag
            if got == want:
                break
        ch.basic_nack(last, multiple=True, requeue=requeue)
        ch.cancel()
        left -= want


def publish_bodies(ch: Any, bodies: Iterable[bytes], *, exchange: str = "", routing_key: str,
                   start: int = 0) -> list[bytes]:
    out = []
    for i, body in enumerate(bodies, start):
        ch.basic_publish(exchange, routing_key, body, props(i), mandatory=True)
        out.append(body)
    return out


def reject_to_dlx(ch: Any, top: Topology, origin: str, bodies: list[bytes], **args: Any) -> None:
    """origin --reject--> DLX --> DLQ."""
    ch.queue_declare(origin, durable=True, arguments={"x-dead-letter-exchange": top.dlx, **args})
    publish_bodies(ch, bodies, routing_key=origin)
    reject_all(ch, origin, len(bodies))


def routing_key_override(ch: Any, top: Topology, origin: str, bodies: list[bytes]) -> str:
    """Published via a topic exchange; the DLX replaces the routing key with 'dead'."""
    exchange = f"{origin}.events"
    ch.exchange_declare(exchange, "topic")
    ch.queue_declare(origin, durable=True,
                     arguments={"x-dead-letter-exchange": top.dlx, "x-dead-letter-routing-key": "dead"})
    ch.queue_bind(origin, exchange, "order.#")
    publish_bodies(ch, bodies, exchange=exchange, routing_key="order.created")
    reject_all(ch, origin, len(bodies))
    return exchange


def ttl_wait_loop(ch: Any, top: Topology, origin: str, bodies: list[bytes], loops: int = 2) -> None:
    """Work queue rejects into a TTL wait queue that dead-letters back (`loops` times); then the
    application parks the message in the DLQ, copying the broker-made headers (a common recoverer)."""
    wait = f"{origin}.wait"
    ch.queue_declare(wait, arguments={"x-message-ttl": 20, "x-dead-letter-exchange": "",
                                      "x-dead-letter-routing-key": origin}, durable=True)
    ch.queue_declare(origin, durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": wait})
    publish_bodies(ch, bodies, routing_key=origin)
    for _ in range(loops):
        reject_all(ch, origin, len(bodies))  # -> wait -> (TTL) -> origin
        deadline = time.monotonic() + 15
        while ch.queue_declare(origin, passive=True).method.message_count < len(bodies):
            assert time.monotonic() < deadline, "messages did not come back from the wait queue"
            time.sleep(0.02)
    for parked, (method, p, body) in enumerate(ch.consume(origin, inactivity_timeout=10), 1):
        assert method is not None
        ch.basic_publish(top.dlx, "", body, p, mandatory=True)
        ch.basic_ack(method.delivery_tag)
        if parked == len(bodies):
            break
    ch.cancel()


def quorum_delivery_limit(ch: Any, top: Topology, origin: str, bodies: list[bytes], limit: int = 2) -> None:
    """A quorum queue with x-delivery-limit: requeued until the broker dead-letters (delivery_limit)."""
    ch.queue_declare(origin, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": limit,
                                                      "x-dead-letter-exchange": top.dlx})
    publish_bodies(ch, bodies, routing_key=origin)
    deadline = time.monotonic() + 30
    empty_polls = 0
    while empty_polls < 10:  # a nacked message is briefly invisible: empty must last a moment
        assert time.monotonic() < deadline, "quorum queue did not dead-letter at its delivery limit"
        method, _p, _b = ch.basic_get(origin)
        if method is None:
            empty_polls += 1
            time.sleep(0.02)
            continue
        empty_polls = 0
        ch.basic_reject(method.delivery_tag, requeue=True)  # counted on every version (4.3: a nack is not)
