"""A real incident on a 3-node cluster (issue 27): a node down, a memory or disk alarm, a quorum leader moved —
each with the exit code and the words a person reads, and nothing lost (scripts/dev-broker cluster, 3.10.8)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from typing import Any
from urllib.parse import quote

import pika
import pika.exceptions
import pytest

pytestmark = pytest.mark.cluster


def dead_letters(env, prefix: str, n: int, *, quorum: bool = False) -> tuple[str, str]:
    """n dead letters made by the broker through `env`'s member (their queues live there): rejected from
    `prefix`.work through a fanout DLX into `prefix`.dlq."""
    args = {"x-queue-type": "quorum"} if quorum else {}
    with env.channel() as ch:
        ch.exchange_declare(f"{prefix}.dlx", "fanout", durable=True)
        ch.queue_declare(f"{prefix}.dlq", durable=True, arguments=args)
        ch.queue_bind(f"{prefix}.dlq", f"{prefix}.dlx")
        ch.queue_declare(f"{prefix}.work", durable=True, arguments={"x-dead-letter-exchange": f"{prefix}.dlx", **args})
        for i in range(n):
            ch.basic_publish("", f"{prefix}.work", f"m{i:04d}".encode(), pika.BasicProperties(delivery_mode=2))
        taken = 0
        while taken < n:
            method, _p, _b = ch.basic_get(f"{prefix}.work")
            if method is not None:
                ch.basic_reject(method.delivery_tag, requeue=False)
                taken += 1
    assert env.wait_depth(f"{prefix}.dlq", n) == n
    return f"{prefix}.dlq", f"{prefix}.work"


def when_depth(env, queue: str, at_least: int, then: Any, done: threading.Event, timeout: float = 60) -> None:
    """In this thread: once `queue` holds `at_least` messages (polled on one open connection), call then()."""
    conn = pika.BlockingConnection(pika.URLParameters(env.url))
    try:
        ch = conn.channel()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and ch.queue_declare(queue, passive=True).method.message_count < at_least:
            time.sleep(0.05)
    finally:
        conn.close()
    then()
    done.set()


def dlxtool(run, env, *args: str) -> Any:
    started = time.monotonic()
    result = run(*args, "--url", env.url, "--format", "json", env={"DLXTOOL_MANAGEMENT_URL": env.management_url})
    result.elapsed = time.monotonic() - started
    return result


def bodies(env, queue: str, *, within: float = 60) -> Counter[bytes]:
    """Every body in the queue, taken and acked once all were read. Right after a node stopped, a quorum queue
    whose leader lived there answers 541 "noproc"/"nodedown" until a new leader is elected (CI saw it): the read
    is retried on a new connection, and since nothing is acked before the end, a failed try takes nothing."""
    deadline = time.monotonic() + within
    while True:
        conn = pika.BlockingConnection(pika.URLParameters(env.url))
        try:
            ch = conn.channel()
            found: Counter[bytes] = Counter()
            last = None
            while True:
                method, _props, body = ch.basic_get(queue)
                if method is None:
                    break
                found[body] += 1
                last = method.delivery_tag
            if last is not None:
                ch.basic_ack(last, multiple=True)
            return found
        except pika.exceptions.AMQPError as exc:
            said = str(exc)
            if time.monotonic() > deadline or not ("noproc" in said or "nodedown" in said):
                raise
            time.sleep(1)
        finally:
            if conn.is_open:
                conn.close()


def test_a_queue_on_a_stopped_node_is_unavailable_not_missing(run, cluster, qname) -> None:
    """Issue 27: classic s4.dlq homed on c2, c2 stopped: `peek`/`replay`/`purge` said "queue not found" (exit 4) —
    500 dead letters looked gone. Now: exit 7, the node named, the messages said not lost; all there afterwards."""
    c1, c2 = cluster.env("c1"), cluster.env("c2")
    dlq, _work = dead_letters(c2, qname, 20)
    assert cluster.home_node(dlq) == "c2"
    with cluster.member_down("c2"):
        for args in (["peek", dlq], ["history", dlq], ["replay", dlq, "--yes"], ["purge", dlq, "--yes"],
                     ["dump", dlq]):
            result = dlxtool(run, c1, *args)
            assert result.exit_code == 7, (args, result.stdout, result.stderr)
            assert cluster.node("c2") in result.stderr and "not lost" in result.stderr, result.stderr
            assert "not found" not in result.stderr.split("(the broker said")[0]
    assert c1.wait_depth(dlq, 20) == 20


def test_a_memory_alarm_before_a_replay_is_named_and_nothing_moves(run, cluster, qname) -> None:
    c1 = cluster.env("c1")
    dlq, work = dead_letters(c1, qname, 10)
    with cluster.memory_alarm("c2"):
        result = dlxtool(run, c1, "replay", dlq, "--yes")
    assert result.exit_code == 7, (result.stdout, result.stderr)
    assert f"memory alarm on {cluster.node('c2')}" in result.stderr and "nothing was read or changed" in result.stderr
    assert c1.queue_depth(dlq) == 10 and c1.queue_depth(work) == 0


def test_a_disk_alarm_before_a_replay_is_named(run, cluster, qname) -> None:
    c1 = cluster.env("c1")
    dlq, _work = dead_letters(c1, qname, 3)
    with cluster.disk_alarm("c3"):
        result = dlxtool(run, c1, "replay", dlq, "--yes")
    assert result.exit_code == 7, (result.stdout, result.stderr)
    assert f"disk alarm on {cluster.node('c3')}" in result.stderr


def test_a_memory_alarm_during_a_replay_stops_it_within_its_timeout_and_loses_nothing(run, cluster, qname) -> None:
    """Issue 27: the blocked replay waited 30 s (blocked_connection_timeout), said "cannot connect", never named the
    alarm; its blocked connection kept 2,000 dead letters unacked, and a rerun said "nothing to replay". Now the
    block is said at once, the run stops within --timeout, the dead letters are back in the DLQ at once (they
    were consumed on a connection that never publishes: an alarm does not block it), and the summary counts
    what may exist twice."""
    c1 = cluster.env("c1")
    dlq, work = dead_letters(c1, qname, 300)
    sent = [f"m{i:04d}".encode() for i in range(300)]
    raised = threading.Event()

    def alarm_once_moving() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and c1.queue_depth(work) < 20:
            time.sleep(0.1)
        cluster.set_memory_alarm("c3")
        raised.set()

    thread = threading.Thread(target=alarm_once_moving)
    thread.start()
    try:
        result = dlxtool(run, c1, "--timeout", "4", "replay", dlq, "--yes", "--rate", "40")
    finally:
        thread.join()
    assert raised.is_set()
    assert result.exit_code == 7, (result.stdout, result.stderr)
    assert "the broker blocked publishing (low on memory" in result.stderr
    assert "lost" not in result.stderr.replace("not lost", "")
    summary = json.loads(result.stdout)
    assert summary["unavailable"] and 0 < summary["moved_total"] < 300
    assert result.elapsed < 60
    # The DLQ got its messages back at once: not held by a blocked connection until the alarm clears.
    in_dlq = bodies(c1, dlq)
    cluster.clear_memory_alarm("c3")
    at_origin = bodies(c1, work)
    assert all(in_dlq[b] + at_origin[b] >= 1 for b in sent), "a message was lost"
    assert sum((in_dlq + at_origin).values()) - 300 <= summary["possible_duplicates"]
    assert sum(at_origin.values()) >= summary["moved_total"]


def test_a_memory_alarm_during_a_purge_move_to_gives_the_queue_back_at_once(run, cluster, qname) -> None:
    """Issue 27, for purge --move-to: it published on the connection it consumed on, and an alarm blocks a
    connection that publishes: the broker then read nothing more from it (acks, give-backs, close), so the
    messages it held stayed unacked until the alarm cleared. Now it publishes on a connection of its own."""
    c1 = cluster.env("c1")
    n = 10_000
    source, parking = f"{qname}.dlq", f"{qname}.parked"
    with c1.channel() as ch:
        for q in (source, parking):
            ch.queue_declare(q, durable=True)
        for i in range(n):
            ch.basic_publish("", source, f"m{i:05d}".encode() + b"x" * 2000, pika.BasicProperties(delivery_mode=2))
    assert c1.wait_depth(source, n) == n
    raised = threading.Event()
    thread = threading.Thread(target=when_depth, args=(c1, parking, 500, lambda: cluster.set_memory_alarm("c1"),
                                                       raised))
    thread.start()
    try:
        # --max-bytes keeps few messages in flight (2 KB bodies): a purge slow enough for the alarm to come mid-run
        # (64 KiB: the 4.3 cluster once moved all 10,000 before the chroot's rabbitmqctl had raised it)
        result = dlxtool(run, c1, "--timeout", "4", "purge", source, "--move-to", parking, "--yes",
                         "--max-bytes", "8KiB")
    finally:
        thread.join()
    try:
        assert raised.is_set()
        assert result.exit_code == 7, (result.stdout, result.stderr)  # not 0: the alarm came before the end
        assert "the broker blocked publishing (low on memory" in result.stderr, result.stderr
        assert result.elapsed < 60
        # Every message ready again in one of the two queues while the alarm is still on: none held unacked by a
        # blocked connection (the passive declares count ready messages only).
        depths = cluster.wait("the purge's messages ready again",
                              lambda: (lambda d: d if sum(d) >= n else None)(
                                  (c1.queue_depth(source), c1.queue_depth(parking))), timeout=20)
        summary = json.loads(result.stdout)
        assert sum(depths) - n <= summary["possible_duplicates"], (depths, summary)
    finally:
        cluster.clear_memory_alarm("c1")


def test_a_rerun_while_dead_letters_are_held_says_who_holds_them(run, cluster, qname) -> None:
    """Not "nothing to replay", exit 0: the DLQ's messages are held unacked by a connection; it says which, and
    that they come back when it closes (exit 7)."""
    c1 = cluster.env("c1")
    dlq, _work = dead_letters(c1, qname, 5)
    conn = pika.BlockingConnection(pika.URLParameters(c1.url))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)
        ch.basic_consume(dlq, lambda *_a: None, auto_ack=False)
        path = f"/queues/{quote(cluster.vhost, safe='')}/{quote(dlq, safe='')}"

        def seen() -> bool:
            row = c1.mgmt.get(path)
            named = [c for c in row.get("consumer_details") or [] if c.get("channel_details")]
            return row.get("messages_unacknowledged") == 5 and bool(named)

        cluster.wait("the API to see 5 unacked and the consumer", seen, timeout=60)  # 30 s was passed once in CI
        result = dlxtool(run, c1, "replay", dlq, "--yes")
    finally:
        conn.close()
    assert result.exit_code == 7, (result.stdout, result.stderr)
    assert "5 message(s)" in result.stderr and "held unacked by" in result.stderr, result.stderr
    assert "127.0.0.1:" in result.stderr, result.stderr


def test_a_quorum_leader_moved_mid_replay_loses_nothing(run, cluster, qname) -> None:
    c1 = cluster.env("c1")
    dlq, work = dead_letters(c1, qname, 400, quorum=True)
    sent = [f"m{i:04d}".encode() for i in range(400)]
    moved = threading.Event()

    def move_once_moving() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and c1.queue_depth(work) < 50:
            time.sleep(0.1)
        cluster.move_leader(dlq, "c3")
        moved.set()

    thread = threading.Thread(target=move_once_moving)
    thread.start()
    try:
        result = dlxtool(run, c1, "replay", dlq, "--yes", "--rate", "100")
    finally:
        thread.join()
    assert moved.is_set()
    summary = json.loads(result.stdout)
    at_origin, in_dlq = bodies(c1, work), bodies(c1, dlq)
    assert all(at_origin[b] + in_dlq[b] >= 1 for b in sent), "a message was lost"
    assert sum((at_origin + in_dlq).values()) - 400 <= summary["possible_duplicates"]
    assert result.exit_code in (0, 3, 7), (result.stdout, result.stderr)  # a leader change may end the consumer
    assert "Traceback" not in result.stderr
    if result.exit_code == 3:  # the consumer ended by the leader change: said, and that a rerun goes on
        assert "nothing was lost" in result.stderr and "run the same command again" in result.stderr, result.stderr
    elif result.exit_code == 7:
        assert "not lost" in result.stderr or "run it again" in result.stderr, result.stderr


def cluster_profile(cluster, tmp_path, order: tuple[str, ...] = ("c1", "c2", "c3")) -> str:
    """A config file with one profile `prod` listing the members' AMQP URLs and their APIs (failover in `order`)."""
    members = [cluster.members[m] for m in order]
    urls = ", ".join(f'"amqp://guest:guest@localhost:{m.amqp_port}/"' for m in members)
    apis = ", ".join(f'"http://localhost:{m.http_port}/"' for m in members)
    path = tmp_path / "cluster.toml"
    path.write_text(f'[brokers.prod]\nurls = [{urls}]\nmanagement_urls = [{apis}]\nvhost = "{cluster.vhost}"\n')
    return str(path)


