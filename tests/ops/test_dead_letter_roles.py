"""Roles from the topology on fake management-API listings (the real broker, with the topologies frameworks declare,
proves them in tests/cli/test_queue_roles.py)."""

from __future__ import annotations

from typing import Any

import pytest

from dlxtool.ops import queue_flags as qf
from dlxtool.ops.dead_letter_roles import Listings
from dlxtool.ops.routes import Key, topics_overlap


def row(name: str, *, consumers: int = 0, ready: int = 0, delivered: int = 0, **args: Any) -> dict[str, Any]:
    """An API row; `args` are queue arguments without their x- prefix (message_ttl -> x-message-ttl)."""
    return {"name": name, "vhost": "v", "type": "classic", "messages_ready": ready, "messages_unacknowledged": 0,
            "consumers": consumers, "arguments": {f"x-{k.replace('_', '-')}": v for k, v in args.items()},
            "effective_policy_definition": {}, "message_stats": {"deliver": delivered} if delivered else None}


def roles(rows: list[dict[str, Any]], exchanges: dict[str, str], bindings: list[tuple[str, str, str]]
          ) -> dict[str, tuple[str | None, str | None]]:
    """queue -> (role, reason); bindings are (exchange, queue or exchange, key); a destination named in
    `exchanges` is an exchange."""
    listing = Listings.from_api(
        [{"name": n, "type": t} for n, t in exchanges.items()],
        [{"source": s, "destination": d, "routing_key": k,
          "destination_type": "exchange" if d in exchanges else "queue"} for s, d, k in bindings])
    parsed = qf.flag_rows([qf.row_from_api("b", r) for r in rows], lambda _v: listing)
    return {r.queue: (r.role, r.role_reason) for r in parsed}


@pytest.mark.parametrize(("a", "b", "overlap"), [
    ("order.*", "order.created", True), ("order.#", "*.created", True), ("order.*", "invoice.#", False),
    ("#", "a.b.c", True), ("a.*.c", "a.#", True), ("a.*", "a.*.*", False), ("#.x", "y.#", True),
    ("a.#.z", "a.b", False), ("a.#.z", "a.b.*", True), ("a.#.z", "a.b.#", True)])
def test_topic_patterns_overlap_when_some_key_matches_both(a: str, b: str, overlap: bool) -> None:
    assert topics_overlap(a, b) is overlap and topics_overlap(b, a) is overlap


def test_a_dead_letter_keeps_its_key_and_only_the_dlq_bound_for_that_key_is_its_target() -> None:
    """@golevelup/nestjs-rabbitmq style: topic exchanges, a dead-letter exchange without a dead-letter routing key.
    orders.dlq is bound for the keys orders gets; invoices.dlq for others: not a target of orders."""
    found = roles([row("orders", dead_letter_exchange="app.dlx"), row("orders.dlq"), row("invoices.dlq", ready=2)],
                  {"app": "topic", "app.dlx": "topic"},
                  [("app", "orders", "order.*"), ("app.dlx", "orders.dlq", "order.#"),
                   ("app.dlx", "invoices.dlq", "invoice.#")])
    assert found["orders.dlq"] == ("dlq", "target of orders")
    assert found["invoices.dlq"] == (None, None) and found["orders"] == (None, None)


def test_a_direct_dead_letter_exchange_bound_with_another_key_routes_nothing_there() -> None:
    """FastStream's subscriber binds a queue with its own name unless routing_key says otherwise: orders.dlq bound as
    'orders.dlq' on a direct DLX gets none of orders' dead letters (they keep the key 'orders')."""
    found = roles([row("orders", dead_letter_exchange="orders.dlx"), row("orders.dlq"),
                   row("pay", dead_letter_exchange="pay.dlx"), row("pay.dlq")],
                  {"orders": "direct", "orders.dlx": "direct", "pay": "direct", "pay.dlx": "direct"},
                  [("orders", "orders", "orders"), ("orders.dlx", "orders.dlq", "orders.dlq"),
                   ("pay", "pay", "pay"), ("pay.dlx", "pay.dlq", "pay")])
    assert found["orders.dlq"] == (None, None)
    assert found["pay.dlq"] == ("dlq", "target of pay")


