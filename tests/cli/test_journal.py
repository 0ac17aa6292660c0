"""The journal on the real broker (issue 32): every run that changes messages leaves a start and an end line — a
killed one its start —, `dlxtool journal` lists them, --no-journal writes nothing, and the broker's own view of
the connection names who and what."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import retry_topologies as rt

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only

ROOT = Path(__file__).resolve().parents[2]


def dead_letters(broker, qname: str, n: int) -> tuple[str, str]:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", [f"m{i:04d}".encode() for i in range(n)])
    assert broker.wait_depth(top.dlq, n) == n
    return top.dlq, f"{qname}.o"


def journal(run) -> list[dict]:
    result = run("journal", "--format", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_a_replay_and_a_purge_are_recorded_with_their_counts_and_files(run, broker, qname, tmp_path,
                                                                      cli_env) -> None:
    dlq, origin = dead_letters(broker, qname, 5)
    replayed = run("replay", dlq, "--yes", "--url", broker.url, "--format", "json")
    assert replayed.exit_code == 0, replayed.stderr
    dlq2, _ = dead_letters(broker, qname + "b", 3)
    backup = tmp_path / "backup.jsonl"
    purged = run("purge", dlq2, "--backup", str(backup), "--yes", "--url", broker.url, "--format", "json")
    assert purged.exit_code == 0, purged.stderr
    runs = journal(run)
    assert [r["command"] for r in runs] == ["replay", "purge"]
    replay_run, purge_run = runs
    assert replay_run["status"] == "ok" and replay_run["counts"]["moved"] == 5
    assert replay_run["queues"] == [dlq, origin] and replay_run["vhost"] == broker.vhost  # read, then put in
    assert replay_run["argv"][:2] == ["replay", dlq] and replay_run["broker_user"] == "guest"
    assert "guest:guest" not in json.dumps(runs)  # the URL's password is masked
    assert purge_run["files"] == [str(backup)] and purge_run["counts"]["removed"] == 3
    state = Path(cli_env["HOME"]) / ".local" / "state" / "dlxtool" / "journal.jsonl"
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    table = run("journal", "--queue", dlq, "--format", "table")
    assert [line.split()[1] for line in table.stdout.splitlines()[2:]] == ["replay"]
    into = run("journal", "--queue", origin, "--format", "json")  # "who put these messages here?"
    assert [r["command"] for r in json.loads(into.stdout)] == ["replay"]


def test_a_run_that_fails_after_its_start_says_so_in_its_end(run, broker, qname, monkeypatch) -> None:
    """A command that fails after the journal saw it start (here: the connection lost in a plain purge, made to
    happen) ends its run with the failure; before, the run read "no end (killed, or still running)"."""
    from dlxtool.errors import ConnectError
    from dlxtool.ops import purge as purge_ops

    dlq, _ = dead_letters(broker, qname, 2)

    def lost(*_args, **_kwargs):
        raise ConnectError("the connection to the broker was lost (the broker or the network closed it)")

    monkeypatch.setattr(purge_ops.Purge, "run", lost)
    result = run("purge", dlq, "--yes", "--url", broker.url)
    assert result.exit_code == 3, result.stderr
    [failed] = journal(run)
    assert failed["command"] == "purge" and failed["status"] != "ok" and "no end" not in failed["status"]
    assert "connection to the broker was lost" in failed["message"]


def test_command_names_a_command_with_its_variants(run, broker, qname, tmp_path) -> None:
    from dlxtool.journal import Journal

    state = tmp_path / ".local" / "state" / "dlxtool" / "journal.jsonl"  # cli_env's HOME is tmp_path
    journal_file = Journal(state)
    for command in ("replay", "replay --edit", "purge"):
        journal_file.end(journal_file.start(command, [command], broker="b", broker_user=None, vhost="/",
                                            queues=["q"]), status="ok")
    def commands(*args: str) -> list[str]:
        return [r["command"] for r in json.loads(run("journal", *args, "--format", "json").stdout)]

    assert commands("--command", "replay") == ["replay", "replay --edit"]
    assert commands("--command", "replay --edit") == ["replay --edit"]
    assert commands("--command", "purge") == ["purge"]


def test_no_journal_writes_nothing_and_a_dry_run_is_not_a_change(run, broker, qname) -> None:
    dlq, _ = dead_letters(broker, qname, 2)
    assert run("replay", dlq, "--dry-run", "--url", broker.url, "--format", "json").exit_code == 0
    assert run("--no-journal", "replay", dlq, "--yes", "--url", broker.url, "--format", "json").exit_code == 0
    assert journal(run) == []


def test_a_killed_replay_leaves_its_start(broker, qname, cli_env) -> None:
    dlq, origin = dead_letters(broker, qname, 2000)
    env = {**cli_env, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "dlxtool", "replay", dlq, "--yes", "--rate", "200", "--url",
                             broker.url], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and broker.queue_depth(origin) < 100:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    listed = subprocess.run([sys.executable, "-m", "dlxtool", "journal", "--format", "json"], env=env,
                            capture_output=True, text=True, timeout=60)
    [killed] = json.loads(listed.stdout)
    assert killed["command"] == "replay" and "no end" in killed["status"]


def test_a_replay_stopped_by_ctrl_c_ends_its_run_with_what_it_moved(broker, qname, cli_env) -> None:
    dlq, origin = dead_letters(broker, qname, 2000)
    env = {**cli_env, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "dlxtool", "replay", dlq, "--yes", "--rate", "200", "--url",
                             broker.url, "--format", "json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and broker.queue_depth(origin) < 100:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    listed = subprocess.run([sys.executable, "-m", "dlxtool", "journal", "--format", "json"], env=env,
                            capture_output=True, text=True, timeout=60)
    [stopped] = json.loads(listed.stdout)
    assert stopped["status"] == "interrupted" and stopped["ended_at"], stopped
    assert stopped["counts"]["moved"] == json.loads(out)["moved_total"] > 0, (stopped, out)
    assert stopped["queues"] == [dlq, origin]


def test_the_brokers_view_of_the_connection_names_who_and_what(run, broker, qname) -> None:
    import getpass
    import threading
    from urllib.parse import quote

    dlq, _ = dead_letters(broker, qname, 600)
    names: set[str] = set()

    def watch() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any("replay" in n for n in names):
            rows = broker.mgmt.get(f"/vhosts/{quote(broker.vhost, safe='')}/connections") or []
            names.update(str(r.get("user_provided_name")) for r in rows if isinstance(r, dict))
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    result = run("replay", dlq, "--yes", "--rate", "60", "--url", broker.url, "--format", "json")
    watcher.join()
    assert result.exit_code == 0, result.stderr
    assert any(n.startswith(f"dlxtool {getpass.getuser()} replay ") for n in names), names


def test_the_ids_of_the_messages_a_run_changed_are_recorded(run, broker, qname) -> None:
    """message_id of each message replayed (the fast path reads it from the encoded properties) and purged, and how
    many had none."""
    import pika

    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        origin = f"{qname}.o"
        ch.queue_declare(origin, durable=True, arguments={"x-dead-letter-exchange": top.dlx})
        for i in range(4):
            props = pika.BasicProperties(message_id=f"order-{i}", content_type="text/plain",
                                         headers={"x-tenant": "t1"}) if i < 3 else pika.BasicProperties()
            ch.basic_publish("", origin, f"m{i}".encode(), props)
        rt.reject_all(ch, origin, 4)
    assert broker.wait_depth(top.dlq, 4) == 4
    replayed = run("replay", top.dlq, "--yes", "--url", broker.url, "--format", "json")
    assert replayed.exit_code == 0, replayed.stderr
    assert broker.wait_depth(origin, 4) == 4
    purged = run("purge", origin, "--backup", "/dev/null", "--yes", "--url", broker.url, "--format", "json")
    assert purged.exit_code == 0, purged.stderr
    replay_run, purge_run = journal(run)[-2:]
    for recorded in (replay_run, purge_run):
        assert sorted(recorded["message_ids"]) == ["order-0", "order-1", "order-2"], recorded
        assert recorded["without_message_id"] == 1