def test_after_a_failover_the_api_follows_and_the_node_is_said(run, cluster, qname, tmp_path) -> None:
    """Issue 27: on 3.x each node reports its own cluster name, and the identity check refused the API of any node
    but the one AMQP reached ("another broker"); after c1 died, AMQP failed over to c2 but the API stayed c1's."""
    dlq, _work = dead_letters(cluster.env("c2"), qname, 3)  # a classic DLQ on c2: up while c1 is down
    config = cluster_profile(cluster, tmp_path)
    with cluster.member_down("c1"):
        result = run("--config", config, "--broker", "prod", "peek", dlq, "--format", "json", env={})
        listed = run("--config", config, "--broker", "prod", "queues", "--format", "json", env={})
    # `queues` (the API alone) asked c1's API first, as the profile lists it, then c2's
    assert listed.exit_code == 0, listed.stderr
    assert dlq in [r["queue"] for r in json.loads(listed.stdout)]
    assert f"management API at {cluster.members['c1'].http_url} not reachable" in listed.stderr, listed.stderr
    assert f"its queues are from the API at {cluster.members['c2'].http_url}" in listed.stderr, listed.stderr
    assert result.exit_code == 0, result.stderr
    assert (f"on node {cluster.node('c2')} (failed over: amqp://guest:****@localhost:"
            f"{cluster.members['c1'].amqp_port}/") in result.stderr
    assert f"management API {cluster.members['c2'].http_url}" in result.stderr and "guest:guest" not in result.stderr
    assert len(json.loads(result.stdout)) == 3
    # another member's API, named alone: the same cluster, proven by membership (not by its cluster name)
    c3_api = f"http://localhost:{cluster.members['c3'].http_port}/"
    alone = run("peek", dlq, "--url", cluster.env("c2").url, "--management-url", c3_api, "--format", "json", env={})
    assert alone.exit_code == 0, alone.stderr


