"""RabbitMQ 4.x's AMQP 1.0 address format v2 (the only one a 4.3 broker with amqp_address_v1 denied takes):
/queues/NAME for a queue (to send to it directly, like the default exchange, or to read from it), and
/exchanges/NAME/KEY (/exchanges/NAME without a key) for an exchange. Each segment percent-encoded as RFC 3986
says (unreserved characters stay), as RabbitMQ's own clients encode it."""

from __future__ import annotations

from urllib.parse import quote


def _segment(name: str) -> str:
    return quote(name, safe="-._~")


def queue_address(name: str) -> str:
    return f"/queues/{_segment(name)}"


def exchange_address(exchange: str, routing_key: str | None = None) -> str:
    """An exchange with a routing key (or none). The default exchange has no address of its own: send to the
    queue (queue_address)."""
    if not exchange:
        raise ValueError("the default exchange is addressed by its queue: /queues/NAME")
    base = f"/exchanges/{_segment(exchange)}"
    return base if routing_key is None else f"{base}/{_segment(routing_key)}"
