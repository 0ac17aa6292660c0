"""The routing key a moved message keeps is checked against its DESTINATION's dead-letter exchange (issue 15 §1,
issue 20): `purge --move-to`, `replay --to`, `load`, and replay to an origin whose bindings changed since. A
message whose next rejection there would be dropped stays where it is, with the reason (exit 5, 6 when nothing
moved); --allow-dlx-drop accepts the risk. Proven as the issue asks: every moved message fails a second time
(a real reject) and every message is still in some queue.

Also: a temporary exchange the broker refuses (a user without configure permission) is reported with the
broker's reply, not as a missing queue; a retry ladder's last tier that parks by expiry is never an origin."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from urllib.parse import quote

import pika
import pytest

from dlxtool.ops.routes import ORIGINAL_KEY
from dlxtool.record import MessageRecord
from tests.support import retry_topologies as rt
from tests.support.retry_app import wait_until


def cli(run, broker, command: str, *args: str):
    return run(command, *args, "--url", broker.url, "--format", "json")


def bodies(broker, *queues: str) -> Counter[bytes]:
    return Counter(body for q in queues for body, _h in broker.snapshot(q))


def direct_dlx_bound_by(ch, queue: str, dlx: str, dlq: str, *keys: str) -> None:
    """`queue` dead-letters to a direct exchange that routes only `keys` (to `dlq`)."""
    ch.exchange_declare(dlx, "direct")
    ch.queue_declare(dlq, durable=True)
    for key in keys:
        ch.queue_bind(dlq, dlx, key)
    ch.queue_declare(queue, arguments={"x-dead-letter-exchange": dlx}, durable=True)


def fail_again(broker, queue: str) -> None:
    """A real reject of every message in `queue` (requeue=False)."""
    with broker.channel() as ch:
        rt.reject_all(ch, queue, broker.queue_depth(queue))


# -- purge --move-to --------------------------------------------------------------------------------------------


def test_purge_move_to_keeps_what_the_parking_queues_dead_letter_exchange_would_drop(run, broker, qname) -> None:
    """The review's case: P's direct DLX is bound only by key P; a message with key `order.created` moved to P
    would be dropped by P's next rejection. It stays in the source (exit 5); the one with key P moves."""
    src, park, ex = f"{qname}.src", f"{qname}.park", f"{qname}.in"
    park_dlx, park_dlq = f"{qname}.park.dlx", f"{qname}.park.dlq"
    with broker.channel() as ch:
        direct_dlx_bound_by(ch, park, park_dlx, park_dlq, park)
        ch.exchange_declare(ex, "direct")
        ch.queue_declare(src, durable=True)
        for key in ("order.created", park):
            ch.queue_bind(src, ex, key)
        ch.basic_publish(ex, "order.created", b"keyed", mandatory=True)
        ch.basic_publish(ex, park, b"named", mandatory=True)
    before = bodies(broker, src)

    plan = cli(run, broker, "purge", src, "--move-to", park, "--routing-key", "*", "--dry-run")
    assert plan.exit_code == 0, plan.output
    figures = json.loads(plan.stdout)
    assert (figures["would_move"], figures["would_stay"], figures["routes"]) == (1, 1, {park: ORIGINAL_KEY})
    [reason] = figures["stay"]
    assert reason.startswith(f"{park}: ") and "'order.created' to no queue" in reason

    result = cli(run, broker, "purge", src, "--move-to", park, "--yes")
    assert result.exit_code == 5, result.output
    summary = json.loads(result.stdout)
    assert summary["moved"] == {park: 1} and summary["left"] == {reason: 1}
    assert summary["routes"] == {park: ORIGINAL_KEY}
    fail_again(broker, park)
    assert broker.wait_depth(park_dlq, 1) == 1
    assert bodies(broker, src, park, park_dlq) == before  # nothing dropped
    assert [b for b, _h in broker.snapshot(src)] == [b"keyed"]

    refused = cli(run, broker, "purge", src, "--move-to", park, "--yes")
    assert refused.exit_code == 6, refused.output  # nothing could move
    assert "nothing moved, no route is safe" in refused.stderr and "--allow-dlx-drop" in refused.stderr
    assert [b for b, _h in broker.snapshot(src)] == [b"keyed"] and broker.queue_depth(park) == 0

    accepted = cli(run, broker, "purge", src, "--move-to", park, "--yes", "--allow-dlx-drop")
    assert accepted.exit_code == 0, accepted.output
    assert [b for b, _h in broker.snapshot(park)] == [b"keyed"]


