"""peek, dump and decode say the same thing about a body (issue 37): a protobuf body cut short is flagged in peek's
table and records as `decode` flags it; `peek --body` prints what the table decodes (`--raw`: the bytes); `dump
--remove` records `decoded` as `dump` does, so that `dump --remove | edit decoded | load --reencode` works."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pika
import pytest

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only

PROTO = """syntax = "proto3";
package acme.orders.v1;
message Money { string currency = 1; int64 cents = 2; }
message Line { string sku = 1; int32 qty = 2; Money price = 3; }
message OrderCreated {
  string order_id = 1;
  string customer = 2;
  repeated Line lines = 3;
  Money total = 4;
  string note = 5;
}
"""
TYPE = "acme.orders.v1.OrderCreated"


@pytest.fixture
def schemas(tmp_path: Path) -> dict[str, str]:
    """The incident's schema (issue 37), as a user registers it: $DLXTOOL_PROTO_PATH."""
    protos = tmp_path / "protos" / "acme" / "orders" / "v1"
    protos.mkdir(parents=True)
    (protos / "orders.proto").write_text(PROTO)
    return {"DLXTOOL_PROTO_PATH": str(tmp_path / "protos")}


def order(schemas: dict[str, str], i: int, note: str = "leave at the door please") -> bytes:
    from proto_registry import Registry

    registry = Registry.load([schemas["DLXTOOL_PROTO_PATH"]])
    msg = registry.message_class(TYPE)(order_id=f"o-{i:05d}", customer=f"cust-{i}", note=note)
    line = msg.lines.add()
    line.sku, line.qty = "SKU-1", 2
    line.price.currency, line.price.cents = "CHF", 1250
    msg.total.currency, msg.total.cents = "CHF", 2500
    return bytes(msg.SerializeToString())


def fill(broker, queue: str, bodies: list[tuple[bytes, str | None]]) -> None:
    with broker.channel() as ch:
        ch.queue_declare(queue, durable=True)
        for i, (body, content_type) in enumerate(bodies):
            ch.basic_publish("", queue, body, pika.BasicProperties(message_id=f"m-{i}", content_type=content_type),
                             mandatory=True)


def test_a_cut_body_is_flagged_in_peek_as_decode_flags_it(run, broker, qname, schemas) -> None:
    whole = order(schemas, 1)
    cut = order(schemas, 2)[:-1]  # cut inside its last field, as a body truncated by a size limit
    noise = bytes(range(200, 256)) * 2  # binary that is no protobuf at all: none of the registry's business
    fill(broker, qname, [(whole, "application/x-protobuf"), (cut, None), (noise, None)])
    records = json.loads(run("peek", qname, "--url", broker.url, "-f", "json", env=schemas).stdout)
    first, second, third = (r["decoded"] for r in records)
    assert first["status"] == "match" and first["type"] == TYPE and first["message"]["note"]
    # what decode says of the same bytes, word for word
    decoded = run("decode", "--input", "base64", "-f", "json", env=schemas,
                  input=base64.b64encode(cut).decode())
    assert decoded.exit_code == 2  # a payload found, none decoded: decode's documented exit
    [said] = json.loads(decoded.stdout)
    assert said["status"] == second["status"] == "truncated"
    assert second["error"] == said["error"] and second["error"].startswith(f"cut short at byte {said['offset']} of "
                                                                           f"{len(cut)}")
    assert (second["offset"], second["size"]) == (said["offset"], len(cut))
    assert second["type"] == said["type"] == TYPE and second["message"] == said["message"]  # the fields before it
    assert "raw" not in second  # the record has the body; decode shows the raw fields
    assert third is None
    table = run("peek", qname, "--url", broker.url, "-f", "table", "--wide", env=schemas).stdout
    [row] = [line for line in table.splitlines() if line.startswith("1 ")]
    assert f"cut short at byte {said['offset']} of {len(cut)}: {TYPE}?" in row  # flagged, and a guess
    # --type selects only what is sure: the cut body's type is read from part of it
    typed = run("peek", qname, "--url", broker.url, "-f", "json", "--type", "OrderCreated", env=schemas)
    assert [r["properties"]["message_id"] for r in json.loads(typed.stdout)] == ["m-0"]
    assert broker.queue_depth(qname) == 3


def test_peek_body_prints_what_the_table_decodes_and_raw_the_bytes(run, broker, qname, schemas) -> None:
    whole, cut = order(schemas, 1), order(schemas, 2)[:-1]
    fill(broker, qname, [(whole, "application/x-protobuf"), (cut, None), (b'{"id": 3}', "application/json")])
    shown = run("peek", qname, "--url", broker.url, "-f", "table", "--body", env=schemas)
    assert shown.exit_code == 0, shown.stderr
    blocks = shown.stdout.split("--- #")[1:]
    assert blocks[0].startswith(f"0 {qname} ({len(whole)} bytes): {TYPE}\n")
    assert json.loads(blocks[0].split("\n", 1)[1])["orderId"] == "o-00001"  # the message, not hex
    head, text = blocks[1].split("\n", 1)
    assert head.startswith(f"1 {qname} ({len(cut)} bytes): cut short at byte ") and TYPE in head
    assert json.loads(text)["orderId"] == "o-00002"  # the fields before the cut
    assert blocks[2] == f'2 {qname} (9 bytes)\n{{"id": 3}}\n'
    raw = run("peek", qname, "--url", broker.url, "-f", "table", "--raw", env=schemas)  # --raw implies --body
    assert raw.exit_code == 0, raw.stderr
    raws = raw.stdout.split("--- #")[1:]
    assert raws[0] == f"0 {qname} ({len(whole)} bytes)\nhex:{whole.hex()}\n"
    assert raws[1] == f"1 {qname} ({len(cut)} bytes)\nhex:{cut.hex()}\n"


def test_dump_remove_records_decoded_as_dump_does_and_reencode_uses_it(run, broker, qname, schemas,
                                                                     tmp_path) -> None:
    whole, cut = order(schemas, 1), order(schemas, 2)[:-1]
    fill(broker, qname, [(whole, "application/x-protobuf"), (cut, None)])
    dumped = [json.loads(line) for line in run("dump", qname, "--url", broker.url, env=schemas).stdout.splitlines()]
    drained = tmp_path / "drained.jsonl"
    removed = run("dump", qname, "--remove", "-o", str(drained), "--yes", "--url", broker.url, env=schemas)
    assert removed.exit_code == 0, removed.stderr
    records = [json.loads(line) for line in drained.read_text().splitlines()]
    assert [r["decoded"] for r in records] == [r["decoded"] for r in dumped]
    assert records[0]["decoded"]["type"] == TYPE and records[1]["decoded"]["status"] == "truncated"
    assert broker.queue_depth(qname) == 0
    # edit decoded, load --reencode: the whole message gets the edit; the cut one goes back as it was
    for r in records:
        if r["decoded"]["message"]:
            r["decoded"]["message"]["note"] = "ring twice"
    edited = "".join(json.dumps(r) + "\n" for r in records)
    loaded = run("load", "-", "--reencode", "--yes", "--url", broker.url, "-f", "json", env=schemas, input=edited)
    assert loaded.exit_code == 0, loaded.stderr
    assert "1 of 2 record(s) re-encoded" in loaded.stderr
    bodies = [body for _m, _p, body in broker.drain(qname)]
    assert bodies[0] == order(schemas, 1, note="ring twice") and bodies[1] == cut