def test_a_headers_dead_letter_exchange_counts_every_binding_and_says_so() -> None:
    found = roles([row("work", dead_letter_exchange="h", dead_letter_routing_key="x"), row("dead")],
                  {"h": "headers"}, [("h", "dead", "")])
    role, reason = found["dead"]
    assert role == "dlq" and reason == ("target of work (exchange 'h' (headers) routes on more than the key: every "
                                        "binding counted)")


def test_taskiq_with_its_worker_down_the_delay_queue_is_a_wait_and_the_dead_queue_the_dlq() -> None:
    """taskiq-aio-pika 0.6 (see tests/cli/test_queue_roles.py): tq.tasks (TTL 3000, DLX "" -> tq.dead), tq.delay
    (per-message expiration, DLX taskiq -> tq.tasks). Worker down: nobody consumes tq.tasks. Issue 30 saw tq.tasks
    flagged dlq and tq.dead not."""
    found = roles([row("tq.tasks", message_ttl=3000, dead_letter_exchange="", dead_letter_routing_key="tq.dead",
                       delivered=40),
                   row("tq.delay", dead_letter_exchange="taskiq", dead_letter_routing_key="tq.tasks"),
                   row("tq.dead", ready=3)],
                  {"taskiq": "direct"}, [("taskiq", "tq.tasks", "tq.tasks")])
    assert found["tq.dead"] == ("dlq", "target of tq.tasks")
    assert found["tq.tasks"] == (None, None)
    assert found["tq.delay"] == ("wait", "retry stage (no consumer ever took a message from it: they leave by "
                                         "per-message expiration): dead-letters to tq.tasks, a work queue: it "
                                         "dead-letters its own failures on")


def test_a_queue_that_was_consumed_is_no_wait_queue_even_with_its_consumers_gone() -> None:
    """A work queue whose service is down (no consumers now, deliveries in its statistics) dead-letters to a DLQ that
    moves its messages on to a parking queue after a TTL: the DLQ is a DLQ, the parking queue too."""
    found = roles([row("work", delivered=10, dead_letter_exchange="", dead_letter_routing_key="dlq"),
                   row("dlq", message_ttl=60000, dead_letter_exchange="", dead_letter_routing_key="parking"),
                   row("parking")], {}, [])
    assert found["dlq"] == ("dlq", "target of work") and found["parking"] == ("dlq", "target of dlq")
    assert found["work"] == (None, None)


def test_a_retry_loop_is_told_without_any_consumer() -> None:
    """work -> wait (TTL) -> work, the whole service down: the loop says which is the wait queue."""
    found = roles([row("work", delivered=5, dead_letter_exchange="", dead_letter_routing_key="wait"),
                   row("wait", message_ttl=1000, dead_letter_exchange="", dead_letter_routing_key="work")], {}, [])
    assert found["wait"] == ("wait", "retry stage (message TTL 1000 ms): dead-letters to work, which dead-letters "
                                     "back here (a retry loop)")
    assert found["work"] == (None, None)


def test_dramatiq_xq_is_the_dlq_of_the_queue_and_its_delay_queue() -> None:
    """Dramatiq 2.x (dramatiq/brokers/rabbitmq.py): Q and Q.DQ dead-letter on "" to Q.XQ (x-message-ttl, no DLX)."""
    dl = {"dead_letter_exchange": "", "dead_letter_routing_key": "q.XQ"}
    found = roles([row("q", consumers=1, **dl), row("q.DQ", consumers=1, **dl), row("q.XQ", message_ttl=604800000)],
                  {}, [])
    assert found["q.XQ"] == ("dlq", "target of q, q.DQ")


