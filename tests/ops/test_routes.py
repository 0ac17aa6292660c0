"""dlxtool.ops.routes: routing questions answered from management API data (pure logic; the real broker's
answers are exercised in tests/cli/test_replay_routing.py)."""

from __future__ import annotations

from typing import Any

import pytest

from dlxtool.broker.management import queue_info
from dlxtool.errors import NotFoundError
from dlxtool.ops.routes import Router, topic_matches


class FakeManagement:
    def __init__(self, exchanges: dict[str, dict[str, Any]], bindings: dict[str, list[dict[str, Any]]],
                 queues: dict[str, dict[str, Any]]) -> None:
        self.exchanges, self._bindings, self.queues = exchanges, bindings, queues

    def get(self, path: str, **_query: Any) -> Any:
        parts = path.split("/")
        name = parts[2] if len(parts) > 2 else ""
        if path.endswith("/bindings/source"):
            return self._bindings.get(name, [])
        if name not in self.exchanges:
            raise NotFoundError(path)
        return self.exchanges[name]

    def queue(self, _vhost: str, name: str) -> Any:
        if name not in self.queues:
            raise NotFoundError(name)
        return queue_info({"name": name, "arguments": self.queues[name]})


def to_queue(queue: str, key: str = "", **extra: Any) -> dict[str, Any]:
    return {"destination": queue, "destination_type": "queue", "routing_key": key, **extra}


@pytest.mark.parametrize(("pattern", "key", "matches"), [
    ("order.*", "order.created", True), ("order.*", "order.created.eu", False), ("order.#", "order", True),
    ("#", "", True), ("*.created", "order.created", True), ("order.*", "o.q", False)])
def test_topic_matching(pattern: str, key: str, matches: bool) -> None:
    assert topic_matches(pattern, key) is matches


def router(**queues: dict[str, Any]) -> Router:
    mgmt = FakeManagement(
        exchanges={"x": {"type": "direct"}, "t": {"type": "topic"}, "h": {"type": "headers"},
                   "ae": {"type": "fanout"}, "x-ae": {"type": "direct", "arguments": {"alternate-exchange": "ae"}},
                   "e2e": {"type": "fanout"}},
        bindings={"x": [to_queue("work", "order.created")], "t": [to_queue("o.q", "order.*")],
                  "ae": [to_queue("unrouted")], "x-ae": [to_queue("work", "order.created")],
                  "e2e": [{"destination": "x", "destination_type": "exchange", "routing_key": ""}]},
        queues={"work": {}, "unrouted": {}, "o.q": {}, **queues})
    return Router(mgmt, "v")


def test_route_follows_exchange_bindings_alternate_exchanges_and_the_default_exchange() -> None:
    r = router()
    assert r.route("x", "order.created") == {"work"}
    assert r.route("x", "work") == set()
    assert r.route("x-ae", "work") == {"unrouted"}
    assert r.route("e2e", "order.created") == {"work"}
    assert r.route("", "work") == {"work"} and r.route("", "nope") == set() and r.route("", "") == set()
    assert r.route("h", "anything") is None  # headers: cannot be told without the message's headers
    assert r.route("missing", "k") == set()


def test_dead_letter_drop_names_the_key_a_direct_dlx_routes_nowhere() -> None:
    r = router(a={"x-dead-letter-exchange": "x"}, b={"x-dead-letter-exchange": "x",
                                                      "x-dead-letter-routing-key": "order.created"},
               c={"x-dead-letter-exchange": "h"}, d={})
    assert "routes routing key 'a' to no queue" in (r.dead_letter_drop("a", "a") or "")
    assert r.dead_letter_drop("a", "order.created") is None
    assert r.dead_letter_drop("b", "b") is None  # its fixed dead-letter routing key is routed
    assert r.dead_letter_drop("c", "c") is None  # headers: unknown, not claimed unsafe
    assert r.dead_letter_drop("d", "d") is None  # no dead-letter exchange


def test_through_wait_queue_reaches_the_processing_queue_or_says_why_not() -> None:
    r = router(**{"w1": {"x-message-ttl": 50, "x-dead-letter-exchange": "x"},
                  "w2": {"x-dead-letter-exchange": "x", "x-dead-letter-routing-key": "nowhere"},
                  "w3": {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"},
                  "w4": {"x-dead-letter-exchange": "h"}, "dlq": {}})
    found = r.through_wait_queue("w1", "order.created", "dlq")
    assert found.queue == "work" and "w1" in found.why
    assert r.through_wait_queue("w1", None, "dlq").queue is None
    nowhere = r.through_wait_queue("w2", "order.created", "dlq")
    assert nowhere.queue is None and "routes to no queue" in nowhere.why
    assert r.through_wait_queue("w3", "k", "dlq").queue == "w3"  # it expired where it was (its DLX is the DLQ)
    assert r.through_wait_queue("w4", "k", "dlq").queue is None
    gone = r.through_wait_queue("gone", "k", "dlq")
    assert gone.queue is None and "no longer exists" in gone.why


def test_a_queue_without_a_dead_letter_exchange_is_the_origin_unless_its_ttl_would_drop_the_message() -> None:
    """Deaths only `expired` from a queue that now has no DLX: not a wait queue (it sends nothing anywhere).
    Without a TTL it is where the message belongs; with one, a replayed message would expire there and be
    dropped (no DLX to catch it): no origin, with that reason."""
    r = router(plain={}, ttl_only={"x-message-ttl": 1000})
    assert r.through_wait_queue("plain", "k", "dlq").queue == "plain"
    dropping = r.through_wait_queue("ttl_only", "k", "dlq")
    assert dropping.queue is None and "would drop" in dropping.why
