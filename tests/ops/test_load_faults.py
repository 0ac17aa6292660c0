"""A connection cut during `load`: every record ends in its queue or in the --failed file; extra copies are
at most the records that had no answer (reported as possible duplicates)."""

from __future__ import annotations

import io
import random

import pika
import pytest

from dlxtool.ops.load import LoadSettings, load
from dlxtool.ops.transfer import RecordSink
from dlxtool.record import MessageRecord, read_records
from tests.ops.test_replay_faults import check_nothing_lost, settled_copies
from tests.support.proxy import CuttingProxy

N = 3000


@pytest.mark.parametrize("seed", range(3))
def test_load_cut_at_a_random_byte(broker, qname, seed) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname)
    sent = [f"{qname}-{i:05d}-".encode() + b"x" * 100 for i in range(N)]
    data = b"".join(MessageRecord(queue=qname, body=b, headers={"i": i}).to_jsonl() for i, b in enumerate(sent))
    cut_at = random.Random(seed).randint(5_000, N * 150)  # a full load sends ~190 B per record
    failed = io.BytesIO()
    with CuttingProxy(broker.host, broker.amqp_port, cut_after_bytes=cut_at) as proxy:
        conn = pika.BlockingConnection(pika.URLParameters(
            broker.url.replace(f":{broker.amqp_port}/", f":{proxy.port}/")))
        result = load(conn, lambda: io.BytesIO(data), LoadSettings("mem", window=200), total=N,
                      failed=RecordSink(failed), handle_sigint=False, timeout=10)
        cuts = proxy.cuts
    failed.seek(0)
    in_failed = [r.body for r in read_records(failed)]
    found = settled_copies(broker, [qname], result.published_total)
    for body in in_failed:
        found[body] += 1
    extra = check_nothing_lost(found, sent, result.lost)
    print(f"seed={seed} cut_at={cut_at}B published={result.published_total} lost={result.lost} "
          f"not_sent={result.not_sent} error={result.error!r} found_dups={extra}")
    assert cuts == 1 and result.error
    assert result.published_total + result.failed_total + result.not_sent == N == len(in_failed) + \
        result.published_total
