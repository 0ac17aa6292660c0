"""A full destination with overflow drop-head (or reject-publish-dlx) is not overfilled by replay, load or
purge --move-to: only what fits moves, the rest stays with the reason (issue 15 section 2). Real broker:
the overflow dead-letters are made by the broker itself."""

from __future__ import annotations

import json
import time
from collections import Counter
from urllib.parse import quote

import pytest

from dlxtool.broker import versions
from dlxtool.ops.replay import ORIGINAL_KEY
from dlxtool.record import MessageRecord
from tests.support import retry_topologies as rt

pytestmark = pytest.mark.metrics  # the room comes from the management API's figures: run again without statistics

FULL = "full (drop-head would push out its head)"


def _declare_limited(ch, queue: str, dlq: str, **limits) -> None:
    """`queue` dead-letters into `dlq` (by the default exchange): what its overflow pushes out lands there."""
    ch.queue_declare(dlq, durable=True)
    ch.queue_declare(queue, durable=True,
                     arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq, **limits})


def _reject_into(broker, work: str, dlq: str, bodies: list[bytes], **limits) -> None:
    """Real rejects, one at a time: `work` dead-letters into `dlq`."""
    with broker.channel() as ch:
        _declare_limited(ch, work, dlq, **limits)
        for body in bodies:
            ch.basic_publish("", work, body, mandatory=True)
            method = None
            while method is None:
                method, _p, _b = ch.basic_get(work, auto_ack=False)
            ch.basic_reject(method.delivery_tag, requeue=False)


def _everything(broker, *queues: str) -> Counter[bytes]:
    return Counter(body for q in queues for body, _h in broker.snapshot(q))


def _fail_again(broker, dlq: str, *queues: str) -> None:
    """Issue 15's proof: every message in `queues` (what was moved there, and what was there) fails once more — a
    real reject — and must land in `dlq` through its queue's dead-letter exchange, not be dropped."""
    expected = broker.queue_depth(dlq) + sum(broker.queue_depth(q) for q in queues)
    with broker.channel() as ch:
        for queue in queues:
            rt.reject_all(ch, queue, broker.queue_depth(queue))
    assert broker.wait_depth(dlq, expected) == expected


def _wait_management(broker, queue: str, ready: int, **settings) -> None:
    """The management API's figures (and a new policy) show up with its next sample (every 5 s). Where it keeps no
    statistics (RabbitMQ 4.3, management_metrics_collection denied) there are no figures to wait for: only the
    settings (4.3 has a queue's policy without statistics)."""
    from dlxtool.broker import versions
    from dlxtool.broker.management import queue_info

    blind = versions.stats_disabled(broker.mgmt.overview())
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        info = queue_info(broker.mgmt.get(f"queues/{quote(broker.vhost, safe='')}/{quote(queue, safe='')}"))
        if (blind or info.messages_ready == ready) and all(info.setting(k) == v for k, v in settings.items()):
            return
        time.sleep(0.3)
    raise AssertionError(f"management API never showed {queue} with {ready} ready and {settings}")


@pytest.fixture
def small(broker, qname):
    """The issue's reproduction: small.q (x-max-length 3, drop-head) dead-letters into dlq; it holds 3 healthy
    messages, and 5 earlier ones its overflow pushed out sit in dlq among 20 others (real rejects from big.q)."""
    small, dlq, big = f"{qname}.small.q", f"{qname}.dlq", f"{qname}.big.q"
    with broker.channel() as ch:
        _declare_limited(ch, small, dlq, **{"x-max-length": 3})
        for i in range(8):
            ch.basic_publish("", small, f"small-{i}".encode(), mandatory=True)
    assert broker.wait_depth(dlq, 5) == 5
    _reject_into(broker, big, dlq, [f"big-{i}".encode() for i in range(20)])
    assert broker.wait_depth(dlq, 25) == 25
    return small, dlq, big


def replay(run, broker, *args: str):
    return run("replay", *args, "--url", broker.url, "--format", "json")


# -- replay ---------------------------------------------------------------------------------------------------


