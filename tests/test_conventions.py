"""Conventions read dead letters shaped as each framework's source writes them (pure logic: no broker).

The broker-side proof (the same shapes published to RabbitMQ, then `history`) is in
tests/cli/test_history_conventions.py.
"""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from dlxtool.conventions import (
    BUILT_IN,
    HeaderConvention,
    Message,
    Route,
    conventions,
    explain,
    reset_body_retries,
    used_body_retries,
)

# spring-projects/spring-amqp, spring-rabbit/.../retry/RepublishMessageRecoverer.java: recover() puts the
# stack trace, the cause's message and the received exchange/routing key (Java Strings → AMQP long strings).
SPRING = {"x-exception-stacktrace": "java.lang.IllegalStateException: no stock\n\tat com.shop.Orders.handle(...)",
          "x-exception-message": "no stock", "x-original-exchange": "orders.ex",
          "x-original-routingKey": "order.created"}

# Particular/NServiceBus: ExceptionHeaderHelper.SetExceptionHeaders (src/NServiceBus.Core/Recoverability/
# ExceptionHeaderHelper.cs) and the move to the error queue (FaultsHeaderKeys.FailedQ); every value a string
# (the RabbitMQ transport sends Dictionary<string, string>), TimeOfFailure in DateTimeOffsetHelper's format.
NSB = {"NServiceBus.MessageId": "b1c0", "NServiceBus.FailedQ": "Sales",
       "NServiceBus.ExceptionInfo.ExceptionType": "System.InvalidOperationException",
       "NServiceBus.ExceptionInfo.HelpLink": "", "NServiceBus.ExceptionInfo.Message": "Order 42 has no lines",
       "NServiceBus.ExceptionInfo.Source": "Sales", "NServiceBus.ExceptionInfo.StackTrace": "System.Inv...",
       "NServiceBus.TimeOfFailure": "2026-11-24 04:10:12:123456 Z", "NServiceBus.Retries": "2",
       "NServiceBus.ProcessingEndpoint": "Sales"}

# MassTransit/MassTransit: SetExceptionHeaders with the names of src/MassTransit.Abstractions/MessageHeaders.cs
# (timestamp ToString("O"), RetryCount an int and only when > 0, InputAddress the endpoint's URI).
MT = {"MT-Reason": "fault", "MT-Fault-ExceptionType": "System.TimeoutException",
      "MT-Fault-InputAddress": "rabbitmq://rabbit.internal/shop/submit-order", "MT-Fault-Message": "db timeout",
      "MT-Fault-Timestamp": "2026-11-24T04:11:00.1234567Z", "MT-Fault-StackTrace": "at Submit...",
      "MT-Fault-ConsumerType": "Shop.SubmitOrderConsumer", "MT-Fault-MessageType": "Shop.SubmitOrder",
      "MT-Fault-RetryCount": 4, "MT-Host-MachineName": "web-1"}

# onebeyond/rascal lib/amqp/SubscriberError.js (forward strategy) on a message SubscriberSession.js marked
# with rascal.originalQueue: one nested table header.
RASCAL = {"rascal": {"originalQueue": "/:q1", "originalVhost": "/", "restoreRoutingHeaders": True,
                     "recovery": {"/:q1": {"republished": 3, "forwarded": 1}},
                     "error": {"message": "bad payload", "code": "E_BAD"}}}


def xdeath(queue: str, when: datetime, reason: str = "rejected") -> dict:
    return {"x-death": [{"queue": queue, "reason": reason, "count": 1, "exchange": "", "routing-keys": [queue],
                         "time": when}], "x-first-death-queue": queue, "x-first-death-reason": reason,
            "x-first-death-exchange": ""}


def test_spring_origin_is_the_original_exchange_and_routing_key() -> None:
    x = explain(Message(SPRING))
    assert (x.origin, x.origin_from, x.origin_label) == (Route(exchange="orders.ex", routing_key="order.created"),
                                                         "spring", "Spring headers")
    assert x.error == "no stock" and x.error_from == "spring"
    assert set(x.reset) == set(SPRING)
    assert x.origin.describe() == "exchange orders.ex, routing key order.created"


def test_spring_on_the_default_exchange_is_a_queue_origin() -> None:
    x = explain(Message({**SPRING, "x-original-exchange": "", "x-original-routingKey": "orders.q"}))
    assert x.origin == Route(queue="orders.q")


def test_nservicebus_failed_queue_error_and_attempts() -> None:
    x = explain(Message(NSB))
    assert (x.origin, x.origin_from) == (Route(queue="Sales"), "nservicebus")
    assert x.error == "System.InvalidOperationException: Order 42 has no lines"
    assert x.attempts == 3 and "at least" in (x.attempts_from or "")
    assert "NServiceBus.ExceptionInfo.StackTrace" in x.reset and "NServiceBus.MessageId" not in x.reset


