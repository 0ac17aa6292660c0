"""dlxtool.ops.routes: routing questions answered from management API data (pure logic; the real broker's
answers are exercised in tests/cli/test_replay_routing.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlxtool.broker.management import queue_info
from dlxtool.errors import NotFoundError
from dlxtool.ops.routes import BindingIndex, Key, Router, binding_matches, topic_matches
from tests.fuzz.strategies import FUZZ


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

    def queue(self, _vhost: str, name: str, *, settled: bool = False) -> Any:
        if name not in self.queues:
            raise NotFoundError(name)
        arguments = dict(self.queues[name])
        consumers = arguments.pop("_consumers", 0)  # not an argument: the queue's consumer count
        return queue_info({"name": name, "arguments": arguments, "consumers": consumers,
                           "effective_policy_definition": {}})


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


def test_a_queue_that_dead_letters_back_to_the_dlq_is_the_origin_only_when_consumed() -> None:
    """Only TTL expiries, the last from a queue whose dead-letter route leads to this DLQ. With consumers it is a
    work queue with a TTL where the message expired unprocessed: the origin. Without, it may be a retry ladder's
    last tier that parks by expiry: never the origin (replayed there, the message would only expire back)."""
    tier = {"x-message-ttl": 50, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
    r = router(**{"last-tier": tier, "work-ttl": {**tier, "_consumers": 2}, "dlq": {}})
    parked = r.through_wait_queue("last-tier", "order.created", "dlq")
    assert parked.queue is None
    assert "'last-tier' has no consumer" in parked.why and "--to QUEUE" in parked.why
    consumed = r.through_wait_queue("work-ttl", "order.created", "dlq")
    assert consumed.queue == "work-ttl" and "consumers" in consumed.why


# -- Routes: the route of each (target, routing key) -------------------------------------------------------------


def routes(**kwargs: Any) -> Any:
    from dlxtool.ops.routes import Routes

    r = router(a={"x-dead-letter-exchange": "x"}, fanned={"x-dead-letter-exchange": "ae"}, plain={})
    return Routes(kwargs.pop("default_exchange", False), exchanges=lambda q: f"tmp.{q}", router=r, **kwargs)


def test_the_kept_routing_key_is_checked_against_the_targets_dead_letter_exchange() -> None:
    """Issue 15 §1 on the original-key route: the key the message keeps is what the target's DLX routes on."""
    r = routes()
    assert r.with_key("a", "order.created") == ("tmp.a", True)  # x routes order.created to `work`
    held = r.with_key("a", "order.updated")
    assert isinstance(held, str) and held.startswith("a: ") and "'order.updated' to no queue" in held
    assert "would drop" in held and held in r.unsafe
    assert r.with_key("fanned", "anything") == ("tmp.fanned", True)  # fanout: every key reaches a queue
    assert r.with_key("plain", "anything") == ("tmp.plain", True)    # no dead-letter exchange
    assert r.describe("a") == "original routing key"  # per target; held keys are reasons of their own


def test_an_unreachable_management_api_holds_everything_back_unless_allowed() -> None:
    from dlxtool.ops.routes import Routes

    blind = Routes(False, exchanges=lambda q: f"tmp.{q}", router=None)
    why = blind.with_key("a", "order.created")
    assert isinstance(why, str) and "cannot be checked (management API not reachable)" in why
    assert blind.for_every_key("a") == why
    allowed = Routes(False, exchanges=lambda q: f"tmp.{q}", router=None, allow_drop=True)
    assert allowed.with_key("a", "order.updated") == ("tmp.a", True) and not allowed.unsafe
    assert routes(allow_drop=True).with_key("a", "order.updated") == ("tmp.a", True)


def test_checked_turns_a_move_whose_key_would_be_dropped_into_a_leave() -> None:
    """The engine's deciders (replay, the plan) go through Routes.checked, the fast path too."""
    from dlxtool.ops.engine import Action, Decision

    r = routes()
    moves = {"order.created": Decision(Action.MOVE, "a", "tmp.a", "order.created"),
             "order.updated": Decision(Action.MOVE, "a", "tmp.a", "order.updated"),
             "default": Decision(Action.MOVE, "a", "", "a")}  # on the default exchange: checked by target already

    class Decide:
        def __call__(self, record: str) -> Decision:
            return moves[record]

        def raw(self, key: str, _props: bytes, _body: bytes) -> Decision | None:
            return moves.get(key)

    checked = r.checked(Decide())
    assert checked("order.created") is moves["order.created"] and checked("default") is moves["default"]
    left = checked("order.updated")
    assert left.action is Action.LEAVE and "'order.updated' to no queue" in left.group
    assert checked.raw("order.updated", b"", b"").action is Action.LEAVE
    assert checked.raw("unknown", b"", b"") is None  # the fast path declined: __call__ decides


