"""Selection predicates on header values (dlxtool.selection)."""

from __future__ import annotations

import struct

import pytest

from dlxtool.amqp_values import RawValue
from dlxtool.errors import UsageError
from dlxtool.record import MessageRecord
from dlxtool.selection import Lens, build_selection, parse_age, parse_duration


@pytest.mark.parametrize(("raw", "text"), [
    (b"L" + struct.pack(">q", -2), "-2"), (b"U\xff\xfe", "-2"), (b"b\x07", "7"), (b"d" + struct.pack(">d", 1.5), "1.5"),
])
def test_header_match_sees_what_a_raw_value_means(raw: bytes, text: str) -> None:
    """Kinds kept as their AMQP bytes (RawValue) match --header NAME=VALUE as the number they hold."""
    record = MessageRecord(queue="q", body=b"", headers={"n": RawValue(raw)})
    assert build_selection(headers=[f"n={text}"]).matches(record)
    assert not build_selection(headers=["n=3"]).matches(record)


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("2sec", 2), ("15m", 900), ("15 min", 900), ("1.5h", 5400), ("3d", 259200),
    ("1w", 604800), (" 2h ", 7200), ("30M", 1800), ("2D", 172800), ("1W", 604800),
])
def test_one_age_parser_takes_what_selection_and_peek_offset_took(text: str, seconds: float) -> None:
    """The union of --older-than's durations (fractions, sec/min, weeks) and --offset's ages (any case)."""
    assert parse_age(text) == seconds
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "-1h", "1y", "yesterday", "1h30m", "2026-01-31"])
def test_what_is_not_an_age(text: str) -> None:
    assert parse_age(text) is None
    with pytest.raises(UsageError, match="bad duration"):
        parse_duration(text)


# -- the criteria, on records shaped as the broker and the frameworks shape them ------------------------------

SPRING = {"x-exception-message": "java.net.SocketTimeoutException: Read timed out", "x-original-exchange": "",
          "x-original-routingKey": "payments", "x-exception-stacktrace": "java.net.SocketTimeoutException\n\tat X"}


def rejected(origin: str = "orders", **headers: object) -> MessageRecord:
    """A record as a broker's reject leaves it: one x-death entry, x-first-death-* companions."""
    from datetime import UTC, datetime

    death = {"queue": origin, "reason": "rejected", "count": 1, "exchange": "", "routing-keys": [origin],
             "time": datetime(2020, 1, 31, 10, 0, tzinfo=UTC)}
    return MessageRecord(queue="dlq", body=b'{"order": 1}', headers={
        "x-death": [death], "x-first-death-queue": origin, "x-first-death-reason": "rejected", **headers})


@pytest.mark.parametrize(("option", "matches"), [
    ("tenant=acme", True), ("tenant=ACME", False), ("Tenant=acme", True), ("tenant~^ac", True), ("tenant~me$", True),
    ("tenant~(?i)^ACME$", True), ("tenant~^me", False), ("missing=", False), ("missing~.*", False),
    ("a=b~c=d", True),  # the first = or ~ separates name from value
])
def test_header_equals_or_regex(option: str, matches: bool) -> None:
    record = MessageRecord(queue="q", body=b"", headers={"tenant": "acme", "a": "b~c=d"})
    assert build_selection(headers=[option]).matches(record) is matches


@pytest.mark.parametrize("option", ["tenant", "=acme", "~x", ""])
def test_a_header_option_without_name_and_operator_is_a_usage_error(option: str) -> None:
    with pytest.raises(UsageError, match="bad --header") as raised:
        build_selection(headers=[option])
    assert "NAME=VALUE" in (raised.value.hint or "")


@pytest.mark.parametrize(("kwargs", "option"), [
    ({"errors": ["(unclosed"]}, "--error"), ({"body_matches": ["[a-"]}, "--body-matches"),
    ({"headers": ["x~*bad"]}, "--header x~"),
])
def test_a_bad_regex_is_a_usage_error_naming_the_option(kwargs: dict[str, list[str]], option: str) -> None:
    with pytest.raises(UsageError) as raised:
        build_selection(**kwargs)  # type: ignore[arg-type]
    assert raised.value.message.startswith(option) and "not a regular expression" in raised.value.message
    assert raised.value.status.name == "USAGE"


