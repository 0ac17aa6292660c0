"""The replay plan (`--dry-run`, or the plan shown before the question) on quorum dead-letter queues.

It reads the first messages and gives them back as `peek` does (dlxtool.ops.peek's reader), under the one rule the
version table decides (dlxtool.broker.versions): where a give-back uses a delivery attempt (RabbitMQ before 4.3) a
queue with a limit needs --spend-attempts and one without (where returns go to the back) --allow-reorder, for the
plan as for `peek`, `history` and `dump`; on 4.3 none of them needs a flag.
"""

from __future__ import annotations

import json

import pytest

from dlxtool.broker import versions
from tests.support import retry_topologies as rt
from tests.support.fill import take_all

pytestmark = pytest.mark.broker


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


def _give_backs_count(broker) -> bool:
    return versions.quorum_give_back_counts(broker.version, "nack")


def _delivery_counts(left) -> list[int]:
    return [int((p.headers or {}).get("x-delivery-count", 0)) for p, _b in left]


@pytest.mark.parametrize("limited", [False, True], ids=["no-limit", "limit-3"])
def test_peek_history_dump_and_the_plan_give_one_answer(run, broker, qname, limited) -> None:
    """The same queue, the same answer from every command that reads without taking: refused (exit 6, the same flag
    named) before 4.3, where the give-back uses a delivery attempt; read without a flag on 4.3, nothing spent."""
    args = {"x-delivery-limit": 3} if limited else broker.quorum_without_limit()
    top, bodies = quorum_dlq(broker, qname, 40, **args)
    answers = {
        "peek": run("peek", top.dlq, "--url", broker.url, "-f", "json"),
        "history": run("history", top.dlq, "--url", broker.url, "-f", "json"),
        "dump": run("dump", top.dlq, "--url", broker.url),
        "replay --dry-run": run("replay", top.dlq, "--dry-run", "--url", broker.url, "-f", "json"),
        "purge --dry-run": run("purge", top.dlq, "--reason", "rejected", "--dry-run", "--url", broker.url, "-f",
                               "json"),
    }
    if _give_backs_count(broker):
        flag = "--spend-attempts" if limited else "--allow-reorder"
        for command, result in answers.items():
            assert result.exit_code == 6, (command, result.output)
            assert flag in result.stderr, (command, result.stderr)
    else:
        for command, result in answers.items():
            assert result.exit_code == 0, (command, result.output)
        assert "use no delivery attempt" in answers["replay --dry-run"].stderr
        plan = json.loads(answers["replay --dry-run"].stdout)["plan"]
        assert {o["queue"]: o["messages"] for o in plan["origins"]} == {f"{qname}.origin": 40}
    left = take_all(broker, top.dlq)
    assert [b for _p, b in left] == bodies
    assert _delivery_counts(left) == [0] * 40  # refused, or given back without a counted attempt (4.3)


def test_a_plan_with_the_flag_reads_as_a_peek_with_it(run, broker, qname) -> None:
    """Before 4.3: --allow-reorder on a queue without a limit; a plan that reads the whole queue gives it back in
    its order. On 4.3 the flag is not needed and changes nothing."""
    top, bodies = quorum_dlq(broker, qname, 150, **broker.quorum_without_limit())
    result = run("replay", top.dlq, "--dry-run", "--allow-reorder", "--url", broker.url, "-f", "json")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)["plan"]
    assert {o["queue"]: o["messages"] for o in plan["origins"]} == {f"{qname}.origin": 150}
    left = take_all(broker, top.dlq)
    assert [b for _p, b in left] == bodies
    if _give_backs_count(broker):
        assert "read the whole queue (150 messages) and gave them back in order" in result.stderr
        assert _delivery_counts(left) == [1] * 150
    else:
        assert _delivery_counts(left) == [0] * 150


def test_a_plan_with_a_limit(run, broker, qname) -> None:
    """A limit of 3: before 4.3 the plan is refused without --spend-attempts (its hint: --yes replays without a plan),
    and with it uses one attempt of each message read; on 4.3 it reads without a flag and uses none."""
    top, bodies = quorum_dlq(broker, qname, 5, **{"x-delivery-limit": 3})
    refused = run("replay", top.dlq, "--dry-run", "--url", broker.url)
    spent = run("replay", top.dlq, "--dry-run", "--spend-attempts", "--url", broker.url, "-f", "json")
    assert spent.exit_code == 0, spent.stderr
    left = take_all(broker, top.dlq)
    assert [b for _p, b in left] == bodies
    if _give_backs_count(broker):
        assert refused.exit_code == 6
        assert "delivery limit 3" in refused.stderr and "--yes replays without a plan" in refused.stderr
        assert "used one delivery attempt of each of the 5 messages" in spent.stderr
        assert _delivery_counts(left) == [1] * 5
    else:
        assert refused.exit_code == 0, refused.stderr
        assert _delivery_counts(left) == [0] * 5
