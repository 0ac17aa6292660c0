"""A queue as the broker sees it now: whether it exists, its ready and consumer counts (a passive
queue.declare: exact and current, unlike the management API's sampled figures) and its type (an AMQP
probe, for when the management API cannot be used). The one place a passive declare is written, and where
RabbitMQ's refusals of one become dlxtool errors. Shared by every command that looks at a queue before
touching it (peek, history, dump, purge, replay, load), so that none imports another's module for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlxtool.errors import ConnectError, DlxtoolError, NotFoundError, UnavailableError

if TYPE_CHECKING:
    from dlxtool.config import BrokerProfile


# A classic queue whose home node is down: "NOT_FOUND - home node 'rabbit@c2' of durable queue 'q' in vhost 'v' is
# down or inaccessible" (rabbit_amqqueue, 3.x and 4.x). The queue exists; its messages cannot be reached now.
_NODE_DOWN = re.compile(r"home node '([^']*)' of .* is down or inaccessible")


@dataclass(frozen=True)
class Counts:
    """What a passive queue.declare answers."""

    ready: int       # messages ready (not held unacked by a consumer)
    consumers: int


def declare(channel: Any, queue: str) -> Counts:
    """A passive declare on `channel` (an AsyncChannel, or a blocking pika channel). A missing queue
    closes the channel: the broker's refusal is raised as it comes (AsyncChannel: ChannelClosed; a
    blocking channel: pika's ChannelClosedByBroker) — `counts` turns it into a dlxtool error."""
    from dlxtool.broker.channel import AsyncChannel

    if isinstance(channel, AsyncChannel):
        method = channel.call("queue_declare", queue, passive=True).method
    else:
        method = channel.queue_declare(queue, passive=True).method
    return Counts(int(method.message_count), int(method.consumer_count))


def counts(channel: Any, queue: str, vhost: str) -> Counts:
    """`declare`, with the broker's refusal (not found, exclusive, no access) as a dlxtool error."""
    try:
        return declare(channel, queue)
    except Exception as exc:
        refused = refusal(exc, queue, vhost)
        if refused is None:
            raise
        raise refused from None


def refusal(exc: BaseException, queue: str, vhost: str) -> DlxtoolError | None:
    """The dlxtool error for the broker's refusal of a passive declare of `queue`, or None (not a refusal)."""
    code = getattr(exc, "reply_code", None)
    text = getattr(exc, "reply_text", None) or str(exc)
    unreachable = _NODE_DOWN.search(text) if code == 404 else None
    if unreachable is not None:
        return UnavailableError(f"queue {queue!r} in vhost {vhost!r} lives on node {unreachable.group(1)}, which is "
                                "down or cannot be reached: its messages are not lost, but cannot be read or counted "
                                f"now (the broker said: {code} {text})",
                                hint="run it again once the node is back; `dlxtool queues` shows which nodes are down")
    if code == 404:
        return NotFoundError(f"queue {queue!r} not found in vhost {vhost!r}",
                             hint="list queues with `dlxtool queues`")
    if code == 405:
        return DlxtoolError(f"queue {queue!r} is exclusive to another connection; no other connection can read or "
                            "purge it", hint="it disappears with the connection that owns it")
    if code == 403:
        return ConnectError(f"access to queue {queue!r} in vhost {vhost!r} refused: {text}",
                            hint="the user needs read/configure permissions on it")
    return None


def ready(conn: Any, queue: str, timeout: float) -> int | None:
    """The ready count of `queue` on a throwaway channel of `conn` (a missing queue closes the channel), or
    None when the broker refuses the declare (the queue does not exist, or is not ours to see)."""
    from dlxtool.broker.channel import AsyncChannel, ChannelClosed

    channel = AsyncChannel(conn, timeout)
    try:
        return declare(channel, queue).ready
    except ChannelClosed:
        return None
    finally:
        channel.close()


def exists(conn: Any, queue: str, timeout: float) -> bool:
    """The queue exists on `conn`'s vhost (and this user may see it)."""
    return ready(conn, queue, timeout) is not None


def exchange_exists(conn: Any, exchange: str, timeout: float) -> bool:
    """The exchange exists on `conn`'s vhost: a passive declare on a throwaway channel (a missing exchange
    closes the channel it is asked on). The default exchange cannot be declared, even passively: it exists."""
    from dlxtool.broker.channel import AsyncChannel, ChannelClosed

    if exchange == "":
        return True
    channel = AsyncChannel(conn, timeout)
    try:
        channel.call("exchange_declare", exchange, passive=True)
        return True
    except ChannelClosed:
        return False
    finally:
        channel.close()


def probe_type(profile: BrokerProfile, name: str) -> str:
    """classic | quorum | stream | unknown, learnt over AMQP without touching a message's position or count.

    A passive declare does not say the type. A consumer asking for a *global* prefetch does: a
    quorum queue refuses it (540 NOT_IMPLEMENTED "does not support global qos", which closes the
    connection, hence a connection of its own), a stream refuses it because it wants a per-consumer
    prefetch (406), a classic queue accepts it. At most one message is delivered to the classic
    probe and it goes back to its place when the probe's connection closes (requeue in place).
    """
    import pika.exceptions as pe

    from dlxtool.broker.connection import close_quietly, connect

    conn = connect(profile)
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1, global_qos=True)
        tag = ch.basic_consume(name, lambda *_: None, auto_ack=False)
        ch.basic_cancel(tag)
        return "classic"
    except (pe.ChannelClosedByBroker, pe.ConnectionClosedByBroker) as exc:
        text = str(exc)
        if "global qos" in text:
            return "quorum"
        if "prefetch count is not set" in text:
            return "stream"
        return "unknown"
    finally:
        close_quietly(conn)
