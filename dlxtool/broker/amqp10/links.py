"""AMQP 1.0 links: reading a queue's head (HeadReader) and sending with settled outcomes (Sender).

HeadReader grants credit itself (never proton's automatic prefetch: it would take more than asked and hold it) and
drains: the broker sends what it has up to the credit, then says it has no more — a peek of 5 on a queue of 2 gets 2
and knows the queue had no more, without waiting for a time-out. Deliveries stay unsettled until settle() gives each
an outcome (dlxtool.broker.amqp10.outcomes); which outcome gives a message back without spending a delivery attempt
on which version is dlxtool.broker.versions' (peek_give_back).

Sender sends a message's bytes (dlxtool.amqp10_message.encode_message) unsettled and waits for the broker's outcome:
accepted (taken), released (routed nowhere), rejected (refused, with the broker's reason) — the 1.0 form of a
publisher confirm with mandatory. Only after `accepted` may a mover remove the source.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dlxtool.amqp10_message import Typed, encode_value
from dlxtool.broker.amqp10.connection import Amqp10Connection, describe_condition, failure
from dlxtool.broker.amqp10.outcomes import ACCEPT, DeliveryState
from dlxtool.errors import ConnectError, DlxtoolError, NotFoundError


@dataclass
class Delivery:
    """One message as a queue delivered it: its bytes (dlxtool.amqp10_message.parse_message reads them) and the
    handle settle() needs. `position` counts from 0 in the order of delivery."""

    raw: bytes
    position: int
    handle: Any = field(repr=False)
    settled: bool = False


class _LinkEvents:
    """What proton tells about one link: deliveries as they complete, and the broker's detach (with its
    condition). Proton calls these from inside the connection's wait()."""

    def __init__(self) -> None:
        self.complete: list[tuple[Any, bytes]] = []
        # The delivery arriving now, frame by frame: a link carries one delivery at a time (AMQP 1.0 §2.6.14: the
        # next begins when the current one is complete). Not keyed by the delivery: proton hands each frame over in
        # a new wrapper object (id() differs), and its tag property decodes the broker's binary tags as text.
        self._partial: bytearray | None = None
        self.closed_by_broker: str | None = None

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        link = event.link
        if not link.is_receiver or not delivery.readable:
            return
        chunk = link.recv(delivery.pending) or b""
        buf = self._partial if self._partial is not None else bytearray()
        buf += chunk
        self._partial = buf
        if not delivery.partial:
            self._partial = None
            self.complete.append((delivery, bytes(buf)))
            link.advance()

    @property
    def receiving(self) -> bool:
        """A delivery has begun and not yet arrived whole."""
        return self._partial is not None

    def on_link_remote_close(self, event: Any) -> None:
        cond = event.link.remote_condition
        self.closed_by_broker = describe_condition(cond) if cond is not None else "detached"
        event.link.close()

    on_link_remote_detach = on_link_remote_close


def _handler() -> Any:
    """A proton Handler that is a _LinkEvents (proton imported here, where a link is made)."""
    from proton import Handler

    class Events(_LinkEvents, Handler):
        pass

    return Events()


class _Receiver:
    """A receiver link on `address` that settles nothing by itself (unsettled, the receiver settles first), with a
    source filter where one is given; attached before __init__ returns, or the broker's refusal raised."""

    def __init__(self, conn: Amqp10Connection, address: str, *, kind: str,
                 source_filter: dict[Any, Any] | None = None) -> None:
        from proton import Link
        from proton.reactor import LinkOption

        modes: Any = Link  # its settle modes come from proton's C module (cproton), which has no types

        class Unsettled(LinkOption):
            def apply(self, link: Any) -> None:
                link.snd_settle_mode = modes.SND_UNSETTLED
                link.rcv_settle_mode = modes.RCV_FIRST
                if source_filter is not None:
                    link.source.filter.put_dict(source_filter)

        self.conn = conn
        self.address = address
        self.events = _handler()
        self.delivered = 0
        try:
            self.link = conn.container.create_receiver(
                conn.proton_connection, address, name=f"dlxtool-{kind}-{os.urandom(4).hex()}", handler=self.events,
                options=Unsettled())
        except Exception as exc:  # noqa: BLE001 - proton's errors: said as the broker's
            raise failure(exc, conn) from None
        conn.wait(lambda: bool(self.link.state & self.link.REMOTE_ACTIVE) or self.events.closed_by_broker
                  is not None, f"attaching to {address}")
        self._check()

    def _detach(self) -> None:
        """Close the link and wait a little for the broker's answer: nothing is held, so a slow detach loses
        nothing."""
        if self.conn.is_open:
            self.link.close()
            with contextlib.suppress(DlxtoolError):
                self.conn.wait(lambda: not (self.link.state & self.link.REMOTE_ACTIVE), "closing the reader", 5)

    def _check(self) -> None:
        said = self.events.closed_by_broker
        if said is not None:
            if "amqp:not-found" in said:
                raise NotFoundError(f"the broker said: {said}")
            raise DlxtoolError(f"the broker detached the reader of {self.address}: {said}")