def test_celery_routes_by_queue_name_count_as_unsafe_too() -> None:
    """by_queue_name's reasons are route reasons (Stay.DEAD_LETTER_UNSAFE): a run where they held everything back is
    refused (exit 6)."""
    from dlxtool.ops.outcomes import refusal
    from dlxtool.ops.replay_decision import NO_ORIGIN
    from dlxtool.ops.stay import Stay, Why

    r = routes()
    why = r.by_queue_name("a")
    assert isinstance(why, Why) and "with the default exchange (routing key 'a')" in why
    assert why.kind is Stay.DEAD_LETTER_UNSAFE and why in r.unsafe
    assert refusal(0, {why: 3}) is not None
    assert refusal(1, {why: 3}) is None and refusal(0, {NO_ORIGIN: 1, why: 1}) is None


def test_a_temporary_exchange_the_broker_refuses_is_reported_with_its_reply() -> None:
    from dlxtool.ops.routes import Routes, RouteUnavailable
    from dlxtool.ops.stay import Stay, Why

    def refused(queue: str) -> str | None:
        raise RouteUnavailable("the broker refused to declare the temporary exchange that keeps the routing key "
                               "(403 ACCESS_REFUSED - …); --default-exchange publishes without one")

    r = Routes(False, exchanges=refused, router=None)
    why = r("a")
    assert isinstance(why, str) and why.startswith("a: the broker refused") and "403 ACCESS_REFUSED" in why
    assert "queue missing" not in why and why in r.unsafe and why.kind is Stay.ROUTE_REFUSED
    missing = Routes(False, exchanges=lambda _q: None, router=None)("a")
    assert missing == "a: queue missing (no temporary exchange can be bound to it)"
    assert isinstance(missing, Why) and missing.kind is Stay.QUEUE_MISSING


# -- the binding index: every binding of an exchange matched at once --------------------------------------------

WORDS = st.sampled_from(["a", "b", "*", "#"])
PATTERNS = st.lists(WORDS, min_size=1, max_size=4).map(".".join)
LITERALS = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4).map(".".join)


@FUZZ
@given(st.sampled_from(["topic", "direct"]), st.lists(PATTERNS, max_size=8),
       st.one_of(LITERALS.map(Key), PATTERNS.map(lambda p: Key(p, pattern=True))))
def test_the_index_matches_what_each_binding_matches_one_by_one(kind: str, patterns: list[str], key: Key) -> None:
    """BindingIndex (a trie for topic exchanges, a dict for direct ones) against binding_matches, its definition."""
    bindings = [{"destination": f"q{i}", "routing_key": p} for i, p in enumerate(patterns)]
    wanted = {b["destination"] for b in bindings if binding_matches(kind, b["routing_key"], key)}
    assert {b["destination"] for b in BindingIndex(kind, bindings).match(key)} == wanted


# -- the temporary exchanges, on the broker ----------------------------------------------------------------------


def test_a_missing_queue_and_another_connections_exclusive_one_are_told_apart_by_the_reply_code(broker, qname) -> None:
    """The bind's 404 (no such queue) leaves the messages where they are; its 405 (RESOURCE_LOCKED: an exclusive
    queue of another connection) is a refusal, with the broker's words. Told by the reply code, not its text."""
    import pika

    from dlxtool.ops.routes import RouteUnavailable, TemporaryExchanges

    holder = pika.BlockingConnection(pika.URLParameters(broker.url))
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        holder.channel().queue_declare(f"{qname}.exclusive", exclusive=True)
        exchanges = TemporaryExchanges(conn, 10, "replay")
        try:
            assert exchanges(f"{qname}.gone") is None and f"{qname}.gone" not in exchanges.refused
            with pytest.raises(RouteUnavailable, match="exclusive queue of another connection") as refused:
                exchanges(f"{qname}.exclusive")
            assert "405" in str(refused.value)
        finally:
            exchanges.delete_all()
    finally:
        conn.close()
        holder.close()
