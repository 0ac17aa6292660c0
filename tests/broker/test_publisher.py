"""Publisher bookkeeping, driven without a broker: which publish a basic.return belongs to.

The broker part (RabbitMQ sending the return of a later publish before the fsync-delayed ack of an
earlier one) is reproduced in tests/cli/test_replay_returns.py; here the frames are fed in that order."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pika
import pytest

from dlxtool.broker import publisher
from dlxtool.broker.publisher import PublishAnswer, Publisher
from dlxtool.broker.wire import codec, frames


class _FakeImpl:
    def add_on_return_callback(self, cb: Any) -> None:
        self.on_return = cb

    def confirm_delivery(self, ack_nack_callback: Any, callback: Any) -> None:
        callback(None)


class _EncodingCodec:
    """Publishes nowhere: encodes the properties, as every codec returns them."""

    def confirms(self, *_args: Any) -> None:
        pass

    def sender(self, _conn: Any, _channel: Any) -> Any:
        return lambda _exchange, _rk, _body, props: frames.encode_for_publish(props, 131072)


class _FakeChannel:
    def __init__(self, connection: Any, timeout: float) -> None:
        self.connection = connection
        self.timeout = timeout
        self.impl = _FakeImpl()

    def wait_for(self, ready: Any, _what: str) -> None:
        assert ready()

    def check(self) -> None:
        pass


@pytest.fixture
def pub(monkeypatch: pytest.MonkeyPatch) -> Publisher:
    monkeypatch.setattr(publisher, "AsyncChannel", _FakeChannel)
    monkeypatch.setattr(codec, "current", lambda: _EncodingCodec())
    return Publisher(object(), window=10)


def _props(message_id: str) -> Any:
    return pika.BasicProperties(message_id=message_id, delivery_mode=2, headers={"dlxtool-replay": {"count": 1}})


def _return(pub: Publisher, props: Any, body: bytes = b"same-body") -> None:
    method = SimpleNamespace(exchange="x", routing_key="rk", reply_code=312, reply_text="NO_ROUTE")
    pub._on_return(None, method, props, body)  # noqa: SLF001


def _ack(pub: Publisher, tag: int, *, multiple: bool = False) -> None:
    pub._on_ack_nack(SimpleNamespace(method=pika.spec.Basic.Ack(delivery_tag=tag, multiple=multiple)))  # noqa: SLF001


def test_a_return_for_a_later_publish_is_not_pinned_on_an_earlier_lookalike(pub: Publisher) -> None:
    """Same body, different message_id: the return of B (seq 2) arrives while A (seq 1) is unacked."""
    a, b = _props("A"), _props("B")
    pub.publish("x", "rk", b"same-body", a, "A")
    pub.publish("x", "rk", b"same-body", b, "B")
    _return(pub, pika.BasicProperties(message_id="B", delivery_mode=2, headers={"dlxtool-replay": {"count": 1}}))
    _ack(pub, 2, multiple=True)
    outcomes = {token: outcome for token, outcome, _ in pub.take_settled()}
    assert outcomes == {"A": PublishAnswer.CONFIRMED, "B": PublishAnswer.RETURNED}
    assert pub.possible_duplicates == 0


def test_identical_publishes_that_tie_are_all_kept_and_counted_as_possible_duplicates(pub: Publisher) -> None:
    """Byte-identical publishes: we cannot tell which one came back, so none of them may be CONFIRMED."""
    for token in ("A", "B", "C"):
        pub.publish("x", "rk", b"same-body", _props("same"), token)
    _return(pub, _props("same"))
    _ack(pub, 3, multiple=True)
    settled = pub.take_settled()
    assert {outcome for _t, outcome, _d in settled} == {PublishAnswer.RETURNED}
    assert all("maybe" in (detail or "") for _t, _o, detail in settled)
    assert pub.possible_duplicates == 2  # one of the three came back; two are at the target as well


def test_a_second_return_on_a_tie_lowers_the_duplicate_count(pub: Publisher) -> None:
    for token in ("A", "B"):
        pub.publish("x", "rk", b"same-body", _props("same"), token)
    _return(pub, _props("same"))
    _return(pub, _props("same"))
    _ack(pub, 2, multiple=True)
    assert {o for _t, o, _d in pub.take_settled()} == {PublishAnswer.RETURNED}
    assert pub.possible_duplicates == 0