class HeadReader(_Receiver):
    """A receiver on a queue whose deliveries stay unsettled until settle() gives each its outcome.

    read(n) asks for up to n more (drain: the broker sends what it has, then says it is out) and returns them in
    the queue's order. Nothing is settled here on its own: close() first gives every unsettled delivery the
    `give_back` outcome (settled, then the link closes), so that a read never ends by a detach or a lost connection
    (which can count attempts)."""

    def __init__(self, conn: Amqp10Connection, address: str, *, give_back: DeliveryState) -> None:
        self.give_back = give_back
        # held, in the order delivered: by id (a settlement of one of thousands held must not rebuild a list)
        self._unsettled: dict[int, Delivery] = {}
        self.exhausted = False  # the last drain came back short: the queue had no more ready
        super().__init__(conn, address, kind="read")

    def read(self, n: int, timeout: float | None = None) -> list[Delivery]:
        """Up to `n` more deliveries (fewer when the queue has fewer ready: then `exhausted`)."""
        if n <= 0:
            return []
        before = len(self.events.complete)
        self.link.drain(n)
        # The drain ends when the credit is used, which is at a delivery's first frame: a large last message may
        # still be arriving then (events.receiving), and is waited for.
        self.conn.wait(lambda: (not self.link.draining() and not self.events.receiving)
                       or self.events.closed_by_broker is not None
                       or len(self.events.complete) - before >= n, f"reading {self.address}", timeout)
        self._check()
        got = self.events.complete[before:]
        self.exhausted = len(got) < n
        out: list[Delivery] = []
        for handle, raw in got:
            delivery = Delivery(raw=raw, position=self.delivered, handle=handle)
            self.delivered += 1
            self._unsettled[id(delivery)] = delivery
            out.append(delivery)
        return out

    @property
    def unsettled(self) -> list[Delivery]:
        """The deliveries held, in the order delivered."""
        return list(self._unsettled.values())

    def arrived(self) -> list[Delivery]:
        """The deliveries that arrived whole but were not handed out by read() (it raised: the link or session
        ended): their bytes, to show; nothing can be settled on them any more."""
        out: list[Delivery] = []
        for handle, raw in self.events.complete[self.delivered:]:
            out.append(Delivery(raw=raw, position=self.delivered, handle=handle, settled=True))
            self.delivered += 1
        return out

    def settle(self, delivery: Delivery, outcome: DeliveryState) -> None:
        """Give one delivery its outcome (and settle it)."""
        apply_outcome(delivery.handle, outcome)
        delivery.settled = True
        self._unsettled.pop(id(delivery), None)

    def settle_all(self, outcome: DeliveryState | None = None) -> None:
        """Every unsettled delivery, in the order delivered (the order a quorum queue keeps returns in), then wait
        until the settlements are written."""
        held = self.unsettled
        for delivery in held:
            self.settle(delivery, outcome or self.give_back)
        if held:  # with nothing to write, a pump waits in proton's select for the next frame (a heartbeat: seconds)
            self.conn.pump()

    def close(self) -> None:
        """Settle what is held (give_back), then detach."""
        if self.conn.is_open:
            self.settle_all()
            self._detach()  # settled already: a slow detach loses nothing


