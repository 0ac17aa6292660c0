"""Replay's origin per message from the conventions (dlxtool.ops.replay.ReplayDecider): pure logic, no broker.

The broker-side proof (each framework's shape replayed to its origin) is tests/cli/test_replay_conventions.py.
"""

from __future__ import annotations

from typing import Any

from dlxtool.conventions import reset_failure_headers
from dlxtool.ops.engine import Action, Decision
from dlxtool.ops.exchange_routes import ExchangeTargets
from dlxtool.ops.provenance import PROVENANCE_HEADER
from dlxtool.ops.replay_decision import ReplayDecider, ReplaySettings
from dlxtool.record import MessageRecord
from tests.test_conventions import NSB, RASCAL, SPRING


def decide(headers: dict[str, Any], routing_key: str = "lot", **settings: Any) -> Decision:
    decider = ReplayDecider(ReplaySettings("lot", **settings), routes=lambda _t: ("(temporary exchange)", True))
    return decider(MessageRecord(queue="lot", body=b"{}", routing_key=routing_key, headers=headers))


def test_a_framework_queue_origin_keeps_the_key_its_framework_recorded_or_the_queue_name() -> None:
    nsb = decide(NSB, routing_key="error")
    # NServiceBus records no routing key: the queue's name, as its own retry sends it (not the error queue's key)
    assert (nsb.group, nsb.exchange, nsb.routing_key) == ("Sales", "(temporary exchange)", "Sales")
    rascal = {"rascal": {**RASCAL["rascal"], "originalExchange": "orders.ex", "originalRoutingKey": "order.created"}}
    got = decide(rascal)
    assert (got.group, got.routing_key) == ("/:q1", "order.created")
    prov = got.properties.headers[PROVENANCE_HEADER]
    assert (prov["exchange"], prov["routing-key"]) == ("orders.ex", "order.created")


def test_the_count_reset_removes_the_framework_failure_headers_and_records_them() -> None:
    got = decide({**NSB, "tenant": "acme"})
    headers = got.properties.headers
    assert sorted(headers) == ["NServiceBus.MessageId", PROVENANCE_HEADER, "tenant"]
    reset = headers[PROVENANCE_HEADER]["reset"]
    assert "NServiceBus.FailedQ=Sales" in reset and "NServiceBus.ExceptionInfo.Message=Order 42 has no lines" in reset
    kept = decide({**NSB, "tenant": "acme"}, keep_history=True).properties.headers
    assert set(NSB) <= set(kept) and "reset" not in kept[PROVENANCE_HEADER]


def test_rascal_loses_only_its_failure_entries() -> None:
    """Its table also carries the encryption profile (the subscriber needs it to decrypt the body) and the
    original exchange/routing key it restores on receipt."""
    table = {**RASCAL["rascal"], "originalExchange": "orders.ex", "originalRoutingKey": "order.created",
             "encryption": {"name": "well-known", "iv": "00ff", "originalContentType": "application/json"},
             "redeliveries": 2}
    headers = {"rascal": table}
    removed = reset_failure_headers(headers, ["rascal"])
    assert headers == {"rascal": {"originalVhost": "/", "restoreRoutingHeaders": True, "originalExchange": "orders.ex",
                                  "originalRoutingKey": "order.created", "encryption": table["encryption"]}}
    assert sorted(removed) == ["rascal.error", "rascal.originalQueue", "rascal.recovery", "rascal.redeliveries"]
    only_failure = {"rascal": {"originalQueue": "q", "error": {"message": "x"}}}
    reset_failure_headers(only_failure, ["rascal"])
    assert only_failure == {}


def test_an_exchange_origin_published_there_with_its_key() -> None:
    decider = ReplayDecider(ReplaySettings("lot"), routes=lambda _t: ("(temporary exchange)", True),
                            exchange_targets=ExchangeTargets(None, allow_displace=True))
    got = decider(MessageRecord(queue="lot", body=b"{}", routing_key="lot", headers=dict(SPRING)))
    assert (got.action, got.group, got.exchange, got.routing_key) == (
        Action.MOVE, "orders.ex → order.created", "orders.ex", "order.created")
    assert not set(SPRING) & set(got.properties.headers)


def test_an_exchange_origin_whose_queues_cannot_be_told_stays_unless_allow_displace() -> None:
    got = decide(SPRING)
    assert got.action is Action.LEAVE and "cannot be told (no management API" in got.group
    assert "--allow-displace" in got.group


def test_an_origin_through_a_deleted_temporary_exchange_is_the_queue_it_was_bound_to() -> None:
    """Replayed once through a temporary exchange, then failed by a Spring consumer: x-original-exchange names
    that exchange (deleted since); it was bound only to the queue its name ends with."""
    headers = {**SPRING, "x-original-exchange": "dlxtool.replay.0a1b2c3d.0.orders.q",
               PROVENANCE_HEADER: {"from": "orders.dlq", "count": 1, "exchange": "orders.ex",
                                   "routing-key": "order.created"}}
    got = decide(headers)
    assert (got.action, got.group, got.routing_key) == (Action.MOVE, "orders.q", "order.created")
    assert got.properties.headers[PROVENANCE_HEADER]["count"] == 2


def test_to_queue_needs_no_origin_and_keeps_the_conventions_reset() -> None:
    got = decide({"NServiceBus.ExceptionInfo.Message": "no lines"}, to_queue="elsewhere")
    assert (got.action, got.group) == (Action.MOVE, "elsewhere")
    assert list(got.properties.headers) == [PROVENANCE_HEADER]


def test_origin_from_names_a_convention_that_does_not_apply() -> None:
    got = decide(NSB, origin_from="spring")
    assert got.action is Action.LEAVE and got.group == "no origin: --origin-from spring: it names no origin here"
