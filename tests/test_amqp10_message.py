"""AMQP 1.0 messages as dlxtool holds them (pure: no broker): the codec, the record's amqp10 field and 64-bit
integers, the 0.9.1 view and its losses, AMQP 1.0 bodies in decode, the x-opt-* convention, dead replies."""

from __future__ import annotations

import orjson
import pytest

from dlxtool.amqp10_message import (
    Amqp10Error,
    Amqp10Message,
    Body,
    Typed,
    decode_value,
    encode_message,
    encode_section,
    encode_value,
    parse_message,
    unwrap_body,
)
from dlxtool.amqp10_view import conversion_losses, view_091
from dlxtool.amqp_values import Long
from dlxtool.record import MessageRecord

VALUES = [Typed("ulong", 2**64 - 1), Typed("ulong", 0), Typed("ulong", 7), Typed("long", -2**63), Typed("int", -5),
          Typed("uint", 300), Typed("char", "é"), Typed("uuid", "6ed98b78-fba2-4d91-b2ec-ea452408d7b4"),
          Typed("timestamp", 1_700_000_000_123), Typed("symbol", "x-opt-a"), Typed("string", "ü" * 300),
          Typed("binary", b"\x00" * 260), Typed("null", None), Typed("boolean", False), Typed("double", 1.5),
          Typed("float", 0.5), Typed("decimal64", b"\x01" * 8),
          Typed("list", [Typed("long", 1), Typed("string", "two")]),
          Typed("map", [(Typed("symbol", "k"), Typed("list", []))]),
          Typed("array", ("symbol", [Typed("symbol", "a"), Typed("symbol", "b")])),
          Typed("described", (Typed("ulong", 0x77), Typed("string", "v")))]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: v.type)
def test_every_type_round_trips_through_bytes_and_json(value) -> None:
    from dlxtool.amqp10_message import from_json, to_json

    raw = encode_value(value)
    assert decode_value(raw) == (value, len(raw))
    assert from_json(orjson.loads(orjson.dumps(to_json(value)))) == value


def test_a_message_with_every_section_and_several_data_sections() -> None:
    msg = Amqp10Message(
        header={"durable": Typed("boolean", True), "delivery_count": Typed("uint", 2)},
        message_annotations=[(Typed("symbol", "x-opt-failure-reason"), Typed("string", "boom"))],
        properties={"message_id": Typed("binary", b"\x01"), "subject": Typed("string", "s"),
                    "group_sequence": Typed("uint", 3)},
        application_properties=[(Typed("string", "c"), Typed("char", "x"))],
        body=Body("data", [b"ab", b"cd"]))
    back = parse_message(encode_message(msg))
    assert back == msg and back.body.payload() == b"abcd"
    assert Amqp10Message.from_json(orjson.loads(orjson.dumps(msg.to_json()))) == msg
    with pytest.raises(Amqp10Error):
        parse_message(b"\x00\x53\x75\x41")  # a data section that is not binary


def test_a_record_keeps_the_message_and_its_64_bit_integers() -> None:
    msg = Amqp10Message(application_properties=[(Typed("string", "n"), Typed("ulong", 2**64 - 1))],
                        body=Body("amqp-value", [Typed("string", "hi")]))
    record = MessageRecord.from_amqp10("q", encode_message(msg))
    assert record.headers["n"] == -1 and record.properties["type"] == "amqp-1.0"
    record.headers["small"] = Long(5)
    record.headers["x-delivery-count"] = Long(2)
    data = orjson.loads(orjson.dumps(record.to_json()))
    assert data["headers"]["x-delivery-count"] == 2  # RabbitMQ's own: a plain number
    back = MessageRecord.from_json(data)
    assert back.amqp10 == msg
    assert type(back.headers["small"]) is Long and type(back.headers["x-delivery-count"]) is Long
    assert MessageRecord.from_json({"queue": "q", "body": "", "headers": {"n": 5}}).headers["n"] == 5  # old files


def test_the_091_view_and_what_it_loses() -> None:
    msg = Amqp10Message(properties={"message_id": Typed("ulong", 9), "to": Typed("string", "/queues/q"),
                                    "reply_to": Typed("string", "/queues/r"),
                                    "creation_time": Typed("timestamp", 1_700_000_000_500)},
                        application_properties=[(Typed("string", "s"), Typed("symbol", "x")),
                                                (Typed("string", "u"), Typed("uuid", "6ed98b78-fba2-4d91-b2ec-"
                                                                                     "ea452408d7b4"))],
                        body=Body("data", [b"a", b"b"]))
    props, headers, _ex, _key = view_091(msg)
    assert props["message_id"] == "9" and props["reply_to"] == "r" and props["timestamp"] == 1_700_000_000
    assert headers["s"] == "x"
    losses = " | ".join(conversion_losses(msg, poison_091=True))
    for words in ("2 data sections arrive merged", "to dropped", "milliseconds", "ulong message-id becomes text",
                  "'s' (symbol) becomes a string", "'u' (uuid) cannot be converted"):
        assert words in losses