def test_error_text_from_the_conventions_and_error_headers() -> None:
    spring = rejected(**SPRING)
    plain = rejected(**{"x-error": "upstream 503"})
    nothing = rejected()
    timed_out = build_selection(errors=["(?i)read TIMED out"])
    assert timed_out.matches(spring) and not timed_out.matches(plain) and not timed_out.matches(nothing)
    assert build_selection(errors=["^upstream 5\\d\\d$"]).matches(plain)
    # every error header counts, not only the one a convention shows
    both = rejected(**SPRING, **{"x-error": "second"})
    assert build_selection(errors=["second"]).matches(both)


def test_origin_as_the_conventions_explain_it() -> None:
    assert build_selection(origins=["orders"]).matches(rejected("orders"))
    assert not build_selection(origins=["payments"]).matches(rejected("orders"))
    # Spring's headers name the origin (a later failure than the x-death it carries)
    spring = rejected("orders", **SPRING)
    assert build_selection(origins=["payments"]).matches(spring)
    assert not build_selection(origins=["orders"]).matches(spring)


def test_type_by_full_name_short_name_or_decoded_type_but_not_a_guess() -> None:
    typed = MessageRecord(queue="q", body=b"", properties={"type": "shop.orders.v1.PaymentFailed"})
    assert build_selection(types=["shop.orders.v1.PaymentFailed"]).matches(typed)
    assert build_selection(types=["PaymentFailed"]).matches(typed)
    assert not build_selection(types=["Payment"]).matches(typed)
    sure = {"type": "shop.orders.v1.OrderPlaced", "confidence": 0.97, "ambiguous": False, "defects": []}
    guess = {**sure, "confidence": 0.2, "ambiguous": True}
    calls: list[int] = []

    def decode(record: MessageRecord) -> dict[str, object]:
        calls.append(record.position)
        return sure if record.position == 0 else guess

    lens = Lens(decode=decode)
    decoded = [MessageRecord(queue="q", body=b"x", position=i) for i in (0, 1)]
    selection = build_selection(types=["OrderPlaced"], lens=lens)
    assert [selection.matches(r) for r in decoded] == [True, False]
    assert selection.matches(decoded[0]) and calls == [0, 1]  # decoded once, kept in the record


def test_body_contains_and_regex() -> None:
    record = MessageRecord(queue="q", body='{"order": 17, "name": "Zoë"}'.encode() + b"\xff")
    assert build_selection(body_contains=["order"]).matches(record)
    assert build_selection(body_matches=[r'"order": 1\d\b']).matches(record)
    assert build_selection(body_matches=["Zoë"]).matches(record)
    assert build_selection(body_matches=[r"\\xff$"]).matches(record)  # bytes that are not UTF-8, as \xNN
    assert not build_selection(body_matches=["^order"]).matches(record)


def test_all_criteria_must_hold_and_a_repeated_one_means_any() -> None:
    record = rejected("orders", tenant="acme")
    assert build_selection(origins=["x", "orders"], headers=["tenant=acme"], reasons=["expired", "rejected"]
                           ).matches(record)
    assert not build_selection(origins=["orders"], headers=["tenant=globex"]).matches(record)
    assert build_selection(origins=["orders"], older_than="1d").matches(record)
    assert not build_selection(origins=["orders"], newer_than="1d").matches(record)


def test_describe_says_what_was_asked() -> None:
    selection = build_selection(headers=["tenant=acme", "x~^a"], errors=["time(d )?out"], body_matches=["z"],
                                types=["T"], limit=3)
    assert selection.describe() == {"types": ["T"], "headers": ["tenant=acme", "x~^a"], "errors": ["time(d )?out"],
                                    "body_matches": ["z"]}
    assert selection.filters_anything and not build_selection(limit=3).filters_anything
