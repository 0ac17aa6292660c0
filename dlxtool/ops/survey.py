"""The dry-run plan: what decide() says about the first messages of a queue, without changing it.

Used by `replay --dry-run` (dlxtool.ops.replay) before the engine (dlxtool.ops.engine) moves anything.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlxtool.broker import queues
from dlxtool.broker.channel import IDLE_WAIT, AsyncChannel
from dlxtool.broker.giveback import close_channel, wait_until_ready
from dlxtool.ops.engine import Action, Decide
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection


@dataclass
class Survey:
    """What decide() says about the first `looked_at` messages of a queue, without changing it."""

    snapshot: int
    looked_at: int
    plan: Counter[tuple[str, str]] = field(default_factory=Counter)  # (action, group) -> count


def survey(conn: AmqpConnection, source: str, decide: Decide, *, max_messages: int, limit: int | None = None,
           timeout: float = 30.0) -> Survey:
    """Read up to max_messages unacked, decide each, then give all back in order and in place.

    The give-back is a cancel and a channel close (dlxtool/broker/giveback.py): classic and quorum
    queues alike take the messages back at the head, in order. On a quorum queue each one used a
    delivery attempt: callers must refuse this with a delivery limit unless the user accepts that.
    Returns once the queue counts them ready again (a replay that follows must see them all).
    Bounded on purpose: holding huge numbers of unacked messages hurts brokers."""
    channel = AsyncChannel(conn, timeout)
    try:
        snapshot = queues.declare(channel, source).ready
        wanted = min(snapshot, max_messages)
        result = Survey(snapshot=snapshot, looked_at=0)
        if not wanted:
            return result
        channel.call("basic_qos", prefetch_count=wanted)
        got: deque[tuple[Any, Any, bytes]] = deque()
        tag = channel.consume(source, lambda _c, m, p, b: got.append((m, p, b)))
        _survey_loop(channel, got, result, source, decide, wanted, limit, timeout)
        channel.cancel_consumer(tag)
        close_channel(channel)
        _wait_given_back(conn, source, snapshot, timeout)
        return result
    finally:
        channel.close()


def _survey_loop(channel: AsyncChannel, got: deque[tuple[Any, Any, bytes]], result: Survey, source: str,
                 decide: Decide, wanted: int, limit: int | None, timeout: float) -> None:
    selected = 0
    idle_deadline = time.monotonic() + timeout
    while result.looked_at < wanted and time.monotonic() < idle_deadline:
        channel.pump(IDLE_WAIT if not got else 0)
        while got and result.looked_at < wanted:
            method, props, body = got.popleft()
            record = MessageRecord.from_delivery(source, method, props, body, position=result.looked_at)
            result.looked_at += 1
            idle_deadline = time.monotonic() + 2.0
            if limit is not None and selected >= limit:
                result.plan[(Action.KEEP.value, "beyond --limit")] += 1
                continue
            d = decide(record)
            selected += d.action is not Action.KEEP
            result.plan[(d.action.value, d.group)] += 1


def _wait_given_back(conn: AmqpConnection, source: str, snapshot: int, timeout: float) -> None:
    """Until the queue counts `snapshot` ready again: a quorum queue applies a close's returns later."""
    probe = AsyncChannel(conn, timeout)
    try:
        wait_until_ready(lambda: queues.declare(probe, source).ready, snapshot, timeout=min(timeout, 10.0))
    finally:
        probe.close()
