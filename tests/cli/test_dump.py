"""dump: every message, every time, nothing removed; `dump --remove` drains a queue into a file
(record written and fsynced, then acked)."""

from __future__ import annotations

import json

import pytest

from dlxtool.ops.record_files import read_records
from tests.support.fill import fill


def declare_and_fill(broker, queue: str, n: int) -> list[bytes]:
    with broker.channel() as ch:
        ch.queue_declare(queue, durable=True)
    sent = [f"d{i:04d}".encode() for i in range(n)]
    fill(broker, queue, sent)
    return sent


def bodies_in(path) -> list[bytes]:
    with open(path, "rb") as f:
        return [r.body for r in read_records(f)]


def test_remove_drains_without_the_unacked_bound(run, broker, qname, tmp_path) -> None:
    sent = declare_and_fill(broker, qname, 40)
    out = tmp_path / "drained.jsonl"
    # A peek-style dump of 40 with a bound of 5 is refused ...
    assert run("dump", qname, "--all", "--max-unacked", "5", "--url", broker.url).exit_code == 6
    # ... a drain holds nothing big: the bound does not apply.
    result = run("dump", qname, "--remove", "--max-unacked", "5", "-o", str(out), "--yes", "--url", broker.url)
    assert result.exit_code == 0, result.stderr
    assert "removed 40 of 40" in result.stderr
    assert bodies_in(out) == sent
    assert broker.queue_depth(qname) == 0


def test_remove_prints_a_json_summary_with_possible_duplicates(run, broker, qname, tmp_path) -> None:
    """Scripts read possible_duplicates from every command that takes messages away (found by the fault
    matrix: dump --remove printed its summary on stderr only, as prose)."""
    import json

    declare_and_fill(broker, qname, 12)
    out = tmp_path / "drained.jsonl"
    result = run("--format", "json", "dump", qname, "--remove", "-o", str(out), "--yes", "--url", broker.url)
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["removed"] == 12 and summary["possible_duplicates"] == 0 and summary["file"] == str(out)
    assert summary["error"] is None and not summary["interrupted"]
    assert len(bodies_in(out)) == 12


def test_remove_n_takes_the_head_and_appends(run, broker, qname, tmp_path) -> None:
    sent = declare_and_fill(broker, qname, 20)
    out = tmp_path / "head.jsonl"
    for _ in range(2):
        result = run("dump", qname, "--remove", "-n", "5", "-o", str(out), "--yes", "--url", broker.url)
        assert result.exit_code == 0, result.stderr
    assert "appending" in result.stderr
    assert bodies_in(out) == sent[:10]
    assert [b for b, _h in broker.snapshot(qname)] == sent[10:]


def test_remove_refuses_a_pipe_and_asks_first(run, broker, qname, tmp_path) -> None:
    declare_and_fill(broker, qname, 3)
    piped = run("dump", qname, "--remove", "--yes", "--url", broker.url)
    assert piped.exit_code == 2 and "-o FILE" in piped.stderr
    unconfirmed = run("dump", qname, "--remove", "-o", str(tmp_path / "x.jsonl"), "--url", broker.url)
    assert unconfirmed.exit_code == 6
    assert broker.queue_depth(qname) == 3