def test_a_dlq_names_three_sources_then_counts() -> None:
    found = roles([*(row(f"w{i}", consumers=1, dead_letter_exchange="dlx") for i in range(5)), row("dead")],
                  {"dlx": "fanout"}, [("dlx", "dead", "")])
    assert found["dead"] == ("dlq", "target of w0, w1, w2 and 2 more")


def test_keys_of_a_queue_bound_to_a_fanout_exchange_are_any_key() -> None:
    listing = Listings.from_api([{"name": "f", "type": "fanout"}, {"name": "t", "type": "topic"}],
                                [{"source": "f", "destination": "q", "destination_type": "queue", "routing_key": ""},
                                 {"source": "t", "destination": "q", "destination_type": "queue",
                                  "routing_key": "a.*"}])
    from dlxtool.ops.dead_letter_roles import dead_letter_keys

    [parsed] = [qf.row_from_api("b", row("q", dead_letter_exchange="x"))]
    assert dead_letter_keys(parsed, listing) == [Key("q"), Key("#", pattern=True), Key("a.*", pattern=True)]


def test_in_a_loop_nobody_consumed_yet_the_queue_that_expires_messages_is_the_wait() -> None:
    """A ladder declared but never consumed (a fresh deploy): both queues wait; the one with the message TTL is the
    retry stage, not the work queue it feeds."""
    found = roles([row("work", dead_letter_exchange="", dead_letter_routing_key="wait"),
                   row("wait", message_ttl=1000, dead_letter_exchange="", dead_letter_routing_key="work")], {}, [])
    assert found["wait"][0] == "wait" and found["work"] == (None, None)


def test_without_statistics_only_a_message_ttl_makes_a_wait_and_a_doubt_is_a_dlq() -> None:
    """RabbitMQ 4.3 with management_metrics_collection denied: no consumer counts, no deliveries. A TTL still tells a
    retry stage; a delay queue by per-message expiration cannot be told from a work queue whose consumers are gone,
    so the queue it feeds is named a dlq (said, never hidden)."""
    def blind(r: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in r.items() if k not in ("messages_ready", "messages_unacknowledged", "consumers",
                                                       "message_stats")}

    found = roles([blind(row("tq.tasks", message_ttl=3000, dead_letter_exchange="", dead_letter_routing_key="tq.dead")),
                   blind(row("tq.delay", dead_letter_exchange="", dead_letter_routing_key="tq.tasks")),
                   blind(row("tq.dead")),
                   blind(row("work", dead_letter_exchange="", dead_letter_routing_key="wait")),
                   blind(row("wait", message_ttl=100, dead_letter_exchange="", dead_letter_routing_key="work"))],
                  {}, [])
    assert found["tq.dead"] == ("dlq", "target of tq.tasks") and found["tq.tasks"] == ("dlq", "target of tq.delay")
    assert found["tq.delay"] == (None, None)
    assert found["wait"][0] == "wait" and found["work"] == (None, None)


def test_a_wait_queue_on_the_default_exchange_sends_messages_back_by_the_key_they_came_with() -> None:
    """scripts/demo_shop.py: orders.retry.wait (TTL, x-dead-letter-exchange "" and no routing key) is bound to the
    direct exchange orders.retry by 'orders.work': expired messages keep that key, which names the work queue."""
    found = roles([row("orders.work", consumers=1, dead_letter_exchange="orders.dlx"),
                   row("orders.retry.wait", message_ttl=1000, dead_letter_exchange=""), row("orders.dlq", ready=16)],
                  {"orders.retry": "direct", "orders.dlx": "fanout"},
                  [("orders.retry", "orders.retry.wait", "orders.work"), ("orders.dlx", "orders.dlq", "")])
    assert found["orders.retry.wait"] == ("wait", "retry stage (message TTL 1000 ms): dead-letters to orders.work, "
                                                  "which has 1 consumer(s)")
    assert found["orders.dlq"] == ("dlq", "target of orders.work") and found["orders.work"] == (None, None)