STREAM_OFFSET_SPEC = "rabbitmq:stream-offset-spec"  # RabbitMQ's source filter: where a stream read starts


class StreamReader(_Receiver):
    """A receiver on a stream from an offset: RabbitMQ's source filter `rabbitmq:stream-offset-spec` (RabbitMQ 4.x)
    with "first", "last", "next", an offset number or a point in time (dlxtool.ops.peek.parse_offset's values).

    read(n, quiet) grants credit for n and returns what arrives until n have, or until `quiet` seconds pass without
    one (the stream's end, as the 0.9.1 read's inactivity timeout). Each delivery is settled `accepted` as read()
    hands it out: a stream keeps every message whatever the outcome, so acceptance takes nothing away, and nothing is
    held (as over 0.9.1); the credit granted is never more than the read still wants."""

    def __init__(self, conn: Amqp10Connection, address: str, *, offset: Any) -> None:
        from proton import Described, symbol, timestamp, ulong

        if isinstance(offset, datetime):
            spec: Any = timestamp(int(offset.timestamp() * 1000))
        elif isinstance(offset, int):
            spec = ulong(offset)
        else:
            spec = str(offset)
        key = symbol(STREAM_OFFSET_SPEC)
        super().__init__(conn, address, kind="stream", source_filter={key: Described(key, spec)})

    def read(self, n: int, quiet: float) -> list[Delivery]:
        """Up to `n` deliveries: fewer where `quiet` seconds passed without one (then the stream had no more)."""
        if n <= 0:
            return []
        before = len(self.events.complete)
        self.link.flow(n)
        while len(self.events.complete) - before < n:
            if not self.conn.waited(self._arrived(len(self.events.complete)), f"reading {self.address}", quiet):
                break  # `quiet` seconds without a delivery: the stream's end (a lost connection raised)
            self._check()
        out: list[Delivery] = []
        for handle, raw in self.events.complete[before:]:
            apply_outcome(handle, ACCEPT)
            out.append(Delivery(raw=raw, position=self.delivered, handle=handle, settled=True))
            self.delivered += 1
        self.events.complete.clear()  # handed out: the caller's now (a long dump must not keep every body here)
        if out:
            self.conn.pump()  # the acceptances written (credit a stream only gets back once they are)
        return out

    def _arrived(self, seen: int) -> Callable[[], bool]:
        """True once a delivery after the first `seen` has arrived whole, or the broker detached the link."""
        return lambda: len(self.events.complete) > seen or self.events.closed_by_broker is not None

    def close(self) -> None:
        """Detach. Credit a read left unused (it stopped at the stream's end) may bring deliveries meanwhile: on a
        stream they take nothing away."""
        self._detach()


class Consumer(_Receiver):
    """A receiver that takes what reaches a queue of its own (the tap's: dlxtool.ops.tap), as a 0.9.1 consumer with
    auto-ack would: credit kept at `window`, each delivery settled `accepted` as take() hands it out."""

    def __init__(self, conn: Amqp10Connection, address: str, *, window: int = 500) -> None:
        self.window = window
        super().__init__(conn, address, kind="take")

    def take(self, quiet: float) -> list[Delivery]:
        """What arrived, waiting at most `quiet` seconds for a first one (none: an empty list)."""
        missing = self.window - self.link.credit
        if missing > 0:
            self.link.flow(missing)
        if not self.events.complete:
            self.conn.waited(lambda: bool(self.events.complete) or self.events.closed_by_broker is not None,
                             f"reading {self.address}", quiet)
        self._check()
        out: list[Delivery] = []
        for handle, raw in self.events.complete:
            apply_outcome(handle, ACCEPT)
            out.append(Delivery(raw=raw, position=self.delivered, handle=handle, settled=True))
            self.delivered += 1
        self.events.complete.clear()
        if out:
            self.conn.pump()  # the acceptances written
        return out

    def close(self) -> None:
        """Detach (what arrived meanwhile was never accepted: the broker keeps it in the queue)."""
        self._detach()


