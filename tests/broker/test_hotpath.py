"""The C fast path of replay (dlxtool/broker/wire/_hotpath.c) against the Python path it stands in for.

Its contract: for any properties it answers either None (the Python path decides) or exactly what
ReplayDecider.__call__ publishes — same target, same provenance, the kept headers and properties byte
for byte. Checked on generated dead letters in the broker's shapes (where it must answer) and on
mutated/garbage bytes (where it must never crash and, when it answers, agree with the Python path).
Broker-made dead letters take it in tests/cli/test_replay*.py and scripts/bench/replay.py."""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pika.compat import long

from dlxtool.amqp_values import RawValue, encode_field_value
from dlxtool.broker.wire import hotpath
from dlxtool.broker.wire.frames import decode_properties, encode_amqp_table, encode_properties
from dlxtool.conventions import BUILT_IN, HeaderConvention, conventions, fast_path_triggers
from dlxtool.deaths import CELERY_HEADER
from dlxtool.ops.engine import Action, Decision
from dlxtool.ops.provenance import PROVENANCE_HEADER, CopyGuard
from dlxtool.ops.replay_address import trusted_count
from dlxtool.ops.replay_decision import ReplayDecider, ReplaySettings
from dlxtool.ops.replay_raw import raw_decider
from dlxtool.record import MessageRecord
from dlxtool.selection import Selection
from tests.support.codecs import wire_codec

NOW = datetime(2026, 11, 21, 14, 30, 5, tzinfo=UTC)
BODY = b"body"  # what both paths publish, and fingerprint (provenance src)


@pytest.fixture(autouse=True, scope="module")
def _on_the_c_codec() -> Iterator[None]:
    """Every test here compares the `c` codec's rewrite with the Python path. The extension is optional:
    where it is absent (no C compiler at install time), or the environment pins another codec, there is
    nothing here to compare (skipped), and the Python path is tested on its own."""
    with wire_codec("c"):
        yield


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=12)
queue_names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=30)
stamps = st.integers(0, 2**32).map(lambda s: datetime.fromtimestamp(s, UTC))
scalars = (st.text(max_size=50) | st.integers(-2**63, 2**63 - 1) | st.booleans() | st.none() | stamps
           | st.binary(max_size=20)
           | st.floats(allow_nan=False).map(lambda f: RawValue(b"d" + struct.pack(">d", f))))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
                      max_leaves=8)


def big_l(ints: Any) -> Any:
    """Integers as AMQP kind L (RabbitMQ passes it through; dlxtool keeps it as a RawValue)."""
    return ints.map(lambda n: RawValue(b"L" + struct.pack(">q", n)))


@st.composite
def deaths(draw: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"count": draw(st.integers(1, 10**6).map(long) | big_l(st.integers(1, 10**6))),
                             "reason": draw(st.sampled_from(["rejected", "expired", "maxlen", "delivery_limit",
                                                             "", "weird"])),
                             "queue": draw(queue_names), "time": draw(stamps)}
    if draw(st.booleans()):
        entry["exchange"] = draw(queue_names)
    if draw(st.booleans()):
        entry["routing-keys"] = draw(st.lists(queue_names, max_size=3))
    if draw(st.booleans()):
        entry["original-expiration"] = str(draw(st.integers(1, 10**6)))
    keys = list(entry)
    draw(st.randoms()).shuffle(keys)
    return {k: entry[k] for k in keys}


@st.composite
def dead_letters(draw: Any) -> tuple[str, Any]:
    headers: dict[str, Any] = draw(st.dictionaries(names, values, max_size=5))
    headers["x-death"] = draw(st.lists(deaths(), min_size=1, max_size=5))
    for name in draw(st.lists(st.sampled_from(["x-first-death-queue", "x-first-death-reason", "x-last-death-queue",
                                               "CC", "x-delivery-count", "x-retry-count", "x-delivery-attempts",
                                               "count", "x-custom-retries"]), max_size=4, unique=True)):
        headers[name] = draw(st.text(max_size=60) | st.integers(-2**40, 2**40) | big_l(st.integers(-2**40, 2**40))
                             | st.lists(st.text(max_size=5)))
    if draw(st.booleans()):
        prov = {"from": "dlq", "count": draw(st.integers(0, 2**31 - 2) | big_l(st.integers(0, 2**31 - 2))),
                "deaths": draw(st.text(max_size=10))}
        # an earlier replay's first-origin address: it wins over x-death's
        for name in draw(st.lists(st.sampled_from(["exchange", "routing-key"]), unique=True)):
            prov[name] = draw(queue_names)
        headers[PROVENANCE_HEADER] = prov
    items = list(headers.items())
    draw(st.randoms()).shuffle(items)
    props = pika.BasicProperties(
        headers=dict(items),
        content_type=draw(st.none() | st.text(max_size=20)), content_encoding=draw(st.none() | st.just("gzip")),
        delivery_mode=draw(st.none() | st.sampled_from([1, 2])), priority=draw(st.none() | st.integers(0, 9)),
        correlation_id=draw(st.none() | st.text(max_size=20)), message_id=draw(st.none() | st.text(max_size=20)),
        timestamp=draw(st.none() | st.integers(0, 2**40)), type=draw(st.none() | st.text(max_size=20)),
        app_id=draw(st.none() | st.text(max_size=10)), expiration=draw(st.none() | st.just("60000")))
    return draw(queue_names), props


def default_exchange_route(target: str) -> tuple[str, bool] | str:
    """Routes for --default-exchange as the management API would answer them: one target's dead-letter
    exchange would drop the queue name (its messages stay), the others go on the default exchange."""
    return "elsewhere: with the default exchange, it would drop" if target == "elsewhere" else ("", False)


