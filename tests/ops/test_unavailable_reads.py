"""A quorum queue without a majority of its members online makes a read wait inside the broker, which then closes
the connection with 541 {timeout, …}: said as a node down (exit 7) by peek and the engine, never as a message that
cannot be converted (peek) or a lost connection (replay, purge: exit 3). Pure logic: the broker's words as pika
raises them (the cluster tests make the real thing, tests/cli/test_cluster_incidents.py)."""

from __future__ import annotations

import pika.exceptions as pe

from dlxtool.errors import UnavailableError
from dlxtool.ops.engine import _unavailable
from dlxtool.ops.peek import unconvertible_close

TIMEOUT = pe.ConnectionClosedByBroker(541, "INTERNAL_ERROR - {timeout,{'%2F_orders.dlq',"
                                           "'dlxtool-k2@localhost'}}")
POISON = pe.ConnectionClosedByBroker(541, "INTERNAL_ERROR - Connection error in the mc_amqpl:to_091 "
                                          "function_clause")


def test_a_541_timeout_is_a_node_down_not_an_unconvertible_message() -> None:
    assert unconvertible_close(POISON) and not unconvertible_close(TIMEOUT)
    assert not unconvertible_close(pe.ConnectionClosedByBroker(320, "CONNECTION_FORCED"))


def test_the_engine_says_a_541_timeout_as_unavailable_and_a_lost_connection_as_lost() -> None:
    said = _unavailable(TIMEOUT)
    assert isinstance(said, UnavailableError) and "not lost" in said.message and "{timeout," in said.message
    assert _unavailable(pe.ConnectionClosedByBroker(320, "CONNECTION_FORCED - shutdown")) is None
    assert _unavailable(POISON) is None
    assert _unavailable(ValueError("a local error")) is None
