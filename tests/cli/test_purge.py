import json
import time
from urllib.parse import quote

import pika


def test_purge_needs_yes_without_a_terminal(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, [b"a", b"b", b"c"])
    result = run("purge", qname, "--url", broker.url)
    assert result.exit_code == 6
    assert "--yes" in result.stderr
    assert broker.queue_depth(qname) == 3


def test_dry_run_changes_nothing(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, [b"a", b"b"])
    result = run("purge", qname, "--url", broker.url, "--dry-run", "--format", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["would_purge"] == 2
    assert broker.queue_depth(qname) == 2


def test_purge_reports_count_and_leaves_unacked(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, [b"1", b"2", b"3", b"4"])
    # A consumer holds one message unacked: queue.purge must not (and cannot) take it.
    holder = pika.BlockingConnection(pika.ConnectionParameters(
        broker.host, broker.amqp_port, broker.vhost, pika.PlainCredentials("guest", "guest")))
    try:
        hch = holder.channel()
        method, _, body = hch.basic_get(qname, auto_ack=False)
        assert body == b"1"
        result = run("purge", qname, "--url", broker.url, "--yes", "--format", "json")
        assert result.exit_code == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["purged"] == 3
        assert "not purged" in result.stderr
        # after the purge, as the broker counts now: the held one is not ready (the API's sample said 4 ready)
        assert summary["depths_after"] == {qname: {"ready": 0, "consumers": 0}}
        hch.basic_nack(method.delivery_tag, requeue=True)
    finally:
        holder.close()
    assert broker.wait_depth(qname, 1) == 1  # the held message came back


def test_purge_missing_queue_is_not_found(run, broker) -> None:
    result = run("purge", "no-such-queue", "--url", broker.url, "--yes")
    assert result.exit_code == 4
    assert "no-such-queue" in result.stderr


def test_streams_cannot_be_purged(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
    result = run("purge", qname, "--url", broker.url, "--yes")
    assert result.exit_code == 6
    assert "stream" in result.stderr


def test_exclusive_queue_of_another_connection_is_one_clear_line(run, broker, qname) -> None:
    """A refusal (exit 6: nothing read or changed) that names the connection holding the queue, where the API says;
    it was exit 1 ("error") with no holder."""
    params = pika.ConnectionParameters(broker.host, broker.amqp_port, broker.vhost,
                                       pika.PlainCredentials("guest", "guest"),
                                       client_properties={"connection_name": f"holder-{qname}"})
    owner = pika.BlockingConnection(params)
    try:
        owner.channel().queue_declare(qname, exclusive=True)
        path = f"queues/{quote(broker.vhost, safe='')}/{quote(qname, safe='')}"
        deadline = time.monotonic() + 20  # the API names the owner once it has the connection's details
        while time.monotonic() < deadline and not (broker.mgmt.get(path) or {}).get("owner_pid_details"):
            time.sleep(0.5)
        for args in (["purge", qname, "--dry-run"], ["peek", qname], ["dump", qname, "-n", "1"],
                     ["replay", qname, "--yes"], ["purge", qname, "--yes"]):
            result = run(*args, "--url", broker.url)
            assert result.exit_code == 6, (args, result.stderr)
            assert f"exclusive to connection 'holder-{qname}'" in result.stderr, (args, result.stderr)
            assert "nothing was read or changed" in result.stderr
            assert "internal error" not in result.stderr
        blind = run("peek", qname, "--url", broker.url, env={"DLXTOOL_MANAGEMENT_URL": "http://127.0.0.1:1/"})
        assert blind.exit_code == 6 and "exclusive to another connection" in blind.stderr, blind.stderr  # no API
    finally:
        owner.close()


def test_keeping_runs_refuse_a_queue_that_drops_its_head(run, broker, qname, tmp_path) -> None:
    """Selective purge and replay keep messages by republishing them to the tail: with max-length and
    drop-head that could push unread messages out, so they refuse (exit 6) and touch nothing."""
    with broker.channel() as ch:
        ch.queue_declare(qname, arguments={"x-max-length": 5}, durable=True)
    broker.publish(qname, [b"1", b"2", b"3"])
    selective = run("purge", qname, "--url", broker.url, "--yes", "--body-contains", "2")
    assert selective.exit_code == 6 and "drop-head" in selective.stderr
    replay = run("replay", qname, "--url", broker.url, "--yes")
    assert replay.exit_code == 6 and "drop-head" in replay.stderr
    assert [body for body, _ in broker.snapshot(qname)] == [b"1", b"2", b"3"]
    plain = run("purge", qname, "--url", broker.url, "--yes", "--backup", str(tmp_path / "backup.jsonl"))
    assert plain.exit_code == 0, plain.stderr  # keeps nothing: allowed
    assert len((tmp_path / "backup.jsonl").read_text().splitlines()) == 3


def test_keeping_runs_refuse_a_source_whose_limits_cannot_be_read(run, broker, qname) -> None:
    """No management API: x-max-length/overflow cannot be read, and a full drop-head queue answers a kept
    message's republish to its tail by pushing out its head. Safe by default: a selective purge refuses
    (exit 6, touching nothing) unless --allow-displace says the queue has no such limit."""
    blind = ("--management-url", "http://127.0.0.1:9/")
    full, plain = f"{qname}.full", f"{qname}.plain"
    with broker.channel() as ch:
        ch.queue_declare(full, arguments={"x-max-length": 3}, durable=True)  # drop-head, at its limit
        ch.queue_declare(plain, durable=True)
    broker.publish(full, [b"1", b"2", b"3"])
    broker.publish(plain, [b"1", b"2", b"3"])
    for queue in (full, plain):
        refused = run("purge", queue, "--url", broker.url, "--yes", "--body-contains", "2", *blind)
        assert refused.exit_code == 6, refused.output
        assert f"limits of {queue!r} unknown (management API at http://127.0.0.1:9/ not reachable" in refused.stderr, \
            refused.stderr
        assert "pushing out its head" in refused.stderr and "--allow-displace" in refused.stderr
        assert [body for body, _ in broker.snapshot(queue)] == [b"1", b"2", b"3"]
    accepted = run("purge", plain, "--url", broker.url, "--yes", "--body-contains", "2", "--allow-displace", *blind)
    assert accepted.exit_code == 0, accepted.output
    assert [body for body, _ in broker.snapshot(plain)] == [b"1", b"3"]


def test_nothing_to_purge_is_said_and_exits_0_without_a_question(run, broker, qname) -> None:
    """An empty queue; a selection that selects none of the queue (found by a preview peek before the question, which
    leaves the messages where they were). No terminal and no --yes: still exit 0, not the refusal (6)."""
    from tests.support.mixed_dlq import mixed_dlq

    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    empty = run("purge", qname, "--url", broker.url, "-f", "json")
    assert empty.exit_code == 0, empty.output
    assert "nothing to purge" in empty.stderr and "not confirmed" not in empty.stderr
    assert json.loads(empty.stdout)["nothing_to_do"] == f"{qname!r} has no ready message"
    m = mixed_dlq(broker, f"{qname}.m")
    none = run("purge", m.dlq, "--header", "tenant=nobody", "--url", broker.url)
    assert none.exit_code == 0, none.output
    assert "preview: the selection selects 0 of all 7 messages" in none.stderr
    assert "nothing to purge: the selection selects none of the 7 messages" in none.stderr
    some = run("purge", m.dlq, "--header", "tenant=acme", "--url", broker.url)
    assert some.exit_code == 6 and "preview: the selection selects 3 of all 7 messages" in some.stderr
    assert [b for b, _h in broker.snapshot(m.dlq)] == m.bodies
