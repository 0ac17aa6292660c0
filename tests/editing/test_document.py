"""dlxtool.editing.document: the editor's document built, read back, checked (problems with message and line)
and diffed; dlxtool.editing.edits: what an edit applies to the delivery met again."""

from __future__ import annotations

import gzip
import struct
from datetime import UTC, datetime

import pytest

from dlxtool.editing.document import build
from dlxtool.editing.edits import Edits
from dlxtool.record import MessageRecord
from proto_registry import DEMO_PROTOS, Registry

ORDER = "shop.orders.v1.OrderPlaced"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return Registry.load([DEMO_PROTOS], cache_dir=tmp_path_factory.mktemp("proto-cache"))


@pytest.fixture
def doc(registry):
    msg = registry.message_class(ORDER)(order_id="o-1")
    msg.total.currency_code = "EUR"
    records = [
        MessageRecord("q.dlq", msg.SerializeToString(), position=0,
                      properties={"type": ORDER, "message_id": "m-0", "timestamp": 1763721005},
                      headers={"tenant": "acme", "raw": b"\x00\xff",
                               "x-first-death-queue": "q", "at": datetime(2026, 1, 2, tzinfo=UTC)}),
        MessageRecord("q.dlq", b'{"a":1}', position=1, properties={"content_type": "application/json"}),
        MessageRecord("q.dlq", gzip.compress(b"hello"), position=2, properties={"content_encoding": "gzip"}),
    ]
    return build([(r, f"{i:016x}") for i, r in enumerate(records)], "test", lambda: registry)


def reg(registry):
    return lambda: registry


def test_an_unchanged_document_replays_every_message_as_it_is(doc, registry) -> None:
    reading = doc.read(doc.text(), reg(registry))
    assert not reading.errors and not reading.left_out and not reading.empty
    assert [e.changed for e in reading.edited] == [(), (), ()]
    assert [e.fingerprint for e in reading.edited] == [f"{i:016x}" for i in range(3)]


def test_empty_documents_change_nothing(doc, registry) -> None:
    for text in ("", "\n\n", "# only comments\n#\n"):
        assert doc.read(text, reg(registry)).nothing
    # every section deleted: nothing to replay either
    head = doc.text().split("### message 1")[0]
    assert doc.read(head, reg(registry)).nothing


def test_a_deleted_section_leaves_that_message_out(doc, registry) -> None:
    text = doc.text()
    start, end = text.index("### message 2"), text.index("### message 3")
    reading = doc.read(text[:start] + text[end:], reg(registry))
    assert [s.number for s in reading.left_out] == [2]
    assert [e.number for e in reading.edited] == [1, 3]


def test_edits_of_body_properties_and_headers(doc, registry) -> None:
    text = (doc.text().replace('"EUR"', '"USD"').replace('"message_id": "m-0"', '"message_id": "m-0b"')
            .replace('  "tenant": "acme",\n', "").replace('"a": 1', '"a": 2').replace("hello", "HELLO"))
    text = text.replace('"x-first-death-queue": "q"', '"x-first-death-queue": "q",\n  "new": {"$bytes": "AAE="}')
    reading = doc.read(text, reg(registry))
    assert not reading.errors
    first, second, third = reading.edited
    assert first.changed == ("body", "properties", "headers")
    assert first.set_properties == {"message_id": "m-0b"} and not first.unset_properties
    assert first.set_headers == {"new": b"\x00\x01"} and first.unset_headers == ("tenant",)
    assert any(line == '-    "currencyCode": "EUR"' for line in first.diff)
    assert any(line == '+    "currencyCode": "USD"' for line in first.diff)
    assert second.body == b'{\n  "a": 2\n}' and second.changed == ("body",)
    assert third.body is not None and gzip.decompress(third.body) == b"HELLO"
    assert "compressed again with gzip" in third.how


def test_problems_name_the_message_and_the_line(doc, registry) -> None:
    text = (doc.text().replace('"currencyCode"', '"currency"').replace('"a": 1', '"a": 1,')
            .replace('"message_id": "m-0"', '"message_id": "m-0",\n  "colour": "red",\n  "priority": 300')
            .replace('"tenant": "acme"', '"tenant": {"$timestamp": "yesterday"}'))
    lines = text.split("\n")

    def line_of(fragment: str) -> int:
        return next(i for i, line in enumerate(lines, 1) if fragment in line)

    reading = doc.read(text, reg(registry))
    json_line = line_of('"a": 1,') + 1
    assert reading.errors == [
        f"message 1, body (line {line_of('currency')}): {ORDER}: Failed to parse total field: Message type "
        f'"shop.common.v1.Money" has no field named "currency" at "OrderPlaced.total". Available Fields(except '
        f"extensions): \"['currencyCode', 'units', 'nanos']\".",
        f"message 1, properties (line {line_of('colour')}): 'colour' is not an AMQP property (known: "
        "content_type, content_encoding, delivery_mode, priority, correlation_id, reply_to, expiration, message_id, "
        "timestamp, type, user_id, app_id, cluster_id)",
        f"message 1, properties (line {line_of('priority')}): priority must be a whole number from 0 to 255, not 300",
        f"message 1, headers (line {line_of('yesterday')}): header 'tenant': bad $timestamp value 'yesterday'",
        f"message 2, body (line {json_line}): not valid JSON: Expecting property name enclosed in "
        "double quotes (column 1)",
    ]
    assert [e.number for e in reading.edited] == [3]  # a message with a problem is not read as edited


