"""`dlxtool load` and the dump → purge → load → dump round trip, against the real broker."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pika

from dlxtool.ops.record_files import read_records
from dlxtool.record import MessageRecord
from tests.support import retry_topologies as rt
from tests.support.fill import fill

TS = datetime(2026, 11, 21, 10, 30, 5, tzinfo=UTC)
HEADERS = {"long-string": "héllo", "byte-array": b"\x00\xfe\xff", "bool": True, "int": -123456, "big": 2**40,
           "decimal": Decimal("12.345"), "timestamp": TS, "void": None,
           "table": {"inner": {"deep": [1, "two", b"\x03"]}}, "array": ["a", 1, TS, None]}
PROPS = dict(content_type="application/x-protobuf", content_encoding="identity", delivery_mode=2, priority=3,
             correlation_id="corr-1", reply_to="replies", expiration="600000", timestamp=1763721005,
             type="shop.orders.v1.OrderPlaced", app_id="orders-svc", user_id="guest")


def load(run, broker, *args: str, input: bytes | None = None):
    return run("load", *args, "--yes", "--url", broker.url, "--format", "json", input=input)


def records_of(path) -> list[MessageRecord]:
    with open(path, "rb") as f:
        return list(read_records(f))


def comparable(records: list[MessageRecord]) -> list[tuple]:
    """What must survive a round trip: all but the transient position and redelivered flag."""
    return [(r.queue, r.body, r.properties, r.headers, r.exchange, r.routing_key, r.decoded) for r in records]


def test_dump_purge_load_dump_round_trip(run, broker, qname, tmp_path) -> None:
    """Messages with every header type pika carries, and broker-made dead letters (x-death)."""
    plain, dlq_origin = f"{qname}.plain", f"{qname}.o"
    with broker.channel() as ch:
        ch.queue_declare(plain, durable=True)
        for i in range(20):
            ch.basic_publish("", plain, bytes([i]) * 7 + b"\x00\xff",
                             pika.BasicProperties(headers={**HEADERS, "i": i}, message_id=f"m-{i}", **PROPS),
                             mandatory=True)
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, dlq_origin, [f"dead-{i}".encode() for i in range(5)])
    assert broker.wait_depth(top.dlq, 5) == 5
    for queue in (plain, top.dlq):
        first, second = tmp_path / f"{queue}.1.jsonl", tmp_path / f"{queue}.2.jsonl"
        assert run("dump", queue, "--all", "-o", str(first), "--url", broker.url).exit_code == 0
        assert run("purge", queue, "--yes", "--url", broker.url).exit_code == 0
        assert broker.queue_depth(queue) == 0
        result = load(run, broker, str(first))
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["published"] == {queue: len(records_of(first))}
        assert run("dump", queue, "--all", "-o", str(second), "--url", broker.url).exit_code == 0
        before, after = records_of(first), records_of(second)
        assert len(before) == (20 if queue == plain else 5)
        # Each record keeps its routing key (the DLX's for the DLQ, the queue name for `plain`), through a
        # temporary exchange bound only to the queue
        assert [r.routing_key for r in after] == [r.routing_key for r in before]
        assert all(r.exchange.startswith("dlxtool.load.") for r in after)
        for r in before + after:
            r.exchange = ""
        if queue == top.dlq:
            assert all(r.deaths[0].reason == "rejected" for r in after)
        assert comparable(after) == comparable(before)
    assert not [e for e in broker.mgmt.get(f"exchanges/{broker.vhost}")
                if e["name"].startswith("dlxtool.") and qname in e["name"]]


def test_load_default_exchange_is_opt_in_and_holds_back_what_a_direct_dlx_would_drop(run, broker, qname,
                                                                                      tmp_path) -> None:
    """Issue 15 §1 for load: into a queue whose direct dead-letter exchange routes only `order.created`,
    the default exchange (routing key = queue name) would make the next dead-lettering drop the message:
    with --default-exchange those records fail with the reason (exit 5); by default they keep their key,
    and a second failure lands in the DLQ."""
    origin, dlq, dlx = f"{qname}.o", f"{qname}.dlq", f"{qname}.dlx"
    with broker.channel() as ch:
        ch.exchange_declare(dlx, "direct")
        ch.queue_declare(dlq, durable=True)
        ch.queue_bind(dlq, dlx, "order.created")
        ch.queue_declare(origin, arguments={"x-dead-letter-exchange": dlx}, durable=True)
    path = tmp_path / "in.jsonl"
    path.write_bytes(MessageRecord(queue=origin, body=b"o", routing_key="order.created").to_jsonl())
    held = load(run, broker, str(path), "--default-exchange")
    assert held.exit_code == 6, held.stderr  # nothing could be published
    [reason] = json.loads(held.stdout)["failed"]
    assert reason.startswith(f"{origin}: ") and "would drop" in reason
    assert broker.queue_depth(origin) == 0

    result = load(run, broker, str(path))
    assert result.exit_code == 0, result.stderr
    with broker.channel() as ch:
        method, _props, body = ch.basic_get(origin)
        assert (method.routing_key, body) == ("order.created", b"o")
        ch.basic_nack(method.delivery_tag, requeue=False)
    assert broker.wait_depth(dlq, 1) == 1


def test_deleted_target_queue_exits_5_and_reports(run, broker, qname, tmp_path) -> None:
    here, gone = f"{qname}.here", f"{qname}.gone"
    with broker.channel() as ch:
        ch.queue_declare(here, durable=True)
    lines = [MessageRecord(queue=here if i % 2 else gone, body=f"r{i}".encode()).to_jsonl() for i in range(10)]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(lines))
    failed = tmp_path / "failed.jsonl"
    result = load(run, broker, str(path), "--failed", str(failed))
    assert result.exit_code == 5
    summary = json.loads(result.stdout)
    assert summary["published"] == {here: 5} and summary["failed_total"] == 5
    # counted by the broker after the run, as replay and move say it (the missing queue is not one it filled)
    assert summary["depths_after"] == {here: {"ready": 5, "consumers": 0}}
    [why] = summary["failed"]
    assert why == f"{gone}: queue missing (no temporary exchange can be bound to it)"
    assert f"queue {gone!r} not found in vhost" in result.stderr          # said before publishing
    assert "5 of 10 record(s) not loaded" in result.stderr and str(failed) in result.stderr
    assert [r.body for r in records_of(failed)] == [b"r0", b"r2", b"r4", b"r6", b"r8"]
    assert [b for b, _h in broker.snapshot(here)] == [b"r1", b"r3", b"r5", b"r7", b"r9"]


def test_bad_files_name_file_and_line_and_publish_nothing(run, broker, qname, tmp_path) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    good = MessageRecord(queue=qname, body=b"ok").to_jsonl()
    cases = {
        b"not json\n": ":2: invalid JSON",
        b'{"queue": "q", "body": "%%%"}\n': ":2: 'body' is not valid base64",
        b'{"body": "aGk="}\n': ":2: the record names no queue",
        b'{"queue": "q", "body": "", "properties": {"colour": "red"}}\n': ":2: unknown AMQP property",
    }
    for i, (bad, expected) in enumerate(cases.items()):
        path = tmp_path / f"bad{i}.jsonl"
        path.write_bytes(good + bad + good)
        result = load(run, broker, str(path))
        assert result.exit_code == 2, result.stderr
        assert f"{path}{expected}" in result.stderr
    assert broker.queue_depth(qname) == 0
    missing = load(run, broker, str(tmp_path / "nope.jsonl"))
    assert missing.exit_code == 4 and "nope.jsonl" in missing.stderr


def test_stdin_to_override_and_torn_last_line(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    data = b"".join(MessageRecord(queue="elsewhere", body=f"s{i}".encode()).to_jsonl() for i in range(3))
    data += MessageRecord(queue="elsewhere", body=b"torn").to_jsonl()[:25]  # a writer killed mid-record
    result = load(run, broker, "-", "--to", qname, input=data)
    assert result.exit_code == 5, result.stderr  # loaded the rest, but a torn record is not a clean load
    assert "<stdin>:4: a record cut short" in result.stderr and "--allow-torn" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["published"] == {qname: 3} and summary["skipped_torn"] == 1
    assert [b for b, _h in broker.snapshot(qname)] == [b"s0", b"s1", b"s2"]
    allowed = load(run, broker, "-", "--to", qname, "--allow-torn", input=data)
    assert allowed.exit_code == 0, allowed.stderr
    assert json.loads(allowed.stdout)["skipped_torn"] == 1


def test_history_from_names_a_torn_record_and_skips_it_only_when_allowed(run, tmp_path) -> None:
    path = tmp_path / "b.jsonl"
    good = MessageRecord(queue="p1", body=b"ok").to_jsonl()
    path.write_bytes(good + good[:6] + good + good[:20])
    refused = run("history", "--from", str(path), "--format", "json")
    assert refused.exit_code == 2 and f"{path}:2: invalid JSON: a record cut short" in refused.stderr
    allowed = run("history", "--from", str(path), "--format", "json", "--allow-torn")
    assert allowed.exit_code == 0, allowed.stderr
    assert len(json.loads(allowed.stdout)) == 2
    assert f"{path}:2:" in allowed.stderr and f"{path}:3:" in allowed.stderr


def test_reset_history_uses_replays_reset(run, broker, qname, tmp_path) -> None:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", [b"a", b"b"])
    assert broker.wait_depth(top.dlq, 2) == 2
    path = tmp_path / "dead.jsonl"
    assert run("dump", top.dlq, "-o", str(path), "--url", broker.url).exit_code == 0
    target = f"{qname}.again"
    with broker.channel() as ch:
        ch.queue_declare(target, durable=True)
    result = load(run, broker, str(path), "--to", target, "--reset-history", "--reset-header", "tenant")
    assert result.exit_code == 0, result.stderr
    for _m, props, _b in broker.drain(target):
        headers = props.headers
        assert not {"x-death", "x-first-death-queue", "tenant"} & set(headers)
        prov = headers["dlxtool-replay"]
        assert prov["from"] == f"file {path}" and prov["count"] == 1 and "rejected" in prov["deaths"]
        assert "tenant=acme" in prov["reset"]


def test_dry_run_publishes_nothing(run, broker, qname, tmp_path) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(MessageRecord(queue=q, body=b"x").to_jsonl() for q in (qname, qname, "missing")))
    result = load(run, broker, str(path), "--dry-run")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["targets"] == {qname: 2, "missing": 1} and plan["exists"] == {qname: True, "missing": False}
    assert broker.queue_depth(qname) == 0


def test_load_of_many_records_keeps_file_order(run, broker, qname, tmp_path) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    sent = [f"n{i:05d}".encode() for i in range(3000)]
    fill(broker, qname, sent)
    path = tmp_path / "all.jsonl"
    assert run("dump", qname, "--remove", "-o", str(path), "--yes", "--url", broker.url).exit_code == 0
    assert broker.queue_depth(qname) == 0
    result = load(run, broker, str(path), "--window", "100")
    assert result.exit_code == 0, result.stderr
    assert [b for b, _h in broker.snapshot(qname)] == sent


def test_a_record_amqp_cannot_carry_refuses_the_file_before_publishing(run, broker, qname, tmp_path) -> None:
    """A float header (pika cannot encode it): the check names FILE:LINE and the header, nothing is published."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    lines = [json.dumps({"queue": qname, "properties": {"message_id": str(i)}, "body": "bTA=",
                         "headers": {"score": 1.5} if i == 2 else {}}) for i in range(4)]
    path = tmp_path / "float.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = load(run, broker, str(path))
    assert result.exit_code == 2, result.stderr
    assert f"{path}:3" in result.stderr and "'score'" in result.stderr
    assert broker.queue_depth(qname) == 0


