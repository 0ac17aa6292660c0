"""Header values pika cannot decode or would change (floats, small integer kinds, scaled decimals, a
timestamp past year 9999) survive peek, dump --remove → load byte for byte, against the real broker."""

from __future__ import annotations

import base64
import json
import struct

import pika

from dlxtool.broker import frames
from dlxtool.broker.amqp_values import RawValue

RAW = {
    "double": b"d" + struct.pack(">d", 1.1), "float": b"f" + struct.pack(">f", 1.5),
    "decimal": b"D\x02\x00\x00\x00\x64", "b": b"b\xff", "B": b"B\xfe", "s": b"s\x80\x01", "u": b"u\xff\xfe",
    "i": b"i" + struct.pack(">I", 4_000_000_000), "stamp": b"T" + struct.pack(">Q", 2**62),
}


def publish_raw(broker, queue: str, n: int) -> None:
    """pika cannot send these kinds: the frames are built by dlxtool's encoder from RawValues."""
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        ch.queue_declare(queue)
        for i in range(n):
            props = pika.BasicProperties(headers={**{k: RawValue(v) for k, v in RAW.items()}, "n": i})
            frames.send_publish(conn, ch._impl, "", queue, f"m{i}".encode(), props, mandatory=False)  # noqa: SLF001
        ch.queue_declare(queue, passive=True)  # a round trip: the publishes are through
    finally:
        conn.close()


def raw_headers(record: dict) -> dict[str, bytes]:
    return {k: base64.b64decode(v["$amqp"]) for k, v in record["headers"].items() if isinstance(v, dict)}


def test_peek_dump_remove_and_load_keep_every_value_byte_for_byte(run, broker, qname, tmp_path) -> None:
    publish_raw(broker, qname, 5)
    peek = run("peek", qname, "-n", "5", "--format", "jsonl", "--url", broker.url)
    assert peek.exit_code == 0, peek.stderr
    records = [json.loads(line) for line in peek.stdout.splitlines()]
    assert len(records) == 5 and all(raw_headers(r) == RAW for r in records)
    assert records[0]["headers"]["double"]["$value"] == 1.1  # readable for people
    path = tmp_path / "b.jsonl"
    drained = run("dump", qname, "--remove", "-o", str(path), "--yes", "--url", broker.url)
    assert drained.exit_code == 0, drained.stderr
    loaded = run("load", str(path), "--url", broker.url, "--format", "json")
    assert loaded.exit_code == 0, loaded.stderr
    again = run("peek", qname, "-n", "5", "--format", "jsonl", "--url", broker.url)
    back = [json.loads(line) for line in again.stdout.splitlines()]
    assert [r["body"] for r in back] == [r["body"] for r in records]
    assert all(raw_headers(r) == RAW for r in back)