def test_masstransit_input_address_then_queue_name() -> None:
    x = explain(Message(MT, queue="submit-order_error"))
    assert (x.origin, x.origin_why) == (Route(queue="submit-order"), "MT-Fault-InputAddress")
    assert x.error == "System.TimeoutException: db timeout" and x.attempts == 5
    assert "MT-Host-MachineName" not in x.reset and "MT-Fault-RetryCount" in x.reset
    no_address = {k: v for k, v in MT.items() if k != "MT-Fault-InputAddress"}
    y = explain(Message(no_address, queue="billing_error"))
    assert (y.origin, y.origin_why) == (Route(queue="billing"), "queue name billing_error")


def test_rascal_nested_table() -> None:
    x = explain(Message(RASCAL))
    assert (x.origin, x.error, x.attempts) == (Route(queue="/:q1"), "E_BAD: bad payload", 4)
    assert x.reset == ("rascal",)


def test_dramatiq_traceback_in_the_body_is_the_error() -> None:
    body = orjson.dumps({"queue_name": "default", "actor_name": "charge", "args": [1], "kwargs": {},
                         "options": {"retries": 3, "traceback": "Traceback (most recent call last):\n  File ...\n"
                                                                "ValueError: card declined\n"},
                         "message_id": "m1", "message_timestamp": 1})
    x = explain(Message(xdeath("default", datetime(2026, 1, 1, tzinfo=UTC)), body))
    assert (x.origin, x.origin_from) == (Route(queue="default"), "x-death")
    assert (x.error, x.error_from) == ("ValueError: card declined", "dramatiq")


def test_app_retry_headers_give_the_attempts() -> None:
    x = explain(Message({"x-retry-count": 5}))
    assert x.origin is None and x.attempts == 6  # 5 retries: handled 6 times
    assert x.attempts_from == "retry-headers: x-retry-count + 1 (the first try, then each retry)"


def test_a_framework_header_beats_x_death_without_times_and_says_why() -> None:
    headers = {**xdeath("orders.q", datetime(2026, 1, 1, tzinfo=UTC)), **SPRING}
    x = explain(Message(headers))
    assert x.origin_from == "spring"
    assert x.conflict and "spring" in x.conflict and "x-death says queue orders.q" in x.conflict
    assert "most recent failure" in x.conflict
    forced = explain(Message(headers), origin_from="x-death")
    assert forced.origin == Route(queue="orders.q") and forced.conflict is None
    assert "--origin-from x-death" in forced.origin_why
    # Both sets of failure headers go with a count reset, whichever names the origin.
    assert {"x-death", "x-exception-message"} <= set(forced.reset)


def test_times_decide_when_both_conventions_have_one() -> None:
    later_death = {**MT, **xdeath("other.q", datetime(2026, 11, 24, 5, 0, tzinfo=UTC))}
    x = explain(Message(later_death))
    assert x.origin == Route(queue="other.q") and "most recent failure" in (x.conflict or "")
    earlier_death = {**MT, **xdeath("other.q", datetime(2026, 11, 24, 4, 0, tzinfo=UTC))}
    assert explain(Message(earlier_death)).origin == Route(queue="submit-order")


def test_agreeing_conventions_are_no_conflict() -> None:
    headers = {**xdeath("Sales", datetime(2026, 11, 24, 5, 0, tzinfo=UTC)), **NSB}
    x = explain(Message(headers))
    assert x.origin == Route(queue="Sales") and x.conflict is None
    assert x.recognised == ["x-death", "nservicebus"]


def test_origin_from_a_convention_that_does_not_apply_gives_no_origin() -> None:
    x = explain(Message(SPRING), origin_from="nservicebus")
    assert x.origin is None and "names no origin" in x.origin_why


def test_team_convention_from_config() -> None:
    team = HeaderConvention("acme", origin_exchange_header="acme-exchange", origin_routing_key_header="acme-key",
                            error_headers=("acme-error",), attempts_header="acme-tries",
                            reset_headers=("acme-trace",))
    headers = {"acme-exchange": "billing", "acme-key": "invoice.due", "acme-error": "PDF failed",
               "acme-tries": "7", "acme-trace": "...", "keep": "me"}
    x = explain(Message(headers), conventions([team]))
    assert (x.origin, x.origin_from, x.error, x.attempts) == (
        Route(exchange="billing", routing_key="invoice.due"), "acme", "PDF failed", 7)
    assert set(x.reset) == {"acme-exchange", "acme-key", "acme-error", "acme-tries", "acme-trace"}
    assert explain(Message(headers), BUILT_IN).origin is None