def test_load_asks_first_like_every_moving_command(run, broker, qname, tmp_path) -> None:
    """Without --yes: the plan, then the question; no terminal to ask on (a test, a pipe, `load -`): refused, exit
    6, nothing published. --yes publishes without asking. A file of no records: said, exit 0, nothing asked."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    fill(broker, qname, [b"a", b"b"])
    path = tmp_path / "r.jsonl"
    assert run("dump", qname, "--remove", "--yes", "-o", str(path), "--url", broker.url).exit_code == 0
    asked = run("load", str(path), "--url", broker.url, "-f", "table")
    assert asked.exit_code == 6, asked.output
    assert "not confirmed: no terminal to ask on" in asked.stderr and "--yes" in asked.stderr
    assert f"{qname}  " in asked.stdout  # the plan came first
    piped = run("load", "-", "--url", broker.url, input=path.read_bytes())
    assert piped.exit_code == 6, piped.output
    assert broker.queue_depth(qname) == 0
    loaded = load(run, broker, str(path))
    assert loaded.exit_code == 0, loaded.output
    assert [b for _m, _p, b in broker.drain(qname)] == [b"a", b"b"]
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    nothing = run("load", str(empty), "--url", broker.url)
    assert nothing.exit_code == 0, nothing.output
    assert "nothing to load" in nothing.stderr and "confirm" not in nothing.stderr