def test_replay_into_a_full_drop_head_origin_displaces_nothing(run, broker, small) -> None:
    small_q, dlq, big = small
    before = _everything(broker, small_q, dlq, big)
    healthy = [b for b, _h in broker.snapshot(small_q)]
    assert healthy == [b"small-5", b"small-6", b"small-7"]

    plan = replay(run, broker, dlq, "--dry-run")
    assert plan.exit_code == 0, plan.stderr
    origins = {o["queue"]: o for o in json.loads(plan.stdout)["plan"]["origins"]}
    assert origins[small_q]["would_stay_full"] == 5 and origins[small_q]["room"].startswith("room 0 (max-length 3")
    assert origins[big]["would_stay_full"] == 0 and origins[big]["room"] == "no limit"
    assert {o["route"] for o in origins.values()} == {ORIGINAL_KEY}

    result = replay(run, broker, dlq, "--yes")
    assert result.exit_code == 5, result.stderr
    summary = json.loads(result.stdout)
    assert summary["moved"] == {big: 20}
    assert summary["left"] == {f"origin {FULL}: {small_q}": 5}
    assert f"origin {FULL}: {small_q} (5)" in result.stderr
    # small.q's healthy messages were not pushed out; every message exists, once.
    assert [b for b, _h in broker.snapshot(small_q)] == healthy
    assert sorted(b for b, _h in broker.snapshot(dlq)) == [f"small-{i}".encode() for i in range(5)]
    assert _everything(broker, small_q, dlq, big) == before
    _fail_again(broker, dlq, big)  # what was replayed fails again: back in the DLQ, none dropped
    assert _everything(broker, small_q, dlq, big) == before


def test_replay_allow_displace_does_what_it_says(run, broker, small) -> None:
    small_q, dlq, big = small
    before = _everything(broker, small_q, dlq, big)
    result = replay(run, broker, dlq, "--yes", "--allow-displace")
    assert result.exit_code == 0, result.stderr
    # The overflow pushed out small.q's 3 healthy ones and 2 of the replayed ones, back into dlq: the issue's
    # outcome, now only on request.
    assert broker.wait_depth(dlq, 5) == 5
    assert broker.queue_depth(small_q) == 3
    _fail_again(broker, dlq, small_q, big)
    assert _everything(broker, small_q, dlq, big) == before


def test_replay_mixed_dlq_moves_what_fits_and_keeps_the_rest(run, broker, qname) -> None:
    """Three origins: one without a limit, one with room for 2 (max-length 5 holding 3), one full by bytes."""
    free, roomy, by_bytes, dlq = f"{qname}.free", f"{qname}.roomy", f"{qname}.bytes", f"{qname}.dlq"
    # All three dead-letter into dlq: anything an overflow pushed out would show up there.
    _reject_into(broker, free, dlq, [f"free-{i}".encode() for i in range(4)])
    _reject_into(broker, roomy, dlq, [f"roomy-{i}".encode() for i in range(4)], **{"x-max-length": 5})
    # 4 body bytes each: 2 fit in the 9 left by the 1-byte message below
    _reject_into(broker, by_bytes, dlq, [b"bb-0", b"bb-1", b"bb-2"], **{"x-max-length-bytes": 10})
    broker.publish(roomy, [b"h-0", b"h-1", b"h-2"])
    broker.publish(by_bytes, [b"h"])  # 1 byte: room for 9, two 4-byte bodies
    assert broker.wait_depth(dlq, 11) == 11
    _wait_management(broker, by_bytes, 1)
    before = _everything(broker, free, roomy, by_bytes, dlq)

    result = replay(run, broker, dlq, "--yes")
    assert result.exit_code == 5, result.stderr
    summary = json.loads(result.stdout)
    if versions.stats_disabled(broker.mgmt.overview()):
        # No byte figures from the API (statistics off): the byte-limited origin counts as full, nothing goes there
        assert summary["moved"] == {free: 4, roomy: 2}
        from dlxtool.ops.capacity import BYTES_UNKNOWN

        assert summary["left"] == {f"origin {FULL}: {roomy}": 2, f"origin {FULL}: {by_bytes} ({BYTES_UNKNOWN})": 3}
        assert sorted(b for b, _h in broker.snapshot(dlq)) == [b"bb-0", b"bb-1", b"bb-2", b"roomy-2", b"roomy-3"]
        return
    assert summary["moved"] == {free: 4, roomy: 2, by_bytes: 2}
    assert summary["left"] == {f"origin {FULL}: {roomy}": 2, f"origin {FULL}: {by_bytes}": 1}
    assert [b for b, _h in broker.snapshot(roomy)] == [b"h-0", b"h-1", b"h-2", b"roomy-0", b"roomy-1"]
    assert [b for b, _h in broker.snapshot(by_bytes)] == [b"h", b"bb-0", b"bb-1"]
    assert sorted(b for b, _h in broker.snapshot(dlq)) == [b"bb-2", b"roomy-2", b"roomy-3"]
    _fail_again(broker, dlq, free, roomy, by_bytes)
    assert _everything(broker, free, roomy, by_bytes, dlq) == before


