"""Files that hold message bodies are their owner's only (issue 28): what dlxtool creates for records (dump -o,
dump --remove -o, purge --backup, replay --save, load --failed) and the summary log is 0600 whatever the umask. A
file that exists already keeps its mode when records are appended to it, and a mode that lets others read is
named in a warning. (A backup was 0644 under umask 022.)"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from dlxtool.record import MessageRecord
from tests.support import retry_topologies as rt


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """The umask files are created under (the CLI runs in this process): 022 the common one, 000 the widest."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def dead_letters(broker, qname: str, n: int) -> str:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", [f"m{i}".encode() for i in range(n)])
    assert broker.wait_depth(top.dlq, n) == n
    return top.dlq


COMMANDS = {
    "dump -o": ["dump", "{q}", "-o", "{file}"],
    "dump --remove -o": ["dump", "{q}", "--remove", "-o", "{file}", "--yes"],
    "purge --backup": ["purge", "{q}", "--backup", "{file}", "--yes"],
    "replay --save": ["replay", "{q}", "--save", "{file}", "--yes"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_record_file_is_created_0600(run, broker, qname, tmp_path, umask, command) -> None:
    dlq = dead_letters(broker, qname, 2)
    path = tmp_path / "records.jsonl"
    result = run(*[a.format(q=dlq, file=path) for a in COMMANDS[command]], "--url", broker.url)
    assert result.exit_code == 0, result.stderr
    assert path.read_bytes().count(b"\n") == 2  # the records are in it
    assert mode(path) == 0o600
    assert "may be read by others" not in result.stderr


def test_load_failed_is_created_0600(run, broker, qname, tmp_path, umask) -> None:
    """A record for a queue that does not exist is returned: it goes to --failed FILE2."""
    records = tmp_path / "in.jsonl"
    records.write_bytes(MessageRecord(queue=f"{qname}.missing", body=b"secret").to_jsonl())
    failed = tmp_path / "failed.jsonl"
    result = run("load", str(records), "--yes", "--failed", str(failed), "--url", broker.url, "--allow-dlx-drop")
    assert result.exit_code in (5, 6), result.stderr
    assert orjson.loads(failed.read_bytes())["body"] == "c2VjcmV0"
    assert mode(failed) == 0o600


@pytest.mark.parametrize("command", ["dump --remove -o", "purge --backup", "replay --save"])
def test_appending_keeps_the_mode_and_says_when_others_may_read(run, broker, qname, tmp_path, umask,
                                                                 command) -> None:
    dlq = dead_letters(broker, qname, 1)
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"")
    path.chmod(0o644)
    result = run(*[a.format(q=dlq, file=path) for a in COMMANDS[command]], "--url", broker.url)
    assert result.exit_code == 0, result.stderr
    assert path.read_bytes().count(b"\n") == 1
    assert mode(path) == 0o644  # its owner's choice, kept ...
    assert f"{path} may be read by others (mode 0644)" in result.stderr  # ... and named
    path.chmod(0o600)
    dead_letters(broker, qname, 1)
    again = run(*[a.format(q=dlq, file=path) for a in COMMANDS[command]], "--url", broker.url)
    assert again.exit_code == 0 and "may be read by others" not in again.stderr


def test_dump_replaces_a_partial_file_left_behind_with_a_0600_one(run, broker, qname, tmp_path, umask) -> None:
    """dump -o FILE writes FILE.partial, then renames it: a FILE.partial an interrupted run left (0644) does not
    give FILE its mode; nor does a FILE replaced with --force."""
    dlq = dead_letters(broker, qname, 1)
    path = tmp_path / "records.jsonl"
    for stale in (path, Path(f"{path}.partial")):
        stale.write_bytes(b"old\n")
        stale.chmod(0o644)
    result = run("dump", dlq, "-o", str(path), "--force", "--url", broker.url)
    assert result.exit_code == 0, result.stderr
    assert mode(path) == 0o600 and b"old" not in path.read_bytes()


def test_the_summary_log_is_0600(tmp_path, monkeypatch, umask) -> None:
    """The output a terminal that went away could not take ($XDG_STATE_HOME/dlxtool/summary-*.log)."""
    from dlxtool.cli import streams

    # the one the streams divert to, placed by the command's environment
    log = streams._SummaryFile({"XDG_STATE_HOME": str(tmp_path / "state")})  # noqa: SLF001
    log.write("removed 3 messages: body b'secret'\n")
    assert log.path is not None and log.path.parent == tmp_path / "state" / "dlxtool"
    assert mode(log.path) == 0o600 and mode(log.path.parent) == 0o700
