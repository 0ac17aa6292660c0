"""The message record survives broker → record → JSON → record → broker with every AMQP type pika sends."""

from datetime import UTC, datetime
from decimal import Decimal

import orjson
import pika

from dlxtool.broker.wire.frames import basic_properties
from dlxtool.record import MessageRecord

TS = datetime(2026, 11, 21, 10, 30, 5, tzinfo=UTC)

HEADERS = {
    "long-string": "héllo",
    "byte-array": b"\x00\x01\xfe\xff",
    "bool": True,
    "int32": -123456,
    "int64": 2**40,
    "decimal": Decimal("12.345"),
    "timestamp": TS,
    "void": None,
    "table": {"inner": {"deep": [1, "two", b"\x03"]}, "flag": False},
    "array": ["a", 1, TS, None, {"k": "v"}],
    "tag-lookalike": {"$bytes": "not really"},
}
PROPS = dict(content_type="application/x-protobuf", content_encoding="identity", delivery_mode=2, priority=3,
             correlation_id="corr-1", reply_to="replies", expiration="600000", message_id="m-1",
             timestamp=1763721005, type="shop.orders.v1.OrderPlaced", app_id="orders-svc", cluster_id="c1")


def get_one(broker, queue: str) -> MessageRecord:
    with broker.channel() as ch:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        assert method is not None, f"{queue} is empty"
        return MessageRecord.from_delivery(queue, method, props, body)


def test_headers_properties_and_body_survive_json_and_republish(broker, qname) -> None:
    body = bytes(range(256))
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, body, pika.BasicProperties(headers=HEADERS, **PROPS), mandatory=True)
    first = get_one(broker, qname)
    assert first.headers == HEADERS
    assert first.properties == PROPS
    assert first.body == body

    again = MessageRecord.from_json(orjson.loads(first.to_jsonl()))
    assert again == first
    with broker.channel() as ch:
        ch.basic_publish("", qname, again.body, basic_properties(again.properties, again.headers), mandatory=True)
    second = get_one(broker, qname)
    assert (second.headers, second.properties, second.body) == (HEADERS, PROPS, body)


def test_where_pika_loses_fidelity_is_documented(broker, qname) -> None:
    """pika limits, checked so that the record docs stay true (see dlxtool/record.py)."""
    import pytest
    from pika.exceptions import UnsupportedAMQPFieldException

    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        # pika cannot encode a float header at all ...
        with pytest.raises(UnsupportedAMQPFieldException):
            ch.basic_publish("", qname, b"x", pika.BasicProperties(headers={"f": 1.5}))
    with broker.channel() as ch:
        # ... and a non-UTF-8 long string comes back as bytes, re-sent as a byte array.
        raw = pika.spec.BasicProperties(headers={"s": b"\xff"})
        ch.basic_publish("", qname, b"x", raw, mandatory=True)
    record = get_one(broker, qname)
    assert record.headers == {"s": b"\xff"}
