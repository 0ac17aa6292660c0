"""Replay keeps what the application routes on (issue 20, issue 15 §1), against the real broker.

Every death here is made by the broker: real rejects, real TTL expiry in wait queues, a real consumer
loop that retries and parks as applications do (tests/support/retry_app.py)."""

from __future__ import annotations

import json

import pika
import pytest

from tests.support import retry_topologies as rt
from tests.support.retry_app import Ladder, wait_until


def replay(run, broker, *args: str):
    return run("replay", *args, "--url", broker.url, "--format", "json")


def depth(broker, queue: str) -> int:
    return broker.queue_depth(queue)


def no_temporary_exchanges(broker, qname: str) -> bool:
    """None of this test's (the vhost is shared by the session: killed runs elsewhere may leave theirs)."""
    return not [e for e in broker.mgmt.get(f"exchanges/{broker.vhost}")
                if e["name"].startswith("dlxtool.") and qname in e["name"]]


@pytest.mark.parametrize("form", ["a", "b"])
def test_retry_ladder_premature_replay_parks_again_and_fixed_replay_processes_all(run, broker, qname, form) -> None:
    """(a) the app parks after its last retry: the deaths are only TTL expiries from the wait queues, and the
    origin is the work queue the last wait queue sends messages back to. (b) the app nacks and the work
    queue's DLX parks. Either way: a premature replay (app still broken) parks every message again, none
    lost; after the fix, a replay gets every message processed, with its original routing key."""
    ladder = Ladder(qname, form, broker.url)
    bodies = {key: f"{form}-{key}".encode() for key in ("order.created", "order.updated")}
    with broker.channel() as ch:
        ladder.declare(ch)
    ladder.broken.set()
    ladder.start()
    try:
        with broker.channel() as ch:
            ladder.publish(ch, bodies)
        wait_until(lambda: depth(broker, ladder.parking) == 2, "the first parking")
        [(_b, headers)] = broker.snapshot(ladder.parking)[:1]
        reasons = {d["reason"] for d in headers["x-death"]}
        assert reasons == ({"expired"} if form == "a" else {"expired", "rejected"})

        history = run("history", ladder.parking, "--url", broker.url, "--format", "json")
        assert history.exit_code == 0, history.stderr
        assert {(i["origin"], i["origin_why"].startswith("after waiting in" if form == "a" else "most recent"))
                for i in json.loads(history.stdout)} == {(ladder.work, True)}  # never the wait queue
        peek = run("peek", ladder.parking, "--url", broker.url, "--format", "table")
        assert peek.exit_code == 0, peek.stderr
        assert peek.stdout.count(f"{ladder.work} (x-death)") == 2, peek.stdout  # as history says
        assert not [t for t in (1, 2, 3) if f"{ladder.wait_queue(t)} (x-death)" in peek.stdout], peek.stdout

        plan = replay(run, broker, ladder.parking, "--dry-run")
        assert plan.exit_code == 0, plan.stderr
        assert [(o["queue"], o["messages"]) for o in json.loads(plan.stdout)["plan"]["origins"]] == \
            [(ladder.work, 2)]

        premature = replay(run, broker, ladder.parking, "--yes")
        assert premature.exit_code == 0, premature.stderr
        assert json.loads(premature.stdout)["moved"] == {ladder.work: 2}
        # the app retries 3 times (its counter was reset) and parks again: nothing dropped on the way
        wait_until(lambda: depth(broker, ladder.parking) == 2, "the second parking")
        assert sorted(b for b, _h in broker.snapshot(ladder.parking)) == sorted(bodies.values())
        assert ladder.processed == []

        ladder.broken.clear()
        fixed = replay(run, broker, ladder.parking, "--yes")
        assert fixed.exit_code == 0, fixed.stderr
        wait_until(lambda: len(ladder.processed) == 2, "processing after the fix")
        assert sorted(ladder.processed) == sorted(bodies.items())  # each with its original routing key
        assert depth(broker, ladder.parking) == 0
        for tier in (1, 2, 3):
            assert depth(broker, ladder.wait_queue(tier)) == 0
        assert no_temporary_exchanges(broker, qname)
    finally:
        ladder.stop()


