"""`dlxtool queues` tells DLQs and retry stages from the topology (issue 30), on the real broker, for the topologies
frameworks declare. Each builder declares what the framework's source declares (cited in its docstring: the
repository, the file and what was copied), then lets the broker make real dead letters (rejects, TTL expiry).
Celery and Dramatiq themselves run in tests/cli/test_real_frameworks.py, which checks `queues` there too.

Roles lean on the API's consumer counts and delivery statistics; where the broker keeps none (RabbitMQ 4.3 with
management_metrics_collection denied) what the topology alone can tell is asserted instead (marker `metrics`)."""

from __future__ import annotations

import json
import time
from typing import Any

import pika
import pytest

from dlxtool.broker import versions
from tests.support.broker import BrokerEnv

pytestmark = pytest.mark.metrics


def blind(broker: BrokerEnv) -> bool:
    return versions.stats_disabled(broker.mgmt.overview())


def _sampled(q: dict) -> bool:
    """The API's row has the queue's counts and its policies (both come with its first statistics sample)."""
    return "messages_unacknowledged" in q and q.get("effective_policy_definition") is not None


def roles(run: Any, broker: BrokerEnv, prefix: str) -> dict[str, tuple[str | None, str | None]]:
    """queue -> (role, role_reason) of the queues whose name starts with `prefix`, from `queues --format json`, once
    the API has sampled each of them (a quorum queue's first sample comes seconds after its declaration)."""
    deadline = time.monotonic() + 30
    while not blind(broker) and time.monotonic() < deadline and not all(
            _sampled(q) for q in broker.mgmt.get(f"queues/{_q(broker.vhost)}")
            if q["name"].startswith(prefix)):
        time.sleep(0.5)
    result = run("queues", "--url", broker.url, "--match", f"{prefix}*", "--format", "json")
    assert result.exit_code == 0, result.output
    return {r["queue"]: (r["role"], r["role_reason"]) for r in json.loads(result.stdout)}


def reject(ch: Any, queue: str, n: int, timeout: float = 15.0) -> None:
    """Take n messages from `queue` and reject them (requeue=false): the broker dead-letters them."""
    deadline = time.monotonic() + timeout
    done = 0
    while done < n:
        method, _props, _body = ch.basic_get(queue, auto_ack=False)
        if method is None:
            assert time.monotonic() < deadline, f"{queue}: {done} of {n} messages came"
            time.sleep(0.05)
            continue
        ch.basic_reject(method.delivery_tag, requeue=False)
        done += 1


def wait_stats(broker: BrokerEnv, queue: str, check: Any, timeout: float = 30.0) -> None:
    """Until the API's row for `queue` satisfies check (its statistics lag the broker by up to an interval)."""
    deadline = time.monotonic() + timeout
    while not check(broker.mgmt.queue(broker.vhost, queue).raw) and time.monotonic() < deadline:
        time.sleep(0.5)


