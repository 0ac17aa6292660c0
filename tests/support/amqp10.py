"""What the AMQP 1.0 tests share: a broker profile for a test's vhost, and the head of a queue read over AMQP 1.0
(given back `released`, as peek gives back on 4.3). The `v4` fixture (tests/conftest.py) skips below RabbitMQ 4.x."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlxtool.amqp10_message import Amqp10Message, parse_message
from dlxtool.config import BrokerProfile

if TYPE_CHECKING:
    from tests.support.broker import BrokerEnv


def profile_of(broker: BrokerEnv) -> BrokerProfile:
    return BrokerProfile(name="t", urls=(broker.url,), vhost=broker.vhost)


def read_head(broker: BrokerEnv, queue: str, n: int) -> list[Amqp10Message]:
    """The first `n` messages of `queue` over AMQP 1.0, given back."""
    from dlxtool.broker.amqp10 import outcomes
    from dlxtool.broker.amqp10.addresses import queue_address
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.broker.amqp10.links import HeadReader

    conn = open_connection(profile_of(broker))
    try:
        reader = HeadReader(conn, queue_address(queue), give_back=outcomes.RELEASE)
        out = [parse_message(d.raw) for d in reader.read(n)]
        reader.close()
        return out
    finally:
        conn.close()
