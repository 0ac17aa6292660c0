"""The engine's reading of a nack (dlxtool.ops.capacity.Rooms.nack_cause through RunHooks), against a real broker
that really nacks: a queue at x-max-length 0 with x-overflow reject-publish refuses every publish. What the engine
was told of its limits decides the reason: told the truth, the generic "nacked" (exit 5); told it has none -- as a
quorum queue between leaders has none that explains its nacks -- "cannot take messages now" (exit 7)."""

from __future__ import annotations

import pika

from dlxtool.ops.actions import Action, Deciding, Decision
from dlxtool.ops.capacity import Capacity, Rooms
from dlxtool.ops.engine import RunHooks, Transfer, TransferOptions
from dlxtool.ops.outcomes import transfer_outcome
from dlxtool.ops.stay import Stay
from dlxtool.outcome import Status


def run_into(broker, source: str, target: str, limits: Capacity):
    rooms = Rooms(lambda _q: limits, role="origin")
    hooks = RunHooks(admit=rooms.admit, nack_copies=rooms.nack_copies, nack_cause=rooms.nack_cause)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        move = Deciding(lambda _r: Decision(Action.MOVE, target, "", target))
        return Transfer(conn, source, move, options=TransferOptions(handle_sigint=False), hooks=hooks).run()
    finally:
        conn.close()


def test_a_nack_the_limits_read_do_not_explain_is_not_now_and_one_they_do_is_nacked(broker, qname) -> None:
    source, target = f"{qname}.src", f"{qname}.dst"
    with broker.channel() as ch:
        ch.queue_declare(source, durable=True)
        ch.queue_declare(target, durable=True, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    broker.publish(source, [f"m{i}".encode() for i in range(5)])

    told_none = run_into(broker, source, target, Capacity(target))
    assert told_none.moved_total == 0 and told_none.left_by_kind() == {Stay.DESTINATION_DOWN.value: 5}
    assert transfer_outcome(told_none, "replay").status is Status.UNAVAILABLE
    assert all(str(why).startswith(f"nacked by {target}, which no limit of its own explains") for why in told_none.left)
    assert told_none.possible_duplicates == 0

    told_true = run_into(broker, source, target, Capacity(target, max_length=0, overflow="reject-publish"))
    assert told_true.left_by_kind() == {Stay.NACKED.value: 5}
    assert transfer_outcome(told_true, "replay").status is Status.PARTIAL
    # nothing lost either time: every message back in the source, none in the target
    assert broker.queue_depth(source) == 5 and broker.queue_depth(target) == 0