def test_a_ttl_retry_ladder_is_wait_and_its_work_queue_no_dlq(run, broker, qname) -> None:
    """Issue 30: work -> retry exchange -> wait (message TTL, dead-letters back to work) -> work; after the last
    attempt the application itself publishes the message to its parking queue. The wait queue was flagged dlq:
    it is a retry stage. The parking queue is no queue's dead-letter target (the application moves messages
    there): `queues` does not claim it is one; peek says so from the messages (tests/cli/test_peek.py)."""
    work, retry, wait, parking = f"{qname}.invoices", f"{qname}.retry", f"{qname}.invoices.retry.wait", \
        f"{qname}.invoices.dlq"
    with broker.channel() as ch:
        ch.exchange_declare(retry, "fanout")
        ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": retry})
        ch.queue_declare(wait, durable=True, arguments={"x-message-ttl": 100, "x-dead-letter-exchange": "",
                                                        "x-dead-letter-routing-key": work})
        ch.queue_bind(wait, retry)
        ch.queue_declare(parking, durable=True)
        ch.basic_publish("", work, b"invoice 1", mandatory=True)
        for _attempt in range(2):  # fails twice: rejected, waits, comes back
            reject(ch, work, 1)
        method, props, body = None, None, b""
        while method is None:
            method, props, body = ch.basic_get(work, auto_ack=False)
        ch.basic_publish("", parking, body, props, mandatory=True)  # the last failure: parked by the app
        ch.basic_ack(method.delivery_tag)
    found = roles(run, broker, qname)
    assert found[wait] == ("wait", f"retry stage (message TTL 100 ms): dead-letters to {work}, which dead-letters back "
                                   "here (a retry loop)")
    assert found[work] == (None, None) and found[parking] == (None, None)
    if not blind(broker):
        wait_stats(broker, parking, lambda raw: raw.get("messages_ready") == 1)  # its sample counts the parked one
    table = run("queues", "--url", broker.url, "--match", f"{qname}*", "--format", "table")
    flags = {line.split()[1]: line.split()[-1] for line in table.stdout.splitlines()[2:]}
    assert flags[wait].split(",")[0] == "wait"  # the role among the flags
    if not blind(broker):  # the counts' age, said once (the API has no sample time per queue)
        assert flags[parking] == "no-consumer"
        assert "the management API's statistics, up to one statistics interval old" in table.stderr
        [row] = json.loads(run("queues", "--url", broker.url, "--match", parking, "--format", "json").stdout)
        assert row["figures_from"] == "management-api-sample"
    # What the topology cannot show, the messages do: peek and history say the parked one was moved by the app.
    moved = (f"1 of the 1 dead letter(s) read here came from {wait}, whose dead-letter route does not lead to "
             f"{parking}: an application (or a person) moved them here")
    for command in ("peek", "history"):
        result = run(command, parking, "--url", broker.url, "--format", "json")
        assert result.exit_code == 0 and moved in result.stderr, result.stderr


def test_the_demo_shops_wait_queue_sends_back_by_the_key_its_binding_gave(run, broker, qname) -> None:
    """scripts/demo_shop.py's topology: the wait queue dead-letters on the default exchange without a routing key,
    so its messages go back by the key they came with: 'orders.work', from its binding on the retry exchange (the
    survey reads the bindings into it to know)."""
    work, retry, wait, dlx, dlq = (f"{qname}.orders.work", f"{qname}.orders.retry", f"{qname}.orders.retry.wait",
                                   f"{qname}.orders.dlx", f"{qname}.orders.dlq")
    with broker.channel() as ch:
        ch.exchange_declare(dlx, "fanout", durable=True)
        ch.exchange_declare(retry, "direct", durable=True)
        ch.queue_declare(dlq, durable=True)
        ch.queue_bind(dlq, dlx)
        ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": dlx})
        ch.queue_declare(wait, durable=True, arguments={"x-message-ttl": 1000, "x-dead-letter-exchange": ""})
        ch.queue_bind(wait, retry, work)
    found = roles(run, broker, qname)
    assert found[wait] == ("wait", f"retry stage (message TTL 1000 ms): dead-letters to {work}, a work queue: it "
                                   "dead-letters its own failures on")
    assert found[dlq] == ("dlq", f"target of {work}") and found[work] == (None, None)


