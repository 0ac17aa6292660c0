"""peek shows protobuf bodies decoded through the same registry path as `dlxtool decode`."""

import json

import pika

from proto_registry import Registry


def order_placed_bytes() -> bytes:
    registry = Registry.load([])
    cls = registry.message_class("shop.orders.v1.OrderPlaced")
    msg = cls(order_id="ord-42", customer_id="cust-7")
    msg.total.currency_code = "EUR"
    msg.total.units = 129
    msg.metadata["source"] = "web"
    return msg.SerializeToString()


def test_peek_decodes_protobuf_bodies_and_leaves_json_alone(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname)
        ch.basic_publish("", qname, order_placed_bytes(),
                         pika.BasicProperties(content_type="application/x-protobuf",
                                              type="shop.orders.v1.OrderPlaced"), mandatory=True)
        ch.basic_publish("", qname, b'{"id": 1}', pika.BasicProperties(content_type="application/json"),
                         mandatory=True)
    result = run("peek", qname, "--url", broker.url, "--format", "json")
    assert result.exit_code == 0, result.stderr
    first, second = json.loads(result.stdout)
    assert first["decoded"]["type"] == "shop.orders.v1.OrderPlaced"
    assert first["decoded"]["message"]["orderId"] == "ord-42"
    assert second["decoded"] is None
    table = run("peek", qname, "--url", broker.url, "--format", "table")
    assert "OrderPlaced" in table.stdout and "ord-42" in table.stdout
    assert broker.queue_depth(qname) == 2


def test_broken_proto_path_warns_and_still_peeks(run, broker, qname, tmp_path) -> None:
    (tmp_path / "bad.proto").write_text('syntax = "proto3";\nmessage X { strin y = 1; }\n')
    with broker.channel() as ch:
        ch.queue_declare(qname)
        ch.basic_publish("", qname, order_placed_bytes(), mandatory=True)
    result = run("peek", qname, "--url", broker.url, "--format", "json", env={"DLXTOOL_PROTO_PATH": str(tmp_path)})
    assert result.exit_code == 0
    assert "bodies not decoded" in result.stderr and "bad.proto" in result.stderr
    assert json.loads(result.stdout)[0]["decoded"] is None
