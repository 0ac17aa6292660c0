"""`load` of records that hold a whole AMQP 1.0 message (issue 39): `dump --protocol 1.0` → `load --protocol 1.0`
brings each message back as it was dumped, section by section and type by type (but the death history, left out,
and dlxtool's provenance, added as a replay over 1.0 adds it); over 0.9.1 such a file is refused (exit 6) unless
the loss is accepted. Messages published by RabbitMQ's own AMQP 1.0 client (rabbitmq-amqp-python-client) and, for
what that client cannot send (several data sections), by dlxtool's encoder; dead-lettered by the broker (a real
`rejected` outcome). On 3.x: --protocol 1.0 is refused (exit 2) and the 0.9.1 refusal is proved on a file made here.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from dlxtool.amqp10_message import Amqp10Message, Body, Typed, encode_message
from dlxtool.broker import versions
from dlxtool.cli.output import ExitStatus
from dlxtool.record import MessageRecord
from tests.support.amqp10 import read_head

pytestmark = pytest.mark.broker

pytest.importorskip("proton")

UUID = "87654321-4321-8765-4321-876543218765"
# What a delivery adds (the broker writes it again on each) and what a load changes on purpose
DELIVERY_HEADER = ("first_acquirer", "delivery_count")
DELIVERY_ANNOTATIONS = ("x-exchange", "x-routing-key", "x-opt-dlxtool-replay")
# The death history the broker gives an AMQP 1.0 reader of a dead letter (measured on 4.0.5 and 4.3.6): left out
DEATH_ANNOTATIONS = ("x-opt-deaths", "x-first-death-queue", "x-first-death-reason", "x-first-death-exchange",
                     "x-last-death-queue", "x-last-death-reason", "x-last-death-exchange")




def _publish_with_the_client(broker, queue: str) -> None:
    """Three messages as RabbitMQ's own AMQP 1.0 client sends them: ids of several types, subject, typed application
    properties (it sends one data section only, and no `to` beside a publisher's address: _own_messages)."""
    client = pytest.importorskip("rabbitmq_amqp_python_client")
    from rabbitmq_amqp_python_client import AddressHelper, Message
    from rabbitmq_amqp_python_client.qpid.proton import symbol, timestamp, ulong

    env = client.Environment(uri=f"amqp://guest:guest@localhost:{broker.amqp_port}/{broker.vhost}")
    conn = env.connection()
    conn.dial()
    try:
        publisher = conn.publisher(AddressHelper.queue_address(queue))
        app = {"big": ulong(2**64 - 1), "small": ulong(5), "sym": symbol("RETRY"),
               "when": timestamp(1_700_000_000_123), "id": uuid.UUID(UUID), "n": 7}
        publisher.publish(Message(body=b"one data section", id=ulong(1000), subject="orders.created",
                                  correlation_id=uuid.UUID(UUID),
                                  durable=True, application_properties=app))
        publisher.publish(Message(body=b"binary id", id=b"\x01\x02id", subject="s", durable=True,
                                  application_properties={"sym": symbol("x")}))
        publisher.publish(Message(body=b"string id", id="plain-1", durable=True,
                                  application_properties={"when": timestamp(1_700_000_000_999)}))
        publisher.close()
    finally:
        conn.close()
        env.close()


def _own_messages() -> list[Amqp10Message]:
    """What the client cannot send: several data sections (an empty one included), with a message annotation and
    `to`; an amqp-value body."""
    sections = Amqp10Message(header={"durable": Typed("boolean", True)},
                             message_annotations=[(Typed("symbol", "x-opt-tenant"), Typed("string", "acme"))],
                             properties={"message_id": Typed("uuid", UUID), "to": Typed("string", "/queues/x")},
                             application_properties=[(Typed("string", "k"), Typed("symbol", "v"))],
                             body=Body("data", [b"part one|", b"\x00\xffpart two", b""]))
    value = Amqp10Message(header={"durable": Typed("boolean", True)}, properties={"message_id": Typed("string", "v")},
                          body=Body("amqp-value", [Typed("map", [(Typed("string", "a"), Typed("long", 1))])]))
    return [sections, value]


def _dead_letters(broker, qname: str) -> tuple[str, str, int]:
    """Five AMQP 1.0 messages rejected from a quorum work queue into a classic DLQ (the broker dead-letters them)."""
    from dlxtool.broker.amqp10 import outcomes
    from dlxtool.broker.amqp10.addresses import queue_address
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.broker.amqp10.links import HeadReader, Sender

    work, dlq = f"{qname}.work", f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, durable=True, arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": dlq})
    _publish_with_the_client(broker, work)
    conn = open_connection(broker.profile())
    try:
        sender = Sender(conn, queue_address(work))
        for msg in _own_messages():
            assert sender.send(encode_message(msg)).taken
        sender.close()
        reader = HeadReader(conn, queue_address(work), give_back=outcomes.RELEASE)
        for delivery in reader.read(5):
            reader.settle(delivery, outcomes.REJECT)
        reader.close()
    finally:
        conn.close()
    assert broker.wait_depth(dlq, 5) == 5
    return work, dlq, 5



def _as_sent(msg: Amqp10Message) -> dict[str, Any]:
    """A message's sections in their JSON form (every value with its type) without what a delivery adds, the death
    history and the provenance."""
    out = msg.to_json()
    header = {k: v for k, v in out.pop("header", {}).items() if k not in DELIVERY_HEADER}
    if header:
        out["header"] = header
    left_out = DELIVERY_ANNOTATIONS + DEATH_ANNOTATIONS
    annotations = {k: v for k, v in out.pop("message_annotations", {}).items() if k not in left_out}
    if annotations:
        out["message_annotations"] = annotations
    return out


def _dump(run, broker, queue: str, path) -> list[dict[str, Any]]:
    result = run("--url", broker.url, "dump", queue, "--all", "--protocol", "1.0", "-o", str(path))
    assert result.exit_code == 0, result.stderr
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_dump_then_load_over_amqp10_brings_each_message_back_as_dumped(v4, qname, run, tmp_path) -> None:
    _work, dlq, n = _dead_letters(v4, qname)
    dumped = _dump(run, v4, dlq, tmp_path / "dlq.jsonl")
    assert len(dumped) == n and all(r.get("amqp10") for r in dumped)
    originals = [Amqp10Message.from_json(r["amqp10"]) for r in dumped]
    # a death history to leave out
    assert all(m.annotation(name) is not None for m in originals for name in DEATH_ANNOTATIONS)
    fresh = f"{qname}.fresh"
    with v4.channel() as ch:
        ch.queue_declare(fresh, durable=True)

    result = run("--url", v4.url, "load", str(tmp_path / "dlq.jsonl"), "--to", fresh, "--protocol", "1.0", "--yes",
                 "--format", "json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["published"] == {fresh: n} and summary["failed_total"] == 0, summary
    assert v4.wait_depth(fresh, n) == n and v4.queue_depth(dlq) == n  # a load takes nothing away

    back = read_head(v4, fresh, n)
    # field by field, type by type: what was dumped, but for the delivery's annotations and the death history
    for got, want in zip(back, originals, strict=True):
        assert _as_sent(got) == _as_sent(want), (got.to_json(), want.to_json())
    first, binary, plain, sections, value = back
    props = first.properties or {}
    assert (props["message_id"].type, props["message_id"].value) == ("ulong", 1000)
    assert props["subject"].value == "orders.created" and (sections.properties or {})["to"].value == "/queues/x"
    assert props["correlation_id"] == Typed("uuid", UUID)
    app = dict((k.value, v) for k, v in first.application_properties or ())
    assert app["big"] == Typed("ulong", 2**64 - 1) and app["small"] == Typed("ulong", 5)
    assert app["sym"] == Typed("symbol", "RETRY") and app["when"] == Typed("timestamp", 1_700_000_000_123)
    assert app["id"] == Typed("uuid", UUID) and app["n"].type == "long"
    assert (binary.properties or {})["message_id"] == Typed("binary", b"\x01\x02id")
    assert (plain.properties or {})["message_id"] == Typed("string", "plain-1")
    assert dict((k.value, v) for k, v in plain.application_properties or ())["when"] == Typed("timestamp",
                                                                                              1_700_000_000_999)
    assert value.body.kind == "amqp-value" and value.body.sections == [Typed("map", [(Typed("string", "a"),
                                                                                     Typed("long", 1))])]
    assert sections.body.kind == "data" and sections.body.sections == [b"part one|", b"\x00\xffpart two", b""]
    assert sections.annotation("x-opt-tenant") == Typed("string", "acme")
    # the death history is left out; the provenance travels as replay over 1.0 sends it, and reads as the header
    for msg in back:
        assert all(msg.annotation(name) is None for name in DEATH_ANNOTATIONS)
        assert msg.annotation("x-opt-dlxtool-replay") is not None
    peeked = run("--url", v4.url, "peek", fresh, "--protocol", "1.0", "--format", "jsonl", "-n", "1")
    assert peeked.exit_code == 0, peeked.stderr
    record = json.loads(peeked.stdout.splitlines()[0])
    assert record["deaths"] == [] and record["headers"]["dlxtool-replay"]["from"] == f"file {tmp_path / 'dlq.jsonl'}"


def _dumped_and_a_fresh_queue(v4, qname: str, run, tmp_path) -> tuple[int, Any, str]:
    """The dead letters dumped over 1.0 into a file, and an empty queue to load them into: (records, file, queue)."""
    _work, dlq, n = _dead_letters(v4, qname)
    path = tmp_path / "dlq.jsonl"
    _dump(run, v4, dlq, path)
    fresh = f"{qname}.fresh"
    with v4.channel() as ch:
        ch.queue_declare(fresh, durable=True)
    return n, path, fresh


def test_over_091_records_that_hold_amqp10_are_refused_unless_the_loss_is_accepted(v4, qname, run, tmp_path) -> None:
    n, path, fresh = _dumped_and_a_fresh_queue(v4, qname, run, tmp_path)
    refused = run("--url", v4.url, "load", str(path), "--to", fresh, "--yes", "--protocol", "0-9-1")
    assert refused.exit_code == ExitStatus.REFUSED, refused.stderr
    assert f"{n} of the {n} record(s) of {path} that hold a whole AMQP 1.0 message" in refused.stderr
    assert "several data sections arrive merged into one body: 1 record(s), e.g. #4" in refused.stderr
    assert "subject dropped: 2 record(s), e.g. #1, #2" in refused.stderr
    assert "--protocol 1.0" in refused.stderr and "nothing was published" in refused.stderr
    assert v4.queue_depth(fresh) == 0

    dry = run("--url", v4.url, "load", str(path), "--to", fresh, "--dry-run", "--format", "json", "--protocol", "0-9-1")
    assert dry.exit_code == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["amqp10_records"] == n and plan["conversion_losses"]["messages_losing"] == n
    assert "the load would be refused (exit 6)" in dry.stderr

    accepted = run("--url", v4.url, "load", str(path), "--to", fresh, "--yes", "--accept-conversion-loss", "--format",
                   "json", "--protocol", "0-9-1")
    assert accepted.exit_code == 0, accepted.stderr
    assert json.loads(accepted.stdout)["published"] == {fresh: n}
    assert "published anyway (--accept-conversion-loss)" in accepted.stderr
    assert v4.wait_depth(fresh, n) == n


def test_auto_loads_records_that_hold_amqp10_over_10_whole(v4, qname, run, tmp_path) -> None:
    """Without --protocol: a file whose every record holds a whole AMQP 1.0 message that 0.9.1 would lose part of is
    published over 1.0, said first; a file that also holds a record read over 0.9.1 cannot go over 1.0 and stays
    refused (exit 6), saying why."""
    n, path, fresh = _dumped_and_a_fresh_queue(v4, qname, run, tmp_path)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(MessageRecord(queue=fresh, body=b"x").to_jsonl() + path.read_bytes())
    refused = run("--url", v4.url, "load", str(mixed), "--to", fresh, "--yes")
    assert refused.exit_code == ExitStatus.REFUSED, refused.stderr
    assert f"1 of the {n + 1} record(s) hold no AMQP 1.0 message" in refused.stderr
    assert v4.queue_depth(fresh) == 0
    dry = run("--url", v4.url, "load", str(path), "--to", fresh, "--dry-run", "--format", "json")
    assert dry.exit_code == 0, dry.stderr
    assert (json.loads(dry.stdout)["protocol"], json.loads(dry.stdout)["protocol_by"]) == ("1.0", "auto")
    assert dry.stderr.count("load over AMQP 1.0 (--protocol auto)") == 1
    done = run("--url", v4.url, "load", str(path), "--to", fresh, "--yes", "--format", "json")
    assert done.exit_code == 0, done.stderr
    assert f"load over AMQP 1.0 (--protocol auto): {n} of the {n} record(s)" in done.stderr
    assert "subject dropped: 2 record(s), e.g. #1, #2" in done.stderr
    assert json.loads(done.stdout)["published"] == {fresh: n}
    back = read_head(v4, fresh, n)
    assert sum(1 for m in back if (m.properties or {}).get("subject") is not None) == 2
    assert any(len(m.body.sections) > 1 for m in back)


def test_what_the_broker_does_not_take_fails_with_the_reason(v4, qname, run, tmp_path) -> None:
    """`rejected` (a full reject-publish queue) fails that record, exit 5, into --failed; a missing queue with
    --default-exchange: nothing sent, exit 6."""
    path = tmp_path / "two.jsonl"
    path.write_bytes(b"".join(_record(qname, f"m-{i}").to_jsonl() for i in range(2)))
    full = f"{qname}.full"
    with v4.channel() as ch:
        ch.queue_declare(full, durable=True, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    failed = tmp_path / "failed.jsonl"
    result = run("--url", v4.url, "load", str(path), "--to", full, "--protocol", "1.0", "--yes", "--format", "json",
                 "--failed", str(failed))
    assert result.exit_code == ExitStatus.PARTIAL, result.stderr
    summary = json.loads(result.stdout)
    assert summary["published"] == {full: 1} and summary["failed_total"] == 1, summary
    assert any("rejected" in why for why in summary["failed"]), summary
    again = [json.loads(line) for line in failed.read_text().splitlines()]
    assert [r["amqp10"]["properties"]["message_id"] for r in again] == [{"string": "m-1"}]

    missing = run("--url", v4.url, "load", str(path), "--to", f"{qname}.nowhere", "--default-exchange", "--protocol",
                  "1.0", "--yes", "--format", "json")
    assert missing.exit_code == ExitStatus.REFUSED, missing.stderr
    assert json.loads(missing.stdout)["published_total"] == 0


def _record(queue: str, message_id: str) -> MessageRecord:
    msg = Amqp10Message(header={"durable": Typed("boolean", True)},
                        properties={"message_id": Typed("string", message_id), "subject": Typed("string", "s")},
                        body=Body("data", [b"a", b"b"]))
    return MessageRecord.from_amqp10(queue, encode_message(msg))


def test_settings_the_amqp10_load_cannot_honour_are_refused(broker, qname, run, tmp_path) -> None:
    """Exit 2 before anything is published: on 3.x --protocol 1.0 itself; on 4.x a record without amqp10 and
    --reencode. On any broker, a file of amqp10 records is refused over 0.9.1 (exit 6)."""
    path = tmp_path / "one.jsonl"
    path.write_bytes(_record(qname, "m-0").to_jsonl())
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    reencode = run("--url", broker.url, "load", str(path), "--protocol", "1.0", "--reencode", "--yes")
    assert reencode.exit_code == 2 and "--protocol 1.0 does not load records with --reencode" in reencode.stderr
    over_091 = run("--url", broker.url, "load", str(path), "--yes", "--protocol", "0-9-1")
    assert over_091.exit_code == ExitStatus.REFUSED, over_091.stderr
    assert "subject dropped: 1 record(s), e.g. #1" in over_091.stderr
    if not versions.speaks_amqp10(broker.version):  # auto cannot take the 1.0 path there: refused, saying why
        auto = run("--url", broker.url, "load", str(path), "--yes")
        assert auto.exit_code == ExitStatus.REFUSED, auto.stderr
        assert "not moved over AMQP 1.0 instead" in auto.stderr and "RabbitMQ 4.x" in auto.stderr
        assert "cannot be made here" in auto.stderr and "--protocol 1.0 (RabbitMQ 4.x) publishes" not in auto.stderr
    by_env = run("--url", broker.url, "load", str(path), "--yes", "--reset-history", env={"DLXTOOL_PROTOCOL": "1.0"})
    if not versions.speaks_amqp10(broker.version):
        assert by_env.exit_code == 2 and "--protocol 1.0 moves messages on RabbitMQ 4.x" in by_env.stderr
        assert broker.queue_depth(qname) == 0
        return
    assert by_env.exit_code == 0, by_env.stderr
    (back,) = read_head(broker, qname, 1)
    assert (back.properties or {})["subject"] == Typed("string", "s") and back.body.sections == [b"a", b"b"]
    assert back.annotation("x-opt-dlxtool-replay") is not None  # --reset-history: replay's provenance
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(MessageRecord(queue=qname, body=b"x").to_jsonl() + path.read_bytes())
    without = run("--url", broker.url, "load", str(plain), "--protocol", "1.0", "--yes")
    assert without.exit_code == 2 and "1 of the 2 record(s)" in without.stderr and f"{plain}:1" in without.stderr
    assert broker.wait_depth(qname, 1) == 1
