"""dlxtool.broker.queues against the real broker: one passive declare for every kind of channel, and the
broker's refusals of it as dlxtool errors."""

from __future__ import annotations

import pika
import pytest

from dlxtool.broker import queues
from dlxtool.broker.channel import AsyncChannel, ChannelClosed
from dlxtool.errors import NotFoundError
from dlxtool.outcome import Status


def test_counts_and_refusals_on_an_async_and_a_blocking_channel(broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        for i in range(3):
            ch.basic_publish("", qname, f"m{i}".encode())
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        blocking = conn.channel()
        held = blocking.basic_get(qname, auto_ack=False)  # one held unacked: not ready
        assert held[0] is not None
        channel = AsyncChannel(conn)
        assert queues.counts(channel, qname, broker.vhost) == queues.Counts(ready=2, consumers=0)
        assert queues.counts(conn.channel(), qname, broker.vhost) == queues.Counts(ready=2, consumers=0)
        assert queues.ready(conn, qname, 10) == 2 and queues.exists(conn, qname, 10)
        assert queues.ready(conn, f"{qname}.missing", 10) is None
        assert not queues.exists(conn, f"{qname}.missing", 10)
        for kind in (AsyncChannel(conn), conn.channel()):  # the broker closes either with 404
            with pytest.raises(NotFoundError, match=f"queue '{qname}.missing' not found in vhost"):
                queues.counts(kind, f"{qname}.missing", broker.vhost)
        with pytest.raises(ChannelClosed) as closed:  # declare alone: the refusal as it comes
            queues.declare(AsyncChannel(conn), f"{qname}.missing")
        assert closed.value.reply_code == 404
    finally:
        conn.close()


def test_an_exclusive_queue_of_another_connection_is_named_as_such(broker, qname) -> None:
    owner = pika.BlockingConnection(pika.URLParameters(broker.url))
    other = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        owner.channel().queue_declare(qname, exclusive=True)
        with pytest.raises(Exception, match="exclusive to another connection") as refused:
            queues.counts(AsyncChannel(other), qname, broker.vhost)
        assert refused.value.status is Status.REFUSED  # exit 6: nothing was read or changed
    finally:
        other.close()
        owner.close()
