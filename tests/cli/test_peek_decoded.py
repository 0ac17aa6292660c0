"""peek shows protobuf bodies decoded through the same registry path as `dlxtool decode`."""

import base64
import json

import pika
import pytest

from proto_registry import DEMO_PROTOS, Registry

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only


def order_placed_bytes() -> bytes:
    registry = Registry.load([DEMO_PROTOS])
    cls = registry.message_class("shop.orders.v1.OrderPlaced")
    msg = cls(order_id="ord-42", customer_id="cust-7")
    msg.total.currency_code = "EUR"
    msg.total.units = 129
    msg.metadata["source"] = "web"
    return msg.SerializeToString()


def demo_config(tmp_path) -> dict[str, str]:
    """A config that asks for the demo's schemas, as scripts/demo's does."""
    config = tmp_path / "demo.toml"
    config.write_text("demo_schemas = true\n")
    return {"DLXTOOL_CONFIG": str(config)}


def test_peek_decodes_protobuf_bodies_and_parses_json(run, broker, qname, tmp_path) -> None:
    env = demo_config(tmp_path)
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, order_placed_bytes(),
                         pika.BasicProperties(content_type="application/x-protobuf",
                                              type="shop.orders.v1.OrderPlaced"), mandatory=True)
        ch.basic_publish("", qname, b'{"id": 1}', pika.BasicProperties(content_type="application/json"),
                         mandatory=True)
    result = run("peek", qname, "--url", broker.url, "--format", "json", env=env)
    assert result.exit_code == 0, result.stderr
    first, second = json.loads(result.stdout)
    assert first["decoded"]["type"] == "shop.orders.v1.OrderPlaced"
    assert first["decoded"]["message"]["orderId"] == "ord-42"
    assert second["decoded"] == {"status": "json", "type": None, "message": {"id": 1}}  # parsed (load --reencode)
    table = run("peek", qname, "--url", broker.url, "--format", "table", env=env)
    assert "OrderPlaced" in table.stdout and "ord-42" in table.stdout
    assert broker.queue_depth(qname) == 2


def test_broken_proto_path_warns_and_still_peeks(run, broker, qname, tmp_path) -> None:
    (tmp_path / "bad.proto").write_text('syntax = "proto3";\nmessage X { strin y = 1; }\n')
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, order_placed_bytes(), mandatory=True)
    result = run("peek", qname, "--url", broker.url, "--format", "json", env={"DLXTOOL_PROTO_PATH": str(tmp_path)})
    assert result.exit_code == 0
    assert "bodies not decoded" in result.stderr and "bad.proto" in result.stderr
    assert json.loads(result.stdout)[0]["decoded"] is None


def test_demo_schemas_are_not_loaded_unless_asked_for(run, broker, qname, tmp_path) -> None:
    """The demo's shop.* types must not label a user's bytes: without demo_schemas nothing is decoded."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, order_placed_bytes(), mandatory=True)
    result = run("peek", qname, "--url", broker.url, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)[0]["decoded"] is None
    result = run("peek", qname, "--url", broker.url, "--format", "json", env=demo_config(tmp_path))
    assert json.loads(result.stdout)[0]["decoded"]["type"] == "shop.orders.v1.OrderPlaced"


def test_table_marks_a_defective_guess_with_its_confidence(run, broker, qname, tmp_path) -> None:
    """Bytes that fit a type only with a defect are a guess: the table says so, and how sure it is."""
    body = base64.b64decode("CgRvLTQyEAcaAwD/EA==")  # fits shop.legacy.v1.StockAdjusted with a defect only
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, body, mandatory=True)
        ch.basic_publish("", qname, order_placed_bytes(), pika.BasicProperties(type="shop.orders.v1.OrderPlaced"),
                         mandatory=True)
    env = demo_config(tmp_path)
    guess, clean = json.loads(run("peek", qname, "--url", broker.url, "-f", "json", env=env).stdout)
    assert guess["decoded"]["defects"] and clean["decoded"].get("defects") is None
    table = run("peek", qname, "--url", broker.url, "-f", "table", env=env).stdout
    guess_row = next(line for line in table.splitlines() if "StockAdjusted" in line or "Money" in line)
    confidence = f"{guess['decoded']['confidence']:.2f}"
    assert f"{guess['decoded']['type']}? ({confidence}, defective" in guess_row
    clean_row = next(line for line in table.splitlines() if "ord-42" in line)
    assert "shop.orders.v1.OrderPlaced {" in clean_row and "?" not in clean_row


def test_history_types_an_untyped_body_by_decoding_it(run, broker, qname, tmp_path) -> None:
    """history decodes a body for its type only, and only when the AMQP `type` property does not give it
    (tests/cli/test_imports.py: a typed one loads no protobuf)."""
    env = demo_config(tmp_path)
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, order_placed_bytes(),
                         pika.BasicProperties(content_type="application/x-protobuf"), mandatory=True)
        ch.basic_publish("", qname, order_placed_bytes(), pika.BasicProperties(type="team.Label"), mandatory=True)
    result = run("history", qname, "--url", broker.url, "-f", "json", env=env)
    assert result.exit_code == 0, result.stderr
    untyped, typed = json.loads(result.stdout)
    assert untyped["type"] == "shop.orders.v1.OrderPlaced"
    assert typed["type"] == "team.Label"