def test_the_connected_node_killed_mid_replay_loses_nothing_and_the_rerun_finishes_elsewhere(
        run, cluster, qname, tmp_path) -> None:
    c2 = cluster.env("c2")
    dlq, work = dead_letters(c2, qname, 600, quorum=True)  # quorum: on every member, led by c2
    sent = [f"m{i:04d}".encode() for i in range(600)]
    config = cluster_profile(cluster, tmp_path, order=("c2", "c1", "c3"))
    killed = threading.Event()
    thread = threading.Thread(target=when_depth, args=(cluster.env("c1"), work, 100, lambda: cluster.kill("c2"),
                                                       killed))
    thread.start()
    try:
        first = run("--config", config, "--broker", "prod", "replay", dlq, "--yes", "--rate", "60", "--format",
                    "json", env={})
    finally:
        thread.join()
    assert killed.is_set()
    assert first.exit_code == 3, (first.stdout, first.stderr)
    assert "Traceback" not in first.stderr
    assert "nothing was lost" in first.stderr and "run the same command again" in first.stderr, first.stderr
    firstsummary = json.loads(first.stdout)
    if firstsummary["held_when_lost"] or firstsummary["held_on_the_way"]:  # held on c2, which is gone: said so
        said = first.stderr
        assert firstsummary["node_down"] and "refuses connections now, so the node it was on" in said, said
    # at once, as an operator would: a quorum DLQ whose leader just died answers "0 ready" for a moment — and again
    # while part of it is still held by the consumer the dead node had (3.10), until all of it was replayed
    moved, duplicates, rerun = firstsummary["moved_total"], firstsummary["possible_duplicates"], None

    def rerun_once() -> Any:
        nonlocal moved, duplicates
        done = run("--config", config, "--broker", "prod", "replay", dlq, "--yes", "--format", "json", env={})
        if done.stdout.strip():  # the run's summary (a refusal before the run prints none)
            again = json.loads(done.stdout)
            moved, duplicates = moved + again["moved_total"], duplicates + again["possible_duplicates"]
        return done

    for _attempt in range(5):
        rerun = rerun_once()
        if rerun.exit_code == 7 and "cannot take messages now" in rerun.stderr:
            # The origin (quorum, led by c2 too) nacks every publish until its new leader is elected (3.10, seen
            # in CI and here: 345 of 345 nacked in 0.4 s): said as not now, each kept in the DLQ.
            assert "nacked by " in rerun.stderr and "run it again in a few seconds" in rerun.stderr, rerun.stderr
            time.sleep(2)
            continue
        if rerun.exit_code == 7:
            # Said, not "nothing to replay": on 3.10 a quorum queue keeps what a consumer on a node that went down
            # had taken until that node is back (measured: 346 held, c2 down, the rerun's consumer on c1).
            assert "leader changed moments ago" in rerun.stderr or "held unacked" in rerun.stderr, rerun.stderr
            assert "until the queue's leader moves" in rerun.stderr or "leader changed" in rerun.stderr
            cluster.relaunch()  # the node back is not enough on 3.10 (measured): the leader moving is
            cluster.move_leader(dlq, "c3")
        else:
            if rerun.exit_code != 0:  # in full (an assert's message is cut)
                pytest.fail(f"rerun exit {rerun.exit_code}\nstderr:\n{rerun.stderr}\nstdout:\n{rerun.stdout}")
            assert "on node dlxtool-" in rerun.stderr
            if moved >= 600 - duplicates:
                break
            # part of it still held by the dead node's consumer: on 3.10 it comes back when the leader moves
            cluster.relaunch()
            cluster.move_leader(dlq, "c1" if cluster.leader(dlq) != "c1" else "c3")
        # 60 s: 30 s ran out once in CI, the cluster pass beside the 4.x passes. Or nothing is left to come back:
        # every message is at the origin already (CI once waited 60 s on an empty DLQ here); the checks below say
        # whether anything was lost and whether every extra copy was reported.
        depths = cluster.wait("the lost consumer's messages back, or all of them at the origin", lambda: (
            lambda d, w: (d, w) if d > 0 or w >= 600 else None)(
                cluster.env("c1").queue_depth(dlq), cluster.env("c1").queue_depth(work)), timeout=60)
        if depths[0] == 0:
            break
    c1 = cluster.env("c1")
    for queue in (work, dlq):  # a basic.get while a quorum queue has no leader closes the connection (541 nodedown)
        cluster.wait(f"{queue} led by a live member", lambda q=queue: cluster.leader(q) != "c2")
    if firstsummary["held_when_lost"] and c1.wait_depth(work, 600, timeout=10) < 600 and not c1.queue_depth(dlq):
        # What the first run said its lost connection held (an unconfirmed publish among them, counted as a
        # possible duplicate, so `moved` can reach 600 - duplicates without it): on 3.10 the quorum DLQ keeps it for
        # the consumer c2 had until c2 is back and the leader moves (QUORUM_KEEPS_A_LOST_CONSUMERS_MESSAGES),
        # seen here with 1 held. The operator's remedy, then the same command once more.
        cluster.relaunch()
        cluster.move_leader(dlq, "c1" if cluster.leader(dlq) != "c1" else "c3")
        cluster.wait("the held messages back in the DLQ", lambda: c1.queue_depth(dlq) > 0, timeout=60)
        rerun = rerun_once()
        assert rerun.exit_code == 0, (rerun.stderr, rerun.stdout)
    c1.wait_depth(work, 600, timeout=10)
    at_origin, in_dlq = bodies(c1, work), bodies(c1, dlq)
    missing = [b for b in sent if not at_origin[b]]
    assert not in_dlq and not missing, (f"lost {len(missing)}: {missing[:5]}; at origin {sum(at_origin.values())}, "
                                        f"first {firstsummary}, last rerun {rerun.stdout if rerun else None}")
    assert sum(at_origin.values()) - 600 <= duplicates


