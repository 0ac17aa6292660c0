"""scripts/dev-broker cluster and its harness (tests/support/cluster.py), against the real cluster.

These prove the harness does what it says, and pin what RabbitMQ (3.10.8 here) does in a cluster: the
texts and fields dlxtool's handling of clusters is built on. Each test leaves the cluster whole (the
`_cluster_restored` fixture undoes what the harness did, failed or not).
"""

from __future__ import annotations

import time
from typing import Any

import pika
import pika.exceptions
import pytest

from dlxtool.broker import versions
from dlxtool.errors import NotFoundError
from tests.support.cluster import MEMBERS, Cluster

pytestmark = pytest.mark.cluster


def connect(cluster: Cluster, member: str) -> pika.BlockingConnection:
    env = cluster.env(member)
    return pika.BlockingConnection(pika.ConnectionParameters(
        host=env.host, port=env.amqp_port, virtual_host=env.vhost,
        credentials=pika.PlainCredentials("guest", "guest"),
        client_properties={"connection_name": f"dlxtool-harness-{member}-{time.monotonic_ns()}"}))


def test_three_members_run_each_reporting_a_cluster_name_of_its_own(cluster: Cluster) -> None:
    for member in MEMBERS:
        assert cluster.running(via=member) == set(MEMBERS)
        overview = cluster.env(member).mgmt.overview(["node", "cluster_name"])
        broker = cluster.members[member].broker  # c1... or, on cluster43, k1...
        assert overview["node"] == cluster.node(member) == f"dlxtool-{broker}@localhost"
        # No cluster_name set: 3.x and 4.3 name the cluster after the answering node (on its host name: "@vm").
        assert overview["cluster_name"].startswith(f"dlxtool-{broker}@")


def test_a_classic_queue_lives_on_the_member_that_declared_it(cluster: Cluster, qname: str) -> None:
    with cluster.env("c2").channel() as ch:
        ch.queue_declare(qname, durable=True)
    assert cluster.wait("the queue listed", lambda: cluster.home_node(qname)) == "c2"


def test_with_its_home_member_down_a_classic_queue_is_unreachable_not_gone(cluster: Cluster, qname: str) -> None:
    with cluster.env("c2").channel() as ch:
        ch.queue_declare(qname, durable=True)
        for body in (b"one", b"two"):
            ch.basic_publish("", qname, body, pika.BasicProperties(delivery_mode=2), mandatory=True)

    def with_figures() -> dict[str, Any] | None:
        row = cluster.queue_row(qname)
        return row if row is not None and row.get("messages") == 2 else None

    listed = cluster.wait("the queue's figures", with_figures)

    cluster.stop_app("c2")
    # What the version table says this version answers (3.10 names the node; 4.3 with Khepri does not)
    if versions.behaviour(cluster.env("c1").version).down_queue_404_names_node:
        refused = (f"NOT_FOUND - home node '{cluster.node('c2')}' of durable queue '{qname}' in vhost "
                   f"'{cluster.vhost}' is down or inaccessible")
    else:
        refused = f"NOT_FOUND - queue '{qname}' in vhost '{cluster.vhost}' process is stopped by supervisor"
    operations = {
        "queue.declare(passive)": lambda ch: ch.queue_declare(qname, passive=True),
        "basic.get": lambda ch: ch.basic_get(qname),
        "basic.consume": lambda ch: ch.basic_consume(qname, lambda *_: None),
        "queue.purge": lambda ch: ch.queue_purge(qname),
    }
    for what, operation in operations.items():
        with cluster.env("c1").channel() as ch, pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
            operation(ch)
        assert (closed.value.reply_code, closed.value.reply_text) == (404, refused), what

    # A mandatory publish to it (default exchange) comes back: unroutable, not lost and not queued (3.10); 4.3
    # routes it to the queue's record and the confirm is a nack: refused, not lost.
    khepri = versions.khepri(cluster.env("c1").version)
    refusal = pika.exceptions.NackError if khepri else pika.exceptions.UnroutableError
    with cluster.env("c1").channel() as ch, pytest.raises(refusal) as returned:
        ch.basic_publish("", qname, b"three", mandatory=True)
    if not khepri:
        method = returned.value.messages[0].method
        assert (method.reply_code, method.reply_text) == (312, "NO_ROUTE")

    # The API lists it, "down", without any figures, on its node; the queue's own endpoint says 404 (3.10).
    row = cluster.queue_row(qname, via="c1")
    assert row is not None
    assert row["node"] == cluster.node("c2"), row
    assert {"messages", "messages_ready", "messages_unacknowledged", "consumers"} <= set(listed) - set(row), row
    if not khepri:
        assert row["state"] == "down"
        assert sorted(row) == ["arguments", "auto_delete", "durable", "exclusive", "name", "node", "state", "type",
                               "vhost"]
        with pytest.raises(NotFoundError):
            cluster.env("c1").mgmt.request("GET", f"queues/{cluster.vhost}/{qname}")

    cluster.start_app("c2")
    assert cluster.env("c1").wait_depth(qname, 2) == 2  # the messages were there all along


@pytest.mark.parametrize(("kind", "flag", "reason"), [("memory", "mem_alarm", "low on memory"),
                                                      ("disk", "disk_free_alarm", "low on disk")])
def test_an_alarm_on_one_member_blocks_publishers_on_every_member(cluster: Cluster, kind: str, flag: str,
                                                                  reason: str) -> None:
    conn = connect(cluster, "c3")
    events: list[Any] = []
    conn.add_on_connection_blocked_callback(lambda _c, frame: events.append(("blocked", frame.method.reason)))
    conn.add_on_connection_unblocked_callback(lambda _c, _frame: events.append(("unblocked",)))
    try:
        ch = conn.channel()
        getattr(cluster, f"set_{kind}_alarm")("c2")
        nodes = cluster.nodes()
        assert {cluster.member_of(n) for n, row in nodes.items() if row.get(flag)} == {"c2"}

        conn.process_data_events(1.0)
        assert events == []  # nothing yet: the broker says so to a connection when it publishes
        ch.basic_publish("", "nowhere", b"x")
        deadline = time.monotonic() + 15
        while not events and time.monotonic() < deadline:
            conn.process_data_events(0.2)
        assert events == [("blocked", reason)]

        getattr(cluster, f"clear_{kind}_alarm")("c2")
        deadline = time.monotonic() + 30
        while len(events) < 2 and time.monotonic() < deadline:
            conn.process_data_events(0.2)
        assert events == [("blocked", reason), ("unblocked",)]
    finally:
        if conn.is_open:
            conn.close()


def test_a_quorum_queues_leader_moves_to_another_member(cluster: Cluster, qname: str) -> None:
    with cluster.env("c1").channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum"})
        ch.basic_publish("", qname, b"kept", mandatory=True)
    assert cluster.wait("a leader", lambda: cluster.leader(qname)) == "c1"  # the declaring member leads
    assert cluster.move_leader(qname, "c3") == "c3"
    row = cluster.queue_row(qname)
    assert row is not None and sorted(row["members"]) == sorted(cluster.node(m) for m in MEMBERS)
    assert cluster.env("c2").wait_depth(qname, 1) == 1


def test_a_killed_member_is_relaunched_and_rejoins(cluster: Cluster) -> None:
    pid = cluster.kill("c3")
    assert cluster.wait("c3 seen down", lambda: "c3" not in cluster.running(via="c1"))
    cluster.relaunch()
    assert cluster.running(via="c1") == set(MEMBERS)
    assert int(cluster.ctl("c3", "eval", "os:getpid().").strip('"')) != pid