def test_marker_problems(doc, registry) -> None:
    text = doc.text()
    twice = text + text[text.index("### message 2"):text.index("### message 3")]
    assert any("message 2 appears twice" in e for e in doc.read(twice, reg(registry)).errors)
    assert any("no message 7" in e for e in doc.read(text.replace("### message 3", "### message 7"),
                                                       reg(registry)).errors)
    broken = text.replace("### properties", "### props", 1)
    errors = doc.read(broken, reg(registry)).errors
    assert any("not a section marker" in e for e in errors) and any("no properties section" in e for e in errors)


def test_an_edit_applies_only_what_changed_to_the_delivery_met_again(doc, registry) -> None:
    text = doc.text().replace('"message_id": "m-0"', '"message_id": "m-0b"').replace('  "tenant": "acme",\n', "")
    first = doc.read(text, reg(registry)).edited[0]
    # the delivery as the replay reads it: a header value JSON cannot say (a float kept as its AMQP bytes) is its own
    delivery = MessageRecord("q.dlq", doc.shown[0].record.body, properties=dict(doc.shown[0].record.properties),
                             headers={**doc.shown[0].record.headers, "x-delivery-count": 3})
    applied = first.apply(delivery)
    assert applied.properties["message_id"] == "m-0b" and applied.properties["timestamp"] == 1763721005
    assert "tenant" not in applied.headers and applied.headers["x-delivery-count"] == 3
    assert applied.body == delivery.body
    unchanged = doc.read(doc.text(), reg(registry)).edited[0]
    assert unchanged.apply(delivery) is delivery


def test_edits_are_found_again_by_fingerprint_and_origin_in_queue_order(doc, registry) -> None:
    reading = doc.read(doc.text(), reg(registry))
    twin = reading.edited[1]
    twin2 = type(twin)(**{**twin.__dict__, "number": 9})
    other_origin = type(twin)(**{**twin.__dict__, "number": 10, "origin": "shipping"})
    edits = Edits([*reading.edited, twin2, other_origin])
    assert edits.take("0000000000000001", None) is twin
    assert edits.take("0000000000000001", None) is twin2
    assert edits.take("0000000000000001", None) is None and edits.take(None, None) is None
    # same bytes, another origin (a fanout publish's twin copy): only that origin's delivery takes it
    assert edits.take("0000000000000001", "billing") is None
    assert edits.take("0000000000000001", "shipping") is other_origin
    assert [e.number for e in edits.remaining()] == [1, 3]
    assert edits.counts()["edit_messages"] == 5


def test_a_header_kept_as_its_amqp_bytes_is_changed_through_its_value() -> None:
    from dlxtool.amqp_values import RawValue

    double = RawValue(b"d" + struct.pack(">d", 1.5))  # a float header: dlxtool keeps its AMQP bytes
    record = MessageRecord("q.dlq", b"x", headers={"rate": double, "n": 1})
    doc = build([(record, "0" * 16)], "test", lambda: None)
    assert doc.read(doc.text(), lambda: None).edited[0].changed == ()
    edited = doc.read(doc.text().replace('"$value": 1.5', '"$value": 2.25'), lambda: None).edited[0]
    assert edited.set_headers == {"rate": RawValue(b"d" + struct.pack(">d", 2.25))}
    bad = doc.read(doc.text().replace('"$value": 1.5', '"$value": "fast"'), lambda: None)
    assert bad.errors and "header 'rate': a value of AMQP kind 'd' cannot be set to 'fast'" in bad.errors[0]
    floated = doc.read(doc.text().replace('"n": 1', '"n": 1.5'), lambda: None)
    assert floated.errors and "header 'n': cannot write a header value of type float" in floated.errors[0]


def test_a_64_bit_header_shown_with_its_kind_is_changed_through_its_value() -> None:
    """A Long (kind `l`: a count RabbitMQ wrote, a 1.0 long or ulong property in the view) that fits 32 bits is shown
    as {"$amqp": its bytes, "$value": N}: an edit of its value keeps the kind (it crashed before)."""
    from dlxtool.amqp_values import Long

    record = MessageRecord("q.dlq", b"x", headers={"n": Long(5)})
    doc = build([(record, "0" * 16)], "test", lambda: None)
    assert '"$value": 5' in doc.text() and doc.read(doc.text(), lambda: None).edited[0].changed == ()
    edited = doc.read(doc.text().replace('"$value": 5', '"$value": -7'), lambda: None).edited[0]
    assert edited.set_headers == {"n": -7} and type(edited.set_headers["n"]) is Long
    for bad, words in (('"$value": 2.5', "whole numbers"), ('"$value": 9223372036854775808', "2^63-1")):
        problems = doc.read(doc.text().replace('"$value": 5', bad), lambda: None).errors
        assert problems and words in problems[0], problems


def test_a_document_edited_again_lists_the_last_problems_at_its_top(doc, registry) -> None:
    from dlxtool.editing.document import with_problems

    saved = doc.text().replace('"a": 1', '"a": 1,')
    problems = doc.read(saved, reg(registry)).errors
    again = with_problems(with_problems(saved, ["an older problem"]), problems)
    assert again.startswith("#! The last save had these problems") and "older problem" not in again
    assert f"#!   {problems[0]}" in again
    fixed = again.replace('"a": 1,', '"a": 1')
    reading = doc.read(fixed, reg(registry))
    assert not reading.errors and [e.changed for e in reading.edited] == [(), (), ()]