def test_a_team_convention_may_name_the_exchange_alone() -> None:
    """@moleculer/channels' dead letters name the channel (a fanout exchange) and the group, no routing key."""
    moleculer = HeaderConvention("moleculer", origin_exchange_header="x-original-channel")
    headers = {"x-original-channel": "order.created", "x-original-group": "payments"}
    x = explain(Message(headers), conventions([moleculer]))
    assert (x.origin, x.origin_from, x.origin_why) == (
        Route(exchange="order.created", routing_key=""), "moleculer", "x-original-channel")
    assert x.origin is not None and x.origin.describe() == "exchange order.created, empty routing key"
    assert x.origin.key() == "order.created (empty key)"
    # a routing-key header named but absent: no origin (never a fan-out the convention did not say)
    keyed = HeaderConvention("keyed", origin_exchange_header="x-original-channel", origin_routing_key_header="k")
    assert explain(Message(headers), conventions([keyed])).origin is None
    # an empty exchange name is the default exchange, which routes by key: no origin either
    assert explain(Message({"x-original-channel": ""}), conventions([moleculer])).origin is None


def test_odd_shapes_never_raise() -> None:
    for headers in ({"rascal": "text"}, {"rascal": {"error": [1]}}, {"x-original-routingKey": {"a": 1}},
                    {"MT-Fault-InputAddress": "::::"}, {"NServiceBus.TimeOfFailure": b"\xff", "NServiceBus.FailedQ": 3},
                    {"x-death": "nonsense"}, {"x-retry-count": "many"}):
        explain(Message(headers, b'{"actor_name": 1, "options": []}'))


def test_x_exception_message_alone_is_not_spring() -> None:
    x = explain(Message({"x-exception-message": "NullPointerException"}))
    assert x.recognised == [] and (x.error, x.error_from) == ("NullPointerException", "error header")


def test_route_text_for_a_replay_plan() -> None:
    assert explain(Message(SPRING)).route_text() == ("exchange orders.ex, routing key order.created, "
                                                     "from Spring headers")
    assert explain(Message(NSB)).route_text() == "queue Sales, from NServiceBus headers"
    assert explain(Message({})).route_text() == "no origin: no convention names an origin"


def test_attempts_are_the_largest_lower_bound() -> None:
    headers = {**xdeath("q", datetime(2026, 1, 1, tzinfo=UTC)), "x-retry-count": 4}
    x = explain(Message(headers))
    assert (x.attempts, x.attempts_from) == (5, "retry-headers: x-retry-count + 1 (the first try, then each retry)")
    # counters of deliveries, and `count` (which says not what it counts), are taken as they are
    for name in ("x-delivery-attempts", "count"):
        x = explain(Message({name: 4}))
        assert (x.attempts, x.attempts_from) == (4, f"retry-headers: {name}")


# -- --reset-body-retries (Dramatiq's attempt count lives in its JSON body) ---------------------------------

DRAMATIQ = (b'{"queue_name":"orders","actor_name":"charge","args":[1.5,"\\u00e9",123456789012345678901234567890],'
            b'"kwargs":{"k":null},'
            b'"options":{"retries":3,"traceback":"ValueError: x","max_retries":5},"message_id":"m1",'
            b'"message_timestamp":1700000000000}')


def test_reset_body_retries_sets_dramatiq_options_retries_to_0_keeping_the_rest() -> None:
    out = reset_body_retries(DRAMATIQ)
    assert out is not None and orjson.loads(out) == {**orjson.loads(DRAMATIQ), "options": {
        "retries": 0, "traceback": "ValueError: x", "max_retries": 5}}
    assert list(orjson.loads(out)) == list(orjson.loads(DRAMATIQ))  # key order
    # compact and ASCII, as Dramatiq's JSONEncoder writes it; a 100-bit integer stays exact
    assert out == DRAMATIQ.replace(b'"retries":3', b'"retries":0')
    assert used_body_retries(DRAMATIQ) == 3 and used_body_retries(out) is None


@pytest.mark.parametrize("body", [
    b"", b"not json", b'{"actor_name":"x"', b'["queue_name","actor_name","options"]',
    b'{"queue_name":"q","actor_name":"a","options":{"retries":0}}',          # nothing used: untouched
    b'{"queue_name":"q","actor_name":"a","options":{}}',
    b'{"queue_name":"q","actor_name":"a","options":{"retries":true}}',
    b'{"queue_name":"q","actor_name":"a","options":"retries=2"}',
    b'{"actor_name":"a","options":{"retries":2}}',                          # no queue_name: not Dramatiq
    b'{"queue_name":"q","options":{"retries":2}, "x":"actor_name"}',        # no actor_name
    b'{"queue_name":"q","actor_name":"a","options":{"retries":2},"s":"\xff"}',  # not UTF-8
], ids=["empty", "text", "broken", "array", "retries-0", "no-retries", "bool", "options-not-dict", "no-queue",
        "no-actor", "not-utf8"])
def test_reset_body_retries_leaves_anything_else_alone(body: bytes) -> None:
    assert reset_body_retries(body) is None
