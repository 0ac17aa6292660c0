"""`dlxtool dump q.dlq | (edit the decoded) | dlxtool load - --reencode` against the real broker, with dead letters
the broker made from real rejects: changed records are published re-encoded, unchanged ones byte for byte."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess

import pika
import pytest
from google.protobuf.unknown_fields import UnknownFieldSet

from proto_registry import DEMO_PROTOS, Registry
from tests.cli.test_compressed_bodies import dead_letter
from tests.cli.test_peek_decoded import demo_config, order_placed_bytes

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only

ORDER = "shop.orders.v1.OrderPlaced"
UNKNOWN = b"\xa0\x1f\x05"  # field 500: a field a newer producer added


def messages() -> list[tuple[bytes, pika.BasicProperties]]:
    return [
        (order_placed_bytes() + UNKNOWN, pika.BasicProperties(content_type="application/x-protobuf", type=ORDER,
                                                              message_id="m-proto")),
        (gzip.compress(b'{"amount": 10, "currency": "EUR"}', mtime=0),
         pika.BasicProperties(content_type="application/json", content_encoding="gzip", message_id="m-gzip")),
        (b'{"untouched": [1, 2.50]}', pika.BasicProperties(content_type="application/json", message_id="m-json")),
        (b"\x00\xffbinary", pika.BasicProperties(message_id="m-bin")),
    ]


def dumped(run, broker, queue: str, env: dict[str, str]) -> list[dict]:
    result = run("dump", queue, "--url", broker.url, env=env)
    assert result.exit_code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def by_id(got: list) -> dict[str, tuple]:
    return {props.message_id: (props, body) for _m, props, body in got}


def test_changed_decoded_is_reencoded_and_the_rest_goes_byte_for_byte(run, broker, qname, tmp_path) -> None:
    sent = messages()
    topo = dead_letter(broker, qname, sent)
    target = f"{qname}.fixed"
    with broker.channel() as ch:
        ch.queue_declare(target, durable=True)
    env = demo_config(tmp_path)
    records = dumped(run, broker, topo.dlq, env)
    assert [r["decoded"]["status"] if r["decoded"] else None for r in records] == ["match", "json", "json", None]
    records[0]["decoded"]["message"]["total"]["currencyCode"] = "USD"
    records[1]["decoded"]["message"]["amount"] = 11
    edited = "".join(json.dumps(r) + "\n" for r in records)

    result = run("load", "-", "--reencode", "--yes", "--to", target, "--url", broker.url, "-f", "json", env=env,
                 input=edited)
    assert result.exit_code == 0, result.stderr
    assert "--reencode: 2 of 4 record(s) re-encoded" in result.stderr
    got = by_id(broker.drain(target))
    registry = Registry.load([DEMO_PROTOS])
    order = registry.message_class(ORDER).FromString(got["m-proto"][1])
    assert order.total.currency_code == "USD" and order.order_id == "ord-42" and order.total.units == 129
    assert [(f.field_number, f.data) for f in UnknownFieldSet(order)] == [(500, 5)]
    props, body = got["m-gzip"]
    assert props.content_encoding == "gzip" and gzip.decompress(body) == b'{"amount":11,"currency":"EUR"}'
    assert got["m-json"][1] == sent[2][0] and got["m-bin"][1] == sent[3][0]  # unchanged: byte for byte
    assert broker.queue_depth(topo.dlq) == 4  # dump took nothing away


def test_without_a_change_every_record_keeps_its_bytes(run, broker, qname, tmp_path) -> None:
    sent = messages()
    topo = dead_letter(broker, qname, sent)
    env = demo_config(tmp_path)
    records = dumped(run, broker, topo.dlq, env)
    assert run("purge", topo.dlq, "--yes", "--url", broker.url).exit_code == 0
    result = run("load", "-", "--reencode", "--yes", "--url", broker.url, "-f", "json", env=env,
                 input="".join(json.dumps(r) + "\n" for r in records))
    assert result.exit_code == 0, result.stderr
    assert [body for _m, _p, body in broker.drain(topo.dlq)] == [body for body, _p in sent]


def test_a_decoded_the_schema_rejects_stops_the_load_before_anything_is_published(run, broker, qname,
                                                                                   tmp_path) -> None:
    topo = dead_letter(broker, qname, messages())
    target = f"{qname}.fixed"
    with broker.channel() as ch:
        ch.queue_declare(target, durable=True)
    env = demo_config(tmp_path)
    records = dumped(run, broker, topo.dlq, env)
    records[0]["decoded"]["message"]["total"]["currency"] = "USD"  # no such field in Money
    result = run("load", "-", "--reencode", "--yes", "--to", target, "--url", broker.url, env=env,
                 input="".join(json.dumps(r) + "\n" for r in records))
    assert result.exit_code == 2
    assert '<stdin>:1: decoded.message: shop.orders.v1.OrderPlaced: Failed to parse total field' in result.stderr
    assert 'no field named "currency"' in result.stderr
    assert broker.queue_depth(target) == 0


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is not installed")
def test_dump_jq_load_pipeline(run, broker, qname, tmp_path) -> None:
    sent = {p.message_id: body for body, p in messages()}
    topo = dead_letter(broker, qname, messages())
    target = f"{qname}.fixed"
    with broker.channel() as ch:
        ch.queue_declare(target, durable=True)
    env = demo_config(tmp_path)
    dump = run("dump", topo.dlq, "--url", broker.url, env=env)
    assert dump.exit_code == 0, dump.stderr
    edited = subprocess.run(
        ["jq", "-c", 'if .decoded.type == "shop.orders.v1.OrderPlaced" then .decoded.message.customerId = "cust-8" '
                     "else . end"], input=dump.stdout, capture_output=True, text=True, check=True).stdout
    result = run("load", "-", "--reencode", "--yes", "--to", target, "--url", broker.url, env=env, input=edited)
    assert result.exit_code == 0, result.stderr
    got = by_id(broker.drain(target))
    order = Registry.load([DEMO_PROTOS]).message_class(ORDER).FromString(got["m-proto"][1])
    assert order.customer_id == "cust-8" and order.order_id == "ord-42"
    # jq rewrote every line (key order, number formats): what it did not change still keeps its bytes
    assert got["m-gzip"][1] == sent["m-gzip"] and got["m-json"][1] == sent["m-json"]
