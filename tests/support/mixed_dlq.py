"""A dead-letter queue with dead letters of several kinds, made for real: rejects and TTL expiry by the broker,
and a Spring-style recoverer (the application republishes a failed message with its error and origin headers).

Positions in the DLQ (a classic queue, `{prefix}.dlq`):
  0-2  rejected from {prefix}.orders: JSON bodies {"order": i}, AMQP type shop.OrderPlaced, tenant=acme, an old
       timestamp property (2025-11-21)
  3-4  expired in {prefix}.slow (its TTL): protobuf PaymentFailed bodies, no AMQP type, tenant=globex, no timestamp
  5-6  republished by a Spring recoverer that failed them in {prefix}.payments: x-exception-message 5 "Read timed out",
       6 "IllegalStateException: bad state"; tenant=initech
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pika

from tests.support import retry_topologies as rt


@dataclass
class Mixed:
    dlq: str
    orders: str
    slow: str
    payments: str
    bodies: list[bytes]


def payment_failed_bytes(order: str) -> bytes:
    from proto_registry import DEMO_PROTOS, Registry

    cls = Registry.load([DEMO_PROTOS]).message_class("shop.orders.v1.PaymentFailed")
    msg = cls(order_id=order, payment_id=f"pay-{order}", error_code="card_declined",
              error_message="Your card was declined.", attempt=3)
    msg.amount.currency_code = "EUR"
    msg.amount.units = 129
    msg.failed_at.seconds = 1763721005
    return bytes(msg.SerializeToString())


def mixed_dlq(broker, prefix: str) -> Mixed:
    m = Mixed(f"{prefix}.dlq", f"{prefix}.orders", f"{prefix}.slow", f"{prefix}.payments", [])
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, prefix)
        assert top.dlq == m.dlq
        orders = [f'{{"order": {i}}}'.encode() for i in range(3)]
        rt.reject_to_dlx(ch, top, m.orders, orders)
        m.bodies += orders
        ch.queue_declare(m.slow, durable=True, arguments={"x-message-ttl": 1, "x-dead-letter-exchange": top.dlx})
        slow = [payment_failed_bytes(f"ord-{i}") for i in (3, 4)]
        for body in slow:
            ch.basic_publish("", m.slow, body, pika.BasicProperties(headers={"tenant": "globex"}, delivery_mode=2),
                             mandatory=True)
            _wait(broker, m.dlq, len(m.bodies) + 1)  # one at a time: expiry keeps their order in the DLQ
            m.bodies.append(body)
        ch.queue_declare(m.payments, durable=True)
        for error, i in (("java.net.SocketTimeoutException: Read timed out", 5),
                         ("java.lang.IllegalStateException: bad state", 6)):
            body = f'{{"payment": {i}}}'.encode()
            # what Spring AMQP's RepublishMessageRecoverer sends after the listener in `payments` failed
            headers = {"tenant": "initech", "x-exception-message": error, "x-original-exchange": "",
                       "x-original-routingKey": m.payments, "x-exception-stacktrace": f"{error}\n\tat Listener"}
            ch.basic_publish(top.dlx, "", body, pika.BasicProperties(headers=headers, delivery_mode=2,
                                                                     content_type="application/json"),
                             mandatory=True)
            m.bodies.append(body)
    _wait(broker, m.dlq, len(m.bodies))
    return m


def _wait(broker, queue: str, n: int) -> None:
    deadline = time.monotonic() + 15
    while broker.queue_depth(queue) < n:
        assert time.monotonic() < deadline, f"{queue}: fewer than {n} dead letters arrived"
        time.sleep(0.02)
