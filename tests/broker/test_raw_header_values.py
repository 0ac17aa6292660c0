"""Header values pika cannot decode or would change (floats, small integer kinds, L, scaled decimals, a
timestamp past year 9999) survive peek, dump --remove → load byte for byte, against the real broker; a
U, which RabbitMQ does not take, is refused by load before anything is published."""

from __future__ import annotations

import base64
import json
import struct

import pika
import pytest

from dlxtool.amqp_values import RawValue
from dlxtool.broker.wire import frames

RAW = {
    "double": b"d" + struct.pack(">d", 1.1), "float": b"f" + struct.pack(">f", 1.5),
    "decimal": b"D\x02\x00\x00\x00\x64", "b": b"b\xff", "B": b"B\xfe", "s": b"s\x80\x01", "u": b"u\xff\xfe",
    "i": b"i" + struct.pack(">I", 4_000_000_000), "stamp": b"T" + struct.pack(">Q", 2**62),
    "L": b"L" + struct.pack(">q", -2),  # RabbitMQ 3.x delivers it as sent (4.x as an l); pika would make it an l
}


def publish_raw(broker, queue: str, n: int) -> None:
    """pika cannot send these kinds: the frames are built by dlxtool's encoder from RawValues."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        for i in range(n):
            props = pika.BasicProperties(headers={**{k: RawValue(v) for k, v in RAW.items()}, "n": i})
            frames.send_publish(conn, ch._impl, "", queue, f"m{i}".encode(), props, mandatory=False,  # noqa: SLF001
                                accelerator=None)
        ch.queue_declare(queue, passive=True)  # a round trip: the publishes are through
    finally:
        conn.close()


def raw_headers(record: dict) -> dict[str, bytes]:
    return {k: base64.b64decode(v["$amqp"]) for k, v in record["headers"].items() if isinstance(v, dict)}


def delivered(broker) -> tuple[dict[str, bytes], dict[str, object]]:
    """What the broker under test delivers of RAW: values kept as their bytes, and values it turned into
    plain ones. RabbitMQ 4.x re-encodes an L (64-bit) as an l with the same value (-2): 3.x keeps it. An l that
    fits 32 bits is kept as its bytes too (as a plain number it would load back as a 32-bit I: issue 39)."""
    if broker.major >= 4:
        return {**{k: v for k, v in RAW.items() if k != "L"}, "L": b"l" + struct.pack(">q", -2)}, {}
    return RAW, {}


def test_peek_dump_remove_and_load_keep_every_value_byte_for_byte(run, broker, qname, tmp_path) -> None:
    publish_raw(broker, qname, 5)
    peek = run("peek", qname, "-n", "5", "--format", "jsonl", "--url", broker.url)
    assert peek.exit_code == 0, peek.stderr
    records = [json.loads(line) for line in peek.stdout.splitlines()]
    kept, plain = delivered(broker)
    assert len(records) == 5 and all(raw_headers(r) == kept for r in records)
    assert all(r["headers"][k] == v for r in records for k, v in plain.items())
    assert records[0]["headers"]["double"]["$value"] == 1.1  # readable for people
    path = tmp_path / "b.jsonl"
    drained = run("dump", qname, "--remove", "-o", str(path), "--yes", "--url", broker.url)
    assert drained.exit_code == 0, drained.stderr
    loaded = run("load", str(path), "--yes", "--url", broker.url, "--format", "json")
    assert loaded.exit_code == 0, loaded.stderr
    again = run("peek", qname, "-n", "5", "--format", "jsonl", "--url", broker.url)
    back = [json.loads(line) for line in again.stdout.splitlines()]
    assert [r["body"] for r in back] == [r["body"] for r in records]
    assert all(raw_headers(r) == kept for r in back)
    assert [r["headers"] for r in back] == [r["headers"] for r in records]


def test_rabbitmq_refuses_a_u_value_so_load_refuses_it_before_publishing(run, broker, qname, tmp_path) -> None:
    """U (the spec's short-int) is not in RabbitMQ's table grammar: the broker closes the whole connection
    on such a publish. A record holding one (kept byte for byte: it can only come from a file) makes load
    refuse the file, naming where, before publishing anything."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    ch = conn.channel()
    ch.queue_declare(qname, durable=True)
    props = pika.BasicProperties(headers={"u": RawValue(b"U\xff\xfe")})
    frames.send_publish(conn, ch._impl, "", qname, b"u", props, mandatory=False,  # noqa: SLF001
                        accelerator=None)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        ch.queue_declare(qname, passive=True)
    assert closed.value.reply_code == 541
    ok = {"queue": qname, "body": base64.b64encode(b"fine").decode(), "headers": {"n": 1}}
    bad = {"queue": qname, "body": base64.b64encode(b"u").decode(),
           "headers": {"t": {"inner": [{"$amqp": base64.b64encode(b"U\xff\xfe").decode(), "$value": -2}]}}}
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(ok) + "\n" + json.dumps(bad) + "\n")
    result = run("load", str(path), "--yes", "--url", broker.url)
    assert result.exit_code == 2, result.stderr
    assert f"{path}:2: header 't.inner[0]'" in result.stderr and "kind 'U'" in result.stderr
    assert broker.queue_depth(qname) == 0
