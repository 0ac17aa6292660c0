"""When the broker says no (issue 28): replay fails fast with the broker's own words, changes nothing where it is
refused as a whole, and isolates the one message the broker refuses — on the real broker, with restricted users
and hostile messages made in the test's own vhost."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pika
import pytest

from tests.support import retry_topologies as rt

PASSWORD = "pw-refusals"


@contextmanager
def user(broker, *, configure: str = ".*", write: str = ".*", read: str = ".*",
         tags: str = "management") -> Iterator[str]:
    """A user of the test's vhost with these permissions (regular expressions), deleted afterwards; yields its
    amqp URL."""
    name = f"dlx-{uuid.uuid4().hex[:8]}"
    broker.mgmt.request("PUT", f"users/{name}", {"password": PASSWORD, "tags": tags})
    broker.mgmt.request("PUT", f"permissions/{quote(broker.vhost, safe='')}/{name}",
                        {"configure": configure, "write": write, "read": read})
    try:
        yield f"amqp://{name}:{PASSWORD}@{broker.host}:{broker.amqp_port}/{quote(broker.vhost, safe='')}"
    finally:
        broker.mgmt.request("DELETE", f"users/{name}")


def dead_letters(broker, qname: str, n: int, *, key: str | None = None) -> tuple[str, str]:
    """n dead letters the broker made (rejected from `qname`.o through a direct DLX, routing key `key`)."""
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", [f"m{i:03d}".encode() for i in range(n)])
    assert broker.wait_depth(top.dlq, n) == n
    return top.dlq, f"{qname}.o"


def as_delivered(broker, queue: str) -> list[tuple[bytes, str, str]]:
    """(body, exchange, routing key) of every message, in queue order, given back in place."""
    out = []
    with broker.channel() as ch:
        last = None
        while True:
            method, _props, body = ch.basic_get(queue, auto_ack=False)
            if method is None:
                break
            last = method.delivery_tag
            out.append((body, method.exchange, method.routing_key))
        if last is not None:
            ch.basic_nack(last, multiple=True, requeue=True)
    return out


def replay(run, url: str, broker, *args: str) -> Any:
    started = time.monotonic()
    result = run("replay", *args, "--url", url, "--yes", "--format", "json",
                 env={"DLXTOOL_MANAGEMENT_URL": broker.management_url})
    result.elapsed = time.monotonic() - started
    return result


def test_a_read_only_user_is_refused_before_anything_is_read(run, broker, qname) -> None:
    dlq, origin = dead_letters(broker, qname, 10)
    before = as_delivered(broker, dlq)
    with user(broker, configure="", write="") as url:
        result = replay(run, url, broker, dlq)
    assert result.exit_code == 6, (result.stdout, result.stderr)
    assert "ACCESS_REFUSED" in result.stderr and "may not declare or publish" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert as_delivered(broker, dlq) == before and broker.queue_depth(origin) == 0


def test_without_configure_permission_a_limited_replay_leaves_the_dlq_as_it_was(run, broker, qname) -> None:
    """Issue 28: `replay --yes --limit 2` by a user without configure permission said "nothing replayed" — and had
    republished all 10 dead letters to the DLQ's tail (exchange '', key = the DLQ's name)."""
    dlq, origin = dead_letters(broker, qname, 10)
    before = as_delivered(broker, dlq)
    with user(broker, configure="") as url:
        result = replay(run, url, broker, dlq, "--limit", "2")
    assert result.exit_code == 6, (result.stdout, result.stderr)
    assert "--default-exchange" in result.stderr  # it has write permission on amq.default: that route works
    assert as_delivered(broker, dlq) == before  # same messages, order, exchange and routing key
    assert broker.queue_depth(origin) == 0


def test_an_exchange_the_broker_refuses_mid_run_stops_at_once_and_changes_nothing(run, broker, qname) -> None:
    """A user whose permissions pass the probes (dlxtool.probe.*) but not the real route (dlxtool.replay.*): the
    broker closes the channel at the first publish; the run says the broker's words within seconds and gives
    every message back in place (a classic DLQ: held, not republished to its tail)."""
    dlq, origin = dead_letters(broker, qname, 30)
    before = as_delivered(broker, dlq)
    with user(broker, write=r"^(?!dlxtool\.replay\.).*$") as url:  # the probes pass, the replay's exchange not
        result = replay(run, url, broker, dlq)
    assert result.exit_code == 6, (result.stdout, result.stderr)
    summary = json.loads(result.stdout)
    assert summary["moved_total"] == 0 and summary["republished_to_tail"] == 0
    assert any("ACCESS_REFUSED" in why and "dlxtool.replay." in why for why in summary["left"]), summary["left"]
    assert summary["possible_duplicates"] == 0
    assert result.elapsed < 20  # not a settle timeout (30 s): the broker said no at once
    assert as_delivered(broker, dlq) == before and broker.queue_depth(origin) == 0


def forge(broker, dlq: str, at: int, change: Any) -> list[bytes]:
    """Rewrite the message at position `at` of `dlq` with change(properties) (the others as they were, in order);
    returns the bodies in order."""
    with broker.channel() as ch:
        taken = []
        while True:
            method, props, body = ch.basic_get(dlq, auto_ack=True)
            if method is None:
                break
            taken.append((props, body))
        change(taken[at][0])
        for props, body in taken:
            ch.basic_publish("", dlq, body, props)
    return [body for _p, body in taken]


def test_a_forged_expiration_is_not_restored_and_every_message_moves_once(run, broker, qname) -> None:
    """Issue 28: an x-death original-expiration of "-100" closed the channel (406 invalid expiration); each run
    duplicated the message before it. Now it is validated before publishing, not restored, and said."""
    dlq, origin = dead_letters(broker, qname, 11)

    def forged(props: pika.BasicProperties) -> None:
        props.headers["x-death"][0]["original-expiration"] = "-100"

    bodies = forge(broker, dlq, 5, forged)
    result = replay(run, broker.url, broker, dlq)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "'-100'" in result.stderr and "without the per-message TTL" in result.stderr
    moved = Counter(body for _m, _p, body in broker.drain(origin))
    assert moved == Counter(bodies) and broker.queue_depth(dlq) == 0  # each exactly once, none left


def test_a_message_whose_user_id_the_broker_would_refuse_stays_and_its_neighbours_move(run, broker, qname) -> None:
    dlq, origin = dead_letters(broker, qname, 6)

    def claimed(props: pika.BasicProperties) -> None:
        props.user_id = "guest"  # published by guest below (allowed), replayed by another user (refused)

    bodies = forge(broker, dlq, 2, claimed)
    with user(broker) as url:
        result = replay(run, url, broker, dlq)
    assert result.exit_code == 5, (result.stdout, result.stderr)
    summary = json.loads(result.stdout)
    assert summary["moved_total"] == 5 and summary["possible_duplicates"] == 0, (summary, result.stderr)
    assert any("user_id property is 'guest'" in why for why in summary["left"]), summary["left"]
    assert sorted(body for _m, _p, body in broker.drain(origin)) == sorted(b for i, b in enumerate(bodies) if i != 2)
    assert [body for body, *_ in as_delivered(broker, dlq)] == [bodies[2]]
    assert summary["republished_to_tail"] == 0  # given back in place (a classic DLQ), not republished


def test_an_unknown_alarm_state_says_why_it_is_unknown(run, broker, qname) -> None:
    """A user with the management tag only: the API's node list is not theirs (3.10.8: 401 "Not monitor user", which
    read as "authentication failed"), its alarm health check is (issue 35: the live source): the state is known, no
    line says it is not. An API that is not reachable: said as such, not as a missing tag."""
    dlq, _origin = dead_letters(broker, qname, 2)
    with user(broker) as url:
        result = replay(run, url, broker, dlq, "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "alarm state of" not in result.stderr and "authentication failed" not in result.stderr, result.stderr
    unreachable = run("replay", dlq, "--dry-run", "--allow-dlx-drop", "--url", broker.url, "--format", "json",
                      env={"DLXTOOL_MANAGEMENT_URL": "http://127.0.0.1:1/"})  # the flag: past the route check
    assert unreachable.exit_code == 0, unreachable.stderr
    [line] = [ln for ln in unreachable.stderr.splitlines() if "alarm state of" in ln]
    assert "not reachable" in line and "monitoring" not in line, line


def test_drop_user_id_replays_it_without_and_the_provenance_keeps_what_it_was(run, broker, qname) -> None:
    """The message above, with --drop-user-id: replayed without its user_id (which the broker would refuse from this
    user), the provenance header saying what it was; the messages without one are untouched."""
    from dlxtool.ops.provenance import PROVENANCE_HEADER

    dlq, origin = dead_letters(broker, qname, 3)

    def claimed(props: pika.BasicProperties) -> None:
        props.user_id = "guest"

    bodies = forge(broker, dlq, 1, claimed)
    with user(broker) as url:
        result = replay(run, url, broker, dlq, "--drop-user-id")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert json.loads(result.stdout)["moved_total"] == 3
    arrived = {body: props for _m, props, body in broker.drain(origin)}
    assert sorted(arrived) == sorted(bodies)
    dropped = arrived[bodies[1]]
    assert dropped.user_id is None
    assert dropped.headers[PROVENANCE_HEADER]["user-id"] == "guest"
    assert all(p.user_id is None and "user-id" not in p.headers[PROVENANCE_HEADER]
               for b, p in arrived.items() if b != bodies[1])
    assert broker.queue_depth(dlq) == 0


def test_a_message_the_broker_refuses_on_publish_is_isolated_with_the_brokers_words(run, broker, qname) -> None:
    """A user without access to the management API (no tags): whether it may publish another user's user_id (the
    impersonator tag) is not known, so nothing is checked before: the broker closes the channel at that message
    (406 user_id ...). It stays with the broker's words; the rest of the run goes on on a new channel; nothing is
    lost and what may exist twice is counted."""
    dlq, origin = dead_letters(broker, qname, 40)

    def claimed(props: pika.BasicProperties) -> None:
        props.user_id = "guest"

    bodies = forge(broker, dlq, 20, claimed)
    with user(broker, tags="") as url:  # no API: its checks are waived, the broker's "no" is what isolates
        result = replay(run, url, broker, dlq, "--allow-displace", "--allow-dlx-drop")
    assert result.exit_code == 5, (result.stdout, result.stderr)
    assert result.elapsed < 20, "waited on a timeout where the broker said why"
    summary = json.loads(result.stdout)
    assert any("refused by the broker: 406 PRECONDITION_FAILED - user_id property set to 'guest'" in why
               for why in summary["left"]), summary["left"]
    at_origin = Counter(body for _m, _p, body in broker.drain(origin))
    in_dlq = Counter(body for _m, _p, body in broker.drain(dlq))
    assert bodies[20] not in at_origin and in_dlq[bodies[20]] == 1
    assert all(at_origin[b] + in_dlq[b] >= 1 for b in bodies), "a message was lost"
    assert sum((at_origin + in_dlq).values()) - len(bodies) <= summary["possible_duplicates"]
    assert all(at_origin[b] == 1 for b in bodies[21:]), "a message after the refused one was not moved exactly once"


def test_a_forged_replay_count_is_not_trusted_by_the_loop_guard(run, broker, qname) -> None:
    dlq, origin = dead_letters(broker, qname, 3)

    def count(props: pika.BasicProperties) -> None:
        props.headers["dlxtool-replay"] = {"from": dlq, "count": -3}

    forge(broker, dlq, 1, count)
    result = replay(run, broker.url, broker, dlq, "--max-replays", "1")
    assert result.exit_code == 5, (result.stdout, result.stderr)
    summary = json.loads(result.stdout)
    assert summary["moved_total"] == 2
    assert any("replay count dlxtool never writes (-3" in why for why in summary["left"]), summary["left"]


@pytest.mark.metrics
def test_a_single_active_consumer_dlq_with_a_consumer_is_refused_at_once(run, broker, qname) -> None:
    """Refused, naming the holder's connection where the management API knows it (statistics kept); without them
    (RabbitMQ 4.3, management_metrics_collection denied) refused all the same, the holder said to be unknown."""
    from dlxtool.broker import versions

    blind = versions.stats_disabled(broker.mgmt.overview())
    dlq = f"{qname}.sac"
    conn = pika.BlockingConnection(pika.URLParameters(broker.url + "?heartbeat=0"))
    try:
        ch = conn.channel()
        ch.queue_declare(dlq, durable=True, arguments={"x-single-active-consumer": True})
        ch.basic_publish("", dlq, b"held")
        ch.basic_consume(dlq, lambda *_a: None, auto_ack=False)
        deadline = time.monotonic() + 15
        path = f"/queues/{quote(broker.vhost, safe='')}/{quote(dlq, safe='')}"
        while not blind and time.monotonic() < deadline and not [
                c for c in broker.mgmt.get(path).get("consumer_details") or [] if c.get("channel_details")]:
            conn.process_data_events(0.2)  # the API names the consumer's connection after its next stats sample
        started = time.monotonic()
        result = replay(run, broker.url, broker, dlq)
        assert time.monotonic() - started < 15
    finally:
        conn.close()
    assert result.exit_code == 6, (result.stdout, result.stderr)
    assert "single-active-consumer" in result.stderr
    assert ("not known to the management API" if blind else "127.0.0.1:") in result.stderr


# not `metrics`: its premise is the API's sample, which a node without metrics collection has not
def test_an_ordinary_consumer_on_a_quorum_dlq_is_not_taken_for_a_single_active_one(run, broker, qname,
                                                                                    tmp_path) -> None:
    """Issue 35: RabbitMQ 4.3's API sets `single_active_consumer_tag` on any quorum queue with a consumer; taken for
    single-active-consumer, one ordinary consumer made replay, purge --backup and dump --remove exit 6 "... is a
    single-active-consumer queue and its active consumer ... gets every message". SAC is the queue's argument."""
    commands = {"replay": ["replay"], "purge": ["purge", "--backup", str(tmp_path / "b.jsonl")],
                "dump": ["dump", "--remove", "--output", str(tmp_path / "d.jsonl")]}
    for name, args in commands.items():
        prefix = f"{qname}.{name}"
        with broker.channel() as ch:
            ch.exchange_declare(f"{prefix}.dlx", "fanout")
            ch.queue_declare(f"{prefix}.dlq", durable=True, arguments={"x-queue-type": "quorum"})
            ch.queue_bind(f"{prefix}.dlq", f"{prefix}.dlx")
            rt.reject_to_dlx(ch, rt.Topology(f"{prefix}.dlq", f"{prefix}.dlx"), f"{prefix}.o",
                             [f"m{i}".encode() for i in range(4)])
        dlq = f"{prefix}.dlq"
        assert broker.wait_depth(dlq, 4) == 4
        conn = pika.BlockingConnection(pika.URLParameters(broker.url + "?heartbeat=0"))
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=1)
            ch.basic_consume(dlq, lambda *_a: None, auto_ack=False)
            path = f"/queues/{quote(broker.vhost, safe='')}/{quote(dlq, safe='')}"
            deadline = time.monotonic() + 30

            def sampled(path: str = path) -> bool:  # the consumer and what it holds in the API's sample (4.3: the tag)
                row = broker.mgmt.get(path)
                return bool(row.get("consumer_details")) and row.get("messages_unacknowledged") == 1

            while time.monotonic() < deadline and not sampled():
                conn.process_data_events(0.2)
            assert sampled()
            result = run(*args, dlq, "--url", broker.url, "--yes",
                         env={"DLXTOOL_MANAGEMENT_URL": broker.management_url})
        finally:
            conn.close()
        assert result.exit_code == 0, (name, result.stdout, result.stderr)
        assert "single-active-consumer" not in result.stderr, result.stderr
        assert "has 1 other consumer(s)" in result.stderr, result.stderr