def test_taskiq_aio_pika_the_dead_queue_is_the_dlq_not_the_task_queue(run, broker, qname) -> None:
    """taskiq-aio-pika 0.6 (taskiq-python/taskiq-aio-pika, taskiq_aio_pika/broker.py `_declare_queues`,
    `_declare_dead_letter_queue`, `kick`; queue.py and exchange.py defaults): exchange "taskiq" (topic); the dead
    letter queue (quorum, no arguments); each task queue quorum with x-dead-letter-exchange "" and
    x-dead-letter-routing-key = the dead letter queue, the Queue's own `arguments` over them (here the issue's
    x-message-ttl 3000, shortened), bound to the exchange by its name; the delay queue quorum with
    x-dead-letter-exchange = the exchange and x-dead-letter-routing-key = the first task queue, not bound; `kick`
    publishes delayed tasks to it on the default exchange with a per-message `expiration`. Issue 30 saw the task
    queue flagged dlq and the dead queue not: with no worker running."""
    exchange, tasks, dead, delay = f"{qname}.taskiq", f"{qname}.tq.tasks", f"{qname}.tq.dead", f"{qname}.tq.delay"
    quorum = {"x-queue-type": "quorum"}
    with broker.channel() as ch:
        ch.exchange_declare(exchange, "topic", durable=True)
        ch.queue_declare(dead, durable=True, arguments=quorum)
        ch.queue_declare(tasks, durable=True, arguments={"x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": dead, **quorum,
                                                         "x-message-ttl": 300})
        ch.queue_bind(tasks, exchange, tasks)
        ch.queue_declare(delay, durable=True, arguments={"x-dead-letter-exchange": exchange,
                                                         "x-dead-letter-routing-key": tasks, **quorum})
        ch.basic_publish("", delay, b'{"task":"charge"}', pika.BasicProperties(expiration="100", delivery_mode=2),
                         mandatory=True)
    assert broker.wait_depth(dead, 1) == 1  # delayed, delivered to the task queue, expired there unprocessed
    found = roles(run, broker, qname)
    assert found[dead] == ("dlq", f"target of {tasks}")
    if blind(broker):  # no statistics: a delay queue cannot be told from a work queue whose consumers are gone
        assert found[tasks] == ("dlq", f"target of {delay}") and found[delay] == (None, None)
    else:
        assert found[tasks] == (None, None)
        assert found[delay] == ("wait", f"retry stage (no consumer ever took a message from it: they leave by "
                                        f"per-message expiration): dead-letters to {tasks}, a work queue: it "
                                        "dead-letters its own failures on")


def test_faststream_a_dlq_bound_by_its_own_name_gets_nothing_and_is_no_dlq(run, broker, qname) -> None:
    """FastStream (ag2ai/faststream, faststream/rabbit/subscriber/usecase.py `start`, schemas/queue.py `routing`,
    schemas/exchange.py): a subscriber declares its RabbitQueue with the `arguments` given (here
    x-dead-letter-exchange), declares its RabbitExchange (type direct by default) and binds the queue with
    `queue.routing()`: its routing_key, else its name. A DLQ subscriber on the DLX with routing_key = the work
    queue's key gets the dead letters (they keep their key); one left to its own name gets none: RabbitMQ drops
    them, and `queues` calls it no dlq."""
    names = {k: f"{qname}.{k}" for k in ("orders", "orders.dlx", "orders.dlq", "pay", "pay.dlx", "pay.dlq")}
    with broker.channel() as ch:
        for base, dlq_key in (("orders", names["orders"]), ("pay", names["pay.dlq"])):
            ch.exchange_declare(names[base], "direct")
            ch.exchange_declare(names[f"{base}.dlx"], "direct")
            ch.queue_declare(names[base], durable=True, arguments={"x-dead-letter-exchange": names[f"{base}.dlx"]})
            ch.queue_bind(names[base], names[base], names[base])
            ch.queue_declare(names[f"{base}.dlq"], durable=True)
            ch.queue_bind(names[f"{base}.dlq"], names[f"{base}.dlx"], dlq_key)
            ch.basic_publish(names[base], names[base], b"event", mandatory=True)
            reject(ch, names[base], 1)
    assert broker.wait_depth(names["orders.dlq"], 1) == 1 and broker.queue_depth(names["pay.dlq"]) == 0
    found = roles(run, broker, qname)
    assert found[names["orders.dlq"]] == ("dlq", f"target of {names['orders']}")
    assert found[names["pay.dlq"]] == (None, None)
    peeked = run("peek", names["orders.dlq"], "--url", broker.url, "--format", "json")  # where the broker put it
    assert peeked.exit_code == 0 and "moved them here" not in peeked.stderr, peeked.stderr