def test_a_wait_queue_whose_way_out_leads_nowhere_is_no_origin(run, broker, qname) -> None:
    """Only TTL expiries, and the wait queue's dead-letter route reaches no queue any more: the message stays
    with the reason (exit 5), and nothing is sent to the wait queue."""
    ladder = Ladder(qname, "a", broker.url)
    with broker.channel() as ch:
        ladder.declare(ch)
    ladder.broken.set()
    ladder.start()
    try:
        with broker.channel() as ch:
            ladder.publish(ch, {"order.created": b"lost?"})
        wait_until(lambda: depth(broker, ladder.parking) == 1, "the parking")
    finally:
        ladder.stop()
    with broker.channel() as ch:
        ch.queue_unbind(ladder.work, ladder.exchange, "order.created")
    result = replay(run, broker, ladder.parking, "--yes")
    assert result.exit_code == 5, result.stderr
    [(reason, n)] = json.loads(result.stdout)["left"].items()
    assert n == 1 and reason.startswith("no origin: only TTL expiries") and "routes to no queue" in reason
    assert ladder.wait_queue(3) in reason
    assert [b for b, _h in broker.snapshot(ladder.parking)] == [b"lost?"]
    assert all(depth(broker, ladder.wait_queue(t)) == 0 for t in (1, 2, 3))


def topic_to_direct_dlx(ch, qname: str) -> tuple[str, str, str]:
    """Issue 15 §1: topic exchange `ex` -> o.q by `order.*`; o.q dead-letters to a direct exchange whose only
    binding, `order.created`, leads to the DLQ."""
    ex, origin, dlq, dlx = f"{qname}.ex", f"{qname}.o", f"{qname}.dlq", f"{qname}.dlx.direct"
    ch.exchange_declare(ex, "topic")
    ch.exchange_declare(dlx, "direct")
    ch.queue_declare(dlq, durable=True)
    ch.queue_bind(dlq, dlx, "order.created")
    ch.queue_declare(origin, arguments={"x-dead-letter-exchange": dlx}, durable=True)
    ch.queue_bind(origin, ex, "order.*")
    return ex, origin, dlq


def test_topic_to_direct_dlx_a_replayed_message_that_fails_again_is_still_in_a_queue(run, broker, qname) -> None:
    """After a replay and a second reject, the message is in the DLQ again (the default-exchange route put
    it in o.q with routing key o.q, which the direct DLX routes nowhere: gone). A consumer that dispatches
    on the routing key gets `order.created` after one and after two replays; the provenance keeps the first
    origin's exchange."""
    with broker.channel() as ch:
        ex, origin, dlq = topic_to_direct_dlx(ch, qname)
        ch.basic_publish(ex, "order.created", b"order-1", mandatory=True)
        rt.reject_all(ch, origin, 1)
    broker.wait_depth(dlq, 1)
    for round_ in (1, 2):
        result = replay(run, broker, dlq, "--yes")
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["moved"] == {origin: 1}
        with broker.channel() as ch:
            method, props, body = ch.basic_get(origin)
            assert method is not None and body == b"order-1"
            assert method.routing_key == "order.created", round_  # what a key-dispatching consumer reads
            prov = props.headers["dlxtool-replay"]
            assert (prov["exchange"], prov["routing-key"], prov["count"]) == (ex, "order.created", round_)
            ch.basic_nack(method.delivery_tag, requeue=False)  # it fails again
        broker.wait_depth(dlq, 1)
        assert depth(broker, origin) == 0
    assert no_temporary_exchanges(broker, qname)


