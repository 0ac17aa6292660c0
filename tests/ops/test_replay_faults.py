"""Faults during replays of a few thousand broker-made dead letters: nothing lost, duplicates counted.

After every run: each original message exists at least once across the DLQ and the origins, and the
number of extra copies is at most what the replay reported as possible duplicates.
"""

from __future__ import annotations

import random
import time
from collections import Counter

import pika
import pytest

from dlxtool.ops.actions import Deciding
from dlxtool.ops.engine import TransferOptions
from dlxtool.ops.replay import replay
from dlxtool.ops.replay_decision import ReplaySettings
from tests.support import retry_topologies as rt
from tests.support.proxy import CuttingProxy

# Nothing a broker decides differently is tested here (dlxtool's own recovery from cut connections): the 3.x
# pass only.
pytestmark = pytest.mark.once

N = 3000


def make_dead_letters(broker, prefix: str, origins: int = 2) -> tuple[str, list[str], list[bytes]]:
    names = [f"{prefix}.o{i}" for i in range(origins)]
    all_bodies: list[bytes] = []
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, prefix)
        for origin in names:
            bodies = [f"{origin}-{j:05d}-".encode() + b"x" * 150 for j in range(N // origins)]
            rt.reject_to_dlx(ch, top, origin, bodies)
            all_bodies += bodies
    assert broker.wait_depth(top.dlq, len(all_bodies), timeout=30) == len(all_bodies)
    return top.dlq, names, all_bodies


def settled_copies(broker, queues: list[str], expected_at_least: int) -> Counter[bytes]:
    """Every message in the queues, once the broker has requeued what dead connections held."""
    deadline = time.monotonic() + 20
    previous = -1
    while True:
        total = sum(broker.queue_depth(q) for q in queues)
        if (total >= expected_at_least and total == previous) or time.monotonic() > deadline:
            break
        previous = total
        time.sleep(0.3)
    found: Counter[bytes] = Counter()
    for queue in queues:
        for _m, _p, body in broker.drain(queue):
            found[body] += 1
    return found


def check_nothing_lost(found: Counter[bytes], originals: list[bytes], reported_duplicates: int) -> int:
    missing = [b for b in originals if not found[b]]
    assert not missing, f"{len(missing)} messages lost, e.g. {missing[:3]}"
    extra = sum(found.values()) - len(originals)
    assert extra <= reported_duplicates, f"{extra} duplicates found, {reported_duplicates} reported"
    return extra


@pytest.mark.parametrize("seed", range(5))
def test_connection_cut_at_a_random_moment(broker, qname, seed) -> None:
    dlq, origins, originals = make_dead_letters(broker, qname)
    rng = random.Random(seed)
    # client->broker bytes of a full run are ~1 KB per message (publish + ack); cut somewhere in it.
    cut_at = rng.randint(5_000, N * 900)
    with CuttingProxy(broker.host, broker.amqp_port, cut_after_bytes=cut_at) as proxy:
        params = pika.URLParameters(broker.url.replace(f":{broker.amqp_port}/", f":{proxy.port}/"))
        conn = pika.BlockingConnection(params)
        result = replay(conn, ReplaySettings(dlq), TransferOptions(prefetch=500, window=300), timeout=10,
                        routes=broker.routes())
        cuts = proxy.cuts
    found = settled_copies(broker, [dlq, *origins], len(originals))
    extra = check_nothing_lost(found, originals, result.possible_duplicates)
    print(f"seed={seed} cut_at={cut_at}B cuts={cuts} moved={result.moved_total} error={result.error!r} "
          f"reported_dups={result.possible_duplicates} found_dups={extra}")
    assert cuts == 1 and result.error  # the cut really happened during the replay


def test_stop_request_mid_way_is_clean(broker, qname) -> None:
    """Ctrl-C (stop()) part-way: in-flight work settles, the rest is requeued, nothing lost.

    Usually no duplicates at all; on a loaded machine a publish may miss the settle timeout, and then
    its message stays in the DLQ too and is reported as a possible duplicate, never silently."""
    from dlxtool.ops.engine import Transfer
    from dlxtool.ops.replay_decision import ReplayDecider

    dlq, origins, originals = make_dead_letters(broker, qname)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    settings = ReplaySettings(dlq)
    decider = ReplayDecider(settings)
    calls = 0

    def decide(record):
        nonlocal calls
        calls += 1
        if calls == N // 3:
            transfer.stop()
        return decider(record)

    transfer = Transfer(conn, dlq, Deciding(decide), options=TransferOptions(prefetch=500, window=300))
    result = transfer.run()
    conn.close()
    assert result.interrupted
    assert 0 < result.moved_total < N
    found = settled_copies(broker, [dlq, *origins], len(originals))
    check_nothing_lost(found, originals, result.possible_duplicates)


def test_origin_deleted_mid_way(broker, qname) -> None:
    from dlxtool.ops.engine import Transfer
    from dlxtool.ops.replay_decision import ReplayDecider

    dlq, origins, originals = make_dead_letters(broker, qname, origins=1)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    other = pika.BlockingConnection(pika.URLParameters(broker.url))
    decider = ReplayDecider(ReplaySettings(dlq))
    calls = 0

    def decide(record):
        nonlocal calls
        calls += 1
        if calls == N // 2:
            other.channel().queue_delete(origins[0])  # an operator deletes the origin
        return decider(record)

    result = Transfer(conn, dlq, Deciding(decide), options=TransferOptions(prefetch=500, window=300)).run()
    conn.close()
    other.close()
    returned = sum(n for why, n in result.left.items() if why.startswith("returned"))
    assert returned > 0 and result.moved_total + returned == N
    in_dlq = Counter(body for _m, _p, body in broker.drain(dlq))
    # What reached the origin before the deletion went with it (the operator's doing);
    # everything else is still in the DLQ.
    gone = [b for b in originals if not in_dlq[b]]
    assert len(gone) <= result.moved_total
    assert sum(in_dlq.values()) >= returned


def test_origin_full_with_reject_publish(broker, qname) -> None:
    dlq, origins, originals = make_dead_letters(broker, qname, origins=1)
    with broker.channel() as ch:
        ch.queue_delete(origins[0])
        # declared again with its dead-letter exchange: without one, its dead letters would stay (Routes.died_there)
        ch.queue_declare(origins[0], arguments={"x-max-length": 1000, "x-overflow": "reject-publish",
                                                "x-dead-letter-exchange": f"{qname}.dlx"}, durable=True)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    result = replay(conn, ReplaySettings(dlq), TransferOptions(prefetch=500, window=300), routes=broker.routes())
    conn.close()
    nacked = sum(n for why, n in result.left.items() if why.startswith("nacked"))
    assert result.moved_total == 1000 and nacked == N - 1000
    found = settled_copies(broker, [dlq, *origins], len(originals))
    assert check_nothing_lost(found, originals, result.possible_duplicates) == 0


def test_a_producer_filling_a_reject_publish_dlx_origin_mid_replay_leaves_no_silent_duplicate(broker, qname) -> None:
    """The origin (x-max-length, x-overflow reject-publish-dlx, dead-lettering into the DLQ) has room when replay
    reads it; a producer fills it before the publishes arrive. The broker nacks them AND dead-letters each one:
    a copy in the DLQ beside the original, which stays. Those nacks are counted as possible duplicates (before,
    433 such copies were found with possible_duplicates 0)."""
    from dlxtool.broker.management import ManagementClient
    from dlxtool.ops import capacity

    dlq, origins, originals = make_dead_letters(broker, qname, origins=1)
    origin, room = origins[0], 500
    with broker.channel() as ch:
        ch.queue_delete(origin)
        ch.queue_declare(origin, arguments={"x-max-length": room, "x-overflow": "reject-publish-dlx",
                                            "x-dead-letter-exchange": f"{qname}.dlx"}, durable=True)
    mgmt = ManagementClient(broker.management_url, "guest", "guest")
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    rooms = capacity.rooms(conn, mgmt, broker.vhost, 10, role="origin")
    read = rooms.lookup

    def read_then_fill(queue: str):  # the producer comes in right after the room was read
        cap = read(queue)
        with broker.channel() as ch:
            for i in range(room):
                ch.basic_publish("", queue, f"producer-{i}".encode())
        return cap

    rooms.lookup = read_then_fill
    result = replay(conn, ReplaySettings(dlq), TransferOptions(prefetch=500, window=300), routes=broker.routes(),
                    rooms=rooms)
    conn.close()
    nacked = sum(n for why, n in result.left.items() if why.startswith("nacked"))
    assert nacked > 0 and all("reject-publish-dlx dead-letters a refused message" in why
                              for why in result.left if why.startswith("nacked"))
    assert result.possible_duplicates >= nacked
    found = settled_copies(broker, [dlq, origin], len(originals))
    found = Counter({body: n for body, n in found.items() if not body.startswith(b"producer-")})
    extra = check_nothing_lost(found, originals, result.possible_duplicates)
    assert extra > 0  # the broker did dead-letter the nacked copies: the case is real
