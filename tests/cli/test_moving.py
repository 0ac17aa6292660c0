"""The record files of the commands that take messages away (dlxtool.cli.moving: check_record_file,
record_file), against the real broker. How a run ends: tests/ops/test_outcomes.py."""

from __future__ import annotations

import errno
import io
import json
from collections import Counter
from typing import Any

import pytest

from dlxtool.ops.record_files import read_records
from tests.support import retry_topologies as rt

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only

# -- record files of the commands that take messages away (real broker) -----------------------------

def dead_letters(broker, qname: str, n: int) -> str:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", [f"m{i:05d}".encode() for i in range(n)])
    assert broker.wait_depth(top.dlq, n) == n
    return top.dlq


def untouched(broker, queue: str, n: int) -> bool:
    """Still n messages, none of them ever delivered (a plan would have read and given them back)."""
    got = broker.drain(queue)
    return len(got) == n and not any(method.redelivered for method, _p, _b in got)


def run_to_completion(run, broker, command: str, queue: str, path) -> Any:
    """`command` on `queue` with its record file at `path`, asking nothing, JSON summary on stdout."""
    args = [a.format(q=queue, file=path) for a in SINK_COMMANDS[command]]
    if command == "dump --remove":
        args.append("--yes")
    return run("--format", "json", *args, "--url", broker.url)


SINK_COMMANDS = {
    "replay": ["replay", "{q}", "--save", "{file}"],
    "replay --yes": ["replay", "{q}", "--save", "{file}", "--yes"],
    "replay --dry-run": ["replay", "{q}", "--save", "{file}", "--dry-run"],
    "purge --backup": ["purge", "{q}", "--backup", "{file}", "--yes"],
    "selective purge --backup": ["purge", "{q}", "--backup", "{file}", "--body-contains", "m0"],
    "dump --remove": ["dump", "{q}", "--remove", "-o", "{file}"],
}


@pytest.mark.parametrize("where", ["missing-dir", "under-a-file"])
@pytest.mark.parametrize("command", list(SINK_COMMANDS))
def test_an_unwritable_record_file_is_refused_before_anything_is_read(run, broker, qname, tmp_path, command,
                                                                      where) -> None:
    dlq = dead_letters(broker, qname, 5)
    (tmp_path / "a-file").write_text("")
    path = tmp_path / ("missing" if where == "missing-dir" else "a-file") / "records.jsonl"
    args = [a.format(q=dlq, file=path) for a in SINK_COMMANDS[command]]
    result = run(*args, "--url", broker.url)
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert f"cannot write {path}:" in result.stderr and "hint:" in result.stderr, result.stderr
    assert "internal error" not in result.stderr and result.stdout == ""  # no plan shown
    assert untouched(broker, dlq, 5)
    assert not path.exists()


class FullFile(io.FileIO):
    """The record file on a disk that fills up: writes fail (ENOSPC) once `room` bytes are in."""

    room = 20_000

    def write(self, data) -> int:  # type: ignore[override]
        if len(data) > FullFile.room:
            super().write(data[:FullFile.room])
            FullFile.room = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        FullFile.room -= len(data)
        return super().write(data)


class CloseFails(io.FileIO):
    """The record file whose close() reports an error (as NFS may): once, after really closing."""

    failed = False

    def close(self) -> None:
        super().close()
        if not CloseFails.failed:
            CloseFails.failed = True
            raise OSError(errno.EIO, "Input/output error")


def file_records(path) -> Counter[bytes]:
    with open(path, "rb") as f:
        return Counter(r.body for r in read_records(f, str(path)))


@pytest.mark.parametrize("command", ["dump --remove", "purge --backup", "replay --yes"])
def test_a_full_disk_mid_run_ends_in_the_summary_and_loses_nothing(run, broker, qname, tmp_path, monkeypatch,
                                                                   command) -> None:
    import dlxtool.ops.record_files as record_files

    n = 3000
    dlq = dead_letters(broker, qname, n)
    monkeypatch.setattr(FullFile, "room", 400_000)  # several batches of records, then a write cut mid-record
    monkeypatch.setattr(record_files, "open", lambda p, mode, buffering=-1: FullFile(p, "a+"), raising=False)
    path = tmp_path / "records.jsonl"
    result = run_to_completion(run, broker, command, dlq, path)
    assert result.exit_code == 5, (result.stdout, result.stderr)
    assert "No space left on device" in result.stderr and "internal error" not in result.stderr
    summary = json.loads(result.stdout)
    assert summary["error"] == "[Errno 28] No space left on device"
    saved = file_records(path)
    assert summary["removed"] + summary["moved_total"] == sum(saved.values()) > 0
    in_dlq = Counter(body for _m, _p, body in broker.drain(dlq))
    moved = Counter(body for _m, _p, body in broker.drain(f"{qname}.o"))
    everywhere = in_dlq + (moved if command.startswith("replay") else saved)
    sent = [f"m{i:05d}".encode() for i in range(n)]
    assert not [b for b in sent if not everywhere[b]], "messages lost"
    assert all(saved[b] for b in sent if not in_dlq[b]), "taken from the queue without a record"
    assert sum(everywhere.values()) - n <= summary["possible_duplicates"]


@pytest.mark.parametrize("command", ["dump --remove", "purge --backup", "replay --yes"])
def test_a_record_file_that_fails_to_close_still_ends_in_the_summary(run, broker, qname, tmp_path, monkeypatch,
                                                                      command) -> None:
    """Every record was flushed and fsynced before its ack: a failing close() loses nothing, says so,
    and does not hide the summary."""
    import dlxtool.ops.record_files as record_files

    dlq = dead_letters(broker, qname, 20)
    monkeypatch.setattr(CloseFails, "failed", False)
    monkeypatch.setattr(record_files, "open", lambda p, mode, buffering=-1: CloseFails(p, "a+"), raising=False)
    path = tmp_path / "records.jsonl"
    result = run_to_completion(run, broker, command, dlq, path)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert CloseFails.failed and f"closing {path} failed" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["removed"] + summary["moved_total"] == 20 == sum(file_records(path).values())
