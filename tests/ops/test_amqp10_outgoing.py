"""What a move over AMQP 1.0 sends (dlxtool.ops.amqp10_outgoing), from a decision on the 0.9.1 view: no broker (the
broker round trips are tests/ops/test_engine_amqp10.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from dlxtool.amqp10_message import Amqp10Message, Body, Typed, encode_message, parse_message
from dlxtool.amqp10_view import view_091
from dlxtool.ops.amqp10_outgoing import outgoing, typed
from dlxtool.ops.provenance import PROVENANCE_HEADER
from dlxtool.ops.stay import Stay, Why
from dlxtool.record import MessageRecord


def _sym(text: str) -> Typed:
    return Typed("symbol", text)


def _dead_letter() -> MessageRecord:
    """A dead letter as a queue delivers it over 1.0: the delivery's header fields and annotations, the death
    history, a retry counter."""
    msg = Amqp10Message(
        header={"durable": Typed("boolean", True), "first_acquirer": Typed("boolean", False),
                "delivery_count": Typed("uint", 1)},
        message_annotations=[(_sym("x-exchange"), Typed("string", "")), (_sym("x-routing-key"), Typed("string", "d")),
                             (_sym("x-opt-deaths"), Typed("array", ("map", [Typed("map", [
                                 (_sym("queue"), Typed("string", "orders")), (_sym("reason"), _sym("rejected")),
                                 (_sym("count"), Typed("ulong", 1)), (_sym("ttl"), Typed("uint", 5000))])]))),
                             (_sym("x-first-death-queue"), Typed("string", "orders")),
                             (_sym("x-acquired-count"), Typed("long", 1)),
                             (_sym("x-opt-tenant"), Typed("string", "acme")), (Typed("ulong", 9), Typed("long", 1))],
        properties={"message_id": Typed("ulong", 7), "user_id": Typed("binary", b"alice"),
                    "subject": Typed("string", "s")},
        application_properties=[(Typed("string", "u"), Typed("uuid", "12345678-1234-5678-1234-567812345678")),
                                (Typed("string", "x-retry-count"), Typed("int", 3))],
        body=Body("data", [b"a", b"b"]))
    return MessageRecord.from_amqp10("orders.dlq", encode_message(msg))


def _reset(record: MessageRecord, **properties: object) -> MessageRecord:
    """What replay's decision publishes: the history and the retry counter reset, a provenance added."""
    headers = {k: v for k, v in record.headers.items() if k in ("x-opt-tenant", "u", "x-acquired-count")}
    headers[PROVENANCE_HEADER] = {"from": "orders.dlq", "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
                                  "id": "run-1", "count": 1}
    return replace(record, headers=headers, properties={**record.properties, **properties})


def test_the_original_sections_go_with_what_the_reset_removed_left_out() -> None:
    record = _dead_letter()
    sent = outgoing(record, _reset(record, expiration="5000"))
    assert isinstance(sent, bytes)
    msg = parse_message(sent)
    assert msg.header == {"durable": Typed("boolean", True), "ttl": Typed("uint", 5000)}  # the TTL restored
    names = [k.value for k, _ in msg.message_annotations or ()]
    # the delivery's and the history's are out (x-acquired-count with the history); the others as they were, a
    # ulong key included
    assert names == ["x-opt-tenant", 9, "x-opt-dlxtool-replay"]
    assert record.amqp10 is not None and msg.properties == record.amqp10.properties
    assert msg.application_properties == [(Typed("string", "u"), Typed("uuid", "12345678-1234-5678-1234-567812345678"))]
    assert msg.body.sections == [b"a", b"b"]
    # the provenance reads back as the header over 1.0, the loop guard's count and the time included
    headers = view_091(msg)[1]
    assert headers[PROVENANCE_HEADER]["id"] == "run-1" and int(headers[PROVENANCE_HEADER]["count"]) == 1
    assert headers[PROVENANCE_HEADER]["at"] == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_a_move_that_changes_nothing_sends_everything_but_the_delivery() -> None:
    record = _dead_letter()
    sent = outgoing(record, None)
    assert isinstance(sent, bytes)
    msg = parse_message(sent)
    assert msg.annotation("x-opt-deaths") is not None and msg.annotation("x-acquired-count") is not None
    assert msg.annotation("x-exchange") is None and msg.header == {"durable": Typed("boolean", True)}


def test_a_dropped_user_id_leaves_the_property_out() -> None:
    record = _dead_letter()
    published = _reset(record)
    published.properties.pop("user_id")
    sent = outgoing(record, published)
    assert isinstance(sent, bytes)
    assert "user_id" not in (parse_message(sent).properties or {})


def test_changed_properties_and_headers_go_back_where_the_view_read_them_typed_as_they_were() -> None:
    """What replay --edit (or a convention) changes in the 0.9.1 view is carried to the 1.0 sections: the original's
    type kept where the new value fits it, a new header an application property (an x- one an annotation)."""
    record = _dead_letter()
    published = _reset(record, content_type="text/plain", message_id="8", priority=4, timestamp=1_700_000_000,
                       type="order.v2")
    published.properties.pop("user_id")
    published.headers.update({"u": "87654321-4321-8765-4321-876543218765", "x-opt-tenant": "globex", "new": 5,
                              "x-opt-new": {"a": 1}})
    sent = outgoing(record, published)
    assert isinstance(sent, bytes)
    msg = parse_message(sent)
    assert msg.properties == {"message_id": Typed("ulong", 8), "subject": Typed("string", "s"),
                              "content_type": Typed("symbol", "text/plain"),
                              "creation_time": Typed("timestamp", 1_700_000_000_000)}
    assert msg.header == {"durable": Typed("boolean", True), "priority": Typed("ubyte", 4)}
    assert msg.application_properties == [
        (Typed("string", "u"), Typed("uuid", "87654321-4321-8765-4321-876543218765")),  # in place, still a uuid
        (Typed("string", "new"), Typed("long", 5))]
    assert msg.annotation("x-opt-tenant") == Typed("string", "globex")
    assert msg.annotation("x-opt-new") == Typed("map", [(Typed("string", "a"), Typed("long", 1))])
    assert msg.annotation("x-basic-type") == Typed("string", "order.v2")
    props, headers, _exchange, _key = view_091(msg)  # and a reader sees what was published
    assert (props["message_id"], props["content_type"], props["priority"], props["type"]) == ("8", "text/plain", 4,
                                                                                              "order.v2")
    assert headers["new"] == 5 and headers["x-opt-tenant"] == "globex"
    assert msg.body.sections == [b"a", b"b"]