def test_purge_move_to_default_exchange_routes_by_the_queue_name(run, broker, qname) -> None:
    """--default-exchange with --move-to: routing key = P's name, which P's DLX routes (bound by P): moved."""
    src, park = f"{qname}.src", f"{qname}.park"
    with broker.channel() as ch:
        direct_dlx_bound_by(ch, park, f"{qname}.park.dlx", f"{qname}.park.dlq", park)
        ch.queue_declare(src, durable=True)
    broker.publish(src, [b"m"])
    result = cli(run, broker, "purge", src, "--move-to", park, "--default-exchange", "--yes")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["routes"] == {park: "default exchange (routing key = queue name)"}
    fail_again(broker, park)
    assert broker.wait_depth(f"{qname}.park.dlq", 1) == 1


# -- replay --to, replay after the bindings changed ---------------------------------------------------------------


def rejected_with_key(broker, qname: str, key: str, n: int = 1) -> tuple[str, str]:
    """Dead letters with routing key `key`, really rejected from `origin` into `dlq` (a fanout DLX)."""
    origin, ex = f"{qname}.o", f"{qname}.in"
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        ch.exchange_declare(ex, "direct")
        ch.queue_declare(origin, arguments={"x-dead-letter-exchange": top.dlx}, durable=True)
        ch.queue_bind(origin, ex, key)
        for i in range(n):
            ch.basic_publish(ex, key, f"m-{i}".encode(), mandatory=True)
        rt.reject_all(ch, origin, n)
    assert broker.wait_depth(top.dlq, n) == n
    return origin, top.dlq


def test_replay_to_a_queue_whose_dead_letter_exchange_would_drop_the_key_moves_nothing(run, broker, qname) -> None:
    _origin, dlq = rejected_with_key(broker, qname, "order.created", 2)
    to, to_dlq = f"{qname}.to", f"{qname}.to.dlq"
    with broker.channel() as ch:
        direct_dlx_bound_by(ch, to, f"{qname}.to.dlx", to_dlq, to)

    plan = cli(run, broker, "replay", dlq, "--to", to, "--dry-run")
    assert plan.exit_code == 0, plan.output
    stay = json.loads(plan.stdout)["plan"]["stay"]
    [(reason, n)] = stay.items()
    assert n == 2 and reason.startswith(f"{to}: ") and "'order.created' to no queue" in reason

    result = cli(run, broker, "replay", dlq, "--to", to, "--yes")
    assert result.exit_code == 6, result.output
    assert "nothing replayed, no route is safe" in result.stderr and "--allow-dlx-drop" in result.stderr
    assert json.loads(result.stdout)["left"] == {reason: 2}
    assert broker.queue_depth(dlq) == 2 and broker.queue_depth(to) == 0

    accepted = cli(run, broker, "replay", dlq, "--to", to, "--yes", "--allow-dlx-drop")
    assert accepted.exit_code == 0, accepted.output
    assert broker.queue_depth(to) == 2


def test_replay_to_an_origin_whose_dead_letter_binding_changed_keeps_the_messages(run, broker, qname) -> None:
    """The origin dead-lettered `order.created` into the DLQ when it failed; since then its direct DLX was rebound
    to another key: replayed, its next rejection would drop the message. It stays (exit 6); once the binding is
    back, the replay goes through and a second failure lands in the DLQ again."""
    origin, ex, dlx, dlq = f"{qname}.o", f"{qname}.in", f"{qname}.dlx", f"{qname}.dlq"
    with broker.channel() as ch:
        direct_dlx_bound_by(ch, origin, dlx, dlq, "order.created")
        ch.exchange_declare(ex, "direct")
        ch.queue_bind(origin, ex, "order.created")
        ch.basic_publish(ex, "order.created", b"o-1", mandatory=True)
        rt.reject_all(ch, origin, 1)
        assert broker.wait_depth(dlq, 1) == 1
        ch.queue_unbind(dlq, dlx, "order.created")
        ch.queue_bind(dlq, dlx, "order.placed")

    held = cli(run, broker, "replay", dlq, "--yes")
    assert held.exit_code == 6, held.output
    [reason] = json.loads(held.stdout)["left"]
    assert reason.startswith(f"{origin}: ") and "'order.created' to no queue" in reason
    assert [b for b, _h in broker.snapshot(dlq)] == [b"o-1"] and broker.queue_depth(origin) == 0

    with broker.channel() as ch:
        ch.queue_bind(dlq, dlx, "order.created")
    replayed = cli(run, broker, "replay", dlq, "--yes")
    assert replayed.exit_code == 0, replayed.output
    assert json.loads(replayed.stdout)["moved"] == {origin: 1}
    fail_again(broker, origin)
    assert broker.wait_depth(dlq, 1) == 1 and [b for b, _h in broker.snapshot(dlq)] == [b"o-1"]