def test_replay_nothing_fits_exits_6(run, broker, small) -> None:
    small_q, dlq, _big = small
    broker.drain(dlq)
    for i in range(2):  # two of small.q's own dead letters, nothing else
        broker.publish(small_q, [f"more-{i}".encode()])
    assert broker.wait_depth(dlq, 2) == 2
    result = replay(run, broker, dlq, "--yes")
    assert result.exit_code == 6, result.stderr
    assert "nothing moved" in result.stderr and "--allow-displace" in result.stderr
    assert broker.queue_depth(dlq) == 2 and broker.queue_depth(small_q) == 3


# -- purge --move-to ----------------------------------------------------------------------------------------


def _source(broker, qname: str, n: int) -> str:
    src = f"{qname}.src"
    with broker.channel() as ch:
        ch.queue_declare(src, durable=True)
    broker.publish(src, [f"s-{i}".encode() for i in range(n)])
    return src


def purge(run, broker, *args: str):
    return run("purge", *args, "--url", broker.url, "--format", "json")


@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_purge_move_to_a_full_queue_moves_what_fits(run, broker, qname, kind) -> None:
    """Checked on 3.10 for both types: the limit counts ready messages only, bytes count bodies only."""
    park, park_dlq = f"{qname}.park", f"{qname}.park.dlq"
    with broker.channel() as ch:
        _declare_limited(ch, park, park_dlq, **{"x-max-length": 3, "x-queue-type": kind})
    broker.publish(park, [b"parked-before"])
    src = _source(broker, qname, 5)

    plan = purge(run, broker, src, "--move-to", park, "--dry-run")
    assert plan.exit_code == 0, plan.stderr
    figures = json.loads(plan.stdout)
    assert (figures["would_move"], figures["would_stay_full"], figures["room"]["room"]) == (2, 3, 2)
    assert "room 2 (max-length 3, drop-head" in plan.stderr

    result = purge(run, broker, src, "--move-to", park, "--yes")
    assert result.exit_code == 5, result.stderr
    summary = json.loads(result.stdout)
    assert summary["moved"] == {park: 2} and summary["routes"] == {park: ORIGINAL_KEY}
    assert summary["left"] == {f"--move-to queue {FULL}: {park}": 3}
    assert sorted(b for b, _h in broker.snapshot(park)) == [b"parked-before", b"s-0", b"s-1"]
    assert [b for b, _h in broker.snapshot(src)] == [b"s-2", b"s-3", b"s-4"]
    assert broker.queue_depth(park_dlq) == 0
    _fail_again(broker, park_dlq, park)  # the moved messages fail in park: its dead-letter exchange catches them
    assert sorted(b for b, _h in broker.snapshot(park_dlq)) == [b"parked-before", b"s-0", b"s-1"]


def test_purge_move_to_a_queue_full_by_policy_is_refused(run, broker, qname) -> None:
    """The limit comes from a policy (an operator policy: the stricter wins), not from the queue's arguments."""
    park, park_dlq = f"{qname}.park", f"{qname}.park.dlq"
    vhost = quote(broker.vhost, safe="")
    with broker.channel() as ch:
        _declare_limited(ch, park, park_dlq)
    broker.mgmt.request("PUT", f"policies/{vhost}/{qname}-p", {"pattern": f"^{park}$", "apply-to": "queues",
                                                                  "definition": {"max-length": 10}})
    broker.mgmt.request("PUT", f"operator-policies/{vhost}/{qname}-op", {
        "pattern": f"^{park}$", "apply-to": "queues", "definition": {"max-length": 2}})
    try:
        _wait_management(broker, park, 0, **{"max-length": 2})
        broker.publish(park, [b"p-0", b"p-1"])
        src = _source(broker, qname, 3)
        result = purge(run, broker, src, "--move-to", park, "--yes")
        assert result.exit_code == 6, result.stderr
        assert f"--move-to queue {FULL}: {park}" in result.stderr and "--allow-displace" in result.stderr
        assert broker.queue_depth(src) == 3 and broker.queue_depth(park_dlq) == 0
        assert [b for b, _h in broker.snapshot(park)] == [b"p-0", b"p-1"]
    finally:
        broker.mgmt.request("DELETE", f"operator-policies/{vhost}/{qname}-op")
        broker.mgmt.request("DELETE", f"policies/{vhost}/{qname}-p")