def test_per_message_ttl_is_restored_and_recorded(run, broker, qname) -> None:
    origin = f"{qname}.o"
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        ch.queue_declare(origin, arguments={"x-dead-letter-exchange": top.dlx}, durable=True)
        for body in (b"t1", b"t2"):
            ch.basic_publish("", origin, body, pika.BasicProperties(expiration="600000"), mandatory=True)
        rt.reject_all(ch, origin, 2)
    broker.wait_depth(top.dlq, 2)
    [(_b, headers)] = broker.snapshot(top.dlq)[:1]
    assert headers["x-death"][0]["original-expiration"] == "600000"  # the broker moved it there

    result = replay(run, broker, top.dlq, "--yes", "--limit", "1")
    assert result.exit_code == 0, result.stderr
    [(_m, props, body)] = broker.drain(origin)
    assert (body, props.expiration) == (b"t1", "600000")
    assert props.headers["dlxtool-replay"]["expiration"] == "600000"

    dropped = replay(run, broker, top.dlq, "--yes", "--drop-expiration")
    assert dropped.exit_code == 0, dropped.stderr
    [(_m, props, body)] = broker.drain(origin)
    assert (body, props.expiration) == (b"t2", None)
    assert "expiration" not in props.headers["dlxtool-replay"]  # dropped for good: not recorded either

    # It fails again and is replayed without the flag: the TTL stays dropped (before, the provenance brought
    # it back).
    with broker.channel() as ch:
        ch.basic_publish("", origin, body, props, mandatory=True)
        rt.reject_all(ch, origin, 1)
    broker.wait_depth(top.dlq, 1)
    again = replay(run, broker, top.dlq, "--yes")
    assert again.exit_code == 0, again.stderr
    [(_m, props, body)] = broker.drain(origin)
    assert (body, props.expiration) == (b"t2", None)


def test_nothing_moved_because_no_route_is_safe_is_refused_with_exit_6(run, broker, qname) -> None:
    """The only origin's direct DLX would drop the queue name: with --default-exchange nothing can go, and
    the run says so with exit 6 (refused), every message still in the DLQ."""
    with broker.channel() as ch:
        ex, origin, dlq = topic_to_direct_dlx(ch, qname)
        for _ in range(3):
            ch.basic_publish(ex, "order.created", b"x", mandatory=True)
        rt.reject_all(ch, origin, 3)
    broker.wait_depth(dlq, 3)
    result = replay(run, broker, dlq, "--yes", "--default-exchange")
    assert result.exit_code == 6, result.stderr
    assert "no route is safe" in result.stderr and "would drop" in result.stderr
    assert json.loads(result.stdout)["moved"] == {}
    assert depth(broker, dlq) == 3 and depth(broker, origin) == 0


def test_celery_tasks_come_back_through_the_default_exchange_others_keep_their_key(run, broker, qname) -> None:
    """Celery's Task.retry publishes the retry to the exchange and key the task was delivered with: after a
    replay through a temporary exchange (deleted at the end) that retry would be lost. A Celery task (headers
    lang "py", task, id, retries) comes back through the default exchange, routing key = the queue name, which
    Celery turns into a retry by queue name; a plain message keeps its original key. Both really rejected."""
    work, dlq, x = f"{qname}.work", f"{qname}.dlq", f"{qname}.x"
    celery = {"lang": "py", "task": "shop.charge", "id": "t-1", "retries": 2}
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}, durable=True)
        ch.exchange_declare(x, "direct")
        ch.queue_bind(work, x, "shop.charge")
        ch.basic_publish(x, "shop.charge", b"task", pika.BasicProperties(headers=celery))
        ch.basic_publish(x, "shop.charge", b"plain", pika.BasicProperties(headers={"k": 1}))
        for _ in range(2):
            method, _props, _body = ch.basic_get(work)
            ch.basic_reject(method.delivery_tag, requeue=False)
    wait_until(lambda: depth(broker, dlq) == 2, "the dead letters")
    result = replay(run, broker, dlq, "--yes")
    assert result.exit_code == 0, result.stderr
    seen = {}
    with broker.channel() as ch:
        for _ in range(2):
            method, props, body = ch.basic_get(work, auto_ack=True)
            exchange = "dlxtool.*" if method.exchange.startswith("dlxtool.") else method.exchange
            seen[body] = (exchange, method.routing_key, props.headers.get("retries"))
    assert seen == {b"task": ("", work, 0), b"plain": ("dlxtool.*", "shop.charge", None)}
    with broker.channel() as ch:
        method, _p, _b = ch.basic_get(work)
        assert method is None


DRAMATIQ_BODY = (b'{"queue_name":"q","actor_name":"charge","args":[1],"kwargs":{},'
                 b'"options":{"retries":2,"traceback":"ValueError: x","max_retries":1},"message_id":"m1",'
                 b'"message_timestamp":1700000000000}')


