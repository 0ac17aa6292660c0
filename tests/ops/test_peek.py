"""Safety rules of the reader, without a broker: what is refused, and why."""

from datetime import UTC, datetime

import pytest

from dlxtool.errors import RefusedError, UsageError
from dlxtool.ops.peek import QueueFacts, ReadOptions, check_read, delivery_count, parse_offset


def facts(qtype: str, **kw) -> QueueFacts:
    return QueueFacts(name="q", vhost="/", type=qtype, type_source=kw.pop("source", "management API"),
                      ready=kw.pop("ready", 100), **kw)


def test_classic_bound_and_cost() -> None:
    notes = check_read(facts("classic", bytes_ready=100 * 2048), ReadOptions(count=50))
    assert "holding up to 50 messages" in notes[0] and "100.0 KiB" in notes[0]
    with pytest.raises(RefusedError, match="bound is 20"):
        check_read(facts("classic"), ReadOptions(count=None, max_unacked=20))


def test_quorum_rules() -> None:
    with pytest.raises(RefusedError, match="BACK"):
        check_read(facts("quorum"), ReadOptions())
    assert check_read(facts("quorum"), ReadOptions(allow_reorder=True))
    with pytest.raises(RefusedError, match="delivery limit 3.*dropped"):
        check_read(facts("quorum", delivery_limit=3), ReadOptions(allow_reorder=True))
    assert check_read(facts("quorum", delivery_limit=3), ReadOptions(spend_attempts=True))
    with pytest.raises(RefusedError, match="could not be checked"):
        check_read(facts("quorum", source="AMQP probe", missing_checks=["x"]),
                   ReadOptions(spend_attempts=True, allow_reorder=True))
    with pytest.raises(RefusedError, match="cannot tell"):
        check_read(facts("unknown", source="AMQP probe"), ReadOptions())


def test_streams_have_no_bound_and_offset_is_for_streams() -> None:
    assert check_read(facts("stream", ready=10**9), ReadOptions(count=None, offset="first")) == []
    with pytest.raises(UsageError):
        check_read(facts("classic"), ReadOptions(offset="first"))


def test_parse_offset() -> None:
    now = datetime(2026, 1, 31, 12, 0, tzinfo=UTC)
    assert parse_offset("First") == "first"
    assert parse_offset("42") == 42
    assert parse_offset("30m", now) == datetime(2026, 1, 31, 11, 30, tzinfo=UTC)
    assert parse_offset("2026-01-31T10:00Z") == datetime(2026, 1, 31, 10, 0, tzinfo=UTC)
    with pytest.raises(UsageError):
        parse_offset("yesterday")


def test_delivery_count_ignores_odd_values() -> None:
    assert delivery_count({"x-delivery-count": 2}) == 2
    assert delivery_count({"x-delivery-count": "2"}) == 0
    assert delivery_count(None) == 0
