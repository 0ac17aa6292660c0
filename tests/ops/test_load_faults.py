"""A connection cut during `load`: every record ends in its queue or in the --failed file; extra copies are
at most the records that had no answer (reported as possible duplicates)."""

from __future__ import annotations

import io
import random
import signal

import pika
import pytest

from dlxtool.ops.load import LoadSettings, load_records
from dlxtool.ops.record_files import RecordSink, read_records
from dlxtool.ops.session import Session
from dlxtool.record import MessageRecord
from tests.ops.test_replay_faults import check_nothing_lost, settled_copies
from tests.support.proxy import CuttingProxy

N = 3000


def _session(broker, conn) -> Session:
    """The load's session on `conn` (through a cutting proxy, where the test has one)."""
    return Session(conn=conn, vhost=broker.vhost, broker="t", timeout=10, management=broker.mgmt)


@pytest.mark.parametrize("seed", range(3))
def test_load_cut_at_a_random_byte(broker, qname, seed) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    sent = [f"{qname}-{i:05d}-".encode() + b"x" * 100 for i in range(N)]
    data = b"".join(MessageRecord(queue=qname, body=b, headers={"i": i}).to_jsonl() for i, b in enumerate(sent))
    cut_at = random.Random(seed).randint(5_000, N * 150)  # a full load sends ~190 B per record
    failed = io.BytesIO()
    with CuttingProxy(broker.host, broker.amqp_port, cut_after_bytes=cut_at) as proxy:
        conn = pika.BlockingConnection(pika.URLParameters(
            broker.url.replace(f":{broker.amqp_port}/", f":{proxy.port}/")))
        result = load_records(_session(broker, conn), lambda: io.BytesIO(data), LoadSettings("mem", window=200),
                              total=N, failed=RecordSink(failed), handle_sigint=False)
        cuts = proxy.cuts
    failed.seek(0)
    in_failed = [r.body for r in read_records(failed)]
    found = settled_copies(broker, [qname], result.published_total)
    for body in in_failed:
        found[body] += 1
    extra = check_nothing_lost(found, sent, result.lost)
    print(f"seed={seed} cut_at={cut_at}B published={result.published_total} lost={result.lost} "
          f"not_sent={result.not_sent} error={result.result.error!r} found_dups={extra}")
    assert cuts == 1 and result.result.error
    assert result.published_total + result.failed_total + result.not_sent == N == len(in_failed) + \
        result.published_total


class _CtrlCAfter(io.BytesIO):
    """Record lines that deliver a real SIGINT to this (main) thread after `lines` of them were read."""

    def __init__(self, data: bytes, lines: int) -> None:
        super().__init__(data)
        self.left = lines

    def __next__(self) -> bytes:
        self.left -= 1
        if self.left == 0:
            signal.raise_signal(signal.SIGINT)  # load's handler turns it into a clean stop
        return super().__next__()


def test_ctrl_c_leaves_no_record_behind(broker, qname) -> None:
    """Regression (fault matrix seed 1000): the record read when Ctrl-C's stop was noticed was neither
    published nor counted as not sent nor written to --failed — one message silently missing."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    n, stop_at = 500, 200
    sent = [f"{qname}-{i:05d}".encode() for i in range(n)]
    data = b"".join(MessageRecord(queue=qname, body=b).to_jsonl() for b in sent)
    opened = []

    def open_stream() -> io.BytesIO:  # the second opening is the publishing pass
        opened.append(_CtrlCAfter(data, stop_at) if opened else io.BytesIO(data))
        return opened[-1]

    open_stream()
    failed = io.BytesIO()
    result = load_records(_session(broker, pika.BlockingConnection(pika.URLParameters(broker.url))), open_stream,
                          LoadSettings("mem", window=50), total=n, failed=RecordSink(failed))
    failed.seek(0)
    in_failed = [r.body for r in read_records(failed)]
    found = settled_copies(broker, [qname], result.published_total)
    for body in in_failed:
        found[body] += 1
    assert result.result.interrupted and result.not_sent
    assert result.published_total + result.failed_total + result.not_sent == n
    check_nothing_lost(found, sent, result.lost)


class _CutAtTheEnd(io.BytesIO):
    """Record lines that drop the proxied connection once the last one was read (and published)."""

    def __init__(self, data: bytes, proxy: CuttingProxy) -> None:
        super().__init__(data)
        self.proxy = proxy

    def __next__(self) -> bytes:
        try:
            return super().__next__()
        except StopIteration:
            self.proxy.cut()  # every record is out; confirms of persistent messages take an fsync to come
            raise


def test_cut_while_waiting_for_the_last_confirms_is_a_connection_error(broker, qname) -> None:
    """Regression (fault matrix seed 1011): a cut after the last publish, while waiting for confirms, was
    swallowed by the publisher's flush: the load ended as 'some records failed' (exit 5), not as a lost
    connection (exit 3), although nothing tells whether those records arrived."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    sent = [f"{qname}-{i:05d}".encode() for i in range(300)]
    data = b"".join(MessageRecord(queue=qname, body=b, properties={"delivery_mode": 2}).to_jsonl() for b in sent)
    failed = io.BytesIO()
    with CuttingProxy(broker.host, broker.amqp_port) as proxy:
        conn = pika.BlockingConnection(pika.URLParameters(
            broker.url.replace(f":{broker.amqp_port}/", f":{proxy.port}/")))
        opened = []

        def open_stream() -> io.BytesIO:
            opened.append(_CutAtTheEnd(data, proxy))
            return opened[-1]

        result = load_records(_session(broker, conn), open_stream, LoadSettings("mem", window=1000),
                              total=len(sent), failed=RecordSink(failed), handle_sigint=False)
        cuts = proxy.cuts
    assert cuts == 1
    if result.lost == 0:
        pytest.skip("every confirm arrived before the cut: nothing to check this time")
    assert result.result.error, result.to_json()
    failed.seek(0)
    found = settled_copies(broker, [qname], result.published_total)
    for record in read_records(failed):
        found[record.body] += 1
    check_nothing_lost(found, sent, result.lost)