def test_a_dlq_with_a_competing_consumer_is_replayed_with_a_warning_and_nothing_lost(run, broker, qname) -> None:
    """An ordinary consumer on the DLQ (prefetch 1, never acks: it holds one message): not refused; said, since it
    takes messages while dlxtool reads; the rest is replayed, the held one comes back when it lets go."""
    dlq, origin = dead_letters(broker, qname, 6)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url + "?heartbeat=0"))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume(dlq, lambda *_a: None, auto_ack=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and broker.queue_depth(dlq) != 5:
            conn.process_data_events(0.1)
        result = replay(run, broker.url, broker, dlq)
    finally:
        conn.close()
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "has 1 other consumer(s): they take messages while dlxtool reads" in result.stderr, result.stderr
    assert json.loads(result.stdout)["moved_total"] == 5
    assert broker.wait_depth(dlq, 1) == 1 and broker.wait_depth(origin, 5) == 5


@pytest.mark.parametrize("user_tags", ["management"])
def test_a_vhost_the_user_may_not_use_is_said_as_such_at_the_api(run, broker, user_tags) -> None:
    """3.10 and 4.0 answer 401 "not authorised": said as such. RabbitMQ 4.3's API answers 404 for such a vhost's
    queues, existing or not (the version table): dlxtool says it may be either."""
    from dlxtool.broker import versions
    from dlxtool.broker.management import ManagementClient
    from dlxtool.errors import ConnectError, NotFoundError

    with broker.channel() as ch:
        ch.queue_declare("there", durable=True)
    hidden = versions.behaviour(broker.version).api_404_for_a_vhost_not_permitted
    with user(broker, tags=user_tags) as url:
        name = url.split("//")[1].split(":")[0]
        broker.mgmt.request("DELETE", f"permissions/{quote(broker.vhost, safe='')}/{name}")
        client = ManagementClient(broker.management_url, name, PASSWORD, timeout=10)
        with pytest.raises(NotFoundError if hidden else ConnectError) as err:
            client.queue(broker.vhost, "there")
    if hidden:
        assert f"or user {name!r} may not use that vhost" in err.value.message
        return
    assert "not authorised for that virtual host" in err.value.message
    assert "authentication failed" not in err.value.message


def test_a_dlq_deleted_mid_replay_is_said_to_have_taken_its_messages_with_it(run, broker, qname) -> None:
    """Issue 28: a DLQ deleted mid-replay was reported as "nothing was lost — unfinished messages are still in
    h2.dlq; run the same command again". They went with the queue: said so, exit 5."""
    import threading

    dlq, origin = dead_letters(broker, qname, 400)

    def delete_once_moving() -> None:
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            ch = conn.channel()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and ch.queue_declare(origin, passive=True).method.message_count < 50:
                time.sleep(0.05)
            ch.queue_delete(dlq)
        finally:
            conn.close()

    thread = threading.Thread(target=delete_once_moving)
    thread.start()
    try:
        result = replay(run, broker.url, broker, dlq, "--rate", "100", "--prefetch", "20")
    finally:
        thread.join()
    assert result.exit_code == 5, (result.stdout, result.stderr)
    assert "was deleted during the run: the messages still in it were deleted with it" in result.stderr
    assert "nothing was lost" not in result.stderr and "still in" not in result.stderr.split("deleted with it")[1]
    assert json.loads(result.stdout)["source_deleted"] is True


def test_purge_move_to_without_configure_permission_is_refused_and_changes_nothing(run, broker, qname) -> None:
    """The permission check of replay, for `purge --move-to` too (issue 28): refused before anything is read, the
    route that would work named."""
    dlq, _origin = dead_letters(broker, qname, 10)
    park = f"{qname}.park"
    with broker.channel() as ch:
        ch.queue_declare(park, durable=True)
    before = as_delivered(broker, dlq)
    with user(broker, configure="") as url:
        result = run("purge", dlq, "--move-to", park, "--yes", "--url", url,
                     env={"DLXTOOL_MANAGEMENT_URL": broker.management_url})
    assert result.exit_code == 6, (result.stdout, result.stderr)
    assert "nothing moved to" in result.stderr and "ACCESS_REFUSED" in result.stderr
    assert "--default-exchange" in result.stderr and "Traceback" not in result.stderr
    assert as_delivered(broker, dlq) == before and broker.queue_depth(park) == 0


def test_a_selective_purge_without_write_permission_keeps_the_rest_in_place(run, broker, qname) -> None:
    """Messages not selected stay by being republished to the tail — which a user without write permission may not
    do: on a classic queue they are held and given back in place instead, order, exchange and key as they were."""
    dlq, _origin = dead_letters(broker, qname, 10)
    before = as_delivered(broker, dlq)
    with user(broker, write="") as url:
        result = run("purge", dlq, "--limit", "3", "--yes", "--format", "json", "--url", url,
                     env={"DLXTOOL_MANAGEMENT_URL": broker.management_url})
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "held and given back in place" in result.stderr
    assert as_delivered(broker, dlq) == before[3:]


def test_load_by_a_user_who_may_not_write_is_refused_before_publishing(run, broker, qname, tmp_path) -> None:
    """Before: the run found out at the first bind and advised --default-exchange, which needs write permission too."""
    from dlxtool.record import MessageRecord

    target = f"{qname}.target"
    with broker.channel() as ch:
        ch.queue_declare(target, durable=True)
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"".join(MessageRecord(queue=target, body=f"r{i}".encode(), routing_key=target).to_jsonl()
                              for i in range(5)))
    with user(broker, write="") as url:
        result = run("load", str(path), "--yes", "--url", url, env={"DLXTOOL_MANAGEMENT_URL": broker.management_url})
    assert result.exit_code == 6, (result.stdout, result.stderr)
    assert "nothing loaded" in result.stderr and "ACCESS_REFUSED" in result.stderr
    assert "Traceback" not in result.stderr
    # the permission named, and no advice that would not work: --default-exchange needs write permission too
    assert "may not declare or publish" in result.stderr and "use --default-exchange" not in result.stderr
    assert broker.queue_depth(target) == 0


def test_a_backup_purge_by_a_user_who_may_not_write_removes_everything(run, broker, qname, tmp_path) -> None:
    """Nothing stays in a --backup run without a selection: no write permission is needed (or asked for), on a
    quorum queue too, where a selective run without it is refused."""
    queue = f"{qname}.q"
    with broker.channel() as ch:
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    broker.publish(queue, [b"a", b"b", b"c"])
    assert broker.wait_depth(queue, 3) == 3
    backup = tmp_path / "backup.jsonl"
    with user(broker, write="") as url:
        result = run("purge", queue, "--backup", str(backup), "--yes", "--format", "json", "--url", url,
                     env={"DLXTOOL_MANAGEMENT_URL": broker.management_url})
        assert result.exit_code == 0, (result.stdout, result.stderr)
        selective = run("purge", queue, "--limit", "1", "--yes", "--url", url,
                        env={"DLXTOOL_MANAGEMENT_URL": broker.management_url})
    assert json.loads(result.stdout)["removed"] == 3 and len(backup.read_text().splitlines()) == 3
    assert broker.queue_depth(queue) == 0
    assert selective.exit_code == 0, selective.stderr  # an empty queue: nothing to do, nothing asked
