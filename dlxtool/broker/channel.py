"""Asynchronous channels on a BlockingConnection: pipelined AMQP without a second I/O framework.

Why not `BlockingChannel`: its `basic_publish` after `confirm_delivery()` waits for each confirm (one
round trip per message), and its consumer callbacks go through an extra event queue. Why not a
`SelectConnection`: it would bypass `dlxtool.broker.connection.connect` (TLS, node failover, error
mapping — THE place connections are opened), and its callback-driven ioloop makes Ctrl-C land inside
pika's frame handling. So we keep the BlockingConnection and open *its underlying* channels
(`connection._impl.channel(...)`, pika's asynchronous `pika.channel.Channel`): publishes, acks and
confirms are written without waiting, callbacks only record what happened, and our own loop drives
I/O with `connection.process_data_events(time_limit)`, which raises when the connection is lost.
`_impl` is private pika API, stable across pika 1.x; tests/broker exercise it against a real broker.
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Callable
from typing import Any

from dlxtool import signal_guard
from dlxtool.broker.wire import codec
from dlxtool.broker.wire.codec import Batch
from dlxtool.errors import ConnectError, DlxtoolError, UnavailableError

# How long one idle pump waits for I/O. Short, because pika's timer cannot be woken early by I/O.
IDLE_WAIT = 0.002
# pump() runs pika's whole event loop at least this often (its timers: heartbeats; deferred callbacks)
FULL_LOOP_EVERY = 0.05
# coalesce_output joins pending output up to this many bytes
COALESCE_MAX = 4 * 1024 * 1024


def process_io(connection: Any) -> None:
    """connection.process_data_events(time_limit=0), with less work in the common case; a stop signal that
    arrives meanwhile is raised when it is done (dlxtool.signal_guard)."""
    signal_guard.guarded(_process_io, connection)


def _process_events(connection: Any) -> None:
    connection.process_data_events(time_limit=0)


def _process_io(connection: Any) -> None:
    """process_io's work.

    pika's version costs a timer, an epoll round and its dispatch checks on every call, and the engine
    calls it thousands of times a second; on a busy replay that was a quarter of dlxtool's CPU. When the
    plain-TCP transport is up and nothing waits for pika's loop, the same I/O is done here by calling the
    transport's own socket handlers (send what is buffered, read what has arrived, parse it). Anything
    else — TLS, a transport going down, events only pika's loop dispatches, or FULL_LOOP_EVERY passed —
    goes through process_data_events, which also raises when the connection is lost."""
    transport: Any = getattr(connection._impl, "_transport", None)  # noqa: SLF001
    now = time.monotonic()
    if (type(transport) is not _PLAIN_TRANSPORT or transport._state != transport._STATE_ACTIVE  # noqa: SLF001
            or now >= connection.__dict__.get("_dlxtool_full_loop_due", 0.0) or _pika_pending(connection)):
        connection.process_data_events(time_limit=0)
        connection._dlxtool_full_loop_due = now + FULL_LOOP_EVERY  # noqa: SLF001
        return
    if transport._tx_buffers:  # noqa: SLF001
        transport._on_socket_writable()  # noqa: SLF001 - sends; would-block keeps the rest buffered
    transport._on_socket_readable()  # noqa: SLF001 - reads until would-block and hands the bytes to pika
    if transport._state != transport._STATE_ACTIVE or _pika_pending(connection):  # noqa: SLF001
        connection.process_data_events(time_limit=0)  # the loss (raised here) or events to dispatch


def _pika_pending(connection: Any) -> bool:
    return bool(connection._closed_result.ready or connection._ready_events  # noqa: SLF001
                or connection._channels_pending_dispatch)  # noqa: SLF001


def _plain_transport() -> Any:  # pika's transport class (untyped), or None
    from dlxtool.broker import pika_import

    pika_import.load()  # this may be a command's first pika import: without its asyncio adapter
    try:
        from pika.adapters.utils.io_services_utils import (
            _AsyncPlaintextTransport,  # pyright: ignore[reportPrivateUsage]  # pika internals: pika_private.py
        )
    except ImportError:  # another pika layout: always the full loop
        return None
    return _AsyncPlaintextTransport


_PLAIN_TRANSPORT = _plain_transport()


def coalesce_output(connection: Any) -> None:
    """Join pika's pending output chunks into one, so they leave in one send() instead of one per frame.

    pika sends every frame (method, header, body: three per publish) with its own syscall; batching a
    loop's worth of publishes and acks into one write saves syscalls. Only touches
    the transport's buffer deque, which pika's writer drains from the front — the bytes are the same.
    Not past COALESCE_MAX bytes: big bodies gain nothing from it, and the join is one more copy of them held
    at once (the byte budget, dlxtool.budget).
    """
    transport: Any = getattr(connection._impl, "_transport", None)  # noqa: SLF001
    buffers = getattr(transport, "_tx_buffers", None)
    if buffers is not None and len(buffers) > 1 \
            and getattr(transport, "_tx_buffered_byte_count", 0) <= COALESCE_MAX:
        joined = b"".join(buffers)
        buffers.clear()
        buffers.append(joined)


def wait_readable(connections: tuple[Any, ...], timeout: float, gather: float = 0.0) -> None:
    """Sleep until a connection has input (or can take output it still holds), at most `timeout` s.
    gather: when input came, sleep this much longer, so that more of it is read at once."""
    signal_guard.raise_held()
    readers: list[Any] = []  # sockets (plain or TLS) as select takes them
    writers: list[Any] = []
    for conn in connections:
        transport = getattr(conn._impl, "_transport", None)  # noqa: SLF001
        sock = getattr(transport, "_sock", None)
        if sock is None or getattr(sock, "pending", lambda: 0)():  # no socket, or TLS bytes already decrypted
            return
        readers.append(sock)
        if getattr(transport, "_tx_buffers", None):
            writers.append(sock)
    with contextlib.suppress(OSError, ValueError):  # a closed socket: process_data_events will say so
        readable, _writable, _ = select.select(readers, writers, [], timeout)
        if readable and gather > 0:
            time.sleep(gather)


def cancel_quietly(channel: Any) -> None:
    """A blocking channel's consumer cancelled (BlockingChannel.cancel), where the broker or the connection
    may have closed the channel meanwhile: then there is nothing left to cancel."""
    import pika.exceptions as pe

    with contextlib.suppress(pe.ChannelClosedByBroker, pe.ConnectionClosedByBroker, pe.ChannelWrongStateError,
                             pe.ConnectionWrongStateError):
        channel.cancel()


class ChannelClosed(DlxtoolError):
    """The broker closed the channel (e.g. publishing to an exchange that was deleted); reply_code and
    reply_text are what it said (404, "NOT_FOUND - no queue 'q' …"), None where it said nothing."""

    def __init__(self, message: str, *, reply_code: int | None = None, reply_text: str | None = None) -> None:
        super().__init__(message)
        self.reply_code = reply_code
        self.reply_text = reply_text


class AsyncChannel:
    """One asynchronous channel plus helpers to wait for replies while pumping the connection."""

    def __init__(self, connection: Any, timeout: float = 30.0) -> None:
        self.connection = connection
        self.timeout = timeout
        self.closed_reason: str | None = None
        self.reply_code: int | None = None     # the broker's close code (404, 406 …), when it closed the channel
        self.reply_text: str | None = None
        self.connection_lost = False
        self.close_answered = False  # our channel.close got its close-ok (see close())
        box: list[Any] = []
        connection._impl.channel(on_open_callback=box.append)  # noqa: SLF001 - see module docstring
        self.wait_for(lambda: bool(box), "channel.open")
        self.impl = box[0]
        self.impl.add_on_close_callback(self._on_close)
        # BlockingConnection.close() closes every channel through its "cookie" (normally a BlockingChannel).
        self.impl._set_cookie(self)  # noqa: SLF001

    def _on_close(self, _channel: Any, reason: BaseException) -> None:
        from pika.exceptions import AMQPConnectionError, ChannelClosedByClient

        from dlxtool.broker.connection import broker_said

        self.closed_reason = broker_said(reason)  # "404 NOT_FOUND - no queue 'q' …", not pika's tuple
        code = getattr(reason, "reply_code", None)
        self.reply_code = code if isinstance(code, int) else None
        self.reply_text = getattr(reason, "reply_text", None)
        # The channel went down with its connection (a broker shutting down sends 320 CONNECTION_FORCED, a
        # dropped socket closes every channel): that is a lost connection (exit 3, run again), not a refusal
        # of something this channel did.
        self.connection_lost = isinstance(reason, AMQPConnectionError) or getattr(reason, "reply_code", None) == 320
        # pika reports our own close as ChannelClosedByClient only when the close-ok came; a connection
        # lost meanwhile (or the broker closing the channel first) replaces the reason.
        self.close_answered = isinstance(reason, ChannelClosedByClient)

    @property
    def is_open(self) -> bool:
        return self.closed_reason is None and self.impl.is_open

    def pump(self, wait: float = 0.0, *others: Any, gather: float = 0.0) -> None:
        """Process pending I/O (and wait up to `wait` seconds for some); raise if the channel died.

        `others`: more BlockingConnections whose input should end the wait too (e.g. a publisher's).
        `gather`: after a wait that input ended, let more arrive for this long before reading it: fewer,
        larger turns, which costs both this process and the broker less per message (wait_readable)."""
        connections = (self.connection, *others)
        if wait > 0:
            # process_data_events(time_limit) always sleeps the whole time_limit on these channels (its
            # early exit watches BlockingChannels only). Send what is pending, sleep only until input
            # arrives, then process it: the pipeline does not stall for `wait` after every idle moment.
            for conn in connections:
                coalesce_output(conn)
                process_io(conn)
            wait_readable(connections, wait, gather)
        for conn in connections:
            coalesce_output(conn)
            process_io(conn)
        self.check()

    def check(self) -> None:
        if self.closed_reason is not None:
            if self.connection_lost:
                raise ConnectError(f"the connection to the broker was lost: {self.closed_reason}")
            raise ChannelClosed(f"the broker closed the channel: {self.closed_reason}", reply_code=self.reply_code,
                                reply_text=self.reply_text)

    def wait_for(self, ready: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        waited = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + waited
        while not ready():
            if time.monotonic() > deadline:
                raise self._no_reply(what, waited)
            # Not process_data_events(time_limit): it sleeps the whole limit however soon the reply comes
            # (see pump), and a command waits for a dozen replies before its first message.
            signal_guard.guarded(_process_events, self.connection)
            if not ready():
                wait_readable((self.connection,), IDLE_WAIT * 5)
                signal_guard.guarded(_process_events, self.connection)
            if getattr(self, "impl", None) is not None:
                self.check()

    def _no_reply(self, what: str, waited: float) -> DlxtoolError:
        """The broker did not answer within the timeout. Blocked by a resource alarm (it said so with
        connection.blocked: it reads nothing more from this connection until the alarm clears): that alarm, not now
        (exit 7). Else the connection went silent — a stalled network, a half-open connection, a broker that stopped
        answering: it is dropped here, so that nothing after waits on it again (each wait would take the timeout
        anew: a stall held a replay 155 s), and what it held goes back when the broker notices."""
        from dlxtool.broker.connection import abort, blocked

        why = blocked(self.connection)
        if why is not None:
            return UnavailableError(f"no reply to {what} within {waited:g}s: the broker blocked this connection "
                                    f"({why}: a resource alarm) and reads nothing more from it until the alarm clears",
                                    hint="run it again once the alarm clears (`dlxtool queues` names the node)")
        abort(self.connection)
        return ConnectError(f"no reply to {what} within {waited:g}s: the connection went silent (a stalled network, "
                            "a half-open connection or a broker that stopped answering) and was dropped")

    def went_silent(self, what: str, waited: float) -> DlxtoolError:
        """What waiting `waited` s for `what` with no answer means (see _no_reply); the connection is dropped."""
        return self._no_reply(what, waited)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call an asynchronous channel method that takes `callback=` and wait for its reply frame."""
        box: list[Any] = []
        getattr(self.impl, method)(*args, callback=box.append, **kwargs)
        self.wait_for(lambda: bool(box), method)
        return box[0]

    def consume(self, queue: str, on_message: Callable[[Any, Any, Any, bytes], None], *, raw: bool = False,
                batch: Batch | None = None) -> str:
        """basic.consume (acks by the caller) without waiting for the consume-ok; returns the consumer tag.
        Deliveries come to on_message(channel, method, properties, body) as the codec assembles them
        (dlxtool.broker.wire.codec): raw asks for the properties still encoded (bytes) and batch for runs
        (frames.fast_deliveries) — on the `pika` codec neither: BasicProperties, one by one. Callers take
        either."""
        codec.current().deliveries(self.connection, self.impl, raw=raw, batch=batch)
        tag: str = self.impl.basic_consume(queue, on_message, auto_ack=False)
        return tag

    def on_cancel(self, callback: Callable[[Any], None]) -> None:
        """callback(frame) when the broker cancels a consumer of this channel (its queue was deleted …)."""
        self.impl.add_on_cancel_callback(callback)

    def ack(self, delivery_tag: int, *, multiple: bool = False) -> None:
        """basic.ack, sent with the next pump."""
        self.impl.basic_ack(delivery_tag, multiple=multiple)

    def qos(self, prefetch_count: int, callback: Callable[[Any], None] | None = None) -> None:
        """basic.qos without waiting; `callback(frame)` at its qos-ok (the broker handles a channel's methods
        in order: the qos-ok proves every ack sent before it)."""
        self.impl.basic_qos(prefetch_count=prefetch_count, callback=callback)

    def cancel_consumer(self, consumer_tag: str) -> None:
        """basic.cancel and wait for the cancel-ok; deliveries that arrive meanwhile still go to the
        consumer's callback, so the caller holds them and gives them back with the rest (close()).

        pika's own basic_cancel rejects (requeue) every delivery that arrives between the cancel and its
        cancel-ok, one basic.reject each. A quorum queue applies those as returns of their own: past 32
        in flight in map order (scrambled, with a delivery limit) or at the back (without one), and
        before the in-order give-back of the channel close. Hundreds of them when acks had just
        freed prefetch slots (tests/ops/test_giveback.py)."""
        if consumer_tag not in self.impl._consumers:  # noqa: SLF001 - gone already (cancelled by the broker)
            return
        box: list[Any] = []
        self.impl.basic_cancel(consumer_tag, callback=box.append)
        self.impl._cancelled.discard(consumer_tag)  # noqa: SLF001 - pika's "reject what still comes" mark
        self.wait_for(lambda: bool(box), "basic.cancel")

    def close(self, *_reason: Any) -> None:
        """Close politely if still open, waiting for the close-ok (`close_answered`: every method sent on
        the channel before, acks included, was processed); never raises (the connection may be gone)."""
        try:
            if self.impl.is_open:
                self.impl.close()
                # Until the close-ok (is_open is False as soon as the close is *sent*): callers take the close
                # as proof that the broker processed every method before it (acks; giveback.close_channel).
                self.wait_for(lambda: self.impl.is_closed or self.closed_reason is not None, "channel.close", 5)
        except Exception:  # noqa: BLE001 - closing must not hide the real outcome
            pass