def test_purge_move_to_reject_publish_dlx_would_duplicate_so_it_is_guarded(run, broker, qname) -> None:
    """Seen on the broker: a full reject-publish-dlx queue nacks the publish AND dead-letters a copy. Without
    the guard the message would stay in the source (nacked) and exist a second time in the park's DLQ."""
    park, park_dlq = f"{qname}.park", f"{qname}.park.dlq"
    with broker.channel() as ch:
        _declare_limited(ch, park, park_dlq, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    broker.publish(park, [b"parked-before"])
    src = _source(broker, qname, 1)
    guarded = purge(run, broker, src, "--move-to", park, "--yes")
    assert guarded.exit_code == 6, guarded.stderr
    assert "reject-publish-dlx would dead-letter a copy" in guarded.stderr
    assert broker.queue_depth(park_dlq) == 0 and broker.queue_depth(src) == 1

    displaced = purge(run, broker, src, "--move-to", park, "--yes", "--allow-displace")
    assert displaced.exit_code == 5, displaced.stderr  # nacked: stays in the source …
    assert broker.queue_depth(src) == 1
    assert broker.wait_depth(park_dlq, 1) == 1         # … and a copy was dead-lettered


# -- load -----------------------------------------------------------------------------------------------------


def load(run, broker, *args: str):
    return run("load", *args, "--yes", "--url", broker.url, "--format", "json")


def test_load_into_a_full_queue_loads_what_fits(run, broker, qname, tmp_path) -> None:
    small, small_dlq, other = f"{qname}.small", f"{qname}.small.dlq", f"{qname}.other"
    with broker.channel() as ch:
        _declare_limited(ch, small, small_dlq, **{"x-max-length": 3})
        _declare_limited(ch, other, small_dlq)  # no limit; its failures land in small.dlq too
    broker.publish(small, [b"healthy-0", b"healthy-1"])
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(MessageRecord(queue=small if i % 2 else other, body=f"r{i}".encode()).to_jsonl()
                              for i in range(8)))
    plan = load(run, broker, str(path), "--dry-run")
    assert plan.exit_code == 0, plan.stderr
    rooms = json.loads(plan.stdout)["rooms"]
    assert (rooms[small]["room"], rooms[small]["would_load"], rooms[other]["would_load"]) == (1, 1, 4)

    failed = tmp_path / "failed.jsonl"
    result = load(run, broker, str(path), "--failed", str(failed))
    assert result.exit_code == 5, result.stderr
    summary = json.loads(result.stdout)
    assert summary["published"] == {other: 4, small: 1}
    assert summary["routes"] == {other: ORIGINAL_KEY, small: ORIGINAL_KEY}
    assert summary["failed"] == {f"queue {FULL}: {small}": 3} and summary["stayed_full"] == {small: 3}
    assert [b for b, _h in broker.snapshot(small)] == [b"healthy-0", b"healthy-1", b"r1"]
    assert broker.queue_depth(small_dlq) == 0
    assert [MessageRecord.from_json(json.loads(line)).body for line in failed.read_bytes().splitlines()] == \
        [b"r3", b"r5", b"r7"]
    _fail_again(broker, small_dlq, small, other)  # every loaded record fails once: none dropped
    assert sorted(b for b, _h in broker.snapshot(small_dlq)) == \
        [b"healthy-0", b"healthy-1", b"r0", b"r1", b"r2", b"r4", b"r6"]


def test_load_into_queues_without_room_publishes_nothing(run, broker, qname, tmp_path) -> None:
    small, small_dlq = f"{qname}.small", f"{qname}.small.dlq"
    with broker.channel() as ch:
        _declare_limited(ch, small, small_dlq, **{"x-max-length-bytes": 4})
    broker.publish(small, [b"1234"])
    _wait_management(broker, small, 1)
    path = tmp_path / "in.jsonl"
    path.write_bytes(MessageRecord(queue=small, body=b"x").to_jsonl())
    result = load(run, broker, str(path))
    assert result.exit_code == 6, result.stderr
    assert f"queue {FULL}: {small}" in result.stderr
    assert [b for b, _h in broker.snapshot(small)] == [b"1234"] and broker.queue_depth(small_dlq) == 0