@pytest.mark.parametrize("codec", ["c", "python"], indirect=True)
def test_replay_to_an_origin_that_no_longer_dead_letters_keeps_the_messages(run, broker, qname, codec) -> None:
    """The broker dead-lettered these messages from the origin; since then the origin was declared again without
    a dead-letter exchange: replayed, their next rejection there would drop them. They stay (exit 6, on the C
    path and the Python one); --allow-dlx-drop moves them knowingly. The queue declared moments ago has no
    policies in the management API yet: dlxtool waits for them instead of reading "none"."""
    origin, ex, dlx, dlq = f"{qname}.o", f"{qname}.in", f"{qname}.dlx", f"{qname}.dlq"
    with broker.channel() as ch:
        direct_dlx_bound_by(ch, origin, dlx, dlq, "order.created")
        ch.exchange_declare(ex, "direct")
        ch.queue_bind(origin, ex, "order.created")
        for body in (b"o-1", b"o-2"):
            ch.basic_publish(ex, "order.created", body, mandatory=True)
        rt.reject_all(ch, origin, 2)
        assert broker.wait_depth(dlq, 2) == 2
        ch.queue_delete(origin)
        ch.queue_declare(origin, durable=True)  # no dead-letter exchange now
        ch.queue_bind(origin, ex, "order.created")

    held = cli(run, broker, "replay", dlq, "--yes")
    assert held.exit_code == 6, held.output
    [(reason, n)] = json.loads(held.stdout)["left"].items()
    assert n == 2 and reason.startswith(f"{origin}: ") and "no dead-letter exchange now" in reason, reason
    assert "--allow-dlx-drop" in held.stderr
    assert sorted(b for b, _h in broker.snapshot(dlq)) == [b"o-1", b"o-2"] and broker.queue_depth(origin) == 0

    moved = cli(run, broker, "replay", dlq, "--yes", "--allow-dlx-drop")
    assert moved.exit_code == 0, moved.output
    assert json.loads(moved.stdout)["moved"] == {origin: 2}
    assert broker.wait_depth(origin, 2) == 2 and broker.queue_depth(dlq) == 0


def test_a_dead_letter_exchange_set_by_policy_on_a_queue_declared_moments_ago_is_read(run, broker, qname) -> None:
    """The management API shows a new queue without its policies until its first stats sample (about 4 s on
    3.10, 1 s on 4.0): read as "no policy", a --default-exchange replay went through and the next rejection
    (routing key = queue name, which the policy's direct DLX does not route) dropped every message. dlxtool
    waits for the policies: the replay is refused (exit 6), nothing lost."""
    origin, ex, dlx, dlq = f"{qname}.o", f"{qname}.in", f"{qname}.dlx", f"{qname}.dlq"
    vhost = quote(broker.vhost, safe="")
    broker.mgmt.request("PUT", f"policies/{vhost}/{qname}-dlx",
                        {"pattern": f"^{qname}\\.o$", "apply-to": "queues",
                         "definition": {"dead-letter-exchange": dlx}})
    try:
        with broker.channel() as ch:
            ch.exchange_declare(dlx, "direct")
            ch.queue_declare(dlq, durable=True)
            ch.queue_bind(dlq, dlx, "order.created")
            ch.exchange_declare(ex, "topic")
            ch.queue_declare(origin, durable=True)
            ch.queue_bind(origin, ex, "order.*")
            ch.basic_publish(ex, "order.created", b"p-1", mandatory=True)
            rt.reject_all(ch, origin, 1)
            assert broker.wait_depth(dlq, 1) == 1
        result = cli(run, broker, "replay", dlq, "--yes", "--default-exchange")
        assert result.exit_code == 6, result.output
        [reason] = json.loads(result.stdout)["left"]
        assert f"'{origin}' to no queue" in reason, reason
        assert [b for b, _h in broker.snapshot(dlq)] == [b"p-1"] and broker.queue_depth(origin) == 0
    finally:
        broker.mgmt.request("DELETE", f"policies/{vhost}/{qname}-dlx")


