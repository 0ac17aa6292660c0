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


# -- exclusions (--not-NAME), names (--message-id), --max-deaths: issue 37 ----------------------------------------


def test_each_not_form_leaves_out_what_its_including_form_selects() -> None:
    """--not-NAME V leaves out exactly the messages --NAME V selects, for every selector that names values."""
    spring = rejected("orders", **SPRING, tenant="acme")
    spring.properties = {"type": "shop.v1.PaymentFailed", "message_id": "m-1"}
    spring.routing_key = "order.created"
    other = rejected("billing", tenant="globex")
    other.properties = {"type": "shop.v1.OrderPlaced", "message_id": "m-2"}
    other.routing_key = "invoice.sent"
    other.body = b"plain"
    cases = {"origins": ["payments"], "reasons": ["rejected"], "types": ["PaymentFailed"],
             "headers": ["tenant=acme"], "errors": ["(?i)timed out"], "routing_keys": ["order.*"],
             "body_contains": ["order"], "body_matches": ['"order": \\d'], "message_ids": ["m-1"]}
    for name, values in cases.items():
        including, excluding = build_selection(**{name: values}), build_selection(exclude={name: values})
        for record in (spring, other):
            assert excluding.matches(record) is not including.matches(record), (name, record.properties)
        assert excluding.describe() == {f"not_{name}" if name != "body_matches" else "not_body_matches":
                                        build_selection(**{name: values}).describe()[name]}


def test_exclusions_combine_with_selections_and_any_excluded_value_leaves_a_message_out() -> None:
    a = rejected("orders")
    a.properties = {"type": "A"}
    b = rejected("orders", **{"x-error": "boom 1"})
    b.properties = {"type": "B"}
    c = rejected("orders", **{"x-error": "fine"})
    c.properties = {"type": "C"}
    records = [a, b, c]
    picks = build_selection(origins=["orders"], exclude={"types": ["A"], "errors": ["^boom"]})
    assert [picks.matches(r) for r in records] == [False, False, True]
    assert [build_selection(exclude={"types": ["A", "C"]}).matches(r) for r in records] == [False, True, False]
    assert picks.explains and not build_selection(types=["A"]).explains
    assert build_selection(exclude={"types": ["A"]}).needs_type


def test_a_message_is_named_by_its_message_id_else_its_fingerprint() -> None:
    """message_name: the message_id property; without one fp: and the replay fingerprint of body and properties,
    which headers (x-death, counters: what dead-lettering changes) do not change."""
    from dlxtool.message_ids import message_name
    from dlxtool.ops.provenance import record_fingerprint

    named = MessageRecord(queue="q", body=b"x", properties={"message_id": "o-00013"})
    anonymous = MessageRecord(queue="q", body=b"x", properties={"type": "T"})
    assert message_name(named) == "o-00013"
    name = message_name(anonymous)
    assert name == f"fp:{record_fingerprint(anonymous)}" and len(name) == 19
    again = MessageRecord(queue="other", body=b"x", properties={"type": "T"}, headers={"x-death": [], "n": 3},
                          redelivered=True, position=7)
    assert message_name(again) == name
    assert message_name(MessageRecord(queue="q", body=b"y", properties={"type": "T"})) != name


def test_message_id_selects_by_id_by_fingerprint_and_by_its_first_digits() -> None:
    from dlxtool.message_ids import message_name

    named = MessageRecord(queue="q", body=b"x", properties={"message_id": "o-1"})
    anonymous = MessageRecord(queue="q", body=b"y")
    fp = message_name(anonymous)
    assert build_selection(message_ids=["o-1"]).matches(named)
    assert not build_selection(message_ids=["o-2"]).matches(named)
    assert build_selection(message_ids=[fp]).matches(anonymous)
    assert build_selection(message_ids=[fp.upper().replace("FP:", "fp:")]).matches(anonymous)
    assert build_selection(message_ids=[fp[:11]]).matches(anonymous)  # fp: + 8 digits
    assert not build_selection(message_ids=[fp[:10]]).matches(anonymous)  # 7 digits: too short to name one
    assert build_selection(message_ids=[message_name(named)]).matches(named)
    # a message with an id is also named by its fingerprint (two copies of one id told apart)
    from dlxtool.message_ids import fingerprint_name

    assert build_selection(message_ids=[fingerprint_name(named) or ""]).matches(named)
    assert not build_selection(message_ids=[fp]).matches(named)


def test_many_names_are_described_by_count_and_digest_not_listed() -> None:
    """The description goes into plans and every replayed message's provenance header: a list of 10,000 ids must
    not."""
    few, many = build_selection(message_ids=["b", "a"]), build_selection(message_ids=[f"o-{i}" for i in range(500)])
    assert few.describe() == {"message_ids": ["a", "b"]}
    described = many.describe()["message_ids"]
    assert isinstance(described, str) and described.startswith("500 names, digest ") and len(described) < 60
    assert many.describe() == build_selection(message_ids=[f"o-{i}" for i in reversed(range(500))]).describe()


def test_id_files_one_a_line() -> None:
    from dlxtool.message_ids import read_id_lines

    assert read_id_lines(["o-1\n", "  o-2  \n", "\n", '"o-3"\n', b"fp:0123456789abcdef\n"], "f") == [
        "o-1", "o-2", "o-3", "fp:0123456789abcdef"]
    with pytest.raises(UsageError, match="line 2"):
        read_id_lines(["a", '"b\\"'], "ids.txt")


def test_max_deaths_is_the_opposite_bound_of_min_deaths() -> None:
    from datetime import UTC, datetime

    def died(times: int) -> MessageRecord:
        death = {"queue": "q", "reason": "rejected", "count": times, "exchange": "", "routing-keys": ["q"],
                 "time": datetime(2020, 1, 1, tzinfo=UTC)}
        return MessageRecord(queue="dlq", body=b"", headers={"x-death": [death]})

    records = [died(n) for n in (1, 2, 3, 4)]
    assert [build_selection(max_deaths=2).matches(r) for r in records] == [True, True, False, False]
    assert [build_selection(min_deaths=3).matches(r) for r in records] == [False, False, True, True]
    assert [build_selection(min_deaths=2, max_deaths=3).matches(r) for r in records] == [False, True, True, False]
    with pytest.raises(UsageError, match="select nothing together"):
        build_selection(min_deaths=3, max_deaths=2)
    # 4.x restarts x-death: a count of 1 there may be low, and --max-deaths says it selected such messages
    restarted = died(1)
    restarted.headers["x-last-death-queue"] = "q"
    selection = build_selection(max_deaths=1)
    assert selection.matches(restarted) and "1 message(s) selected by --max-deaths 1" in (
        selection.tally.note(None, 1) or "")
