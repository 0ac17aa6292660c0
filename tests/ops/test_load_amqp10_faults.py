"""`load --protocol 1.0` stopped mid-run (issue 39), as the 0.9.1 load's faults are proved (test_load_faults.py): a
Ctrl-C, and the broker closing the run's AMQP 1.0 connection. Every record ends in its queue or in the --failed file
(counted published, failed, lost — maybe published — or not sent); extra copies are at most the lost ones."""

from __future__ import annotations

import io
from collections import Counter
from typing import Any

import pika
import pytest

from dlxtool.amqp10_message import Amqp10Message, Body, Typed, encode_message, parse_message
from dlxtool.ops.load import LoadSettings, load_records
from dlxtool.ops.record_files import RecordSink, read_records
from dlxtool.record import MessageRecord
from tests.ops.test_load_faults import _CtrlCAfter
from tests.support.amqp10 import close_connections, is_amqp10

pytestmark = pytest.mark.broker

pytest.importorskip("proton")



def _session(broker) -> Any:
    from dlxtool.ops.session import Session

    return Session(conn=pika.BlockingConnection(pika.URLParameters(broker.url)), vhost=broker.vhost, broker="t",
                   timeout=10, management=broker.mgmt,
                   profile=broker.profile())


def _records(queue: str, n: int) -> tuple[list[bytes], bytes]:
    ids = [f"{queue}-{i:04d}".encode() for i in range(n)]
    data = b"".join(MessageRecord.from_amqp10(queue, encode_message(Amqp10Message(
        properties={"message_id": Typed("string", i.decode()), "subject": Typed("string", "s")},
        body=Body("data", [i, b"|2nd"])))).to_jsonl() for i in ids)
    return ids, data


def _in_queue(broker, queue: str, n: int) -> Counter[bytes]:
    """The first data section of each message in `queue` (read over AMQP 1.0, given back)."""
    from dlxtool.broker.amqp10 import outcomes
    from dlxtool.broker.amqp10.addresses import queue_address
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.broker.amqp10.links import HeadReader

    conn = open_connection(broker.profile())
    try:
        reader = HeadReader(conn, queue_address(queue), give_back=outcomes.RELEASE)
        found = Counter(bytes(parse_message(d.raw).body.sections[0]) for d in reader.read(n))
        reader.close()
        return found
    finally:
        conn.close()


def _check(broker, queue: str, ids: list[bytes], result: Any, failed: io.BytesIO) -> None:
    failed.seek(0)
    in_failed = [r.amqp10.body.sections[0] for r in read_records(failed) if r.amqp10 is not None]
    assert result.published_total + result.failed_total + result.not_sent == len(ids) == \
        len(in_failed) + result.published_total, result.to_json()
    depth = broker.wait_depth(queue, result.published_total)
    assert result.published_total <= depth <= result.published_total + result.lost
    found = _in_queue(broker, queue, depth) + Counter(in_failed)
    assert set(found) == set(ids)  # nothing lost
    assert sum(found.values()) - len(ids) <= result.lost  # copies only where no outcome came


def test_ctrl_c_over_amqp10_leaves_no_record_behind(v4, qname) -> None:
    with v4.channel() as ch:
        ch.queue_declare(qname, durable=True)
    ids, data = _records(qname, 300)
    failed = io.BytesIO()
    result = load_records(_session(v4), lambda: _CtrlCAfter(data, 120), LoadSettings("mem", window=20, protocol="1.0"),
                          total=len(ids), failed=RecordSink(failed), handle_sigint=True)
    assert result.result.interrupted and result.result.error is None and result.not_sent > 0, result.to_json()
    assert 0 < result.published_total < len(ids)
    _check(v4, qname, ids, result, failed)


def test_a_closed_amqp10_connection_loses_nothing(v4, qname) -> None:
    """The broker closes the run's AMQP 1.0 connection (an operator's `close connection`, a restart) mid-run: the
    run stops with the error; what had no outcome is lost (maybe published), the rest not sent, all in --failed."""
    with v4.channel() as ch:
        ch.queue_declare(qname, durable=True)
    ids, data = _records(qname, 300)
    failed = io.BytesIO()
    closed: list[int] = []

    class CloseAfter(io.BytesIO):
        """Record lines that have the broker close the run's AMQP 1.0 connection once 100 of them were read."""

        def __next__(self) -> bytes:
            if len(ids) - 100 == len(self.getvalue()[self.tell():].splitlines()) and not closed:
                closed.append(_close_amqp10_connections(v4))
            return super().__next__()

    result = load_records(_session(v4), lambda: CloseAfter(data), LoadSettings("mem", window=20, protocol="1.0"),
                          total=len(ids), failed=RecordSink(failed), handle_sigint=False)
    assert closed == [1] and result.result.error, result.to_json()
    assert 0 < result.published_total < len(ids) and result.not_sent > 0
    _check(v4, qname, ids, result, failed)


def _close_amqp10_connections(broker, timeout: float = 30.0) -> int:
    """Close (management API) the AMQP 1.0 connections in the test's vhost, once listed."""
    return close_connections(broker, is_amqp10, timeout=timeout, what="the run's AMQP 1.0 connection")
