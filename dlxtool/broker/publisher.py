"""A confirming publisher that pipelines: many publishes in flight, each settled exactly once.

Every publish is `mandatory=True` on a channel in confirm mode. The broker answers each one, in its
own time, with one of:

- `PublishAnswer.CONFIRMED` — basic.ack and no basic.return: the message is in a queue. Only now may the
  caller ack (remove) the source message.
- `PublishAnswer.RETURNED` — basic.return (unroutable: e.g. the queue was deleted), then basic.ack. Without
  mandatory this message would have been confirmed and silently dropped.
- `PublishAnswer.NACKED` — basic.nack (e.g. the queue is at x-max-length with overflow reject-publish).
- `PublishAnswer.LOST` — the channel or connection died before an answer: the broker may or may not have
  the message (a possible duplicate if the caller keeps the source too, which it must).
- `PublishAnswer.BROKER_REFUSED` — the broker closed the channel over this publish (dlxtool.broker.refusals:
  an expiration it refuses, no write permission on the exchange …): not delivered.
- `PublishAnswer.UNSENT` — published after the one the broker refused, on the same channel: the broker
  never looked at it (not delivered); it may be published again on a new channel (`reopen`).

When the broker closes the channel (`closed_by_broker`), every unsettled publish is settled at once — no
confirm will come — by what the broker said: the publish it names (the first unsettled one that fits) is
BROKER_REFUSED, those before it LOST (routed in order before it; their confirms died with the channel), those
after it UNSENT; where it names none, all LOST.

A basic.return carries no delivery tag; RabbitMQ sends it before the ack for the same publish, but the
ack of an EARLIER publish may still be waiting (fsync), so the return is not always for the oldest
unsettled publish. We match it on exchange, routing key, body and the full encoded properties (every
basic property and header). If several unsettled publishes still tie, we cannot know which one came
back: every tied one settles RETURNED ("maybe returned", the caller keeps its source) and the copies
some of them left at the target are counted in `possible_duplicates` — a message that could be the
returned one is never reported CONFIRMED (its source would be acked: lost).

Usage (the caller drives I/O, so several publishers and a consumer can share one loop)::

    pub = Publisher(connection, window=1000)
    pub.publish("", "orders", body, props, token=delivery_tag)   # never blocks
    while pub.outstanding: pub.pump(0.01); for token, outcome, why in pub.take_settled(): ...
    pub.flush(timeout)  # everything settled (or LOST on timeout)

`has_room()` says whether the window allows another publish: a bounded number of messages in
flight keeps memory flat and confirms fast, and is what makes this match the shovel's speed.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections import deque
from collections.abc import Hashable
from typing import Any

from dlxtool.broker.channel import IDLE_WAIT, AsyncChannel
from dlxtool.broker.refusals import Refusal
from dlxtool.broker.wire import codec


class PublishAnswer(enum.Enum):
    CONFIRMED = "confirmed"
    RETURNED = "returned"
    NACKED = "nacked"
    LOST = "unconfirmed"  # no answer: the broker may have it (a copy may exist), or not
    REFUSED = "not sent"  # could not be encoded (dlxtool.broker.wire.frames.EncodeError): never left this process
    BROKER_REFUSED = "refused by the broker"
    UNSENT = "not delivered"  # after a publish the broker refused, on the same channel (closed there)


class _Pending:
    __slots__ = ("token", "key", "props", "returned", "maybe")

    def __init__(self, token: Any, key: tuple[str, str, bytes], props: bytes) -> None:
        self.token = token
        self.key = key
        self.props = props              # the encoded properties as sent
        self.returned: str | None = None
        self.maybe = False              # returned or not: a tie we cannot resolve


Settled = tuple[Any, PublishAnswer, str | None]  # (token, outcome, detail)


class Publisher:
    def __init__(self, connection: Any, *, window: int = 1000, timeout: float = 30.0) -> None:
        self.channel = AsyncChannel(connection, timeout)
        self.window = max(1, window)
        self._seq = 0
        self._pending: dict[int, _Pending] = {}
        # unsettled seqs per message, publish order: made at the first basic.return (_returns_index), kept
        # from then on. Returns are rare, and until one comes nothing reads it: off every publish's path.
        self._by_key: dict[tuple[str, str, bytes], list[int]] | None = None
        self._settled: deque[Settled] = deque()
        self.published = 0
        self._maybe_marked = 0     # publishes settled "maybe returned" (ties)
        self._maybe_returns = 0    # returns that landed on such ties (each is one of them, really returned)

        self._codec = codec.current()  # writes the frames (dlxtool's encoder, or pika's basic_publish)
        self.refusal: Refusal | None = None  # what the broker said when it closed the channel (closed_by_broker)
        self._open()

    def _open(self) -> None:
        self.channel.impl.add_on_return_callback(self._on_return)
        self._select_confirms()
        self._send = self._codec.sender(self.channel.connection, self.channel.impl)

    def _select_confirms(self) -> None:
        box: list[Any] = []
        self.channel.impl.confirm_delivery(ack_nack_callback=self._on_ack_nack, callback=box.append)
        self.channel.wait_for(lambda: bool(box), "confirm.select")
        self._codec.confirms(self.channel.connection, self.channel.impl, self._on_ack_nack)

    # -- API --------------------------------------------------------------------------------------

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    @property
    def possible_duplicates(self) -> int:
        """Tied publishes reported RETURNED that in fact reached the target: the caller keeps their source
        too, so these exist twice (an upper bound: a tied one nacked or lost is counted as well)."""
        return max(0, self._maybe_marked - self._maybe_returns)

    def has_room(self) -> bool:
        return len(self._pending) < self.window

    def room(self) -> int:
        """How many more publishes the window allows now."""
        return max(0, self.window - len(self._pending))

    def publish(self, exchange: str, routing_key: str, body: bytes, properties: Any, token: Hashable | Any) -> None:
        """Send one message (mandatory, confirmed); its outcome comes back later via take_settled()."""
        self.channel.check()
        # EncodeError (nothing sent, nothing recorded) when the message cannot go on the wire
        props = self._send(exchange, routing_key, body, properties)
        self._seq += 1
        key = (exchange, routing_key, body)
        self._pending[self._seq] = _Pending(token, key, props)
        by_key = self._by_key
        if by_key is not None:
            seqs = by_key.get(key)
            if seqs is None:
                by_key[key] = [self._seq]
            else:
                seqs.append(self._seq)
        self.published += 1

    def pump(self, wait: float = 0.0) -> None:
        self.channel.pump(wait)

    def take_settled(self) -> list[Settled]:
        """Outcomes settled since the last call, in the order the broker settled them."""
        out = list(self._settled)
        self._settled.clear()
        return out

    def flush(self, timeout: float | None = None) -> list[Settled]:
        """Wait until every publish is settled; on timeout the rest become LOST. If the connection dies
        meanwhile, the rest become LOST (take_settled() has them) and the error goes on: the caller must
        not take a dead connection for a finished run."""
        deadline = time.monotonic() + (self.channel.timeout if timeout is None else timeout)
        try:
            while self._pending and time.monotonic() < deadline:
                self.pump(IDLE_WAIT)
            if self._pending:
                # No confirm within the timeout: a broker that answers is slow (they are LOST: unconfirmed, maybe
                # published); one that does not answer a channel.open either went silent (a stall, a half-open
                # connection): the connection is dropped and that is the error (a lost connection, not "unconfirmed").
                AsyncChannel(self.channel.connection, self.channel.timeout).close()
        except Exception:
            self.abandon("no confirm before the connection ended")
            raise
        self.abandon("no confirm within the timeout")
        return self.take_settled()

    def abandon(self, why: str) -> None:
        """Mark every unsettled publish LOST (the channel is gone or we give up waiting)."""
        for seq in sorted(self._pending):
            self._settle(seq, PublishAnswer.LOST, why)

    def close(self) -> None:
        self.channel.close()

    def closed_by_broker(self) -> Refusal | None:
        """The broker's refusal, once, the first time this is asked after the broker closed the channel (None
        otherwise); every unsettled publish is settled by then (the module docstring). ConnectError where the
        channel went with its connection."""
        if self.refusal is not None or self.channel.closed_reason is None:
            return None
        if self.channel.connection_lost:
            self.channel.check()  # raises: a lost connection is not the broker's answer to anything
        refusal = self.refusal = Refusal.read(self.channel.reply_code, self.channel.reply_text)
        seqs = sorted(self._pending)
        culprit = next((seq for seq in seqs if self._refused(refusal, self._pending[seq])), None)
        for seq in seqs:
            if culprit is None:
                self._settle(seq, PublishAnswer.LOST, f"no confirm: the broker closed the channel ({refusal.said})")
            elif seq < culprit:
                self._settle(seq, PublishAnswer.LOST, "routed before the broker closed the channel; its confirm "
                                                       f"was lost with the channel ({refusal.said})")
            elif seq == culprit:
                self._settle(seq, PublishAnswer.BROKER_REFUSED, refusal.said)
            else:
                self._settle(seq, PublishAnswer.UNSENT, "published after the one the broker refused, on the same "
                                                         "channel: not delivered")
        return refusal

    def reopen(self) -> None:
        """Go on on a new channel after the broker closed this one (closed_by_broker settled everything)."""
        assert not self._pending, "reopen() after closed_by_broker()"
        self.channel = AsyncChannel(self.channel.connection, self.channel.timeout)
        self._seq = 0
        self._by_key = None
        self.refusal = None
        self._open()

    @staticmethod
    def _refused(refusal: Refusal, pending: _Pending) -> bool:
        from dlxtool.broker.wire.frames import decode_properties

        try:
            properties = decode_properties(pending.props)
        except Exception:  # noqa: BLE001 - our own bytes; if they do not decode, they name nothing
            properties = None
        return refusal.refuses(pending.key[0], len(pending.key[2]), properties)

    # -- broker callbacks (only record; never call blocking methods here) ---------------------------

    def _on_return(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        key = (method.exchange or "", method.routing_key or "", bytes(body))
        seqs = self._returns_index().get(key)
        if not seqs:
            return  # not ours (cannot happen on our own channel) — nothing to settle
        why = f"unroutable ({method.reply_code} {method.reply_text})"
        candidates = [s for s in seqs if self._pending[s].returned is None or self._pending[s].maybe]
        raw = _encoded(properties)
        exact = [s for s in candidates if self._pending[s].props == raw]
        candidates = exact or candidates  # no exact match (re-encoding differs): every look-alike is suspect
        if not candidates:
            return
        if len(candidates) == 1 and not self._pending[candidates[0]].maybe:
            self._pending[candidates[0]].returned = why
            return
        # A tie: any of them may be the returned one. All stay at the source; one of them really came back.
        self._maybe_returns += 1
        for seq in candidates:
            pending = self._pending[seq]
            if not pending.maybe:
                pending.maybe = True
                pending.returned = f"maybe {why}: {len(candidates)} identical publishes in flight"
                self._maybe_marked += 1

    def _returns_index(self) -> dict[tuple[str, str, bytes], list[int]]:
        """_by_key, made from the unsettled publishes at the first return (dict order is publish order)."""
        by_key = self._by_key
        if by_key is None:
            by_key = self._by_key = {}
            for seq, pending in self._pending.items():
                by_key.setdefault(pending.key, []).append(seq)
        return by_key

    def _on_ack_nack(self, frame: Any) -> None:
        method = frame.method
        nack = type(method).__name__ == "Nack"
        tag = method.delivery_tag
        pending = self._pending
        if method.multiple:  # dict order is publish order: the settled ones are at the front
            seqs: list[int] = []
            for seq in pending:
                if seq > tag:
                    break
                seqs.append(seq)
            if not nack and self._by_key is None:  # no return yet: none of them was returned
                pop, settled, confirmed = pending.pop, self._settled.append, PublishAnswer.CONFIRMED
                for seq in seqs:  # every publish's path (a batch per ack frame): _settle, inlined
                    settled((pop(seq).token, confirmed, None))
                return
        else:
            seqs = [tag] if tag in pending else []
        for seq in seqs:
            entry = pending[seq]
            if nack:
                self._settle(seq, PublishAnswer.NACKED, "rejected by the broker (basic.nack, e.g. queue full)")
            elif entry.returned is not None:
                self._settle(seq, PublishAnswer.RETURNED, entry.returned)
            else:
                self._settle(seq, PublishAnswer.CONFIRMED, None)

    def _settle(self, seq: int, outcome: PublishAnswer, detail: str | None) -> None:
        pending = self._pending.pop(seq)
        by_key = self._by_key
        seqs = by_key.get(pending.key) if by_key is not None else None
        if by_key is not None and seqs is not None:
            if len(seqs) == 1:
                if seqs[0] == seq:
                    del by_key[pending.key]
            else:
                with contextlib.suppress(ValueError):
                    seqs.remove(seq)
        self._settled.append((pending.token, outcome, detail))


def _encoded(properties: Any) -> bytes | None:
    from dlxtool.broker.wire.frames import encode_properties

    try:
        return encode_properties(properties)
    except Exception:  # noqa: BLE001 - cannot compare: treat as matching none exactly
        return None