@pytest.mark.parametrize("command", ["dump", "purge"])
def test_an_empty_queue_with_a_risky_tail_is_nothing_to_take_for_dump(run, broker, qname, tmp_path,
                                                                      command: str) -> None:
    """A selection keeps messages by republishing them to the tail, which a drop-head queue at its limit answers by
    pushing out its head: refused (exit 6) where there are messages. `dump --remove` of an empty one has always
    been "nothing to take", exit 0 (the review of issue 36's change: dump --remove, now a purge, refused it); a
    purge refuses what it could not run safely even then, as before (tests/cli/test_errors.py)."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-max-length": 0, "x-overflow": "drop-head"})
    args = (["dump", qname, "--remove", "-o", str(tmp_path / "o.jsonl")] if command == "dump"
            else ["purge", qname, "--backup", str(tmp_path / "o.jsonl")])
    result = run(*args, "--body-contains", "x", "--yes", "--url", broker.url)
    if command == "purge":
        assert result.exit_code == 6 and "drop-head" in result.stderr, result.stderr
        return
    assert result.exit_code == 0, result.stderr
    assert "nothing to take" in result.stderr


def test_remove_refuses_streams(run, broker, qname, tmp_path) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
    result = run("dump", qname, "--remove", "-o", str(tmp_path / "s.jsonl"), "--yes", "--url", broker.url)
    assert result.exit_code == 6 and "stream" in result.stderr


def test_remove_to_stdout_redirected_to_a_file(broker, qname, tmp_path, cli_env) -> None:
    import subprocess
    import sys

    sent = declare_and_fill(broker, qname, 10)
    out = tmp_path / "redirected.jsonl"
    with open(out, "wb") as f:
        proc = subprocess.run([sys.executable, "-m", "dlxtool", "dump", qname, "--remove", "--yes", "--url",
                               broker.url], stdout=f, stderr=subprocess.PIPE, env=cli_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert bodies_in(out) == sent


def test_back_to_back_dumps_of_10000_messages_each_write_all_of_them(run, broker, qname, tmp_path) -> None:
    """A dump right after another must not stop at a ready count taken while the last one's
    give-back was still going on (reviewer: 10000, 2679, 10000 lines, the short one exit 0)."""
    declare_and_fill(broker, qname, 10_000)
    lines = []
    for i in range(3):
        out = tmp_path / f"dump{i}.jsonl"
        result = run("dump", qname, "--url", broker.url, "-o", str(out))
        assert result.exit_code == 0, result.stderr
        lines.append(len(out.read_bytes().splitlines()))
    assert lines == [10_000] * 3
    assert broker.queue_depth(qname) == 10_000


def test_dump_of_a_quorum_queue_without_limit_keeps_order(run, broker, qname, tmp_path) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments=broker.quorum_without_limit())
    broker.publish(qname, [b"%d" % i for i in range(300)])
    for i in range(2):
        out = tmp_path / f"dump{i}.jsonl"
        result = run("dump", qname, "--url", broker.url, "-o", str(out), "--allow-reorder")
        assert result.exit_code == 0, result.stderr
        assert len(out.read_bytes().splitlines()) == 300
    assert [body for _m, _p, body in broker.drain(qname)] == [b"%d" % i for i in range(300)]


def test_an_existing_backup_is_not_replaced_without_force(run, broker, qname, tmp_path) -> None:
    declare_and_fill(broker, qname, 3)
    backup = tmp_path / "purge-backup.jsonl"
    backup.write_bytes(b'{"queue": "q", "body": "b25seSBjb3B5"}\n')  # the only copy of a purged message
    refused = run("dump", qname, "-o", str(backup), "--url", broker.url)
    assert refused.exit_code == 2 and "refusing to replace it" in refused.stderr and "--force" in refused.stderr
    assert backup.read_bytes() == b'{"queue": "q", "body": "b25seSBjb3B5"}\n'
    forced = run("dump", qname, "-o", str(backup), "--force", "--url", broker.url)
    assert forced.exit_code == 0, forced.stderr
    assert len(bodies_in(backup)) == 3


def test_a_symlink_is_written_through_not_replaced(run, broker, qname, tmp_path) -> None:
    declare_and_fill(broker, qname, 2)
    target, link = tmp_path / "target.jsonl", tmp_path / "link.jsonl"
    link.symlink_to(target)
    result = run("dump", qname, "-o", str(link), "--url", broker.url)
    assert result.exit_code == 0, result.stderr
    assert link.is_symlink() and len(bodies_in(target)) == 2


def test_remove_summary_takes_format(run, broker, qname, tmp_path) -> None:
    declare_and_fill(broker, qname, 2)
    out = tmp_path / "d.jsonl"
    result = run("dump", qname, "--remove", "-o", str(out), "--yes", "--format", "jsonl", "--url", broker.url)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["removed"] == 2 and result.stdout.count("\n") == 1