def deciders(**overrides: Any) -> tuple[ReplayDecider, ReplayDecider]:
    """Two deciders that stamp the same time and ids: one for each path. Routes: the original routing key
    through "(temporary exchange)", or the default exchange for default_exchange=True."""
    settings_ = ReplaySettings(source="orders.dlq", **overrides)
    routes = default_exchange_route if settings_.default_exchange else lambda _t: ("(temporary exchange)", True)
    a, b = ReplayDecider(settings_, now=NOW, routes=routes), ReplayDecider(settings_, now=NOW, routes=routes)
    b._run_id = a._run_id  # noqa: SLF001
    return a, b


def python_path(decider: ReplayDecider, routing_key: str, props: Any, body: bytes = BODY) -> Decision:
    method = pika.spec.Basic.Deliver("ctag", 7, False, "dlx", routing_key)
    return decider(MessageRecord.from_delivery("orders.dlq", method, props, body))


def assert_same(python: Decision, fast: Decision) -> None:
    assert (fast.action, fast.group, fast.exchange, fast.routing_key) == (
        python.action, python.group, python.exchange, python.routing_key)
    if python.action is Action.MOVE:
        assert fast.properties == encode_properties(python.properties)


def expects_fast(props: Any, **overrides: Any) -> bool:
    """Where the C path must answer: a failure death with a queue and no TTL to restore."""
    headers = props.headers
    origin = next((d for d in headers["x-death"] if d["reason"] in ("rejected", "maxlen", "delivery_limit")
                   and d["queue"]), None)
    failure = origin is not None and "original-expiration" not in origin
    if any(str(k).lower() == CELERY_HEADER for k in headers):
        return False  # a header `lang` (maybe a Celery task: Python resets its retries and picks its route)
    names, prefixes = fast_path_triggers(BUILT_IN) or ((), ())
    if any(str(k).lower() in names or str(k).lower().startswith(prefixes) for k in headers):
        return False  # a header another convention reads: Python explains the message
    if trusted_count(headers)[1] is not None:
        return False  # a replay count dlxtool never writes: Python says so (and --max-replays does not trust it)
    return failure  # the retry counters removed are rendered whatever their values (the old C declined lists …)


DRAMATIQ_BODY = (b'{"queue_name":"orders","actor_name":"charge","args":[1],"kwargs":{},'
                 b'"options":{"retries":2,"traceback":"ValueError: x"},"message_id":"m1","message_timestamp":1}')

# A value for every replay setting (dlxtool.ops.replay_settings): the fast path is compared with the Python path
# over all of them at once. A new setting without a strategy here fails test_every_setting_is_generated.
SETTINGS: dict[str, Any] = {
    "source": st.just("orders.dlq"),
    "selection": st.sampled_from([Selection(), Selection(origins=("orders",)), Selection(min_deaths=2)]),
    "to_queue": st.sampled_from([None, "elsewhere"]),
    "keep_history": st.booleans(),
    "reset_headers": st.sampled_from([(), ("count", "x-custom-retries"), ("X-Retry-Count",)]),
    "max_replays": st.none() | st.integers(1, 4),
    "default_exchange": st.booleans(),
    "drop_expiration": st.booleans(),
    "allow_displace": st.booleans(),
    "allow_dlx_drop": st.booleans(),
    "reset_body_retries": st.booleans(),
    "conventions": st.sampled_from([BUILT_IN, conventions([HeaderConvention("acme", origin_queue_header="acme-origin",
                                                                            attempts_header="acme-tries")])]),
    "origin_from": st.sampled_from([None, "x-death", "spring"]),
    "allow_fanout": st.booleans(),
    "publisher": st.sampled_from([None, "guest", "other"]),
    "impersonator": st.sampled_from([None, True, False]),
    "drop_user_id": st.booleans(),
    "edits": st.just(None),  # --edit turns the fast path off (only_when): the CLI tests replay its edits
    "run_id": st.none() | st.just("canary0run01"),
    "check_replies": st.booleans(),
}


def test_every_setting_is_generated() -> None:
    from dataclasses import fields

    assert set(SETTINGS) == {f.name for f in fields(ReplaySettings)}


@st.composite
def replay_settings(draw: Any) -> dict[str, Any]:
    return {name: draw(strategy) for name, strategy in SETTINGS.items() if name != "source"}


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(letter=dead_letters(), overrides=replay_settings(), body=st.sampled_from([BODY, DRAMATIQ_BODY]),
       user_id=st.sampled_from([None, "guest", "other"]))
def test_fast_path_publishes_what_the_python_path_publishes(letter: Any, overrides: dict[str, Any], body: bytes,
                                                            user_id: str | None) -> None:
    """Over generated settings and dead letters: the fast path answers exactly what the Python path answers for the
    same message, or declines. Where every setting lets it run and nothing in the message needs the Python path,
    it must answer."""
    from dlxtool.ops.replay_settings import fast_path_applies, fast_path_declines

    routing_key, props = letter
    props.user_id = user_id
    slow, fast = deciders(**overrides)
    raw = encode_properties(props)
    if fast.raw is None:
        assert not fast_path_applies(fast.s), "the settings allow the fast path, and it is off"
        return
    answer = fast.raw(routing_key, raw, body)
    if answer is None:
        declined = any(test(raw, body) for test in fast_path_declines(fast.s))
        assert declined or not expects_fast(props), "the fast path declined a canonical dead letter"
        return
    python = python_path(slow, routing_key, decode_properties(raw), body)
    assert_same(python, answer)
    if python.action is Action.MOVE:
        assert (answer.body if answer.body is not None else body) == (python.body if python.body is not None
                                                                      else body)