def test_celery_tasks_held_back_by_their_default_exchange_route_are_refused_with_exit_6(run, broker, qname) -> None:
    """Celery tasks go back by queue name (see test_replay_routing); when the origin's direct DLX would drop the
    queue name, they stay — and a run where that held back everything is refused (exit 6), as for other routes."""
    work, x, dlx, dlq = f"{qname}.work", f"{qname}.x", f"{qname}.dlx", f"{qname}.dlq"
    celery = {"lang": "py", "task": "shop.charge", "id": "t-1", "retries": 2}
    with broker.channel() as ch:
        direct_dlx_bound_by(ch, work, dlx, dlq, "shop.charge")
        ch.exchange_declare(x, "direct")
        ch.queue_bind(work, x, "shop.charge")
        ch.basic_publish(x, "shop.charge", b"task", pika.BasicProperties(headers=celery))
        rt.reject_all(ch, work, 1)
    assert broker.wait_depth(dlq, 1) == 1
    result = cli(run, broker, "replay", dlq, "--yes")
    assert result.exit_code == 6, result.output
    [reason] = json.loads(result.stdout)["left"]
    assert "with the default exchange" in reason and "would drop" in reason
    assert "no route is safe" in result.stderr
    assert broker.queue_depth(dlq) == 1 and broker.queue_depth(work) == 0


# -- load ---------------------------------------------------------------------------------------------------------


def test_load_keeps_back_records_whose_key_the_queues_dead_letter_exchange_would_drop(run, broker, qname,
                                                                                    tmp_path) -> None:
    origin, dlx, dlq = f"{qname}.o", f"{qname}.dlx", f"{qname}.dlq"
    with broker.channel() as ch:
        direct_dlx_bound_by(ch, origin, dlx, dlq, "order.created")
    path, failed = tmp_path / "in.jsonl", tmp_path / "failed.jsonl"
    path.write_bytes(MessageRecord(queue=origin, body=b"safe", routing_key="order.created").to_jsonl()
                     + MessageRecord(queue=origin, body=b"unsafe", routing_key="order.placed").to_jsonl())

    plan = cli(run, broker, "load", str(path), "--dry-run")
    assert plan.exit_code == 0, plan.output
    figures = json.loads(plan.stdout)
    assert figures["routes"] == {origin: ORIGINAL_KEY}
    [(reason, n)] = figures["unsafe"].items()
    assert n == 1 and reason.startswith(f"{origin}: ") and "'order.placed' to no queue" in reason
    assert figures["rooms"][origin]["would_load"] == 1

    result = cli(run, broker, "load", str(path), "--yes", "--failed", str(failed))
    assert result.exit_code == 5, result.output
    summary = json.loads(result.stdout)
    assert summary["published"] == {origin: 1} and summary["failed"] == {reason: 1}
    assert summary["routes"] == {origin: ORIGINAL_KEY}
    fail_again(broker, origin)
    assert broker.wait_depth(dlq, 1) == 1
    assert [b for b, _h in broker.snapshot(dlq)] == [b"safe"]
    [kept] = [MessageRecord.from_json(json.loads(line)) for line in failed.read_bytes().splitlines()]
    assert kept.body == b"unsafe"  # not lost: in --failed, to load again

    refused = cli(run, broker, "load", str(failed), "--yes")
    assert refused.exit_code == 6, refused.output
    assert "nothing loaded, no route is safe" in refused.stderr and "--allow-dlx-drop" in refused.stderr
    assert broker.queue_depth(origin) == 0


# -- a temporary exchange the broker refuses ------------------------------------------------------------------------


@pytest.fixture
def no_configure_user(broker):
    """A real user with read and write but no configure permission on the test's vhost (management tag, so
    that the API still answers for it). Deleted afterwards."""
    name, password = f"dlxtool-noconf-{uuid.uuid4().hex[:8]}", f"Pw-{uuid.uuid4().hex[:10]}"
    broker.mgmt.request("PUT", f"users/{name}", {"password": password, "tags": "management"})
    broker.mgmt.request("PUT", f"permissions/{quote(broker.vhost, safe='')}/{name}",
                        {"configure": "^$", "write": ".*", "read": ".*"})
    try:
        yield name, password
    finally:
        broker.mgmt.request("DELETE", f"users/{name}")


