"""Giving held messages back to their queue, in order: the one place that knows how.

Used by the peek reader (basic.get: peek, history, dump and the replay and purge plans) and the
transfer engine at a stop (basic.consume). What RabbitMQ 3.10.8 does, measured here (tests/ops/test_giveback.py,
tests/ops/test_peek.py):

- classic, basic.get: a multi-nack becomes one requeue per get, applied one by one (10,000 take
  seconds). Closing the channel puts everything back in one step, in place, in order.
- classic, consumer deliveries: a multi-nack is one requeue of the whole list (fast, in order);
  closing the channel is just as good. We close: one rule for classic queues.
- quorum, basic.get: every get is a consumer of its own, so a multi-nack is one return command per
  message; past 32 in flight the client stashes them in a map and sends them later in map order:
  scrambled. Closing the channel returns each "consumer" on its own, also in map order: scrambled.
  So: nack at most QUORUM_RETURN_CHUNK, wait until the queue applied them, repeat.
- quorum, consumer deliveries: a multi-nack is one return command, but the queue applies it in map
  order too (scrambled past 32 with a delivery limit; without one the returns go to the BACK). When
  the channel closes, the queue returns everything the consumer held in message order, at the HEAD
  (where they were), with or without a delivery limit. Each return, either way, counts as a
  delivery attempt (x-delivery-count + 1). So: cancel the consumer, then close the channel.
- ... but only cancel once nothing is on its way to the consumer. Deliveries that reach the channel
  after its basic.cancel are returned by the channel's queue client itself, one return each (scrambled
  past 32 with a delivery limit), ahead of what the close gives back; those that reach the client before
  the cancel-ok, pika's basic_cancel rejects one by one (same effect). Acks free prefetch slots that the
  queue fills at once, so a stop can hit that: the transfer engine first waits until every slot is
  taken by a delivery it holds, and cancels with AsyncChannel.cancel_consumer (no rejects).
- After a close, a quorum queue applies the returns asynchronously: a passive declare right after
  can still count 0 (it also answers 0 when its stat times out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlxtool import waits
from dlxtool.broker import queues
from dlxtool.broker.connection import abort

# rabbit_fifo_client (3.10) sends at most 32 commands to a quorum queue before it waits for them to be
# applied; further returns are stashed in a map keyed by consumer and sent later in map order.
QUORUM_RETURN_CHUNK = 32
RETURN_WAIT_SECONDS = 10.0
POLL_SECONDS = 0.002


CLOSE_WAIT_SECONDS = 15.0  # a channel close the broker has not answered by then will not be answered


class _CloseNotAnswered(Exception):
    pass


def close_channel(channel: Any, wait: float = CLOSE_WAIT_SECONDS) -> bool:
    """Give back everything `channel` holds by closing it (classic gets, any consumer deliveries).

    Works on a pika BlockingChannel and on dlxtool's AsyncChannel. True when the broker answered the
    close: every method sent on the channel before (acks included) was processed by then.

    A BlockingChannel's close waits at most `wait` seconds, then the whole connection is dropped: the broker
    gives back everything a connection held when it goes, in place. Seen in CI: a peek stopped by SIGTERM
    mid-read waited for ever on its close-ok (a signal raised inside pika's own I/O can leave its frame reader or
    writer half-way, so the answer never comes or is never read)."""
    if not channel.is_open:
        return False
    timer = _deadline(channel, wait)
    try:
        channel.close()
    except _CloseNotAnswered:
        abort(channel.connection)
        return False
    except Exception:  # noqa: BLE001 - the connection is gone: the broker returns them anyway
        return False
    finally:
        if timer is not None:
            timer()
    answered = getattr(channel, "close_answered", None)  # AsyncChannel: a close-ok, not a lost connection
    if answered is not None:
        return bool(answered)
    return bool(getattr(channel, "is_closed", not channel.is_open))  # BlockingChannel: close() waited or raised


def _deadline(channel: Any, wait: float) -> Callable[[], None] | None:
    """Make a pika BlockingChannel's next blocking wait raise _CloseNotAnswered after `wait` seconds (a timer on
    the connection's I/O loop, which pika runs while it waits); returns what removes it. None for other channels
    (dlxtool's AsyncChannel bounds its own waits)."""
    ioloop = getattr(getattr(getattr(channel, "connection", None), "_impl", None), "ioloop", None)
    if ioloop is None:
        return None

    def expired() -> None:
        raise _CloseNotAnswered

    handle = ioloop.call_later(wait, expired)
    return lambda: ioloop.remove_timeout(handle)


@dataclass
class HeldGets:
    """basic.get deliveries held on one channel, and how many of them are given back already (kept
    here, not in a local, so a give-back cut short by Ctrl-C resumes where it was)."""

    tags: list[int] = field(default_factory=list[int])
    returned: int = 0
    confirmed: bool = True  # False: a chunk was not seen applied in time (the order may have changed)

    @property
    def all_returned(self) -> bool:
        return self.returned == len(self.tags)


def give_back_quorum_gets(channel: Any, queue: str, held: HeldGets) -> None:
    """Nack the held basic.get deliveries of a quorum queue QUORUM_RETURN_CHUNK at a time, each chunk
    applied before the next is sent (a blocking pika channel).

    The barrier: each basic.get is a consumer of its own until its message comes back, so the
    passive-declare consumer count drops by the chunk once the queue applied it (and by then it has
    told the channel, before it answers the declare)."""
    tags = held.tags
    while held.returned < len(tags):
        end = min(held.returned + QUORUM_RETURN_CHUNK, len(tags))
        still = len(tags) - held.returned
        before = _wait_consumers(channel, queue, still)  # fewer than we hold: the queue's stat timed out
        channel.basic_nack(tags[end - 1], multiple=True, requeue=True)
        chunk, held.returned = end - held.returned, end
        if before is None or _wait_consumers(channel, queue, still - chunk, before - chunk) is None:
            held.confirmed = False


def _wait_consumers(channel: Any, queue: str, low: int, high: int | None = None) -> int | None:
    """Poll the consumer count until it is within [low, high] (None after RETURN_WAIT_SECONDS).

    A quorum queue answers 0 when its stat times out (250 ms): never accept fewer than still held."""
    wait = waits.Wait(f"quorum queue {queue!r} to count the messages given back", RETURN_WAIT_SECONDS, POLL_SECONDS)
    while True:
        count = queues.declare(channel, queue).consumers
        if count >= low and (high is None or count <= high):
            return count
        if not wait.pause():
            return None