@st.composite
def related_letters(draw: Any) -> list[tuple[str, Any]]:
    """Dead letters of one DLQ that share most of what the fast path caches (x-death but routing keys, provenance,
    retry counters), with small variations: one decider replays them all, its caches warm."""
    templates = draw(st.lists(st.lists(deaths(), min_size=1, max_size=3), min_size=1, max_size=2))
    keys = st.sampled_from([None, [], ["a"], ["b", "c"], ["é"]])
    provs = st.sampled_from([None, {"count": 1}, {"count": 2, "exchange": "x", "routing-key": "k"},
                             {"count": 1, "routing-key": "k2", "src": "0123456789abcdef", "id": "run-1"}, "text",
                             # as replay writes id and src (the layout the fast path slices), and others
                             {"count": 1, "id": "run-1-7", "src": "0123456789abcdef"},
                             {"count": 1, "id": "run-2-3", "src": "0123456789abcdef"},
                             {"count": 1, "id": "rün-1-4", "src": "0123456789abcdef"},
                             {"count": 1, "id": "run-1-5", "src": "0123456789abcdeé"},
                             {"count": 1, "id": "", "src": "fedcba9876543210"},
                             {"count": 1, "id": "run-3-1", "src": "fedcba987654321"}])
    letters = []
    for _ in range(draw(st.integers(2, 8))):
        entries = [dict(e) for e in draw(st.sampled_from(templates))]
        for entry in entries:
            entry.pop("routing-keys", None)
            chosen = draw(keys)
            if chosen is not None:
                entry["routing-keys"] = chosen
        headers: dict[str, Any] = {"x-death": entries, "tenant": "acme"}
        prov = draw(provs)
        if prov is not None:
            headers[PROVENANCE_HEADER] = prov
        retry = draw(st.sampled_from([None, 1, 3, "3", [1]]))
        if retry is not None:
            headers["x-retry-count"] = retry
        letters.append((draw(st.sampled_from(["q", "r", "ä"])), pika.BasicProperties(headers=headers)))
    return letters