def test_amqp10_bodies_unwrap() -> None:
    assert unwrap_body(encode_section("amqp-value", Typed("binary", b"\x08\x01"))).payload == b"\x08\x01"
    assert unwrap_body(encode_section("data", b"a") + encode_section("data", b"b")).what == "2 data sections"
    seq = unwrap_body(encode_section("amqp-sequence", [Typed("long", 1)]))
    assert seq.value == [[1]] and seq.payload is None
    assert unwrap_body(b"\x08\x01") is None and unwrap_body(b"\x00\x53\x77") is None


def test_the_modified_outcomes_words_are_read() -> None:
    from dlxtool.conventions import Message, explain

    found = explain(Message({"x-opt-failure-reason": "card declined", "x-opt-attempt": Long(3), "x-opt-tenant": "a"}))
    assert (found.error, found.attempts) == ("card declined", 3)
    assert set(found.reset) == {"x-opt-failure-reason", "x-opt-attempt"}
    assert explain(Message({"x-opt-retry-count": 2})).attempts == 3


def test_replies_that_cannot_arrive() -> None:
    from dlxtool.ops.replay_replies import unreachable_replies

    records = [MessageRecord("q", b"", position=0, properties={"reply_to": "amq.rabbitmq.reply-to.g1h2AA"}),
               MessageRecord("q", b"", position=1, properties={"reply_to": "amq.gen-abc"}),
               MessageRecord("q", b"", position=2, properties={"reply_to": "replies"}),
               MessageRecord("q", b"", position=3)]
    asked: list[str] = []

    def exists(name: str) -> bool | None:
        asked.append(name)
        return name == "replies"

    dead = unreachable_replies(records, exists)
    assert [d.position for d in dead] == [0, 1] and "direct reply-to" in dead[0].why
    assert asked == ["amq.gen-abc", "replies"]


def test_conversion_notes_say_what_a_091_move_changes_and_what_was_converted() -> None:
    from dlxtool.amqp10_conversions import conversion_notes

    whole = Amqp10Message(properties={"message_id": Typed("string", "m-1"), "subject": Typed("string", "s")},
                          body=Body("data", [b"a", b"b"]))
    plain = Amqp10Message(properties={"message_id": Typed("string", "m-2")}, body=Body("data", [b"a"]))
    records = [MessageRecord.from_amqp10("q", encode_message(m), position=i) for i, m in enumerate((whole, plain))]
    [note] = conversion_notes(records, read_over_amqp10=True, speaks_amqp10=True, poison_091=False)
    assert note.startswith("note: 1 of the 2 message(s) shown would not come back whole")
    assert "#0 (m-1): its 2 data sections arrive merged into one body; subject dropped" in note
    assert "m-2" not in note
    # many: three examples, then how many more
    many = [MessageRecord.from_amqp10("q", encode_message(whole), position=i) for i in range(5)]
    [note] = conversion_notes(many, read_over_amqp10=True, speaks_amqp10=True, poison_091=False)
    assert note.count("\n  #") == 3 and "… and 2 more" in note
    assert conversion_notes([records[1]], read_over_amqp10=True, speaks_amqp10=True, poison_091=False) == []
    # read over 0.9.1: the signs the broker's conversion leaves, and the way to see the message as published
    converted = MessageRecord(queue="q", body=b"x", properties={"type": "amqp-1.0"}, headers={"x-opt-tenant": "a"},
                              position=4)
    native = MessageRecord(queue="q", body=b"x", properties={"message_id": "m"}, headers={}, position=5)
    [note] = conversion_notes([native, converted], read_over_amqp10=False, speaks_amqp10=True, poison_091=False)
    assert "1 of the 2 message(s) shown were published over AMQP 1.0 (#4: type=amqp-1.0, header x-opt-tenant)" in note
    assert "--protocol 1.0" in note
    [older] = conversion_notes([converted], read_over_amqp10=False, speaks_amqp10=False, poison_091=False)
    assert "--protocol 1.0" not in older
    assert conversion_notes([native], read_over_amqp10=False, speaks_amqp10=True, poison_091=False) == []