def test_reject_publish_queues_keep_working_as_before(run, broker, qname, tmp_path) -> None:
    """reject-publish is safe on its own (nacked → not loaded): no guard, the broker's answer counts."""
    small = f"{qname}.small"
    with broker.channel() as ch:
        ch.queue_declare(small, arguments={"x-max-length": 1, "x-overflow": "reject-publish"}, durable=True)
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(MessageRecord(queue=small, body=f"r{i}".encode()).to_jsonl() for i in range(3)))
    result = load(run, broker, str(path))
    assert result.exit_code == 5, result.stderr
    summary = json.loads(result.stdout)
    assert summary["published"] == {small: 1} and summary["stayed_full"] == {}
    assert all("nacked" in why for why in summary["failed"])


# -- limits that cannot be read ---------------------------------------------------------------------------------


def test_replay_without_a_management_api_moves_nothing_into_origins_whose_limits_it_cannot_read(
        run, broker, qname) -> None:
    """Safe by default: with no management API the origin's x-max-length/overflow (argument or policy) cannot be
    read, and a full drop-head origin would push out its head; so nothing moves (exit 6, the reason named) until
    --allow-displace accepts the risk."""
    work, dlq = f"{qname}.work", f"{qname}.dlq"
    bodies = [f"m-{i}".encode() for i in range(4)]
    _reject_into(broker, work, dlq, bodies)
    assert broker.wait_depth(dlq, 4) == 4
    blind = ("--management-url", "http://127.0.0.1:9/")

    refused = replay(run, broker, dlq, "--yes", *blind)
    assert refused.exit_code == 6, refused.output
    assert "unknown" in refused.stderr and "--allow-displace" in refused.stderr, refused.stderr
    # refused before reading: the DLQ itself may be a full drop-head queue, and what stays is republished to it
    assert "republishing them to its tail" in refused.stderr, refused.stderr
    assert broker.wait_depth(dlq, 4) == 4 and broker.wait_depth(work, 0) == 0

    # Nor can the origin's dead-letter exchange be checked: --allow-displace alone moves nothing (exit 6) …
    unchecked = replay(run, broker, dlq, "--yes", "--allow-displace", *blind)
    assert unchecked.exit_code == 6, unchecked.output
    assert "cannot be checked (management API not reachable)" in unchecked.stderr and "--allow-dlx-drop" in \
        unchecked.stderr, unchecked.stderr
    assert broker.wait_depth(dlq, 4) == 4 and broker.wait_depth(work, 0) == 0
    # … both risks accepted, it replays
    accepted = replay(run, broker, dlq, "--yes", "--allow-displace", "--allow-dlx-drop", *blind)
    assert accepted.exit_code == 0, accepted.output
    assert broker.wait_depth(work, 4) == 4 and broker.wait_depth(dlq, 0) == 0


def test_a_limit_set_by_policy_moments_ago_is_not_missed(run, broker, qname) -> None:
    """The management API shows a new policy on a queue only with its next statistics sample (4.5-4.9 s measured
    on 3.10 and 4.0): a replay started at once read the full origin as unlimited and pushed its healthy head out
    into the DLQ. The queue's sample is checked against the vhost's policy list and waited for: the origin is
    full, nothing moves (exit 6), nothing is displaced."""
    work, dlq = f"{qname}.work", f"{qname}.dlq"
    _reject_into(broker, work, dlq, [f"bad-{i}".encode() for i in range(3)])
    assert broker.wait_depth(dlq, 3) == 3
    with broker.channel() as ch:
        for i in range(5):
            ch.basic_publish("", work, f"good-{i}".encode(), mandatory=True)
    _wait_management(broker, work, 5)  # a settled sample, without the policy
    vhost = quote(broker.vhost, safe="")
    broker.mgmt.request("PUT", f"policies/{vhost}/{qname}-limit",
                        {"pattern": f"^{qname}\\.work$", "apply-to": "queues",
                         "definition": {"max-length": 5, "overflow": "drop-head"}})
    try:
        result = replay(run, broker, dlq, "--yes")
        assert result.exit_code == 6, result.output
        assert f"origin {FULL}: {work}" in result.stderr
        assert [b for b, _h in broker.snapshot(work)] == [f"good-{i}".encode() for i in range(5)]
        assert sorted(b for b, _h in broker.snapshot(dlq)) == [f"bad-{i}".encode() for i in range(3)]
    finally:
        broker.mgmt.request("DELETE", f"policies/{vhost}/{qname}-limit")