def test_the_connected_node_stopped_mid_purge_backup_loses_nothing(run, cluster, qname, tmp_path) -> None:
    from dlxtool.ops.record_files import read_records

    c2 = cluster.env("c2")
    dlq, _work = dead_letters(c2, qname, 600, quorum=True)
    sent = [f"m{i:04d}".encode() for i in range(600)]
    config = cluster_profile(cluster, tmp_path, order=("c2", "c1", "c3"))
    backup = tmp_path / "backup.jsonl"
    stopped = threading.Event()

    def stop_once_removing() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not backup.exists() or backup.stat().st_size < 20_000):
            time.sleep(0.02)
        cluster.stop_app("c2")
        stopped.set()

    thread = threading.Thread(target=stop_once_removing)
    thread.start()
    try:
        first = run("--config", config, "--broker", "prod", "purge", dlq, "--backup", str(backup), "--yes",
                    "--format", "json", env={})
    finally:
        thread.join()
    assert stopped.is_set()
    assert first.exit_code in (0, 3), (first.stdout, first.stderr)  # 0: the purge ended before the stop
    if first.exit_code == 3:  # the connected node stopped under it: said as a lost connection, not a traceback
        assert "connection" in first.stderr and "Traceback" not in first.stderr, first.stderr
    with open(backup, "rb") as f:
        saved = Counter(r.body for r in read_records(f, str(backup)))
    in_dlq = bodies(cluster.env("c1"), dlq)
    assert all(saved[b] + in_dlq[b] >= 1 for b in sent), "a message was lost"
    summary = json.loads(first.stdout)
    assert sum((saved + in_dlq).values()) - 600 <= summary["possible_duplicates"]


