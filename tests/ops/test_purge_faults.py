"""Faults during purge --backup (and --move-to): every message ends in the queue or in the backup file.

After every run the multiset of bodies in the queue plus the file holds every original at least once,
and the extra copies are at most what the run reported as possible duplicates.
"""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pika
import pytest

from dlxtool.ops.engine import TransferOptions
from dlxtool.ops.purge import PurgeSettings, run_reading_purge
from dlxtool.ops.record_files import RecordSink, TornRecord, iter_records
from dlxtool.selection import Selection
from tests.ops.test_replay_faults import check_nothing_lost, settled_copies
from tests.support.fill import fill, take_all
from tests.support.proxy import CuttingProxy

# Nothing a broker decides differently is tested here (dlxtool's own recovery from cut connections and full
# files): the 3.x pass only.
pytestmark = pytest.mark.once

N = 3000


def originals(qname: str) -> list[bytes]:
    # Every third body contains "keep": the selective runs keep those (republished to the tail).
    return [f"{qname}-{i:05d}-{'keep' if i % 3 == 0 else 'drop'}-".encode() + b"x" * 100 for i in range(N)]


def file_bodies(path: Path) -> Counter[bytes]:
    found: Counter[bytes] = Counter()
    with open(path, "rb") as f:
        try:
            for _where, record in iter_records(f, str(path)):
                found[record.body] += 1
        except TornRecord:
            pass  # a writer killed mid-record: that message was not acked (checked by the multiset)
    return found


def queue_of_originals(broker, qname: str) -> list[bytes]:
    sent = originals(qname)
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    fill(broker, qname, sent)
    return sent


def through_proxy(broker, proxy: CuttingProxy) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url.replace(f":{broker.amqp_port}/",
                                                                         f":{proxy.port}/")))


class CuttingSink(RecordSink):
    """A backup file whose k-th record write drops the connection (before that record is flushed/acked)."""

    def __init__(self, out, proxy: CuttingProxy, cut_at: int) -> None:
        super().__init__(out)
        self.proxy, self.cut_at = proxy, cut_at

    def write(self, record) -> None:
        super().write(record)
        if self.written == self.cut_at:
            self.proxy.cut()


@pytest.mark.parametrize("seed", range(4))
def test_backup_cut_at_a_random_record(broker, qname, tmp_path, seed) -> None:
    """Plain --backup (everything REMOVEd): the connection drops while record k is being written."""
    sent = queue_of_originals(broker, qname)
    backup = tmp_path / "backup.jsonl"
    cut_at = random.Random(seed).randint(1, N)
    with CuttingProxy(broker.host, broker.amqp_port) as proxy, open(backup, "ab") as f:
        conn = through_proxy(broker, proxy)
        sink = CuttingSink(f, proxy, cut_at)
        result = run_reading_purge(conn, PurgeSettings(qname, backup=str(backup)),
                                   TransferOptions(sink=sink, prefetch=500, handle_sigint=False), timeout=10)
        cuts = proxy.cuts
    found = settled_copies(broker, [qname], N - cut_at) + file_bodies(backup)
    extra = check_nothing_lost(found, sent, result.possible_duplicates)
    print(f"seed={seed} cut_at_record={cut_at} removed={result.removed} error={result.error!r} "
          f"reported_dups={result.possible_duplicates} found_dups={extra}")
    assert cuts == 1 and result.error and result.removed < N


@pytest.mark.parametrize("seed", range(4))
def test_selective_backup_cut_at_a_random_byte(broker, qname, tmp_path, seed) -> None:
    """Selective purge with --backup (2/3 removed, 1/3 republished to the tail): cut after a random number
    of client->broker bytes (a full run sends ~75 B per message, mostly the republishes)."""
    sent = queue_of_originals(broker, qname)
    backup = tmp_path / "backup.jsonl"
    cut_at = random.Random(seed).randint(2_000, N * 70)
    with CuttingProxy(broker.host, broker.amqp_port, cut_after_bytes=cut_at) as proxy, open(backup, "ab") as f:
        conn = through_proxy(broker, proxy)
        settings = PurgeSettings(qname, Selection(body_contains=(b"-drop-",)), backup=str(backup))
        result = run_reading_purge(conn, settings, TransferOptions(sink=RecordSink(f), prefetch=500,
                                                                   handle_sigint=False), timeout=10)
        cuts = proxy.cuts
    in_file = file_bodies(backup)
    assert all(b"-drop-" in body for body in in_file)
    found = settled_copies(broker, [qname], N - sum(in_file.values())) + in_file
    extra = check_nothing_lost(found, sent, result.possible_duplicates)
    print(f"seed={seed} cut_at={cut_at}B removed={result.removed} kept={sum(result.kept.values())} "
          f"error={result.error!r} reported_dups={result.possible_duplicates} found_dups={extra}")
    assert cuts == 1 and result.error


@pytest.mark.parametrize("seed", range(2))
def test_purge_process_killed_at_a_random_moment(broker, qname, tmp_path, seed) -> None:
    """kill -9 of `dlxtool purge --backup` mid-run: what is not in the file is still in the queue."""
    sent = queue_of_originals(broker, qname)
    backup = tmp_path / "backup.jsonl"
    kill_after = random.Random(seed).randint(50_000, 300 * N // 2)  # bytes of backup written
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLXTOOL_")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
               DLXTOOL_MANAGEMENT_URL=broker.management_url)
    proc = subprocess.Popen([sys.executable, "-m", "dlxtool", "purge", qname, "--url", broker.url, "--backup",
                             str(backup), "--yes"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        if backup.exists() and backup.stat().st_size >= kill_after:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.001)
    proc.wait(10)
    in_file = file_bodies(backup)
    found = settled_copies(broker, [qname], N - sum(in_file.values())) + in_file
    # A killed process reports nothing: at most the prefetch window (2000, the CLI's) may exist twice.
    extra = check_nothing_lost(found, sent, 2000)
    print(f"seed={seed} killed_after={kill_after}B rc={proc.returncode} in_file={sum(in_file.values())} "
          f"dups={extra}")
    assert proc.returncode == -signal.SIGKILL


def test_move_to_a_deleted_target_leaves_everything_in_order(broker, qname) -> None:
    """The parking queue is gone (deleted after the CLI's check): no publish can reach it (the temporary
    exchange cannot be bound to it; a queue deleted later returns the mandatory publishes), so every selected
    message stays — republished to the tail, in order — and the run says so."""
    sent = originals(qname)[:300]
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    fill(broker, qname, sent)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    settings = PurgeSettings(qname, Selection(body_contains=(b"-drop-",)), move_to=f"{qname}.deleted")
    result = run_reading_purge(conn, settings, TransferOptions(handle_sigint=False, sink=RecordSink(io.BytesIO())))
    conn.close()
    assert result.moved_total == 0 and result.possible_duplicates == 0
    # the temporary exchange that keeps the routing key cannot be bound to a missing queue: nothing is published
    assert result.left == {f"{qname}.deleted: queue missing (no temporary exchange can be bound to it)": 200}
    left = [body for _p, body in take_all(broker, qname)]
    assert sorted(left) == sorted(sent)
    # Each group keeps its order; a returned message is re-kept when its return arrives, so it can end
    # up behind kept messages that were after it (documented in `purge --help`).
    for group in (b"-keep-", b"-drop-"):
        assert [b for b in left if group in b] == [b for b in sent if group in b]
