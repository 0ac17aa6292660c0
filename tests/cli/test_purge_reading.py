"""`dlxtool purge` reading modes against the real broker: --backup, selection filters, --move-to, dry runs."""

from __future__ import annotations

import json

import pika

from dlxtool.broker import versions
from dlxtool.ops.record_files import read_records
from tests.support.fill import fill, poison_at_head, take_all


def purge(run, broker, *args: str):
    return run("purge", *args, "--url", broker.url, "--format", "json")


def props(i: int) -> pika.BasicProperties:
    return pika.BasicProperties(type="good" if i % 3 else "bad", headers={"i": i}, message_id=f"m{i}",
                                delivery_mode=2)


def bodies(n: int, prefix: str = "msg") -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


def queues_with(broker, queues: list[str], n: int) -> list[bytes]:
    """Declare the queues; fill the first with n messages (props below); return their bodies."""
    with broker.channel() as ch:
        for queue in queues:
            ch.queue_declare(queue, durable=True)
    sent = bodies(n)
    fill(broker, queues[0], sent, props)
    return sent


def test_backup_writes_every_message_and_load_undoes_it(run, broker, qname, tmp_path) -> None:
    sent = queues_with(broker, [qname], 50)
    before = broker.snapshot(qname)
    backup = tmp_path / "backup.jsonl"

    result = purge(run, broker, qname, "--backup", str(backup), "--yes")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["removed"] == 50 and summary["possible_duplicates"] == 0
    assert broker.queue_depth(qname) == 0
    with open(backup, "rb") as f:
        records = list(read_records(f))
    assert [r.body for r in records] == sent
    assert {r.queue for r in records} == {qname}

    result = run("load", str(backup), "--yes", "--url", broker.url, "--format", "json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["published"] == {qname: 50}
    assert broker.snapshot(qname) == before


def test_selective_purge_unclogs_ten_poison_messages_at_the_head(run, broker, qname, tmp_path) -> None:
    """The classic clog: 10 poison messages (broker-made deaths: rejected 3 times) in front of 9,990 good
    ones. Only the poison goes (into the backup); the 9,990 stay, in order."""
    poison = bodies(10, "poison")
    good = bodies(9_990, "good")
    poison_at_head(broker, qname, poison, deaths=3)
    fill(broker, qname, good)
    backup = tmp_path / "poison.jsonl"

    result = purge(run, broker, qname, "--min-deaths", "3", "--backup", str(backup), "--yes")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["removed"] == 10 and summary["kept"] == {"not selected": 9_990}
    assert summary["left_total"] == 0 and summary["possible_duplicates"] == 0
    with open(backup, "rb") as f:
        removed = list(read_records(f))
    assert [r.body for r in removed] == poison
    assert all(r.deaths[0].reason == "rejected" and r.deaths[0].count == 3 for r in removed)
    assert [body for _p, body in take_all(broker, qname)] == good


def test_limit_takes_the_head_and_leaves_the_rest_in_place(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    sent = bodies(30)
    fill(broker, qname, sent)
    result = purge(run, broker, qname, "--limit", "5", "--yes")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["removed"] == 5
    assert [b for b, _h in broker.snapshot(qname)] == sent[5:]


def test_filters_select_by_type_header_and_body(run, broker, qname) -> None:
    sent = queues_with(broker, [qname], 30)
    assert purge(run, broker, qname, "--type", "bad", "--yes").exit_code == 0
    left = [b for b, _h in broker.snapshot(qname)]
    assert left == [b for i, b in enumerate(sent) if i % 3]
    assert purge(run, broker, qname, "--header", "i=4", "--yes").exit_code == 0
    assert purge(run, broker, qname, "--body-contains", "msg-0000", "--yes").exit_code == 0
    assert [b for b, _h in broker.snapshot(qname)] == [b for i, b in enumerate(sent) if i % 3 and i >= 10 and i != 4]


def test_move_to_parks_the_selected_messages_unchanged(run, broker, qname) -> None:
    parked = f"{qname}.parked"
    sent = queues_with(broker, [qname, parked], 12)
    result = purge(run, broker, qname, "--type", "bad", "--move-to", parked, "--yes")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["moved"] == {parked: 4}
    moved = broker.drain(parked)
    assert [b for _m, _p, b in moved] == [b for i, b in enumerate(sent) if i % 3 == 0]
    assert all(p.type == "bad" and p.headers["i"] % 3 == 0 and p.delivery_mode == 2 for _m, p, _b in moved)
    assert [b for b, _h in broker.snapshot(qname)] == [b for i, b in enumerate(sent) if i % 3]


def test_move_to_keeps_the_routing_key_so_a_direct_dlx_still_routes_the_next_failure(run, broker, qname) -> None:
    """Issue 15 §1 for purge --move-to: the parking queue dead-letters through a direct exchange bound by
    the original key only; the moved message keeps that key (not the parking queue's name), so rejecting it
    there lands it in the DLQ instead of dropping it."""
    parked, dlq, dlx, ex = f"{qname}.parked", f"{qname}.dlq", f"{qname}.dlx", f"{qname}.in"
    with broker.channel() as ch:
        ch.exchange_declare(dlx, "direct")
        ch.queue_declare(dlq, durable=True)
        ch.queue_bind(dlq, dlx, "order.created")
        ch.queue_declare(parked, arguments={"x-dead-letter-exchange": dlx}, durable=True)
        ch.queue_declare(qname, durable=True)
        ch.exchange_declare(ex, "direct")
        ch.queue_bind(qname, ex, "order.created")
        ch.basic_publish(ex, "order.created", b"m", pika.BasicProperties(type="bad"), mandatory=True)
    result = purge(run, broker, qname, "--type", "bad", "--move-to", parked, "--yes")
    assert result.exit_code == 0, result.stderr
    with broker.channel() as ch:
        method, _props, body = ch.basic_get(parked)
        assert (method.routing_key, body) == ("order.created", b"m")
        ch.basic_nack(method.delivery_tag, requeue=False)
    assert broker.wait_depth(dlq, 1) == 1
    assert not [e for e in broker.mgmt.get(f"exchanges/{broker.vhost}")
                if e["name"].startswith("dlxtool.") and qname in e["name"]]


def test_move_to_a_missing_queue_is_refused_before_anything(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    fill(broker, qname, bodies(3))
    result = purge(run, broker, qname, "--move-to", f"{qname}.nope", "--yes")
    assert result.exit_code == 4 and ".nope" in result.stderr
    assert broker.queue_depth(qname) == 3


def test_dry_runs_change_nothing(run, broker, qname, tmp_path) -> None:
    parked = f"{qname}.parked"
    sent = queues_with(broker, [qname, parked], 9)
    backup = tmp_path / "b.jsonl"
    plain_backup = json.loads(purge(run, broker, qname, "--backup", str(backup), "--dry-run").stdout)
    assert plain_backup["would_remove"] == 9 and plain_backup["looked_at"] == 0
    selective = json.loads(purge(run, broker, qname, "--type", "bad", "--dry-run").stdout)
    assert (selective["would_remove"], selective["would_keep"], selective["looked_at"]) == (3, 6, 9)
    assert (selective["sampled"], selective["queue_depth"]) == (False, 9)
    first = json.loads(purge(run, broker, qname, "--type", "bad", "--dry-run", "--max-unacked", "4").stdout)
    assert (first["sampled"], first["looked_at"], first["queue_depth"]) == (True, 4, 9)
    moving = json.loads(purge(run, broker, qname, "--type", "good", "--limit", "2", "--move-to", parked,
                              "--dry-run").stdout)
    assert (moving["would_move"], moving["would_remove"], moving["would_keep"]) == (2, 0, 7)
    assert not backup.exists()
    assert [b for b, _h in broker.snapshot(qname)] == sent
    assert broker.queue_depth(parked) == 0


def test_quorum_with_delivery_limit_reading_purge_uses_no_attempt(run, broker, qname) -> None:
    """Consuming and acking (plus republishing what stays) uses no delivery attempt: with limit 1 a single
    give-back would dead-letter a message. The dry run must peek, so it follows peek's refusal."""
    dlq = f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 1,
                                                         "x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": dlq})
    sent = bodies(9)
    fill(broker, qname, sent, props)
    dry = purge(run, broker, qname, "--type", "bad", "--dry-run")
    if versions.quorum_give_back_counts(broker.version, "nack"):
        assert dry.exit_code == 6 and "--spend-attempts" in dry.stderr
    else:  # RabbitMQ 4.3: the peek's give-back uses no attempt, so the dry run reads (and leaves them in place)
        assert dry.exit_code == 0, dry.stderr
        assert json.loads(dry.stdout)["would_remove"] == 3
    result = purge(run, broker, qname, "--type", "bad", "--yes")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["removed"] == 3
    # Twice more: had the first run given anything back, the limit would now dead-letter it.
    assert purge(run, broker, qname, "--type", "nothing-matches", "--yes").exit_code == 0
    assert purge(run, broker, qname, "--type", "nothing-matches", "--yes").exit_code == 0
    left = [b for _m, _p, b in broker.drain(qname)]
    assert left == [b for i, b in enumerate(sent) if i % 3]
    assert broker.queue_depth(dlq) == 0


def test_streams_cannot_be_backed_up_and_purged(run, broker, qname, tmp_path) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
    result = purge(run, broker, qname, "--backup", str(tmp_path / "b.jsonl"), "--yes")
    assert result.exit_code == 6 and "stream" in result.stderr


def test_move_to_itself_is_a_usage_error(run, broker, qname) -> None:
    result = purge(run, broker, qname, "--move-to", qname, "--yes")
    assert result.exit_code == 2