def test_a_quorum_queue_without_a_majority_is_unavailable_not_running(run, cluster, qname) -> None:
    """2 of 3 members stopped: the API still said "running" for the quorum DLQ (its old leader, the surviving node)
    and `queues` showed its 7 messages as if all were well; a read then timed out inside the broker (541)."""
    from dlxtool.broker import versions

    c1 = cluster.env("c1")
    if versions.khepri(c1.version):
        pytest.skip("2 of 3 members down is a Khepri cluster without its majority (test_a_cluster_without_its_khepri_"
                    "majority_is_said_within_the_timeout); a quorum queue's own: test_a_quorum_queue_without_its_"
                    "majority_is_said_within_the_timeout")
    dlq, _work = dead_letters(c1, qname, 7, quorum=True)
    c1_api = f"http://localhost:{cluster.members['c1'].http_port}/"
    with cluster.member_down("c2"), cluster.member_down("c3"):
        cluster.wait("the API's list of members online", lambda: len((cluster.queue_row(dlq) or {}).get(
            "online") or [0, 0]) == 1)
        result = run("queues", "--url", c1.url, "--management-url", c1_api, "--format", "json", env={})
        assert result.exit_code == 0, result.stderr
        [row] = [r for r in json.loads(result.stdout) if r["queue"] == dlq]
        assert row["flags"][0] == "unavailable", row
        assert "only 1 of its 3 members online" in row["reasons"]["unavailable"]
        for args in (["peek", dlq, "--spend-attempts"], ["replay", dlq, "--yes"], ["purge", dlq, "--yes"]):
            said = dlxtool(run, c1, *args)  # said before anything is read (a read would time out in the broker)
            assert said.exit_code == 7, (args, said.stdout, said.stderr)
            assert "only 1 of its 3 members online" in said.stderr and "not lost" in said.stderr, said.stderr
    assert c1.wait_depth(dlq, 7) == 7


