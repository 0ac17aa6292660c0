"""Plain purge: queue.purge after showing what is there. Backup and selective purge build on the drain engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlxtool.broker.management import ManagementClient
from dlxtool.errors import ConnectError, DlxtoolError, NotFoundError, RefusedError


@dataclass
class QueueState:
    name: str
    type: str | None  # None when the management API could not tell
    ready: int
    unacked: int | None
    consumers: int
    note: str | None = None  # e.g. which check could not be made

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.name, "type": self.type, "ready": self.ready, "unacked": self.unacked,
                "consumers": self.consumers}


def queue_state(channel: Any, mgmt: ManagementClient | None, vhost: str, queue: str) -> QueueState:
    """Ready and consumer counts from the broker itself (a passive declare is exact and current);
    type and unacked from the management API, whose figures are sampled every few seconds."""
    ok = passive_declare(channel, queue, vhost)
    note = None
    qtype, unacked = None, None
    if mgmt is None:
        note = "no management API: queue type and unacked count unknown"
    else:
        try:
            info = mgmt.queue(vhost, queue)
            qtype, unacked = info.type, info.messages_unacked
        except DlxtoolError as exc:
            note = f"management API unavailable ({exc.message}): queue type and unacked count unknown"
    return QueueState(queue, qtype, ok.message_count, unacked, ok.consumer_count, note)


def passive_declare(channel: Any, queue: str, vhost: str) -> Any:
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


def check_purgeable(state: QueueState) -> None:
    if state.type == "stream":
        raise RefusedError(f"{state.name!r} is a stream: streams cannot be purged",
                           hint="streams are trimmed by retention (x-max-length-bytes, x-max-age), not purged")


def purge(channel: Any, queue: str) -> int:
    """queue.purge: removes ready messages only; returns how many the broker says it removed."""
    return channel.queue_purge(queue).method.message_count
