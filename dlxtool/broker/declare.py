"""A passive queue.declare with RabbitMQ's refusals turned into dlxtool errors.

Shared by every command that looks at a queue before touching it (peek, history, dump, purge, replay),
so that none of them imports another command's module for it."""

from __future__ import annotations

from typing import Any

from dlxtool.errors import ConnectError, DlxtoolError, NotFoundError


def passive_declare(channel: Any, queue: str, vhost: str) -> Any:
    """The Queue.DeclareOk of ``queue`` (exact ready and consumer counts), or a dlxtool error."""
    import pika.exceptions as pe

    try:
        return channel.queue_declare(queue, passive=True).method
    except pe.ChannelClosedByBroker as exc:
        if exc.reply_code == 404:
            raise NotFoundError(f"queue {queue!r} not found in vhost {vhost!r}",
                                hint="list queues with `dlxtool queues`") from None
        if exc.reply_code == 405:
            raise DlxtoolError(f"queue {queue!r} is exclusive to another connection; no other connection "
                               "can read or purge it", hint="it disappears with the connection that owns it") from None
        if exc.reply_code == 403:
            raise ConnectError(f"access to queue {queue!r} in vhost {vhost!r} refused: {exc.reply_text}",
                               hint="the user needs read/configure permissions on it") from None
        raise