def test_queues_watch_keeps_the_last_known_depth_of_a_queue_whose_node_went_down(cluster, qname, cli_env) -> None:
    """--watch, the incident view: the queue's node stops between two refreshes; its row turns `unavailable` with the
    depth last told and when, not 0 (what 3.x's API shows for it)."""
    import subprocess
    import sys
    from pathlib import Path

    c1 = cluster.env("c1")
    dlq, _work = dead_letters(cluster.env("c2"), qname, 7)
    cluster.wait("the API's first sample of the queue", lambda: (cluster.queue_row(dlq) or {}).get("messages") == 7)
    c1_api = f"http://localhost:{cluster.members['c1'].http_port}/"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "dlxtool", "queues", "--url", c1.url, "--management-url", c1_api,
                             "--watch", "1", "--watch-count", "15", "--format", "jsonl"],
                            env={**cli_env, "PYTHONPATH": str(root)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    rows: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None and proc.stderr is not None
        for line in proc.stdout:  # the first refresh, with the node up
            rows.append(json.loads(line))
            if rows[-1].get("queue") == dlq:
                break
        with cluster.member_down("c2"):
            # the same reader to the end (communicate() reads the pipe itself: lines this one had buffered were lost)
            rows += [json.loads(line) for line in proc.stdout]
            proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    ours = [r for r in rows if r.get("queue") == dlq]
    assert ours[0]["ready"] == 7 and "unavailable" not in ours[0]["flags"]
    down = [r for r in ours if r["flags"] and r["flags"][0] == "unavailable"]
    assert down, [r["flags"] for r in ours]
    assert down[-1]["ready"] is None and down[-1]["last_known"]["ready"] == 7, down[-1]


def test_queues_marks_a_node_down_and_the_queues_that_live_there(run, cluster, qname) -> None:
    """Issue 27: with c2 stopped, `queues` listed its queue with 0 messages and no flag, exit 0."""
    c1, c2 = cluster.env("c1"), cluster.env("c2")
    dlq, _work = dead_letters(c2, qname, 7)
    c1_api = f"http://localhost:{cluster.members['c1'].http_port}/"
    args = ("queues", "--url", c1.url, "--management-url", c1_api)
    cluster.wait("the API's first sample of the queue", lambda: (cluster.queue_row(dlq) or {}).get("messages") == 7)
    before = run(*args, "--format", "json", env={})
    [row] = [r for r in json.loads(before.stdout) if r["queue"] == dlq]
    assert row["ready"] == 7 and row["node"] == cluster.node("c2") and "unavailable" not in row["flags"]
    with cluster.member_down("c2"):
        result = run(*args, "--format", "json", env={})
        assert result.exit_code == 0, result.stderr
        [row] = [r for r in json.loads(result.stdout) if r["queue"] == dlq]
        assert row["flags"][0] == "unavailable" and row["ready"] is None and row["messages"] is None
        assert cluster.node("c2") in row["reasons"]["unavailable"] and "not lost" in row["reasons"]["unavailable"]
        assert f"node(s) {cluster.node('c2')} down (2 of 3 running)" in result.stderr
        table = run(*args, "--format", "table", env={})
        [line] = [ln for ln in table.stdout.splitlines() if dlq in ln]
        assert cluster.node("c2") in line and "unavailable" in line and " 7 " not in line


# -- issue 35: what the cluster says now, on 3.x and on 4.3 (Khepri) ------------------------------------------------


def test_an_alarm_raised_or_cleared_moments_ago_is_decided_from_the_live_check(run, cluster, qname) -> None:
    """Issue 35: /api/nodes's alarm flags are a statistics sample (5 s and more): an alarm raised 2 s before let
    `replay` start (exit 3 'no reply to channel.open within 5s', the alarm not named) and `purge --move-to` never
    looked; 4 s after it cleared `replay` still refused 'memory alarm on k3'. The health check asks the nodes now:
    each run here comes the moment the member itself says its alarm is on, or off."""
    c1 = cluster.env("c1")
    dlq, work = dead_letters(c1, qname, 10)
    parked = f"{qname}.parked"
    with c1.channel() as ch:
        ch.queue_declare(parked, durable=True)
    cluster.set_memory_alarm("c3", sampled=False)
    try:
        replayed = dlxtool(run, c1, "replay", dlq, "--yes")
        moved = dlxtool(run, c1, "purge", dlq, "--move-to", parked, "--yes")
    finally:
        cluster.clear_memory_alarm("c3", sampled=False)
    after = dlxtool(run, c1, "replay", dlq, "--yes")
    for result in (replayed, moved):
        assert result.exit_code == 7, (result.stdout, result.stderr)
        assert f"memory alarm on {cluster.node('c3')}" in result.stderr, result.stderr
        assert "nothing was read or changed" in result.stderr, result.stderr
    assert after.exit_code == 0, (after.stdout, after.stderr)
    assert json.loads(after.stdout)["moved_total"] == 10
    assert c1.wait_depth(work, 10) == 10 and c1.queue_depth(parked) == 0


def test_a_cluster_without_its_khepri_majority_is_said_within_the_timeout(run, cluster, qname) -> None:
    """Issue 35: a 4.3 cluster with 2 of its 3 nodes down answered every command after 30 s with the broker's raw
    'metadata store operation timed out', exit 3 (dlxtool's probe queue waited on Khepri). Now: said before anything
    waits, exit 7, within --timeout. 3.x keeps its metadata in Mnesia, which needs no majority: not this case."""
    from dlxtool.broker import versions

    c1 = cluster.env("c1")
    if not versions.khepri(c1.version):
        pytest.skip(f"RabbitMQ {c1.version} keeps its metadata in Mnesia (versions.Behaviour.khepri)")
    dlq, _work = dead_letters(c1, qname, 5, quorum=True)
    with cluster.member_down("c2"), cluster.member_down("c3"):
        cluster.wait("c1 to see two members down", lambda: cluster.running(via="c1") == {"c1"})
        for args in (["peek", dlq], ["replay", dlq, "--yes"], ["purge", dlq, "--yes"], ["queues"]):
            result = dlxtool(run, c1, "--timeout", "5", *args)
            assert result.exit_code == 7, (args, result.stdout, result.stderr)
            assert "the cluster has lost its majority (Khepri: 1 of 3 nodes)" in result.stderr, result.stderr
            assert "Traceback" not in result.stderr and result.elapsed < 20, (args, result.elapsed)
    assert c1.wait_depth(dlq, 5, timeout=60) == 5


def test_a_quorum_queue_without_its_majority_is_said_within_the_timeout(run, cluster, qname) -> None:
    """A quorum DLQ of two members, one of them stopped: the cluster keeps its majority (2 of 3 nodes: Khepri on 4.3
    goes on), the queue has none. Said before anything is read (a read waits inside the broker), exit 7, within
    --timeout (issue 35: `peek` exit 7 after 65 s on 4.3)."""
    c1 = cluster.env("c1")
    dlq, _work = dead_letters(c1, qname, 6, quorum=True)

    # The DLQ again, with two members: the declaring member (c1) and one more. 4.3.6 just after the test before
    # brought its stopped members back answered 541 "Cannot declare quorum queue ... cluster_not_formed" (seen in CI):
    # the members' quorum systems come up moments after the nodes. Asked again for that only; any other error fails.
    deadline = time.monotonic() + 60
    while True:
        try:
            with c1.channel() as ch:
                ch.queue_delete(dlq)
                ch.queue_declare(dlq, durable=True,
                                 arguments={"x-queue-type": "quorum", "x-quorum-initial-group-size": 2})
            break
        except pika.exceptions.ConnectionClosedByBroker as exc:
            if "cluster_not_formed" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(1)
    with c1.channel() as ch:
        ch.queue_bind(dlq, f"{qname}.dlx")
        for i in range(6):
            ch.basic_publish("", dlq, f"q{i}".encode(), pika.BasicProperties(delivery_mode=2))
    members = cluster.wait("the DLQ's two members", lambda: (cluster.queue_row(dlq) or {}).get("members"))
    other = next(cluster.member_of(m) for m in members if m != cluster.node("c1"))
    with cluster.member_down(other):
        cluster.wait("the API's members online", lambda: len((cluster.queue_row(dlq) or {}).get("online") or [0, 0])
                     == 1)
        for args in (["peek", dlq], ["replay", dlq, "--yes"], ["purge", dlq, "--yes"]):
            result = dlxtool(run, c1, "--timeout", "5", *args)
            assert result.exit_code == 7, (args, result.stdout, result.stderr)
            # before the read, where the API's `online` says so; where it still named the stopped member online
            # (seen in CI), the broker's own words when the read timed out inside it (541 {timeout, …}): not a
            # message that cannot be converted (exit 5), not a lost connection (exit 3)
            said = result.stderr
            assert f"quorum queue {dlq!r} has only 1 of its 2 members online" in said or (
                "a node the queue lives on is down" in said and "{timeout," in said), said
            assert result.elapsed < 20, (args, result.elapsed)
    assert c1.wait_depth(dlq, 6, timeout=60) == 6


def test_a_queue_on_a_killed_node_is_unavailable_not_missing(run, cluster, qname, tmp_path) -> None:
    """Issue 35: on 4.3 a classic DLQ homed on a killed node made `peek`, `replay`, `purge --backup` exit 4 'queue
    not found' (the broker's 404 '... due to timeout', or '... process is stopped by supervisor' as its node is
    away): exit 7, its node named, not lost."""
    c1 = cluster.env("c1")
    dlq, _work = dead_letters(cluster.env("c2"), qname, 8)
    cluster.wait("the API's first sample of the queue", lambda: (cluster.queue_row(dlq) or {}).get("messages") == 8)
    cluster.kill("c2")
    cluster.wait("c2 seen down", lambda: "c2" not in cluster.running(via="c1"))
    backup = str(tmp_path / "b.jsonl")
    for args in (["peek", dlq], ["replay", dlq, "--yes"], ["purge", dlq, "--backup", backup, "--yes"]):
        result = dlxtool(run, c1, "--timeout", "5", *args)
        assert result.exit_code == 7, (args, result.stdout, result.stderr)
        assert cluster.node("c2") in result.stderr and "not lost" in result.stderr, result.stderr
        assert "not found" not in result.stderr.split("(the broker said")[0], result.stderr
        assert result.elapsed < 30, (args, result.elapsed)
    cluster.relaunch()
    assert c1.wait_depth(dlq, 8, timeout=60) == 8
