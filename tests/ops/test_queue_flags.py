"""Flag rules on fake management-API rows (the real broker proves them in tests/cli/test_queues.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlxtool.broker.management import default_delivery_limit
from dlxtool.ops import queue_flags as qf
from dlxtool.ops.dead_letter_roles import Listings
from tests.fuzz.strategies import FUZZ


def api_row(name: str, *, type_: str = "classic", ready: int = 0, unacked: int = 0, consumers: int = 0,
            args: dict[str, Any] | None = None, policy: dict[str, Any] | None = None,
            rates: dict[str, float] | None = None, vhost: str = "v") -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": name, "vhost": vhost, "type": type_, "messages_ready": ready, "messages_unacknowledged": unacked,
        "consumers": consumers, "arguments": args or {}, "policy": "p" if policy else None,
        "effective_policy_definition": policy or [],  # the API sends [] when no policy applies
    }
    if rates is not None:
        row["message_stats"] = {f"{k}_details": {"rate": v} for k, v in rates.items()}
    return row


def listings(bindings: list[dict[str, Any]] | None = None, exchanges: dict[str, str] | None = None) -> Any:
    """listings_of for flag_rows: these bindings (of any vhost); every exchange they name is fanout unless
    `exchanges` gives its type."""
    bindings = bindings or []
    types = {b["source"]: "fanout" for b in bindings} | (exchanges or {})
    by_vhost: dict[str, Listings] = {}
    for b in bindings:
        by_vhost.setdefault(b["vhost"], Listings())
    for v, listing in by_vhost.items():
        listing.exchanges = {name: {"name": name, "type": kind} for name, kind in types.items()}
        for b in bindings:
            if b["vhost"] == v:
                listing.add_binding(b)
    return lambda vhost: by_vhost.get(vhost, Listings())


def flag_rows(rows: list[qf.QueueRow], bindings: list[dict[str, Any]] | None = None,
              exchanges: dict[str, str] | None = None) -> list[qf.QueueRow]:
    return qf.flag_rows(rows, listings(bindings, exchanges))


def flags_of(*rows: dict[str, Any], bindings: list[dict[str, Any]] | None = None,
             exchanges: dict[str, str] | None = None, version: str | None = None) -> dict[str, dict[str, str]]:
    parsed = [qf.row_from_api("b", r, broker_version=version) for r in rows]
    return {r.queue: r.flags for r in flag_rows(parsed, bindings, exchanges)}


def bind(source: str, dest: str, kind: str = "queue", vhost: str = "v", key: str = "") -> dict[str, str]:
    return {"vhost": vhost, "source": source, "destination": dest, "destination_type": kind, "routing_key": key}


LOOPING = {"deliver_get": 900.0, "redeliver": 900.0, "ack": 0.0}
HEALTHY = {"publish": 50.0, "deliver_get": 50.0, "redeliver": 0.0, "ack": 50.0}


def test_arguments_win_over_policy_setting_by_setting() -> None:
    row = qf.row_from_api("b", api_row("q", args={"x-dead-letter-exchange": "from-args"},
                                       policy={"dead-letter-exchange": "from-policy",
                                               "dead-letter-routing-key": "rk-policy"}))
    assert row.dead_letter_exchange == "from-args"
    assert row.dead_letter_routing_key == "rk-policy"
    assert row.dead_letter_source == {"exchange": "arguments", "routing_key": "policy"}


def test_missing_message_stats_means_zero_rates() -> None:
    row = qf.row_from_api("b", api_row("q", ready=3))
    assert row.rates == qf.Rates()


def test_dlq_through_exchange_and_exchange_to_exchange_bindings() -> None:
    flags = flags_of(api_row("work", args={"x-dead-letter-exchange": "dlx"}), api_row("dead", ready=2),
                     api_row("chained"), api_row("other", ready=1),
                     bindings=[bind("dlx", "dead"), bind("dlx", "dlx2", "exchange"), bind("dlx2", "chained"),
                               bind("elsewhere", "other")])
    assert "dlq" in flags["dead"] and "work" in flags["dead"]["dlq"]
    assert "dlq" in flags["chained"]
    assert flags["other"] == {"no-consumer": "1 message(s) ready and no consumer"}
    assert "no-consumer" not in flags["dead"]  # a DLQ without a consumer is normal


def test_dlq_via_policy_and_default_exchange_routing_key() -> None:
    flags = flags_of(api_row("work", policy={"dead-letter-exchange": "", "dead-letter-routing-key": "parking"}),
                     api_row("parking"))
    assert "dlq" in flags["parking"]


def test_dlq_is_per_vhost() -> None:
    flags = flags_of(api_row("work", vhost="a", args={"x-dead-letter-exchange": "dlx"}),
                     api_row("dead", vhost="b"), bindings=[bind("dlx", "dead", vhost="b")])
    assert "dlq" not in flags["dead"]


def test_a_retry_stage_is_wait_not_dlq_and_the_queue_it_feeds_back_is_not_a_dlq() -> None:
    """Issue 30: work dead-letters to a TTL wait queue, which dead-letters back to work (a retry loop). The wait
    queue was flagged dlq: it is a retry stage, and what it sends back are retries, not dead letters."""
    flags = flags_of(api_row("retry.wait", ready=5, args={"x-message-ttl": 5000, "x-dead-letter-exchange": "work"}),
                     api_row("work", consumers=1, args={"x-dead-letter-exchange": "retry"}),
                     bindings=[bind("work", "work"), bind("retry", "retry.wait")])
    assert flags["work"] == {}
    assert flags["retry.wait"] == {"wait": "retry stage (message TTL 5000 ms): dead-letters to work, which has 1 "
                                           "consumer(s)"}


def test_clogged_with_the_poison_message_in_the_prefetch() -> None:
    flags = flags_of(api_row("q", unacked=3, consumers=1, rates=LOOPING,
                             args={"x-dead-letter-exchange": "dlx"}))
    assert list(flags["q"]) == ["clogged"]


@pytest.mark.parametrize("rates, consumers, messages", [
    (HEALTHY, 1, 5),  # acks keep up
    ({"deliver_get": 100.0, "redeliver": 5.0, "ack": 95.0}, 1, 5),  # a few retries, mostly acked
    (LOOPING, 1, 0),  # nothing left in the queue
    (LOOPING, 0, 5),  # no consumer (rates lag behind)
    ({"redeliver": 0.05}, 1, 5),  # below the rate threshold
])
def test_not_clogged(rates: dict[str, float], consumers: int, messages: int) -> None:
    flags = flags_of(api_row("q", ready=messages, consumers=consumers, rates=rates,
                             args={"x-dead-letter-exchange": "dlx"}))
    assert "clogged" not in flags["q"]


def test_no_dlx_when_rejects_loop_or_drop() -> None:
    flags = flags_of(api_row("looping", unacked=1, consumers=1, rates=LOOPING),
                     api_row("dropping", consumers=1, rates={"deliver_get": 20.0, "ack": 1.0}),
                     api_row("autoack", consumers=1, rates={"deliver_get": 20.0, "deliver_no_ack": 20.0}),
                     api_row("healthy", consumers=1, rates=HEALTHY),
                     api_row("has-dlx", consumers=1, rates=LOOPING, args={"x-dead-letter-exchange": "d"}))
    assert "requeue" in flags["looping"]["no-dlx"]
    assert "dropped" in flags["dropping"]["no-dlx"]
    assert "no-dlx" not in flags["autoack"]  # auto-ack deliveries are never acked explicitly
    assert "no-dlx" not in flags["healthy"]
    assert "no-dlx" not in flags["has-dlx"]


PEEKED = {"deliver_get": 3.0, "get": 3.0, "redeliver": 2.8, "ack": 0.0}  # basic.get, given back, again


def test_peeks_are_not_rejects() -> None:
    flags = flags_of(api_row("work", args={"x-dead-letter-exchange": "dlx"}),
                     api_row("dead", ready=40, rates=PEEKED),
                     api_row("served", ready=5, consumers=1,
                             rates={"deliver_get": 53.0, "get": 3.0, "redeliver": 2.8, "ack": 50.0}),
                     api_row("looping-and-peeked", unacked=1, consumers=1,
                             rates={"deliver_get": 903.0, "get": 3.0, "redeliver": 902.0, "ack": 0.0}),
                     api_row("dropping", consumers=1, rates={"deliver_get": 23.0, "get": 3.0, "ack": 1.0}),
                     bindings=[bind("dlx", "dead")])
    assert list(flags["dead"]) == ["dlq"]  # no consumer: nobody rejects, the redeliveries are peeks
    assert flags["served"] == {}  # a consumer acks all it gets; the peeks' redeliveries are discounted
    assert list(flags["looping-and-peeked"]) == ["clogged", "no-dlx"]
    assert "899/s redelivered" in flags["looping-and-peeked"]["no-dlx"]
    assert "ack 1/s of 20/s delivered" in flags["dropping"]["no-dlx"]


def test_streams_get_no_consumer_side_flags() -> None:
    flags = flags_of(api_row("s", type_="stream", ready=1000, rates=LOOPING))
    assert flags["s"] == {}


def test_at_limit_from_redelivery_share_against_the_limit() -> None:
    near = {"deliver_get": 10.0, "redeliver": 9.0}  # ~10 deliveries per message
    flags = flags_of(api_row("near", type_="quorum", ready=3, consumers=1, rates=near,
                             args={"x-delivery-limit": 12}),
                     api_row("far", type_="quorum", ready=3, consumers=1, rates=near,
                             policy={"delivery-limit": 50}),
                     api_row("unlimited", type_="quorum", ready=3, consumers=1, rates=near),
                     api_row("classic", ready=3, consumers=1, rates=near, args={"x-delivery-limit": 12}))
    assert "~10.0 deliveries per message" in flags["near"]["at-limit"]
    assert "at-limit" not in flags["far"]
    assert "at-limit" not in flags["unlimited"]
    assert "at-limit" not in flags["classic"]


def test_at_limit_uses_the_4x_default_limit_unless_unlimited() -> None:
    looping = {"deliver_get": 5.0, "redeliver": 5.0}
    assert default_delivery_limit("4.0.5") == 20 and default_delivery_limit("3.10.8") is None
    flags = flags_of(api_row("q", type_="quorum", unacked=1, consumers=1, rates=looping),
                     api_row("off", type_="quorum", unacked=1, consumers=1, rates=looping,
                             args={"x-delivery-limit": -1}),
                     version="4.0.5")
    assert "every delivery is a redelivery" in flags["q"]["at-limit"]
    assert "at-limit" not in flags["off"]


def test_deliveries_per_message() -> None:
    assert qf.deliveries_per_message(qf.Rates(deliver=18, redeliver=15)) == 6
    assert qf.deliveries_per_message(qf.Rates(deliver=4, redeliver=4)) == float("inf")


def test_flags_come_in_a_stable_order_with_json() -> None:
    [row] = flag_rows([qf.row_from_api("b", api_row("q", unacked=2, consumers=1, rates=LOOPING))])
    data = row.to_json()
    assert data["flags"] == ["clogged", "no-dlx"]
    assert set(data["reasons"]) == {"clogged", "no-dlx"}
    assert data["messages"] == 2 and data["rates"]["redeliver"] == 900.0


def test_rates_for_people() -> None:
    assert [qf.format_rate(v) for v in (0, 0.004, 0.05, 0.2, 1.0, 9.96, 16.4)] == ["0", "0", "0.05", "0.2", "1",
                                                                                  "10", "16"]


_maybe = st.one_of(st.none(), st.integers(0, 10**6))
_rates = st.dictionaries(st.sampled_from(["publish", "deliver_get", "ack", "redeliver", "deliver_no_ack", "get_no_ack",
                                          "get"]), st.floats(0, 1e4), max_size=7)


@st.composite
def settingless_items(draw: st.DrawFn) -> dict[str, Any]:
    """Listing items with no argument and no policy in effect, in every shape the API sends that in."""
    item: dict[str, Any] = {"name": draw(st.text(max_size=8))}
    for key, value in (("vhost", st.text(max_size=4)), ("type", st.sampled_from(["classic", "quorum", "stream"])),
                       ("messages_ready", _maybe), ("messages_unacknowledged", _maybe), ("consumers", _maybe),
                       ("arguments", st.sampled_from([{}, None])),
                       ("effective_policy_definition", st.sampled_from([{}, [], None])),
                       ("policy", st.sampled_from([None, "", "p"])),
                       ("message_stats", st.one_of(st.none(), _rates.map(
                           lambda r: {f"{k}_details": {"rate": v} for k, v in r.items()})))):
        if draw(st.booleans()):
            item[key] = draw(value)
    return item


@FUZZ
@given(settingless_items(), st.sampled_from([None, "3.10.8", "4.0.5"]))
def test_the_quick_row_of_a_queue_without_settings_is_the_full_one(item: dict[str, Any], version: str | None) -> None:
    """row_from_api skips resolving settings where there are none (10,000 queues: issue 28); the row is the same."""
    quick = qf._row_without_settings("b", item, version)  # noqa: SLF001
    assert quick == qf._row_with_settings("b", item, version)  # noqa: SLF001
    assert qf.row_from_api("b", item, broker_version=version) == quick


def settings_only(row: dict[str, Any]) -> dict[str, Any]:
    """The row as RabbitMQ 4.3 gives it with management_metrics_collection denied: settings, no counts, no rates."""
    return {k: v for k, v in row.items() if k not in ("messages_ready", "messages_unacknowledged", "consumers",
                                                      "message_stats")}


def test_without_figures_a_flag_that_needs_them_is_cannot_tell_not_absent() -> None:
    rows = [qf.row_from_api("b", settings_only(r), broker_version="4.3.6") for r in (
        api_row("work", args={"x-dead-letter-exchange": "dlx"}),
        api_row("dead"),
        api_row("plain"),
        api_row("qq", type_="quorum", args={"x-dead-letter-exchange": "dlx"}),
        api_row("wait", args={"x-message-ttl": 1000, "x-dead-letter-exchange": "back"}),
        api_row("s", type_="stream"))]
    by_name = {r.queue: r for r in flag_rows(rows, [bind("dlx", "dead"), bind("back", "work")])}
    assert all(not r.figures_known for r in rows)
    assert {name: list(r.cannot_tell) for name, r in by_name.items()} == {
        "work": ["clogged", "no-consumer"],  # it has a dead-letter exchange: no-dlx is ruled out by its settings
        "dead": ["clogged", "no-dlx"],  # a DLQ is never no-consumer
        "plain": ["clogged", "no-consumer", "no-dlx"],
        "qq": ["clogged", "no-consumer", "at-limit"],  # 4.x: delivery limit 20
        "wait": ["clogged"],  # a retry wait queue: neither no-consumer nor no-dlx
        "s": [],  # streams only ever get dlq
    }
    assert list(by_name["dead"].flags) == ["dlq"]  # what needs no figures is still told
    assert "statistics are off" in by_name["plain"].cannot_tell["clogged"]
    assert by_name["plain"].to_json()["cannot_tell"] == by_name["plain"].cannot_tell


def test_with_figures_nothing_is_cannot_tell() -> None:
    [row] = flag_rows([qf.row_from_api("b", api_row("plain", ready=1))])
    assert row.figures_known and row.cannot_tell == {} and list(row.flags) == ["no-consumer"]


def test_a_selection_keeps_what_it_cannot_rule_out() -> None:
    from dlxtool.ops.queues import QueueFilter

    [blind] = flag_rows([qf.row_from_api("b", settings_only(api_row("plain")))])
    [seen] = flag_rows([qf.row_from_api("b", api_row("seen", ready=1, consumers=1))])
    assert QueueFilter(flags=("clogged",)).keep(blind) and not QueueFilter(flags=("clogged",)).keep(seen)
    assert QueueFilter(flags=("any",)).keep(blind)
    assert QueueFilter(min_messages=5).keep(blind) and not QueueFilter(min_messages=5).keep(seen)


@pytest.mark.parametrize(("members", "online", "unavailable"), [(3, 1, True), (3, 2, False), (5, 2, True),
                                                                (2, 1, True), (3, 3, False)])
def test_a_quorum_queue_without_a_majority_online_is_unavailable(members: int, online: int,
                                                                  unavailable: bool) -> None:
    """2 of 3 members stopped (the 3.10.8 cluster): the API still says "running" and names the old leader, and lists
    the members online; reads time out. Counts come from the API as they were."""
    row = api_row("qq", type_="quorum", ready=5) | {
        "state": "running", "leader": "n1", "members": [f"n{i}" for i in range(1, members + 1)],
        "online": [f"n{i}" for i in range(1, online + 1)]}
    flags = flags_of(row)["qq"]
    assert ("unavailable" in flags) is unavailable, flags
    if unavailable:
        assert f"only {online} of its {members} members online" in flags["unavailable"]


def test_a_stream_with_a_minority_of_replicas_online_is_not_called_unavailable() -> None:
    row = api_row("s", type_="stream") | {"members": ["n1", "n2", "n3"], "online": ["n1"]}
    assert "unavailable" not in flags_of(row)["s"]