@pytest.mark.parametrize("overrides", [{}, {"max_replays": 2}, {"keep_history": True}, {"default_exchange": True}],
                         ids=["default", "max-replays", "keep-history", "default-exchange"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(letters=related_letters())
def test_one_decider_over_many_dead_letters_answers_as_the_python_path(overrides: dict[str, Any],
                                                                        letters: list[tuple[str, Any]]) -> None:
    """What the fast path caches (a reading per x-death, per provenance, per retry counters; encoded parts) never
    answers for one message what was read for another. Both deciders see the whole sequence, as the engine's:
    a message the fast path declines goes to the same decider's __call__."""
    slow, fast = deciders(**overrides)
    for routing_key, props in letters:
        raw = encode_properties(props)
        answer = fast.raw(routing_key, raw, BODY)
        if answer is None:
            answer = python_path(fast, routing_key, decode_properties(raw))
            if answer.action is Action.MOVE:
                answer.properties = encode_properties(answer.properties)
        assert_same(python_path(slow, routing_key, decode_properties(raw)), answer)


def test_a_broker_shaped_dead_letter_is_rewritten_as_documented() -> None:
    props = pika.BasicProperties(content_type="application/x-protobuf", delivery_mode=2, headers={
        "tenant": "acme",
        "x-death": [{"count": long(3), "reason": "expired", "queue": "orders.wait", "time": NOW,
                     "exchange": "retry", "routing-keys": ["orders.wait"]},
                    {"count": long(2), "reason": "rejected", "queue": "orders.work", "time": NOW,
                     "exchange": "orders", "routing-keys": ["order.created"]}],
        "x-first-death-queue": "orders.work", "x-first-death-reason": "rejected", "x-first-death-exchange": "orders",
        "x-retry-count": 4,
    })
    slow, fast = deciders()
    answer = fast.raw("orders.work", encode_properties(props), BODY)
    # the original routing key (x-death at the origin), through the route's exchange
    assert answer is not None and (answer.group, answer.exchange, answer.routing_key) == (
        "orders.work", "(temporary exchange)", "order.created")
    published = decode_properties(answer.properties)
    assert published.content_type == "application/x-protobuf" and published.delivery_mode == 2
    assert list(published.headers) == ["tenant", PROVENANCE_HEADER]
    prov = published.headers[PROVENANCE_HEADER]
    assert prov["from"] == "orders.dlq" and prov["at"] == NOW and prov["count"] == 1
    assert (prov["exchange"], prov["routing-key"]) == ("orders", "order.created")
    assert prov["deaths"] == "expired×3 from orders.wait, rejected×2 from orders.work"
    assert prov["reset"] == "x-retry-count=4"
    assert_same(python_path(slow, "orders.work", props), answer)


def test_a_second_replay_keeps_the_first_origins_key_in_c_as_in_python() -> None:
    """After one replay through a temporary exchange, x-death names that exchange; the provenance holds the
    first origin's exchange and routing key, and both paths publish with those."""
    props = pika.BasicProperties(headers={
        "x-death": [{"count": long(1), "reason": "rejected", "queue": "orders.work", "time": NOW,
                     "exchange": "dlxtool.replay.1234.0.orders.work", "routing-keys": ["order.created"]}],
        PROVENANCE_HEADER: {"from": "orders.dlq", "count": 1, "exchange": "orders", "routing-key": "order.placed"}})
    slow, fast = deciders()
    answer = fast.raw("orders.work", encode_properties(props), BODY)
    assert answer is not None and answer.routing_key == "order.placed"
    prov = decode_properties(answer.properties).headers[PROVENANCE_HEADER]
    assert (prov["exchange"], prov["routing-key"], prov["count"]) == ("orders", "order.placed", 2)
    assert_same(python_path(slow, "orders.work", props), answer)


def test_a_ttl_to_restore_is_left_to_python_which_restores_it() -> None:
    props = pika.BasicProperties(headers={
        "x-death": [{"count": long(1), "reason": "rejected", "queue": "q", "time": NOW, "routing-keys": ["k"],
                     "original-expiration": "600000"}]})
    slow, fast = deciders()
    assert fast.raw("q", encode_properties(props), BODY) is None
    published = python_path(slow, "q", props)
    assert published.properties.expiration == "600000"
    assert published.properties.headers[PROVENANCE_HEADER]["expiration"] == "600000"
    dropped = python_path(deciders(drop_expiration=True)[0], "q", props)
    assert dropped.properties.expiration is None
    assert "expiration" not in dropped.properties.headers[PROVENANCE_HEADER]  # dropped for good


def test_the_loop_guard_leaves_it_with_the_same_reason() -> None:
    props = pika.BasicProperties(headers={
        "x-death": [{"count": long(1), "reason": "rejected", "queue": "q", "time": NOW}],
        PROVENANCE_HEADER: {"count": 2}})
    slow, fast = deciders(max_replays=2)
    answer = fast.raw("q", encode_properties(props), BODY)
    assert answer is not None and answer.action is Action.LEAVE
    assert_same(python_path(slow, "q", props), answer)


@pytest.mark.parametrize("count", [2**63 - 1, "99999999999999999999"], ids=["int64-max", "text"])
@pytest.mark.parametrize("overrides", [{}, {"max_replays": 3}], ids=["plain", "max-replays"])
def test_a_replay_count_past_64_bits_never_raises_on_the_fast_path(count: Any, overrides: dict[str, Any]) -> None:
    """An earlier provenance whose count + 1 does not fit an AMQP integer: the fast path declines it (the plan's
    entries cannot be encoded) and the Python path decides, as for every message it leaves; it never raises out
    of the engine (a raise would end the whole run on that one message, every time)."""
    props = pika.BasicProperties(headers={
        "x-death": [{"count": long(1), "reason": "rejected", "queue": "q", "time": NOW}],
        PROVENANCE_HEADER: {"count": count}})
    slow, fast = deciders(**overrides)
    raw = encode_properties(props)
    assert fast.raw("q", raw, BODY) is None
    answer = python_path(slow, "q", decode_properties(raw))
    if overrides:  # not a count dlxtool writes: the loop guard cannot trust it (issue 28: a forged -3 passed it)
        assert answer.action is Action.LEAVE and "replay count dlxtool never writes" in answer.group


@pytest.mark.parametrize("headers", [
    {"x-death": [{"count": long(1), "reason": "expired", "queue": "wait", "time": NOW}],
     "x-first-death-queue": "work"},                                    # origin from x-first-death-queue
    {"x-death": {"count": long(1), "reason": "rejected", "queue": "q"}},  # a table, not an array
    {"x-death": [{"count": long(1), "reason": b"rejected\xff", "queue": "q"}]},  # no failure reason: as above
    {"x-death": [{"count": long(1), "reason": "rejected", "queue": "q", "original-expiration": "60"}]},  # a TTL
    {"x-death": [{"count": long(1), "reason": "rejected", "queue": "q"}],
     PROVENANCE_HEADER: {"exchange": "", "expiration": "60"}},
    {"tenant": "acme"},
    {"x-death": [{"count": long(1), "reason": "rejected", "queue": "q"}],  # not a count dlxtool writes: said
     PROVENANCE_HEADER: {"count": RawValue(b"d" + struct.pack(">d", float("inf")))}},
    {"x-death": [{"count": long(1), "reason": "rejected", "queue": "q"}], PROVENANCE_HEADER: {"count": -3}},
], ids=["first-death", "table", "bad-utf8", "ttl", "recorded-ttl", "no-x-death", "infinite-replays", "negative"])
def test_what_the_fast_path_cannot_do_is_left_to_the_python_path(headers: dict[str, Any]) -> None:
    _slow, fast = deciders()
    assert fast.raw("q", encode_properties(pika.BasicProperties(headers=headers)), BODY) is None


@pytest.mark.parametrize("headers", [
    {"x-death": [{"count": "1", "reason": "rejected", "queue": "q"}]},   # a text count
    {"x-death": [{"count": RawValue(b"d" + struct.pack(">d", 2.5)), "reason": "rejected", "queue": "q"}]},
    {"x-death": [{"count": long(1), "reason": "rejected", "queue": "q"}], "x-retry-count": [1, 2]},
    {"x-death": [{"count": long(1), "reason": "rejected", "queue": "q"}],
     "x-retry-count": {"n": RawValue(b"d" + struct.pack(">d", 3.5))}},
    {"x-death": [{"count": long(1), "reason": "rejected", "queue": "q"}], PROVENANCE_HEADER: {"count": "2"}},
    {"x-death": [{"count": long(1), "reason": "rejected", "queue": "q", "routing-keys": [7, b"\xff"]}]},
], ids=["text-count", "float-count", "list-retry", "table-retry", "text-replays", "odd-keys"])
def test_unusual_values_are_read_by_the_python_paths_own_rules(headers: dict[str, Any]) -> None:
    """The C only hands the encoded values over; the rules that read them are the Python path's: a value the
    broker would not write is read the same on both paths (the old C rewrite declined these)."""
    slow, fast = deciders()
    raw = encode_properties(pika.BasicProperties(headers=headers))
    answer = fast.raw("q", raw, BODY)
    assert answer is not None
    assert_same(python_path(slow, "q", decode_properties(raw)), answer)


def test_duplicate_header_names_are_left_to_the_python_path() -> None:
    raw = bytearray(encode_properties(pika.BasicProperties(headers={
        "x-death": [{"count": long(1), "reason": "rejected", "queue": "q"}], "aaaaaaa": "x"})))
    raw[raw.index(b"aaaaaaa"):raw.index(b"aaaaaaa") + 7] = b"x-death"[:7]  # a second key "x-death"
    _slow, fast = deciders()
    assert fast.raw("q", bytes(raw), BODY) is None


def _table(*items: tuple[bytes, bytes]) -> bytes:
    """A field table written as given (a key may come twice), with its 4-byte size."""
    body = b"".join(bytes([len(key)]) + key + value for key, value in items)
    return struct.pack(">I", len(body)) + body


FAILED_IN_Q = {"count": long(1), "reason": "rejected", "queue": "q", "time": NOW}
ENTRY_WITH_A_KEY_TWICE = b"F" + _table(
    (b"count", b"l" + struct.pack(">q", 1)), (b"reason", b"S\x00\x00\x00\x08rejected"),
    (b"queue", b"S\x00\x00\x00\x01q"), (b"time", b"T" + struct.pack(">Q", 1)), (b"time", b"T" + struct.pack(">Q", 2)))
X_DEATH_WITH_A_KEY_TWICE = b"A" + struct.pack(">I", len(ENTRY_WITH_A_KEY_TWICE)) + ENTRY_WITH_A_KEY_TWICE


@pytest.mark.parametrize("overrides", [{}, {"keep_history": True}], ids=["default", "keep-history"])
@pytest.mark.parametrize("headers", [
    {"h": RawValue(b"S\x00\x00\x00\x02\xff\xfe")},                     # a long string RabbitMQ passes on as is
    {"h": RawValue(b"F" + _table((b"s", b"S\x00\x00\x00\x02\xc3\x28")))},  # the same inside a table
    {"h": RawValue(b"A\x00\x00\x00\x06S\x00\x00\x00\x01\x80")},       # and inside an array
    {"h": RawValue(b"t\x02")},                                             # a boolean that is not 0 or 1
    {"h": RawValue(b"F" + _table((b"a", b"I\x00\x00\x00\x01"), (b"a", b"V")))},  # a table with a key twice
    {"x-death": RawValue(X_DEATH_WITH_A_KEY_TWICE)},                        # kept as is with --keep-history
], ids=["not-utf8", "not-utf8-in-table", "not-utf8-in-array", "bool-2", "key-twice", "x-death-key-twice"])
def test_kept_values_the_python_path_writes_back_otherwise_are_left_to_it(headers: dict[str, Any],
                                                                          overrides: dict[str, Any]) -> None:
    # Python decodes a non-UTF-8 long string as bytes and publishes it as a byte array (x), any boolean byte as
    # 1, a table with a key twice as one key: copying those bytes as they are would publish something else.
    raw = encode_properties(pika.BasicProperties(headers={"tenant": "acme", "x-death": [FAILED_IN_Q], **headers}))
    slow, fast = deciders(**overrides)
    answer = fast.raw("q", raw, BODY)
    if answer is not None:
        assert_same(python_path(slow, "q", decode_properties(raw)), answer)


def test_a_reset_header_name_that_is_not_utf8_text_agrees_with_the_python_path() -> None:
    # click hands argv bytes that are not UTF-8 over as surrogates: `--reset-header $'x-\xff'` is 'x-\udcff'
    slow, fast = deciders(reset_headers=("x-\udcff",))
    props = pika.BasicProperties(headers={"x-death": [FAILED_IN_Q], "x-retry-count": 2})
    assert_same(python_path(slow, "q", props), fast.raw("q", encode_properties(props), BODY))
    # a header named by the same bytes (not UTF-8 either): Python keeps it (its name decodes to bytes, not that str)
    slow, fast = deciders(reset_headers=("x-\udcff",))
    raw = encode_properties(pika.BasicProperties(headers={"x-death": [FAILED_IN_Q], b"x-\xed\xb3\xbf": "1"}))
    answer = fast.raw("q", raw, BODY)
    if answer is not None:
        assert_same(python_path(slow, "q", decode_properties(raw)), answer)


def test_a_provenance_named_as_a_retry_header_is_reported_as_python_reports_it() -> None:
    """--reset-header dlxtool-replay: the earlier provenance is removed like a retry counter and shown in "reset"
    (its count still counts): what the old C rewrite left to Python, read by the same rules on both paths."""
    props = pika.BasicProperties(headers={"x-death": [FAILED_IN_Q], PROVENANCE_HEADER: {"count": 4, "from": "d"}})
    slow, fast = deciders(reset_headers=(PROVENANCE_HEADER,))
    answer = fast.raw("q", encode_properties(props), BODY)
    assert answer is not None
    prov = decode_properties(answer.properties).headers[PROVENANCE_HEADER]
    assert prov["count"] == 5 and prov["reset"] == "dlxtool-replay={'count': 4, 'from': 'd'}"
    assert_same(python_path(slow, "q", props), answer)


def test_read_deliveries_refuses_an_offset_outside_the_buffer() -> None:
    module = hotpath.load()
    assert module is not None
    with pytest.raises(ValueError, match="offset"):  # was: SystemError, NULL returned without an exception set
        module.read_deliveries(b"", 5, 1, ())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(letter=dead_letters(), seed=st.integers(0, 2**32), flips=st.integers(1, 8))
def test_mutated_bytes_never_crash_and_an_answer_agrees_with_python(letter: Any, seed: int, flips: int) -> None:
    routing_key, props = letter
    raw = bytearray(encode_properties(props))
    rnd = random.Random(seed)
    for _ in range(flips):
        what = rnd.random()
        at = rnd.randrange(len(raw))
        if what < 0.6:
            raw[at] = rnd.randrange(256)
        elif what < 0.8:
            del raw[at:at + rnd.randint(1, 8)]
        else:
            raw[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
    slow, fast = deciders()
    answer = fast.raw(routing_key, bytes(raw), BODY)
    if answer is None:
        return
    python = python_path(slow, routing_key, decode_properties(bytes(raw)))  # must decode: the C path took it
    assert (answer.action, answer.group) == (python.action, python.group)
    if python.action is Action.MOVE:
        assert answer.properties == encode_properties(python.properties)


@given(garbage=st.binary(max_size=300))
@settings(max_examples=500, deadline=None)
def test_garbage_is_declined(garbage: bytes) -> None:
    _slow, fast = deciders()
    answer = fast.raw("q", garbage, BODY)
    assert answer is None or answer.action in (Action.MOVE, Action.LEAVE)


def test_time_of_day_is_stamped_to_the_second() -> None:
    props = pika.BasicProperties(headers={"x-death": [{"count": long(1), "reason": "rejected", "queue": "q"}]})
    _slow, fast = deciders()
    fast.now = None
    before = datetime.now(UTC).replace(microsecond=0)
    answer = raw_decider(fast)("q", encode_properties(props), BODY)  # its clock is read as it is made
    stamp = decode_properties(answer.properties).headers[PROVENANCE_HEADER]["at"]
    assert before <= stamp <= datetime.now(UTC) + timedelta(seconds=1)


def _props(headers: dict[str, Any]) -> Any:
    return pika.BasicProperties(headers=headers, content_type="application/json", delivery_mode=2, message_id="m",
                                timestamp=1_700_000_000, app_id="a")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers=st.dictionaries(names, values, max_size=6), data=st.data())
def test_splice_copies_the_headers_but_the_dropped_ones_and_appends_the_entries(headers: dict[str, Any],
                                                                                data: Any) -> None:
    """splice_headers is a byte operation: the properties Python would encode for the kept headers followed by
    the appended ones."""
    accelerator = hotpath.load()
    assert accelerator is not None
    drop = data.draw(st.lists(st.sampled_from([*headers, "absent"]), unique=True))
    extra = {k: v for k, v in data.draw(st.dictionaries(names, values, max_size=3)).items()
             if k in drop or k not in headers}
    spliced = accelerator.splice_headers(encode_properties(_props(headers)), tuple(n.encode() for n in drop),
                                         encode_amqp_table(extra)[4:])
    kept = {k: v for k, v in headers.items() if k not in drop}
    assert spliced == encode_properties(_props({**kept, **extra}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers=st.none() | st.dictionaries(names, values, max_size=6), body=st.binary(max_size=700),
       content_type=st.none() | st.text(max_size=20), message_id=st.none() | st.text(max_size=200))
def test_fingerprint_in_c_is_the_python_fingerprint(headers: Any, body: bytes, content_type: Any,
                                                     message_id: Any) -> None:
    """The provenance `src` the C path writes is source_fingerprint's (hashlib's BLAKE2b): a copy made on one
    codec pairs with its source on any other, and with the copies earlier versions made. Bodies across the
    128-byte block boundaries; properties with and without a header table."""
    from dlxtool.ops.provenance import source_fingerprint

    accelerator = hotpath.load()
    assert accelerator is not None
    props = encode_properties(pika.BasicProperties(headers=headers, content_type=content_type, message_id=message_id,
                                                   delivery_mode=2, priority=3))
    assert accelerator.fingerprint(props, body) == source_fingerprint(props, body)
    assert accelerator.fingerprint(props, body + b"." * 2049) is None  # a large body: hashlib's, faster there


@given(props=st.binary(max_size=60), body=st.binary(max_size=300))
@settings(max_examples=500, deadline=None)
def test_fingerprint_in_c_agrees_on_garbage_or_declines(props: bytes, body: bytes) -> None:
    """Properties that do not parse: the C answers what Python answers, or None (Python's to compute)."""
    from dlxtool.ops.provenance import source_fingerprint

    accelerator = hotpath.load()
    assert accelerator is not None
    answer = accelerator.fingerprint(props, body)
    assert answer is None or answer == source_fingerprint(props, body)


class _SmallGuard(CopyGuard):
    """A copy guard with a 512-bit filter: a few dozen fingerprints already set most of it (partial hits)."""

    BITS = 1 << 9
    _MASK = BITS - 1


@settings(max_examples=300, deadline=None)
@given(sources=st.lists(st.text(max_size=20), max_size=60), probes=st.lists(st.text(max_size=20), max_size=30))
def test_the_copy_guards_filter_in_c_holds_the_bits_python_sets(sources: list[str], probes: list[str]) -> None:
    """CopyGuard's Bloom filter through the C extension's bloom() (the `c` codec's): the same bytes as the Python
    bits after the same sources, and the same answer for every fingerprint asked after them, hits and misses and
    partial hits (a small filter). Python's hash() of str is negative about half the time: the shifts agree."""
    accelerator = hotpath.load()
    assert accelerator is not None
    python, c = _SmallGuard(), _SmallGuard(accelerator.bloom)
    for fingerprint in sources:
        assert python.stays(fingerprint, None) is c.stays(fingerprint, None) is False
    assert python._bloom == c._bloom  # noqa: SLF001 - the filter's bytes are what must agree
    for fingerprint in [*probes, *sources]:
        assert python._seen(fingerprint) == c._seen(fingerprint)  # noqa: SLF001
    assert all(c._seen(fingerprint) for fingerprint in sources)  # noqa: SLF001 - no false miss


def test_bloom_refuses_a_filter_it_cannot_index() -> None:
    accelerator = hotpath.load()
    assert accelerator is not None
    for filter_ in (bytearray(3), bytearray(0), bytearray(1 << 22)):  # not a power of two bits; none; over 2**24
        with pytest.raises(ValueError, match="power of two"):
            accelerator.bloom(filter_, "0123456789abcdef", True)
    with pytest.raises(BufferError):
        accelerator.bloom(b"\0" * 8, "0123456789abcdef", True)  # read-only


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(headers=st.dictionaries(names, values | st.lists(st.dictionaries(names, values, max_size=4), max_size=3),
                               max_size=6), data=st.data())
def test_scan_hands_over_the_picked_fields_and_the_reported_values(headers: dict[str, Any], data: Any) -> None:
    accelerator = hotpath.load()
    assert accelerator is not None
    wanted = st.sampled_from([*headers, "absent"])
    report = data.draw(st.lists(wanted, unique=True))
    fields_of = {name: sorted({k for v in ([headers[name]] if isinstance(headers.get(name), dict) else
                                           headers.get(name) if isinstance(headers.get(name), list) else [])
                               if isinstance(v, dict) for k in v} | {"absent"}) for name in [*headers, "absent"]}
    picks = [(name, data.draw(st.lists(st.sampled_from(fields_of[name]), unique=True)))
             for name in data.draw(st.lists(wanted, max_size=4))]
    drop = tuple(k.encode() for k in headers)  # nothing kept: no value is held to what Python writes back
    scanned = accelerator.scan_headers(encode_properties(_props(headers)), drop, tuple(n.encode() for n in report),
                                       tuple((n.encode(), tuple(f.encode() for f in fs)) for n, fs in picks))
    assert scanned is not None

    def only(table: dict[str, Any], fields: list[str]) -> bytes:
        return encode_amqp_table({k: v for k, v in table.items() if k in fields})

    expected = []
    for name, fields in picks:
        value = headers.get(name) if name in headers else ...
        if value is ...:
            expected.append(None)
        elif isinstance(value, dict):
            expected.append(only(value, fields))
        elif isinstance(value, list) and all(isinstance(v, dict) for v in value):
            expected.append([only(v, fields) for v in value])
        else:
            expected.append(False)
    assert scanned == (tuple(expected), tuple((k.encode(), encode_field_value(headers[k])) for k in headers
                                              if k in report))


def test_scan_and_splice_decline_what_they_cannot_copy_exactly() -> None:
    accelerator = hotpath.load()
    assert accelerator is not None
    twice = b"\x20\x00" + _table((b"b", b"I\x00\x00\x00\x01"), (b"b", b"I\x00\x00\x00\x02"))  # headers only
    assert accelerator.scan_headers(b"\x20\x00" + _table((b"b", b"I\x00\x00\x00\x01")), (), (), ()) == ((), ())
    not_utf8 = encode_properties(_props({"h": RawValue(b"S\x00\x00\x00\x01\xff")}))
    for props in (b"", b"\x00", encode_properties(pika.BasicProperties(message_id="m")),  # no header table
                  encode_properties(_props({"a": 1})) + b"\x00", twice):
        assert accelerator.scan_headers(props, (), (), ()) is None
    assert accelerator.scan_headers(not_utf8, (), (), ()) is None  # kept: Python would write it back as bytes
    assert accelerator.scan_headers(not_utf8, (b"h",), (), ()) is not None  # dropped: never written back
    assert accelerator.splice_headers(b"\x20\x00\x00\x00\x00\x09", (), b"") is None  # a table past the end
    with pytest.raises(TypeError):
        accelerator.scan_headers(not_utf8, ("h",), (), ())


@given(channel=st.integers(1, 65535), method=st.binary(max_size=300), props=st.binary(max_size=300),
       body=st.binary(max_size=700), body_max=st.integers(1, 800))
def test_publish_frames_in_c_are_the_python_frames(channel: int, method: bytes, props: bytes, body: bytes,
                                                   body_max: int) -> None:
    from dlxtool.broker.wire import frames

    accelerator = hotpath.load()
    assert accelerator is not None
    assert accelerator.publish_frames(channel, method, props, body, body_max) == frames._py_frames(  # noqa: SLF001
        channel, method, body, props, body_max)


def test_a_celery_task_gets_its_retries_reset_in_python_not_removed() -> None:
    """Celery counts attempts in its `retries` header (task protocol 2) and needs the header: it is set back
    to 0 (recorded in the provenance), and the C path leaves such messages to Python."""
    celery = {"lang": "py", "task": "orders.charge", "id": "5f0c", "retries": 3, "root_id": "5f0c"}
    props = pika.BasicProperties(content_type="application/json", headers={
        **celery, "x-death": [{"count": long(1), "reason": "rejected", "queue": "celery", "time": NOW,
                               "routing-keys": ["celery"]}]})
    slow, fast = deciders()
    assert fast.raw("celery", encode_properties(props), BODY) is None
    published = python_path(slow, "celery", props)
    assert published.properties.headers["retries"] == 0
    assert published.properties.headers["task"] == "orders.charge"
    assert published.properties.headers[PROVENANCE_HEADER]["reset"] == "retries=3"
    kept = python_path(deciders(keep_history=True)[0], "celery", props)
    assert kept.properties.headers["retries"] == 3


def test_a_dramatiq_body_is_rewritten_in_python_only_with_reset_body_retries() -> None:
    """--reset-body-retries sets Dramatiq's options.retries back to 0 in the body: the C path never touches a
    body, so it leaves Dramatiq-shaped bodies to Python then; without the option the body is published as is."""
    props = pika.BasicProperties(headers={"x-death": [{"count": long(1), "reason": "rejected", "queue": "orders",
                                                       "time": NOW, "routing-keys": ["orders"]}]})
    encoded = encode_properties(props)
    plain, fast_plain = deciders()
    assert fast_plain.raw is not None and fast_plain.raw("orders", encoded, DRAMATIQ_BODY) is not None
    method = pika.spec.Basic.Deliver("ctag", 7, False, "dlx", "orders")
    untouched = plain(MessageRecord.from_delivery("orders.dlq", method, props, DRAMATIQ_BODY))
    assert untouched.body == DRAMATIQ_BODY
    slow, fast = deciders(reset_body_retries=True)
    assert fast.raw is not None and fast.raw("orders", encoded, DRAMATIQ_BODY) is None
    assert fast.raw("orders", encoded, BODY) is not None  # other bodies keep the fast path
    reset = slow(MessageRecord.from_delivery("orders.dlq", method, props, DRAMATIQ_BODY))
    assert reset.body == DRAMATIQ_BODY.replace(b'"retries":2', b'"retries":0')
    assert reset.record is not None and reset.record.body == reset.body  # what --save writes


XDEATH = {"x-death": [{"count": long(1), "reason": "rejected", "queue": "orders.work", "time": NOW, "exchange": "",
                       "routing-keys": ["orders.work"]}]}


@pytest.mark.parametrize(("headers", "group"), [
    ({"x-original-exchange": "orders", "x-original-routingKey": "order.created", "x-exception-message": "boom",
      "x-exception-stacktrace": "..."}, "orders → order.created"),
    ({"X-Original-Exchange": "orders", "X-ORIGINAL-ROUTINGKEY": "order.created"}, "orders → order.created"),
    ({"x-original-routing\u212aey": "orders.q"}, "orders.q"),  # KELVIN SIGN: Python's lower() makes it a 'k'
    ({"NServiceBus.FailedQ": "Sales", "NServiceBus.ExceptionInfo.Message": "no lines"}, "Sales"),
    ({"nservicebus.exceptioninfo.Message": "no lines"}, "orders.work"),
    ({"MT-Fault-InputAddress": "rabbitmq://h/v/submit", "MT-Fault-Message": "timeout"}, "submit"),
    ({"MT-Reason": "fault"}, "orders.work"),
    ({"rascal": {"originalQueue": "q1", "error": {"message": "bad"}}}, "q1"),
], ids=["spring", "spring-case", "spring-kelvin-sign", "nservicebus", "nservicebus-error-only", "masstransit",
        "masstransit-reason", "rascal"])
def test_a_dead_letter_another_convention_explains_is_left_to_python(headers: dict[str, Any], group: str) -> None:
    """x-death and a framework's headers: the framework's failure is the most recent (it republished what it
    received, x-death included), so its origin wins, and its failure headers go with the count reset: the C path,
    which reads x-death only, must decline (or it would replay to x-death's origin and keep those headers)."""
    props = pika.BasicProperties(headers={**XDEATH, **headers})
    slow, fast = deciders(allow_displace=True)
    assert fast.raw("orders.work", encode_properties(props), BODY) is None
    decided = python_path(slow, "orders.work", props)
    assert decided.group == group, decided
    assert decided.action is Action.MOVE and list(decided.properties.headers) in (
        [PROVENANCE_HEADER], ["rascal", PROVENANCE_HEADER]), decided.properties.headers


def test_a_team_conventions_headers_are_left_to_python() -> None:
    team = HeaderConvention("acme", origin_queue_header="acme-origin", attempts_header="acme-tries")
    props = pika.BasicProperties(headers={**XDEATH, "ACME-Tries": 3})
    slow, fast = deciders(conventions=conventions([team]))
    assert fast.raw("orders.work", encode_properties(props), BODY) is None
    decided = python_path(slow, "orders.work", props)
    assert decided.group == "orders.work" and "ACME-Tries" not in decided.properties.headers
    # Built-in conventions only: the same header is a plain one, kept, and the C path answers as Python does.
    plain_slow, plain_fast = deciders()
    answer = plain_fast.raw("orders.work", encode_properties(props), BODY)
    assert answer is not None and "ACME-Tries" in decode_properties(answer.properties).headers
    assert_same(python_path(plain_slow, "orders.work", props), answer)


def test_origin_from_another_convention_turns_the_fast_path_off() -> None:
    slow, fast = deciders(origin_from="spring")
    assert fast.raw is None
    decided = python_path(slow, "orders.work", pika.BasicProperties(headers=XDEATH))
    assert decided.action is Action.LEAVE and decided.group == "no origin: --origin-from spring: it names no " \
                                                                "origin here"
    assert deciders(origin_from="x-death")[1].raw is not None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(letter=dead_letters())
def test_the_python_paths_x_death_shortcut_decides_as_every_convention_would(letter: Any) -> None:
    """Without another convention's header, the Python path skips reading the message with every convention
    (ReplayDecider._triggers): the decision must be the one the full reading gives."""
    routing_key, props = letter
    quick, full = deciders()
    full._triggers = None  # noqa: SLF001 - every message read with every convention
    assert quick._triggers is not None  # noqa: SLF001
    a, b = python_path(quick, routing_key, props), python_path(full, routing_key, props)
    assert (a.action, a.group, a.exchange, a.routing_key) == (b.action, b.group, b.exchange, b.routing_key)
    if a.action is Action.MOVE:
        assert encode_properties(a.properties) == encode_properties(b.properties)