def test_dramatiq_body_retries_are_reset_only_with_reset_body_retries(run, broker, qname) -> None:
    """Dramatiq keeps its attempt count in the JSON body (options.retries). The plan counts the messages whose
    retries are used up; without --reset-body-retries bodies are replayed byte for byte; with it a Dramatiq
    body gets options.retries 0 (the rest as it was) and any other body stays byte for byte."""
    work, dlq = f"{qname}.work", f"{qname}.dlq"
    other = b'{"actor_name":"not dramatiq","options":{"retries":2}}'  # no queue_name: not Dramatiq-shaped
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}, durable=True)

    def dead_letter() -> None:
        with broker.channel() as ch:
            for body in (DRAMATIQ_BODY, other):
                ch.basic_publish("", work, body)
            for _ in range(2):
                method, _props, _body = ch.basic_get(work)
                ch.basic_reject(method.delivery_tag, requeue=False)
        wait_until(lambda: depth(broker, dlq) == 2, "the dead letters")

    def replayed(*args: str) -> list[bytes]:
        result = replay(run, broker, dlq, "--yes", *args)
        assert result.exit_code == 0, result.stderr
        with broker.channel() as ch:
            bodies = [ch.basic_get(work, auto_ack=True)[2] for _ in range(2)]
            assert ch.basic_get(work)[0] is None
        return bodies

    dead_letter()
    plan = replay(run, broker, dlq, "--dry-run")
    assert json.loads(plan.stdout)["plan"]["dramatiq_retries_used"] == 1
    with_option = replay(run, broker, dlq, "--dry-run", "--reset-body-retries")
    assert json.loads(with_option.stdout)["plan"]["dramatiq_retries_used"] == 0
    assert replayed() == [DRAMATIQ_BODY, other]
    dead_letter()
    assert replayed("--reset-body-retries") == [DRAMATIQ_BODY.replace(b'"retries":2', b'"retries":0'), other]


def plan_route_lines(run, broker, dlq: str) -> list[str]:
    result = run("replay", dlq, "--url", broker.url, "--dry-run", "-f", "table")
    assert result.exit_code == 0, result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("route: ")]


def test_the_plans_route_line_speaks_of_what_the_plan_has(run, broker, qname) -> None:
    """Queue origins only: the temporary exchange, no Celery. A Celery task among them: Celery too. An exchange
    origin only (Spring's): published to that exchange, no temporary exchange. All dead letters really rejected
    (Spring's is framework-made, as Spring's recoverer republishes it)."""
    work, dlq, x = f"{qname}.work", f"{qname}.dlq", f"{qname}.x"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}, durable=True)
        ch.exchange_declare(x, "direct")
        ch.queue_bind(work, x, "shop.charge")
        ch.basic_publish(x, "shop.charge", b"plain", pika.BasicProperties(headers={"k": 1}))
        method, _props, _body = ch.basic_get(work)
        ch.basic_reject(method.delivery_tag, requeue=False)
    wait_until(lambda: depth(broker, dlq) == 1, "the dead letter")
    [line] = plan_route_lines(run, broker, dlq)
    assert "to a queue, each message keeps its original routing key" in line and "temporary fanout exchange" in line
    assert "Celery" not in line
    with broker.channel() as ch:
        ch.basic_publish(x, "shop.charge", b"task", pika.BasicProperties(
            headers={"lang": "py", "task": "shop.charge", "id": "t-1", "retries": 2}))
        method, _props, _body = ch.basic_get(work)
        ch.basic_reject(method.delivery_tag, requeue=False)
    wait_until(lambda: depth(broker, dlq) == 2, "the dead letters")
    lines = plan_route_lines(run, broker, dlq)
    assert len(lines) == 2 and lines[1].startswith("route: 1 Celery task(s) go through the default exchange")

    lot = f"{qname}.lot"
    with broker.channel() as ch:
        ch.queue_declare(lot, durable=True)
        ch.basic_publish("", lot, b"{}", pika.BasicProperties(headers={
            "x-original-exchange": x, "x-original-routingKey": "shop.charge", "x-exception-stacktrace": "at x"}))
    [line] = plan_route_lines(run, broker, lot)
    assert line.startswith("route: to an exchange, each message is published to it with its routing key")
    assert "temporary" not in line and "Celery" not in line