def test_a_refused_temporary_exchange_is_reported_with_the_brokers_reply(run, broker, qname,
                                                                         no_configure_user) -> None:
    """Without configure permission the temporary exchange cannot be declared: that is what the run says (the
    broker's 403 and --default-exchange), not 'queue missing … create the queue'; nothing moves (exit 6).
    --default-exchange needs no exchange of its own: the replay goes through."""
    user, password = no_configure_user
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", [b"a", b"b"])
    assert broker.wait_depth(top.dlq, 2) == 2
    url = broker.url.replace("guest:guest@", f"{user}:{password}@")
    assert url != broker.url

    refused = run("replay", top.dlq, "--yes", "--url", url, "--format", "json")
    assert refused.exit_code == 6, refused.output
    assert refused.stdout == ""  # refused before anything was read (issue 28: the broker is asked with a probe)
    assert "403" in refused.stderr and "ACCESS_REFUSED" in refused.stderr and "--default-exchange" in refused.stderr
    assert "queue missing" not in refused.stderr and "create the queue" not in refused.stderr
    assert broker.queue_depth(top.dlq) == 2 and broker.queue_depth(f"{qname}.o") == 0

    accepted = run("replay", top.dlq, "--yes", "--default-exchange", "--url", url, "--format", "json")
    assert accepted.exit_code == 0, accepted.output
    assert broker.queue_depth(f"{qname}.o") == 2


# -- the last tier of a retry ladder --------------------------------------------------------------------------------


def test_a_last_tier_that_parks_by_expiry_is_never_the_origin(run, broker, qname) -> None:
    """A wait queue (TTL, no consumer) whose dead-letter route leads to the DLQ itself: its messages' deaths are
    only `expired` from it. Replayed there, they would only expire back: no origin, with the reason (exit 5)."""
    tier, dlq = f"{qname}.wait.3", f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(tier, arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "",
                                          "x-dead-letter-routing-key": dlq}, durable=True)
        ch.basic_publish("", tier, b"parked", mandatory=True)
    wait_until(lambda: broker.queue_depth(dlq) == 1, "the expiry")
    result = cli(run, broker, "replay", dlq, "--yes")
    assert result.exit_code == 5, result.output
    [(reason, n)] = json.loads(result.stdout)["left"].items()
    assert n == 1 and reason.startswith("no origin:") and f"{tier!r} has no consumer" in reason
    assert [b for b, _h in broker.snapshot(dlq)] == [b"parked"] and broker.queue_depth(tier) == 0


def test_without_the_management_api_nothing_moves_unless_both_risks_are_accepted(run, broker, qname,
                                                                                tmp_path) -> None:
    """No API: neither the destination's limits nor its dead-letter exchange can be read. purge --move-to is
    refused before anything is read, load publishes nothing (exit 6 both); --allow-displace and --allow-dlx-drop
    together move them."""
    blind = ("--management-url", "http://127.0.0.1:9/")
    src, park = f"{qname}.src", f"{qname}.park"
    with broker.channel() as ch:
        ch.queue_declare(src, durable=True)
        ch.queue_declare(park, durable=True)
    broker.publish(src, [b"m"])
    refused = cli(run, broker, "purge", src, "--move-to", park, "--yes", "--allow-displace", *blind)
    assert refused.exit_code == 6, refused.output
    assert "cannot be checked (management API not reachable)" in refused.stderr and "--allow-dlx-drop" in \
        refused.stderr
    assert broker.queue_depth(src) == 1 and broker.queue_depth(park) == 0
    moved = cli(run, broker, "purge", src, "--move-to", park, "--yes", "--allow-displace", "--allow-dlx-drop", *blind)
    assert moved.exit_code == 0, moved.output
    assert broker.queue_depth(park) == 1

    path = tmp_path / "in.jsonl"
    path.write_bytes(MessageRecord(queue=park, body=b"r", routing_key="k").to_jsonl())
    held = cli(run, broker, "load", str(path), "--yes", "--allow-displace", *blind)
    assert held.exit_code == 6, held.output
    assert "cannot be checked" in held.stderr and broker.queue_depth(park) == 1
    loaded = cli(run, broker, "load", str(path), "--yes", "--allow-displace", "--allow-dlx-drop", *blind)
    assert loaded.exit_code == 0, loaded.output
    assert broker.queue_depth(park) == 2


# -- what a selective run keeps in its source ---------------------------------------------------------------


