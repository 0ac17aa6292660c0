"""Whether this connection's user may publish where a command is about to publish — asked of the broker itself,
before any message is read, with probes that change nothing.

RabbitMQ's permissions are regular expressions per vhost (configure, write, read), plus topic permissions; a
user who is not an administrator cannot read them through the management API, and even one who can would be
reading a second source about a first. So dlxtool asks the broker the way a publish would, on a channel of its
own, leaving nothing behind:

  * configure and write on dlxtool's temporary exchanges (`dlxtool.*`, the original-key route): declare a
    throwaway fanout exchange of that name, publish one empty mandatory message to it (bound to nothing: it
    comes back unroutable, nowhere delivered), delete it;
  * write on an exchange that exists (the default exchange): publish one empty mandatory message with a routing
    key no queue has — returned unroutable, nowhere delivered.

The answer is the broker's: None (allowed) or what it said ("403 ACCESS_REFUSED - access to exchange
'amq.default' in vhost 'v' refused for user 'ro'")."""

from __future__ import annotations

import uuid
from typing import Any

from dlxtool.broker.channel import AsyncChannel, ChannelClosed
from dlxtool.errors import ConnectError

PROBE_PREFIX = "dlxtool.probe."


def probe_temporary_exchanges(conn: Any, timeout: float) -> str | None:
    """None where this user may declare, publish to and delete an exchange named like dlxtool's temporary ones
    (configure and write on `dlxtool.*`); else what the broker said."""
    name = f"{PROBE_PREFIX}{uuid.uuid4().hex[:12]}"
    channel = AsyncChannel(conn, timeout)
    declared = False
    try:
        channel.call("exchange_declare", name, exchange_type="fanout", durable=False, auto_delete=False)
        declared = True
        return _publish_unroutable(channel, name)
    except ChannelClosed:
        return channel.closed_reason
    finally:
        if declared:
            _delete(conn, name, timeout)
        channel.close()


def probe_write(conn: Any, exchange: str, timeout: float) -> str | None:
    """None where this user may publish to `exchange` ("" the default exchange); else what the broker said. The
    probe message has a routing key no queue has: returned, delivered nowhere (an exchange with an alternate
    exchange or a catch-all binding would route it: only ask this of the default exchange and dlxtool's own)."""
    channel = AsyncChannel(conn, timeout)
    try:
        return _publish_unroutable(channel, exchange)
    except ChannelClosed:
        return channel.closed_reason
    finally:
        channel.close()


def _publish_unroutable(channel: AsyncChannel, exchange: str) -> str | None:
    """One empty mandatory publish with a confirm; None once the broker answered it (returned, then acked)."""
    import pika

    answered: list[bool] = []
    def confirmed(_frame: object) -> None:
        answered.append(True)

    channel.impl.add_on_return_callback(_ignore)  # expected: unroutable on purpose
    channel.call("confirm_delivery", ack_nack_callback=confirmed)
    channel.impl.basic_publish(exchange, f"{PROBE_PREFIX}{uuid.uuid4().hex}", b"", pika.BasicProperties(),
                               mandatory=True)
    try:
        channel.wait_for(lambda: bool(answered), "a probe publish's confirm")
    except ChannelClosed:
        return channel.closed_reason
    return None


def _delete(conn: Any, name: str, timeout: float) -> None:
    channel = AsyncChannel(conn, timeout)
    try:
        channel.call("exchange_delete", name)
    except (ChannelClosed, ConnectError):
        pass  # best effort: the name says what it was
    finally:
        channel.close()


def _ignore(*_: object) -> None:
    """A pika callback whose calls carry nothing wanted (the deliveries of a consume only started, a return)."""
