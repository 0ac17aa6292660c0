"""Replies that cannot arrive (issue 39): a request replayed with a stale reply address gets its answer sent nowhere.

A dead-lettered RPC request carries the `reply_to` of a caller that has long given up: a direct reply-to pseudo-queue
(amq.rabbitmq.reply-to.*, tied to the caller's channel, gone with it) or a reply queue that was exclusive or
auto-delete (server-named amq.gen-* ones are) and no longer exists. Replaying it makes the service do the work and
answer into the void. `unreachable_replies` names them for the replay plan; the replay leaves them in the DLQ unless
the user agrees (a flag).

Used by replay's decision (dlxtool.ops.replay_decision: ReplaySettings.check_replies, on by default): a request
whose reply cannot arrive stays with the reason (Stay.DEAD_REPLY), in the plan and in the run, unless
--allow-dead-replies. `queue_exists` is a passive declare on the destinations' broker (True, False when the broker
says 404, None when it cannot tell: then the request goes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"
FLAG = "--allow-dead-replies"


@dataclass(frozen=True)
class DeadReply:
    position: int
    reply_to: str
    why: str

    def describe(self) -> str:
        return f"position {self.position}: reply_to {self.reply_to!r} {self.why}"


def reply_queue(reply_to: str) -> str | None:
    """The queue a reply address names: a 0.9.1 reply_to is a queue name (the default exchange's key); an AMQP 1.0
    one in address format v2 is /queues/NAME; /exchanges/… addresses name no queue (None)."""
    if reply_to.startswith("/queues/"):
        return unquote(reply_to[len("/queues/"):])
    if "/" in reply_to:  # /exchanges/… (1.0), or Spring AMQP's exchange/routingKey (0.9.1): no queue named
        return None
    return reply_to


def dead_reply(reply_to: Any, queue_exists: Callable[[str], bool | None]) -> str | None:
    """Why a reply to `reply_to` cannot arrive now, or None (no reply address, or one that may still be read)."""
    if isinstance(reply_to, bytes):
        reply_to = reply_to.decode("utf-8", "replace")
    if not isinstance(reply_to, str) or not reply_to:
        return None
    queue = reply_queue(reply_to)
    if queue is None:
        return None
    if queue.startswith(DIRECT_REPLY_TO):
        return ("is a direct reply-to address: it lived as long as the requesting channel, so a reply to the replayed "
                "request goes nowhere")
    exists = queue_exists(queue)
    if exists is False:
        kind = "a server-named (exclusive) reply queue" if queue.startswith("amq.gen-") else "a reply queue"
        return f"names {kind} that no longer exists: a reply to the replayed request goes nowhere"
    return None


def unreachable_replies(records: Iterable[Any], queue_exists: Callable[[str], bool | None]) -> list[DeadReply]:
    """The records (MessageRecord: position, properties['reply_to']) whose reply cannot arrive, in order. Each queue
    is asked about once."""
    asked: dict[str, bool | None] = {}

    def exists(name: str) -> bool | None:
        if name not in asked:
            asked[name] = queue_exists(name)
        return asked[name]

    out: list[DeadReply] = []
    for record in records:
        properties: dict[str, Any] = getattr(record, "properties", None) or {}
        reply_to = properties.get("reply_to")
        why = dead_reply(reply_to, exists)
        if why is not None:
            out.append(DeadReply(int(getattr(record, "position", 0)), str(reply_to), why))
    return out
