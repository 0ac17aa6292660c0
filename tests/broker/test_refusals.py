"""dlxtool.broker.refusals against the real broker: each channel close it reads is made to happen here (on every
version the suite runs), and read back as the Refusal the engine acts on — so a broker that words a refusal
differently fails here, not in an incident."""

from __future__ import annotations

import uuid

import pika
import pika.exceptions
import pytest

from dlxtool.broker.refusals import Refusal


def refused(broker, exchange: str, key: str, body: bytes = b"x", **props) -> Refusal:
    """Publish once with confirms on a fresh channel; the broker's channel close, read."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            ch.basic_publish(exchange, key, body, pika.BasicProperties(**props))
        return Refusal.read(closed.value.reply_code, closed.value.reply_text)
    finally:
        if conn.is_open:
            conn.close()


@pytest.mark.parametrize(("prop", "value", "other"), [("expiration", "-100", "100"),         # forged
                                                    ("user_id", "orders-service", "guest")])  # not ours
def test_a_refused_property_is_pinned_to_its_message(broker, qname, prop: str, value: str, other: str) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    refusal = refused(broker, "", qname, **{prop: value})
    assert (refusal.code, getattr(refusal, prop), refusal.per_message) == (406, value, True), refusal.said
    assert refusal.refuses("", 1, pika.BasicProperties(**{prop: value}))
    assert not refusal.refuses("", 1, pika.BasicProperties(**{prop: other}))


def test_a_missing_exchange_names_the_exchange(broker) -> None:
    missing = f"dlxtool-missing-{uuid.uuid4().hex[:8]}"
    refusal = refused(broker, missing, "k")
    assert (refusal.code, refusal.exchange, refusal.per_message) == (404, missing, False), refusal.said
    assert refusal.names_exchange(missing) and not refusal.names_exchange("")


def test_an_internal_exchange_names_the_exchange(broker, qname) -> None:
    internal = f"{qname}.internal"
    with broker.channel() as ch:
        ch.exchange_declare(internal, "fanout", durable=True, internal=True)
    try:
        refusal = refused(broker, internal, "k")
        assert (refusal.code, refusal.exchange, refusal.per_message) == (403, internal, False), refusal.said
    finally:
        with broker.channel() as ch:
            ch.exchange_delete(internal)


def test_a_body_over_the_brokers_max_size_is_pinned_to_its_message(broker, qname) -> None:
    """4.x's default max_message_size is 16 MiB (3.x's 128 MiB: too big to send here for each run)."""
    if broker.major < 4:
        pytest.skip("3.x's max_message_size default is 128 MiB")
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    size = 16 * 1024 * 1024 + 1
    refusal = refused(broker, "", qname, body=b"x" * size)
    assert (refusal.code, refusal.size, refusal.per_message) == (406, size, True), refusal.said
    assert refusal.max_size == 16 * 1024 * 1024 and refusal.refuses("", size, pika.BasicProperties())


def test_the_expirations_dlxtool_restores_are_those_the_broker_takes(broker, qname) -> None:
    """versions.expiration_taken (replay checks an x-death original-expiration with it before restoring it) against
    this broker: each value published once; taken or the channel closed (406 invalid expiration)."""
    from dlxtool.broker.versions import MAX_EXPIRATION_MS, expiration_taken

    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    values = [str(MAX_EXPIRATION_MS), str(MAX_EXPIRATION_MS + 1), "0", "-0", "+5", "60000", " 5", "1.5", "", "-100",
              "5e3"]
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    taken: dict[str, bool] = {}
    try:
        for value in values:
            ch = conn.channel()
            ch.confirm_delivery()
            try:
                ch.basic_publish("", qname, b"x", pika.BasicProperties(expiration=value))
                taken[value] = True
                ch.close()
            except pika.exceptions.ChannelClosedByBroker as closed:
                assert closed.reply_code == 406, closed
                taken[value] = False
    finally:
        conn.close()
    assert {v: expiration_taken(v) for v in values} == taken
