"""Safety rules of the reader, without a broker: what is refused, and why."""

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from dlxtool.errors import PartialError, RefusedError, UsageError
from dlxtool.ops.peek import QueueFacts, QueueReader, ReadOptions, check_read, delivery_count, parse_offset


def facts(qtype: str, **kw) -> QueueFacts:
    return QueueFacts(name=kw.pop("name", "q"), vhost="/", type=qtype, type_source=kw.pop("source", "management API"),
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
    assert parse_offset("1W", now) == datetime(2026, 1, 24, 12, 0, tzinfo=UTC)  # the one age parser: weeks too
    assert parse_offset("1.5h", now) == datetime(2026, 1, 31, 10, 30, tzinfo=UTC)
    assert parse_offset("2026-01-31T10:00Z") == datetime(2026, 1, 31, 10, 0, tzinfo=UTC)
    with pytest.raises(UsageError):
        parse_offset("yesterday")


def test_delivery_count_ignores_odd_values() -> None:
    assert delivery_count({"x-delivery-count": 2}) == 2
    assert delivery_count({"x-delivery-count": "2"}) == 0
    assert delivery_count(None) == 0


# -- the reader against fakes and the real broker -------------------------------------------------------

class FakeChannel:
    """basic.get from a list; the last get tells how many are left, as the broker's get-ok does."""

    def __init__(self, n: int) -> None:
        self.left, self.tag, self.is_open = n, 0, True

    def basic_get(self, queue: str, auto_ack: bool):
        if not self.left:
            return None, None, None
        self.left -= 1
        self.tag += 1
        method = SimpleNamespace(delivery_tag=self.tag, exchange="", routing_key=queue, redelivered=False,
                                 message_count=self.left)
        return method, SimpleNamespace(headers=None), b"x"

    def close(self) -> None:  # a classic queue takes back what a closed channel held
        self.left += self.tag
        self.is_open = False


def test_read_all_goes_by_basic_get_not_by_a_stale_count() -> None:
    channel = FakeChannel(8)
    reader = QueueReader(channel, facts("classic", ready=3), ReadOptions(count=None, max_unacked=20))
    assert len(list(reader.records())) == 8  # the count (3) was stale: read until get-empty
    assert reader.outcome().error is None
    assert not channel.is_open and channel.left == 8


def test_read_all_that_hits_the_bound_says_how_many_were_left() -> None:
    reader = QueueReader(FakeChannel(12), facts("classic", ready=3), ReadOptions(count=None, max_unacked=5))
    assert len(list(reader.records())) == 5
    error = reader.outcome().error
    assert isinstance(error, PartialError) and "7 more" in error.message


def test_quorum_limit_of_one_is_refused_even_with_spend_attempts() -> None:
    with pytest.raises(RefusedError, match="delivery limit 1"):
        check_read(facts("quorum", delivery_limit=1), ReadOptions(spend_attempts=True))


def test_default_exchange_as_dead_letter_exchange_is_not_dropped() -> None:
    with pytest.raises(RefusedError) as refused:
        check_read(facts("quorum", delivery_limit=3, dead_letter_exchange=""), ReadOptions())
    assert "dropped" not in refused.value.message and "default exchange" in refused.value.message


def numbered(n: int) -> list[bytes]:
    return [str(i).encode() for i in range(n)]


def read_with(broker, queue_facts: QueueFacts, opts: ReadOptions, decode=None) -> list:
    with broker.channel() as ch:
        reader = QueueReader(ch, queue_facts, opts, *(() if decode is None else (decode,)))
        return list(reader.records())


def test_quorum_read_that_fills_a_batch_still_finishes_the_returned_block(broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 5})
    broker.publish(qname, numbered(6))
    quorum = facts("quorum", delivery_limit=5, name=qname)
    assert len(read_with(broker, quorum, ReadOptions(count=6, spend_attempts=True, batch_size=3))) == 6
    # The head is now a block of 6 returned messages; read 3 of them, exactly one batch.
    assert len(read_with(broker, quorum, ReadOptions(count=3, spend_attempts=True, batch_size=3))) == 3
    assert [body for _m, _p, body in broker.drain(qname)] == numbered(6)


def test_bodies_are_decoded_after_the_messages_are_given_back(broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, numbered(5))
    depths: list[int] = []

    def decode(record) -> None:
        depths.append(broker.queue_depth(qname))  # what the queue holds while we decode

    records = read_with(broker, facts("classic", name=qname), ReadOptions(count=5), decode)
    assert len(records) == 5
    assert depths == [5] * 5
