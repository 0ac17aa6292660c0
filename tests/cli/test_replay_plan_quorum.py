"""The replay plan (`--dry-run`, or the plan shown before the question) on quorum dead-letter queues.

It reads messages and gives them back: on a quorum queue that is a delivery attempt per message, so
a delivery limit refuses it; without one the messages must come back where they were, in order.
"""

from __future__ import annotations

import json

from tests.support import retry_topologies as rt
from tests.support.fill import take_all


def quorum_dlq(broker, prefix: str, n: int, **args) -> tuple[rt.Topology, list[bytes]]:
    """n dead letters, rejected by the broker from a classic origin into a quorum DLQ."""
    bodies = [f"q-{i:05d}".encode() for i in range(n)]
    with broker.channel() as ch:
        top = rt.Topology(f"{prefix}.dlq", f"{prefix}.dlx")
        ch.exchange_declare(top.dlx, "fanout")
        ch.queue_declare(top.dlq, durable=True, arguments={"x-queue-type": "quorum", **args})
        ch.queue_bind(top.dlq, top.dlx)
        rt.reject_to_dlx(ch, top, f"{prefix}.origin", bodies)
    assert broker.wait_depth(top.dlq, n) == n
    return top, bodies


def test_plan_on_a_quorum_dlq_without_limit_keeps_order_and_place(run, broker, qname) -> None:
    top, bodies = quorum_dlq(broker, qname, 150, **broker.quorum_without_limit())
    result = run("replay", top.dlq, "--dry-run", "--url", broker.url, "--format", "json")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)["plan"]
    assert {o["queue"]: o["messages"] for o in plan["origins"]} == {f"{qname}.origin": 150}
    assert "delivery attempt" in result.stderr
    left = take_all(broker, top.dlq)
    assert [b for _p, b in left] == bodies


def test_plan_on_a_quorum_dlq_with_a_limit_is_refused(run, broker, qname) -> None:
    top, _bodies = quorum_dlq(broker, qname, 5, **{"x-delivery-limit": 3})
    result = run("replay", top.dlq, "--dry-run", "--url", broker.url)
    assert result.exit_code == 6
    assert "delivery-limit 3" in result.stderr
    assert all(not (p.headers or {}).get("x-delivery-count") for p, _b in take_all(broker, top.dlq))