def test_a_selective_purge_keeps_the_routing_key_of_what_it_keeps(run, broker, qname) -> None:
    """Messages a selective run keeps are republished to the source's tail. On the default exchange their key
    became the queue's name: where the queue's dead-letter exchange routes on the key (direct, bound by the
    original key), their next failure was dropped. They keep their own key now, and the exchange that carried
    them is gone after the run."""
    work, ex, dlx, dlq = f"{qname}.work", f"{qname}.ex", f"{qname}.dlx", f"{qname}.dlq"
    with broker.channel() as ch:
        direct_dlx_bound_by(ch, work, dlx, dlq, "order.created")
        ch.exchange_declare(ex, "direct")
        ch.queue_bind(work, ex, "order.created")
        # the poison first: what is kept after a removal is republished to the tail (before anything changed, a
        # classic queue's kept messages are given back in place instead: tests/cli/test_broker_refusals.py)
        ch.basic_publish(ex, "order.created", b"poison", mandatory=True)
        for i in range(3):
            ch.basic_publish(ex, "order.created", f"healthy {i}".encode(), mandatory=True)
    assert broker.wait_depth(work, 4) == 4

    result = cli(run, broker, "purge", work, "--body-contains", "poison", "--yes")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["removed"] == 1
    with broker.channel() as ch:  # the next failure of each kept message: a real reject
        kept = []
        for _ in range(3):
            method, _props, _body = ch.basic_get(work)
            kept.append((method.routing_key, method.exchange))
            ch.basic_reject(method.delivery_tag, requeue=False)
    assert [k for k, _e in kept] == ["order.created"] * 3
    assert all(e.startswith("dlxtool.keep.") for _k, e in kept), kept
    assert broker.wait_depth(dlq, 3) == 3  # none dropped by the direct DLX
    exchanges = broker.mgmt.request("GET", f"exchanges/{quote(broker.vhost, safe='')}")
    # this run's (other tests share the vhost: a fault test's killed run may leave its own behind, by design)
    assert not [e["name"] for e in exchanges if e["name"].startswith("dlxtool.keep.") and qname in e["name"]]


def test_kept_messages_without_configure_permission_are_said_to_lose_their_key(run, broker, qname,
                                                                                 no_configure_user) -> None:
    """A user who may not declare the exchange that keeps their key: kept messages go to the tail on the default
    exchange as before, and the run says so (stderr and the JSON's notes), nothing lost."""
    user, password = no_configure_user
    work, ex = f"{qname}.work", f"{qname}.ex"
    with broker.channel() as ch:
        ch.exchange_declare(ex, "direct")
        ch.queue_declare(work, durable=True)
        ch.queue_bind(work, ex, "order.created")
        ch.basic_publish(ex, "order.created", b"poison", mandatory=True)  # first: the healthy one is republished
        ch.basic_publish(ex, "order.created", b"healthy", mandatory=True)
    assert broker.wait_depth(work, 2) == 2
    url = broker.url.replace("guest:guest@", f"{user}:{password}@")
    result = run("purge", work, "--body-contains", "poison", "--yes", "--url", url, "--format", "json")
    assert result.exit_code == 0, result.output
    [note] = json.loads(result.stdout)["notes"]
    assert "not their own" in note and "403" in note, note
    assert note in result.stderr
    assert [b for b, _h in broker.snapshot(work)] == [b"healthy"]


def test_a_work_queue_whose_consumer_just_started_is_the_origin_of_what_expired_there(run, broker, qname) -> None:
    """Issue 30: messages expired unprocessed in a work queue with a TTL (its worker was down); the worker starts, and
    a dry run moments later said "'tq.tasks' has no consumer" (the API's sample, up to 5 s old) and found no origin.
    Whether it is consumed decides the origin: the broker's own count (a passive declare) says it."""
    work, dlq = f"{qname}.tq.tasks", f"{qname}.tq.dead"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, durable=True, arguments={"x-message-ttl": 50, "x-dead-letter-exchange": "",
                                                        "x-dead-letter-routing-key": dlq})
        ch.basic_publish("", work, b"task", mandatory=True)
    wait_until(lambda: broker.queue_depth(dlq) == 1, "the expiry")
    worker = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        worker.channel().basic_consume(work, lambda *_: None)  # the worker starts: nothing is left to deliver
        result = cli(run, broker, "replay", dlq, "--dry-run")
    finally:
        worker.close()
    assert result.exit_code == 0, result.output
    [origin] = json.loads(result.stdout)["plan"]["origins"]
    assert (origin["queue"], origin["messages"]) == (work, 1), result.stdout
