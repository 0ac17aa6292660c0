"""dlxtool.ops.peek_past_poison.wait_until_back against a real broker: the second read of a queue starts once what the
first read's closed connection held is back (the broker puts it back asynchronously), and never waits past its bound."""

from __future__ import annotations

import threading
import time

import pika
import pytest

from dlxtool.ops import peek_past_poison
from dlxtool.ops.peek import QueueFacts
from tests.support.broker import BrokerEnv


def held(broker: BrokerEnv, queue: str, n: int) -> pika.BlockingConnection:
    """A connection holding the first `n` messages of `queue` unacked (as a read the broker stopped holds them)."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    for _ in range(n):
        method, _props, _body = ch.basic_get(queue)
        assert method is not None
    return conn


def test_the_second_read_waits_until_the_held_messages_are_back(broker: BrokerEnv, qname: str) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, [b"a", b"b", b"c"])
    facts = QueueFacts(name=qname, vhost=broker.vhost, type="classic", type_source="AMQP probe", ready=3)
    conn = held(broker, qname, 2)
    closer = threading.Timer(0.3, conn.close)  # pika is not thread-safe: nothing else uses this connection meanwhile
    started = time.monotonic()
    closer.start()
    try:
        assert peek_past_poison.wait_until_back(broker.profile(), facts) is True
    finally:
        closer.join()
    assert time.monotonic() - started >= 0.3  # it waited for the close, not for a timer of its own
    assert broker.queue_depth(qname) == 3


def test_it_gives_up_at_its_bound_when_the_messages_stay_away(broker: BrokerEnv, qname: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Another consumer holds them (or took them): the read goes on after BACK_WAIT_SECONDS, said with False."""
    monkeypatch.setattr(peek_past_poison, "BACK_WAIT_SECONDS", 0.3)
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, [b"a", b"b"])
    facts = QueueFacts(name=qname, vhost=broker.vhost, type="classic", type_source="AMQP probe", ready=2)
    conn = held(broker, qname, 1)
    try:
        started = time.monotonic()
        assert peek_past_poison.wait_until_back(broker.profile(), facts) is False
        assert 0.3 <= time.monotonic() - started < 3
    finally:
        conn.close()