def test_golevelup_nestjs_rabbitmq_topic_dlqs_each_get_their_own_sources(run, broker, qname) -> None:
    """@golevelup/nestjs-rabbitmq (golevelup/nestjs, packages/rabbitmq/src/amqp/connection.ts `setupQueue` and the
    exchange assertion with `defaultExchangeType: 'topic'`; rabbitmq.interfaces.ts QueueOptions): exchanges are
    topic unless typed; a handler's queue is asserted with its queueOptions (deadLetterExchange, which amqplib
    sends as x-dead-letter-exchange; no deadLetterRoutingKey) and bound for each routingKey; a failing handler's
    `new Nack(false)` rejects without requeue. Two DLQs on one dead-letter exchange, bound by key pattern: each is
    the target of the queue whose keys it matches only."""
    app, dlx = f"{qname}.app", f"{qname}.app.dlx"
    orders, invoices = f"{qname}.orders", f"{qname}.invoices"
    with broker.channel() as ch:
        ch.exchange_declare(app, "topic", durable=True)
        ch.exchange_declare(dlx, "topic", durable=True)
        for queue, key, pattern in ((orders, "order.created", "order.#"), (invoices, "invoice.paid", "invoice.#")):
            ch.queue_declare(queue, durable=True, arguments={"x-dead-letter-exchange": dlx})
            ch.queue_bind(queue, app, key)
            ch.queue_declare(f"{queue}.dlq", durable=True)
            ch.queue_bind(f"{queue}.dlq", dlx, pattern)
            ch.basic_publish(app, key, b"{}", mandatory=True)
            reject(ch, queue, 1)
    assert broker.wait_depth(f"{orders}.dlq", 1) == 1 and broker.wait_depth(f"{invoices}.dlq", 1) == 1
    found = roles(run, broker, qname)
    assert found[f"{orders}.dlq"] == ("dlq", f"target of {orders}")
    assert found[f"{invoices}.dlq"] == ("dlq", f"target of {invoices}")


def test_kombu_a_delay_queue_with_message_ttl_is_a_wait_before_the_work_queue(run, broker, qname) -> None:
    """kombu (celery/kombu, kombu/entity.py Queue.declare/_create_queue/queue_bind, Exchange type 'direct' by
    default; kombu/transport/base.py to_rabbitmq_queue_arguments: `message_ttl` in seconds becomes x-message-ttl in
    ms): Queue(name, Exchange(name), routing_key, queue_arguments=..., message_ttl=...) declares the exchange, the
    queue with those arguments, and binds it. A delay queue (message_ttl 0.1, dead-letters to the work exchange)
    in front of a work queue that dead-letters to a direct DLX the DLQ is bound to with the work key."""
    tasks, delay, dlx, dead = f"{qname}.tasks", f"{qname}.tasks.delay", f"{qname}.tasks.dlx", f"{qname}.tasks.dead"
    with broker.channel() as ch:
        ch.exchange_declare(tasks, "direct", durable=True)
        ch.queue_declare(tasks, durable=True, arguments={"x-dead-letter-exchange": dlx})
        ch.queue_bind(tasks, tasks, "tasks")
        ch.exchange_declare(delay, "direct", durable=True)
        ch.queue_declare(delay, durable=True, arguments={"x-dead-letter-exchange": tasks, "x-message-ttl": 100})
        ch.queue_bind(delay, delay, "tasks")
        ch.exchange_declare(dlx, "direct", durable=True)
        ch.queue_declare(dead, durable=True)
        ch.queue_bind(dead, dlx, "tasks")
        ch.basic_publish(delay, "tasks", b"task", mandatory=True)
        reject(ch, tasks, 1)  # waited 100 ms in the delay queue, then failed
    assert broker.wait_depth(dead, 1) == 1
    found = roles(run, broker, qname)
    assert found[dead] == ("dlq", f"target of {tasks}")
    assert found[delay] == ("wait", f"retry stage (message TTL 100 ms): dead-letters to {tasks}, a work queue: it "
                                    "dead-letters its own failures on")
    assert found[tasks] == (None, None)


