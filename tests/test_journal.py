"""The journal (dlxtool.journal): lines that pair into runs, a killed run's start, 0600, a lock, rotation, and a
journal that cannot be written as a problem, never an exception."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from dlxtool import journal as journal_module
from dlxtool import secrets
from dlxtool.journal import Journal, read_runs
from dlxtool.message_ids import MessageIds


def test_a_run_is_a_start_and_an_end_and_a_killed_one_keeps_its_start(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal.jsonl")
    done = j.start("replay", ["replay", "q.dlq", "--yes"], broker="prod", broker_user="oncall", vhost="/",
                   queues=["q.dlq"])
    ids = MessageIds()
    for message_id in ("a", "b", "c"):
        ids.add(message_id)
    j.end(done, status="ok", counts={"moved": 3}, files=["saved.jsonl"], message_ids=ids)
    j.start("purge", ["purge", "q.dlq", "--backup", "b.jsonl"], broker="prod", broker_user="oncall", vhost="/",
            queues=["q.dlq"], files=["b.jsonl"])
    runs = list(read_runs(tmp_path / "journal.jsonl"))
    assert [r.start["command"] for r in runs] == ["replay", "purge"]
    assert runs[0].to_json()["status"] == "ok" and runs[0].to_json()["message_ids"] == ["a", "b", "c"]
    assert runs[0].to_json()["files"] == ["saved.jsonl"]
    assert runs[1].end is None and "no end" in runs[1].to_json()["status"]
    assert runs[1].to_json()["files"] == ["b.jsonl"]


def test_it_is_private_and_says_no_secret(tmp_path: Path) -> None:
    secrets.register("s3cret-pw")
    j = Journal(tmp_path / "state" / "journal.jsonl")
    j.start("load", ["--url", "amqp://u:s3cret-pw@h/", "load", "f"], broker="(--url)", broker_user="u", vhost="/",
            queues=[])
    path = tmp_path / "state" / "journal.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"s3cret-pw" not in path.read_bytes()


def test_writers_at_once_lose_no_line(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"

    def write(n: int) -> None:
        j = Journal(path)
        for _ in range(50):
            j.end(j.start("replay", [], broker=str(n), broker_user=None, vhost="/", queues=[]), status="ok")

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    runs = list(read_runs(path))
    assert len(runs) == 200 and all(r.end is not None for r in runs)


def test_it_rotates_by_size_and_reads_the_rotated_files_too(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(journal_module, "MAX_BYTES", 2_000)
    path = tmp_path / "journal.jsonl"
    j = Journal(path)
    for n in range(30):
        j.end(j.start("replay", [], broker=f"b{n}", broker_user=None, vhost="/", queues=[]), status="ok")
    assert path.with_name("journal.jsonl.1").exists() and path.stat().st_size <= 2_000
    brokers = [r.start["broker"] for r in read_runs(path)]
    assert brokers == sorted(brokers, key=lambda b: int(b[1:])) and brokers[-1] == "b29"


def test_a_journal_that_cannot_be_written_is_a_problem_not_an_error(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    j = Journal(blocked / "journal.jsonl")  # under a file: cannot be made
    run = j.start("replay", [], broker="b", broker_user=None, vhost="/", queues=[])
    j.end(run, status="ok")
    assert j.problem is not None and "could not be written" in j.problem
    assert not os.path.exists(blocked / "journal.jsonl")
