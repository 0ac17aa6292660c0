"""Replay and requests whose reply cannot arrive (issue 39): an RPC request dead-lettered with the reply_to of a
caller that has gone — a direct reply-to address, or a reply queue that no longer exists — stays in the DLQ with the
reason unless --allow-dead-replies; a request whose reply queue is still there, and a message with no reply_to, go
back. Dead letters made by the broker (real rejects)."""

from __future__ import annotations

import json

import pika
import pytest

from dlxtool.cli.output import ExitStatus

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only


def _requests(broker, qname: str) -> tuple[str, str]:
    """origin -> DLQ by a real reject; four requests: a live reply queue, a gone one, a direct reply-to, none."""
    origin, dlq, replies = f"{qname}.rpc", f"{qname}.dlq", f"{qname}.replies"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(origin, durable=True, arguments={"x-dead-letter-exchange": "",
                                                          "x-dead-letter-routing-key": dlq})
        ch.queue_declare(replies, durable=True)
        for message_id, reply_to in (("live", replies), ("gone", f"{qname}.gone-replies"),
                                     ("direct", "amq.rabbitmq.reply-to.g1h2AA5yZXBseUAxAAAAAA.ZG9uZQ=="),
                                     ("none", None)):
            ch.basic_publish("", origin, message_id.encode(),
                             pika.BasicProperties(message_id=message_id, reply_to=reply_to), mandatory=True)
        for _ in range(4):
            method, _props, _body = ch.basic_get(origin, auto_ack=False)
            ch.basic_reject(method.delivery_tag, requeue=False)
    assert broker.wait_depth(dlq, 4) == 4
    return origin, dlq


def test_requests_whose_reply_cannot_arrive_stay_unless_allowed(run, broker, qname) -> None:
    origin, dlq = _requests(broker, qname)
    plan = run("replay", dlq, "--dry-run", "--url", broker.url, "--format", "json")
    assert plan.exit_code == 0, plan.stderr
    assert "gone" in plan.stdout + plan.stderr and "direct reply-to" in plan.stdout + plan.stderr

    result = run("replay", dlq, "--yes", "--url", broker.url, "--format", "json")
    assert result.exit_code == ExitStatus.PARTIAL, result.stderr
    out = json.loads(result.stdout)
    assert out["moved"] == {origin: 2}
    assert sorted(props.message_id for _m, props, _b in broker.drain(origin)) == ["live", "none"]
    left = broker.snapshot(dlq)
    assert len(left) == 2
    reasons = " | ".join(out["left"])
    assert "direct reply-to address" in reasons and "no longer exists" in reasons
    assert "--allow-dead-replies" in reasons

    again = run("replay", dlq, "--yes", "--allow-dead-replies", "--url", broker.url, "--format", "json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["moved"] == {origin: 2}
    assert sorted(props.message_id for _m, props, _b in broker.drain(origin)) == ["direct", "gone"]
    assert broker.queue_depth(dlq) == 0