def test_moleculer_channels_failed_messages_are_moved_by_the_app_not_the_topology(run, broker, qname) -> None:
    """@moleculer/channels (moleculerjs/moleculer-channels, src/adapters/amqp.js `subscribe` and
    `moveToDeadLetter`): a channel is a fanout exchange with a queue `GROUP.CHANNEL` bound with "" and no
    dead-letter arguments; dead lettering declares a fanout exchange (DEAD_LETTER) and a queue (FAILED_MESSAGES)
    bound to it with "", and on the last failure the adapter publishes the message there itself, then acks it. No
    queue dead-letters into FAILED_MESSAGES: `queues` makes no dlq of it (nor of anything else here)."""
    channel, work, dl_exchange, failed = (f"{qname}.order.created", f"{qname}.orders.order.created",
                                          f"{qname}.DEAD_LETTER", f"{qname}.FAILED_MESSAGES")
    with broker.channel() as ch:
        ch.exchange_declare(dl_exchange, "fanout", durable=True)
        ch.queue_declare(failed, durable=True)
        ch.queue_bind(failed, dl_exchange, "")
        ch.exchange_declare(channel, "fanout", durable=True)
        ch.queue_declare(work, durable=True)
        ch.queue_bind(work, channel, "")
        ch.basic_publish(channel, "", b"{}", mandatory=True)
        method = None
        while method is None:
            method, _props, body = ch.basic_get(work, auto_ack=False)
        ch.basic_publish(dl_exchange, failed, body, pika.BasicProperties(
            headers={"x-original-channel": channel, "x-original-group": "orders", "x-error-message": "boom"}))
        ch.basic_ack(method.delivery_tag)
    found = roles(run, broker, qname)
    assert found == {channel_queue: (None, None) for channel_queue in (work, failed)}


def test_a_dead_letter_exchange_from_a_policy_and_a_ttl_from_an_operator_policy_make_a_wait(run, broker,
                                                                                          qname) -> None:
    """Settings from policies count as arguments do: a wait queue whose dead-letter exchange comes from a policy
    and whose message TTL from an operator policy (the API's effective definition merges them)."""
    work, wait = f"{qname}.work", f"{qname}.wait"
    v = broker.vhost
    broker.mgmt.request("PUT", f"policies/{_q(v)}/{_q(qname)}-dlx", {
        "pattern": f"^{_re(wait)}$", "apply-to": "queues",
        "definition": {"dead-letter-exchange": "", "dead-letter-routing-key": work}})
    broker.mgmt.request("PUT", f"operator-policies/{_q(v)}/{_q(qname)}-ttl", {
        "pattern": f"^{_re(wait)}$", "apply-to": "queues", "definition": {"message-ttl": 100}})
    with broker.channel() as ch:
        ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": "",
                                                        "x-dead-letter-routing-key": wait})
        ch.queue_declare(wait, durable=True)
    wait_stats(broker, wait, lambda raw: (raw.get("effective_policy_definition") or {}).get("message-ttl") == 100)
    found = roles(run, broker, qname)
    assert found[wait] == ("wait", f"retry stage (message TTL 100 ms): dead-letters to {work}, which dead-letters "
                                   "back here (a retry loop)")
    assert found[work] == (None, None)


def _q(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def _re(text: str) -> str:
    import re

    return re.escape(text)


def test_a_peek_s_held_gets_are_no_consumers_of_a_quorum_dlq(run, broker, qname) -> None:
    """Issue 35: a quorum queue counts every basic.get held unacked as a consumer in its statistics (a peek holding
    50 read "50 consumers"; none of them is in the API's consumer list), and the DLQ lost its `dlq` role. The
    consumer count comes from the consumer list: the DLQ keeps its role while a peek holds its head."""
    if blind(broker):
        pytest.skip("the API keeps no statistics here: no consumer count to be misled by")
    work, dlq = f"{qname}.work", f"{qname}.dlq"
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        ch = conn.channel()
        ch.queue_declare(dlq, durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        for i in range(20):
            ch.basic_publish("", work, b"%d" % i)
        reject(ch, work, 20)
        assert broker.wait_depth(dlq, 20) == 20
        peeking = conn.channel()
        for _ in range(20):
            method = None
            while method is None:
                method, _p, _b = peeking.basic_get(dlq, auto_ack=False)
        wait_stats(broker, dlq, lambda q: q.get("consumers") == 20)  # the queue's own count: 20 "consumers"
        deadline = time.monotonic() + 15
        while True:  # the listing's row has its figures (a sample) too
            result = run("queues", "--url", broker.url, "--match", f"{qname}*", "--format", "json")
            assert result.exit_code == 0, result.output
            row = next(r for r in json.loads(result.stdout) if r["queue"] == dlq)
            if row["figures_known"] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert row["consumers"] == 0 and row["role"] == "dlq", row
    finally:
        conn.close()