def apply_outcome(handle: Any, outcome: DeliveryState) -> None:
    from proton import Delivery as ProtonDelivery
    from proton import symbol

    state = {"accepted": ProtonDelivery.ACCEPTED, "rejected": ProtonDelivery.REJECTED,
             "released": ProtonDelivery.RELEASED, "modified": ProtonDelivery.MODIFIED}[outcome.kind]
    if outcome.kind == "modified":
        handle.local.failed = outcome.delivery_failed
        handle.local.undeliverable = outcome.undeliverable_here
        if outcome.annotations:
            handle.local.annotations = {symbol(k): _proton_value(v) for k, v in outcome.annotations}
    handle.update(state)
    handle.settle()


def _proton_value(value: Typed) -> Any:
    """A typed value as proton's Python types (proton.Data decodes our own encoding of it: the exact type)."""
    from proton import Data

    data = Data()
    data.decode(encode_value(value))
    data.rewind()
    data.next()
    return data.get_object()


class Sender:
    """A sender to one address (a queue: /queues/NAME; an exchange: /exchanges/NAME/KEY). send() waits for the
    broker's outcome of each message."""

    def __init__(self, conn: Amqp10Connection, address: str) -> None:
        self.conn = conn
        self.address = address
        self.events = _handler()
        try:
            self.link = conn.container.create_sender(
                conn.proton_connection, address, name=f"dlxtool-send-{os.urandom(4).hex()}", handler=self.events)
        except Exception as exc:  # noqa: BLE001 - proton's errors: said as the broker's
            raise failure(exc, conn) from None
        self._tag = 0
        self.in_flight = 0  # messages written whose outcome has not come: the broker may have taken them

    def send(self, raw: bytes, timeout: float | None = None) -> DeliveryState:
        """Send one message (its encoded sections) and wait for the broker's outcome."""
        delivery = self.start(raw, timeout)
        self.conn.wait(lambda: answered(delivery) or self.events.closed_by_broker is not None,
                       f"waiting for the outcome of a send to {self.address}", timeout)
        outcome = self.outcome(delivery)
        assert outcome is not None
        return outcome

    def start(self, raw: bytes, timeout: float | None = None) -> Any:
        """Send one message without waiting for its outcome (a window of them in flight: outcome() reads each);
        waits for credit first (NotFoundError where the broker refuses the address: nothing was sent)."""
        self.conn.wait(lambda: self.link.credit > 0 or self.events.closed_by_broker is not None,
                       f"waiting for credit to send to {self.address}", timeout)
        self._refused()
        self._tag += 1
        delivery = self.link.delivery(str(self._tag))
        self.in_flight += 1
        self.link.send(raw)
        self.link.advance()
        return delivery

    def outcome(self, delivery: Any) -> DeliveryState | None:
        """The broker's outcome of a started send (settled here), or None while it has not come; the broker's
        refusal of the link raised."""
        if not answered(delivery):
            self._refused()
            return None
        self.in_flight -= 1
        outcome = outcome_of(delivery)
        delivery.settle()
        return outcome

    def _refused(self) -> None:
        said = self.events.closed_by_broker
        if said is not None:
            if "amqp:not-found" in said:
                raise NotFoundError(f"the broker said: {said}")
            raise ConnectError(f"the broker detached the sender to {self.address}: {said}",
                               hint="nothing is lost: a message without an `accepted` outcome stays where it was")

    def close(self) -> None:
        if self.conn.is_open:
            self.link.close()


def answered(delivery: Any) -> bool:
    """The broker gave a sent delivery its outcome."""
    return bool(delivery.remote_state) or bool(delivery.settled)


def outcome_of(delivery: Any) -> DeliveryState:
    """What the broker said of a sent delivery."""
    from proton import Delivery as ProtonDelivery

    state = delivery.remote_state
    remote = delivery.remote
    if state == ProtonDelivery.ACCEPTED:
        return DeliveryState("accepted")
    if state == ProtonDelivery.REJECTED:
        cond = getattr(remote, "condition", None)
        return DeliveryState("rejected", condition=describe_condition(cond) if cond is not None else "")
    if state == ProtonDelivery.MODIFIED:
        return DeliveryState("modified", delivery_failed=bool(remote.failed),
                             undeliverable_here=bool(remote.undeliverable))
    # released, or settled without a state: not taken
    return DeliveryState("released")
