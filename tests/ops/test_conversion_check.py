"""The conversion check's tally and words (dlxtool.ops.conversion_check), without a broker: per kind, how many
messages and which positions; the refusal unless accepted; what a 0.9.1 read shows by itself. The check against real
brokers (4.0 and 4.3), through replay and move: tests/cli/test_conversion.py."""

from __future__ import annotations

from dlxtool.amqp10_view import LOSS_KINDS, came_from_amqp10
from dlxtool.errors import RefusedError
from dlxtool.ops.conversion_check import CONVERSION_FLAG, UNSEEN, ConversionCheck, sign_kinds


def _check(**kw: object) -> ConversionCheck:
    check = ConversionCheck("orders.dlq", exact=True, **kw)  # type: ignore[arg-type]
    check.add(0, [], LOSS_KINDS.__getitem__)
    for position in range(1, 6):
        check.add(position, [("subject", "subject dropped"), ("subject", "subject dropped")],
                  LOSS_KINDS.__getitem__)
    check.add(6, [("symbol", "application property 'k' (symbol) becomes a string")], LOSS_KINDS.__getitem__)
    return check


def test_messages_are_counted_per_kind_with_their_first_positions() -> None:
    check = _check()
    assert (check.judged, check.losing) == (7, 6)
    data = check.to_json()
    assert data["kinds"][0] == {"kind": "subject", "what": "subject dropped", "messages": 5, "positions": [1, 2, 3],
                                "example": "subject dropped"}
    assert data["kinds"][1]["positions"] == [6] and data["refused"] is True
    lines = check.lines()
    assert "6 of the 7 message(s) to move from 'orders.dlq'" in lines[0]
    assert lines[1] == "  subject dropped: 5 message(s), e.g. #1, #2, #3…"
    assert lines[2].endswith("e.g. #6 (application property 'k' (symbol) becomes a string)")


def test_the_default_refuses_and_the_flag_accepts() -> None:
    check = _check()
    refusal = check.refusal("replay")
    assert isinstance(refusal, RefusedError) and "nothing was changed" in refusal.message
    assert "subject, symbol" in refusal.message and CONVERSION_FLAG in (refusal.hint or "")
    assert "dump --protocol 1.0" in (refusal.hint or "")
    assert "--protocol 1.0 moves them as published" in (_check(amqp10_path="--protocol 1.0").refusal("replay").hint
                                                        or "")
    assert not _check(accepted=True).refuses
    clean = ConversionCheck("q", exact=True)
    clean.add(0, [], LOSS_KINDS.__getitem__)
    assert not clean.refuses and clean.lines() == []


def test_what_a_091_read_shows_by_itself() -> None:
    assert sign_kinds([]) == []
    signs = came_from_amqp10({"type": "amqp-1.0", "message_id": "urn:uuid:6ed98b78-fba2-4d91-b2ec-ea452408d7b4"},
                             {"x-message-id": b"\x01", "x-opt-tenant": "acme"})
    kinds = [k for k, _p in sign_kinds(signs)]
    assert kinds == ["encoded-body", "id-moved", "id-as-text", UNSEEN]
    assert [k for k, _p in sign_kinds(["header x-opt-failure-reason"])] == [UNSEEN]


def test_a_decimal_header_is_found_as_pika_decodes_it_and_as_raw_bytes() -> None:
    """The 1.0 read stops before a 0.9.1 message with a decimal header (it ends the 1.0 session): found whether it
    arrives as pika's Decimal or, where pika would not write it back identically (scale 2, digits 100: pika writes
    1.00 back as scale 0), as dlxtool's codec keeps it, the raw `D` bytes — at any depth."""
    import struct
    from decimal import Decimal

    from dlxtool.amqp_values import RawValue, decode_field_value
    from dlxtool.ops.conversion_check import _holds_decimal

    raw = decode_field_value(b"D" + struct.pack(">Bi", 2, 100))
    assert isinstance(raw, RawValue) and raw.kind == "D"  # the case: kept as its bytes
    for headers in ({"amount": Decimal("1.5")}, {"amount": raw}, {"outer": {"list": [1, raw]}}):
        assert _holds_decimal(headers), headers
    assert not _holds_decimal({"n": decode_field_value(b"f" + struct.pack(">f", 1.5)), "s": "1.5", "l": [1]})


def test_what_only_a_message_published_over_amqp10_shows() -> None:
    """--protocol auto skips the 0.9.1 read of a message that is plainly AMQP 1.0's (it has no 0.9.1 headers to
    lose over 1.0). What RabbitMQ rebuilds for a 0.9.1 message read over 1.0 is no proof: a urn:uuid id becomes a
    uuid, a type=amqp-1.0 body its sections (mc_amqpl); a subject, a symbol, a char or a ulong id are."""
    from dlxtool.amqp10_message import Amqp10Message, Body, Typed
    from dlxtool.amqp10_view import published_over_amqp10

    def msg(props: dict | None = None, app: list | None = None, body: Body | None = None) -> Amqp10Message:
        return Amqp10Message(properties=props, application_properties=app, body=body or Body("data", [b"x"]))

    uuid = Typed("uuid", "87654321-4321-8765-4321-876543218765")
    assert not published_over_amqp10(msg())
    assert not published_over_amqp10(msg({"message_id": uuid}))
    assert not published_over_amqp10(msg(body=Body("data", [b"a", b"b"])))
    assert not published_over_amqp10(msg(body=Body("amqp-value", [Typed("string", "v")])))
    assert published_over_amqp10(msg({"subject": Typed("string", "s")}))
    assert published_over_amqp10(msg({"message_id": Typed("ulong", 7)}))
    assert published_over_amqp10(msg(app=[(Typed("string", "k"), Typed("symbol", "s"))]))
    assert published_over_amqp10(msg(app=[(Typed("string", "grade"), Typed("char", "A"))]))


def test_a_message_091_cannot_be_given_refuses_even_when_the_loss_is_accepted() -> None:
    check = ConversionCheck("q", accepted=True)
    check.add(0, [("subject", "subject dropped")], LOSS_KINDS.__getitem__)
    assert not check.refuses
    check.add(1, [("unconvertible", "it closes the connection")], LOSS_KINDS.__getitem__)
    assert check.undeliverable and check.refuses
    assert CONVERSION_FLAG not in check.advice() and "--protocol 1.0" in check.advice()
    over_10 = ConversionCheck("q", accepted=True, over="1.0")
    over_10.add(0, [("table-header", "its table header 'a'")], lambda _k: "a table header is dropped")
    assert not over_10.undeliverable and not over_10.refuses