def test_what_the_broker_hands_over_from_091_messages_is_kept_exactly() -> None:
    """A 0.9.1 message read over AMQP 1.0 (RabbitMQ converts it): header names that are not UTF-8 arrive as strings
    or symbols holding those bytes, and headers nest as deep as the publisher made them; both are kept byte for
    byte, in the record's JSON too, and its x- headers (message annotations) are headers in the 0.9.1 view."""
    deep = Typed("list", [])
    for _ in range(500):
        deep = Typed("list", [deep])
    msg = Amqp10Message(message_annotations=[(Typed("symbol", b"x-\xff"), Typed("string", b"\x80v")),
                                             (Typed("symbol", "x-exception-message"), Typed("binary", b"a\x00b")),
                                             (Typed("symbol", "x-deep"), deep),
                                             (Typed("symbol", "x-basic-type"), Typed("string", "t"))],
                        application_properties=[(Typed("string", b"\xfe"), Typed("long", 1))],
                        body=Body("data", [b"x"]))
    raw = encode_message(msg)
    back = parse_message(raw)
    assert encode_message(back) == raw  # the levels past MAX_DECODE_DEPTH kept as their bytes
    kept, levels = back.message_annotations[2][1], 0
    while kept.type == "list":
        kept, levels = kept.value[0], levels + 1
    assert kept.type == "encoded" and 0 < levels <= 32 and back.message_annotations[:2] == msg.message_annotations[:2]
    record = MessageRecord.from_amqp10("q", raw)
    assert record.headers[b"x-\xff"] == b"\x80v" and record.headers[b"\xfe"] == 1
    assert record.headers["x-exception-message"] == "a\x00b"  # a longstr to a 0.9.1 reader
    assert record.properties["type"] == "t" and "x-deep" in record.headers
    data = orjson.loads(orjson.dumps(record.to_json()))
    again = MessageRecord.from_json(data).amqp10
    assert again == back and again is not None and encode_message(again) == raw


def test_hostile_nesting_is_an_error_not_a_crash() -> None:
    """Arrays of arrays and chains of described values thousands deep (the depth cap keeps lists and maps as bytes;
    these cannot be): an Amqp10Error, never a RecursionError."""
    described = b"\x40"
    for _ in range(5000):
        described = b"\x00\x40" + described
    with pytest.raises(Amqp10Error):
        decode_value(described)

    def payload(element: int, items: bytes) -> bytes:  # a wide array's bytes after its constructor, one item
        body = (1).to_bytes(4, "big") + bytes((element,)) + items
        return len(body).to_bytes(4, "big") + body

    nested = payload(0x40, b"")
    for _ in range(5000):
        nested = payload(0xF0, nested)
    with pytest.raises(Amqp10Error, match="nested past"):
        decode_value(b"\xf0" + nested)
    shallow = payload(0x40, b"")
    for _ in range(5):
        shallow = payload(0xF0, shallow)
    assert decode_value(b"\xf0" + shallow)[0].type == "array"


def test_each_loss_has_a_kind_the_plan_names() -> None:
    """loss_kinds gives each phrase of conversion_losses with its kind (replay's plan counts messages per kind)."""
    from dlxtool.amqp10_view import LOSS_KINDS, loss_kinds

    msg = Amqp10Message(properties={"message_id": Typed("binary", b"\x01"), "subject": Typed("string", "s"),
                                    "group_sequence": Typed("uint", 1),
                                    "creation_time": Typed("timestamp", 1_700_000_000_001)},
                        application_properties=[(Typed("string", "big"), Typed("ulong", 2**64 - 1)),
                                                (Typed("string", "l"), Typed("list", [Typed("symbol", "x")])),
                                                (Typed("string", "c"), Typed("char", "x"))],
                        message_annotations=[(Typed("ulong", 7), Typed("string", "v"))],
                        body=Body("amqp-sequence", [[Typed("long", 1)]]))
    kinds = loss_kinds(msg)
    assert [phrase for _k, phrase in kinds] == conversion_losses(msg)
    assert [k for k, _p in kinds] == ["encoded-body", "subject", "group-sequence", "creation-time-ms", "id-moved",
                                      "ulong-wraps", "nested", "char-uuid", "annotations"]
    assert all(k in LOSS_KINDS for k, _p in kinds)
    assert ("unconvertible", "application property 'c' (char) cannot be converted: the broker closes the 0.9.1 "
            "connection it is delivered to") in loss_kinds(msg, poison_091=True)