def test_a_change_without_a_faithful_form_stays_with_the_reason() -> None:
    record = _dead_letter()
    for published, words in [
        (_reset(record, cluster_id="c1"), "cluster_id"),
        (replace(_reset(record), headers={**_reset(record).headers, "table": {"a": 1}}), "application property"),
        (replace(_reset(record), headers={**_reset(record).headers, "x-death": []}), "death history"),
        (replace(_reset(record), headers={**_reset(record).headers, "x-message-id": b"\x01"}), "binary message-id"),
        (replace(_reset(record), body=b"other"), "2 data sections"),  # which one?
    ]:
        why = outgoing(record, published)
        assert isinstance(why, Why) and why.kind is Stay.NOT_SENT and words in why, (words, why)
    value = MessageRecord.from_amqp10("q", encode_message(Amqp10Message(body=Body("amqp-value", [Typed("long", 1)]))))
    why = outgoing(value, replace(value, properties={**value.properties, "type": "other"}))
    assert isinstance(why, Why) and "amqp-value" in why


def test_typed_values_keep_what_the_provenance_holds() -> None:
    assert typed({"a": [1, "x", None, True, b"\x00"]}) == Typed("map", [(Typed("string", "a"), Typed("list", [
        Typed("long", 1), Typed("string", "x"), Typed("null", None), Typed("boolean", True),
        Typed("binary", b"\x00")]))])


def test_typed_like_keeps_the_original_type_where_the_edited_value_fits() -> None:
    from dlxtool.ops.amqp10_changes import milliseconds, typed_like

    ulong = Typed("ulong", 2**64 - 1)
    assert typed_like(ulong, -2) == Typed("ulong", 2**64 - 2)   # shown wrapped, as the conversion does
    assert typed_like(ulong, 7) == Typed("ulong", 7)
    assert typed_like(Typed("uint", 1), -1) == Typed("long", -1)  # no longer fits: dlxtool's own form
    assert typed_like(Typed("binary", b"abc"), "abd") == Typed("binary", b"abd")  # shown as its text
    assert typed_like(Typed("double", 1.5), 2) == Typed("double", 2.0)
    assert typed_like(Typed("symbol", "a"), "b") == Typed("symbol", "b")
    assert typed_like(Typed("symbol", "a"), 5) == Typed("long", 5)
    assert typed_like(Typed("array", ("symbol", [_sym("a")])), ["b", "c"]) == Typed("array", ("symbol", [
        _sym("b"), _sym("c")]))
    assert typed_like(Typed("uuid", "12345678-1234-5678-1234-567812345678"), "not a uuid") == Typed("string",
                                                                                                   "not a uuid")
    moment = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)
    assert typed_like(Typed("timestamp", 0), moment) == Typed("timestamp", milliseconds(moment))
    assert milliseconds(moment) == 1767323045123  # exact: no float rounding


def test_an_x_name_both_an_annotation_and_a_property_is_edited_where_the_view_reads_it() -> None:
    """view_091 shows the annotation where both hold the name; the edit goes there too. Names the view never shows as
    headers, and removing a binary id's header, stay with the reason."""
    msg = Amqp10Message(message_annotations=[(_sym("x-opt-a"), Typed("string", "ann"))],
                        application_properties=[(Typed("string", "x-opt-a"), Typed("string", "prop"))],
                        properties={"message_id": Typed("binary", b"\x01")}, body=Body("data", [b"x"]))
    record = MessageRecord.from_amqp10("q", encode_message(msg))
    assert record.headers["x-opt-a"] == "ann"
    sent = outgoing(record, replace(record, headers={**record.headers, "x-opt-a": "new"}))
    assert isinstance(sent, bytes)
    assert view_091(parse_message(sent))[1]["x-opt-a"] == "new"
    for headers, words in [({**record.headers, "x-opt-deaths": []}, "death history"),
                           ({**record.headers, "x-basic-priority": 1}, "basic property"),
                           ({**record.headers, "x-exchange": "e"}, "the broker's"),
                           ({k: v for k, v in record.headers.items() if k != "x-message-id"}, "was removed")]:
        why = outgoing(record, replace(record, headers=headers))
        assert isinstance(why, Why) and words in why, (words, why)


def test_typed_like_falls_back_where_the_type_cannot_hold_the_value() -> None:
    from dlxtool.ops.amqp10_changes import typed_like

    nested = Typed("array", ("array", [Typed("array", ("long", [Typed("long", 1)]))]))
    assert typed_like(nested, [[1, 2]]) == Typed("list", [Typed("list", [Typed("long", 1), Typed("long", 2)])])
    assert typed_like(Typed("float", 1.5), 1e39) == Typed("double", 1e39)   # past a float: dlxtool's double
    assert typed_like(Typed("double", 1.5), 10**400).type == "string"        # past any number type: its digits
    assert typed_like(None, 2**63) == Typed("ulong", 2**63)
