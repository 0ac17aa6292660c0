"""What a lost connection's summary says the broker still holds, against what it held (issue 35's fault campaign).

A stall right after dlxtool's basic.consume: the broker sends a prefetch of deliveries into a path that forwards
nothing, dlxtool receives none of them, drops the silent connection after its timeout (exit 3) — and the broker,
seeing no close, holds them until its heartbeat gives up. "Unfinished messages are still in the DLQ" is then true
only with what the summary adds: up to that many held by the lost connection, and until when. (Found by the
campaign, seed 1025: "0 held" said while the broker held 16.)"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.chaos import EXITS, Trial, _items, _let_go, _queue, _ready_now
from tests.support.faultproxy import FaultProxy
from tests.support.faults import ROOT, FaultNode, _summary, cli_env, write_config

pytestmark = [pytest.mark.faults, pytest.mark.chaos]
BASIC_CONSUME = b"\x00\x3c\x00\x14"  # class 60 (basic), method 20 (consume)


def test_deliveries_sent_into_a_stalled_path_are_said_held_by_the_lost_connection(broker, tmp_path) -> None:
    # purge --backup: its only consume is the engine's (a replay's brake consumes on the DLQ first: docs/canary.md)
    trial = Trial(seed=990001, command="purge-backup", fault="stall", messages=300, at=0.0, prefetch=100, window=50)
    queue = _queue(broker, "ch990001.q", _items(trial))
    config, backup = tmp_path / "config.toml", tmp_path / "backup.jsonl"
    with FaultProxy(broker.host, broker.amqp_port) as proxy:
        write_config(FaultNode(broker, ""), proxy.port, config)
        config.write_text(config.read_text().replace("timeout = 15", "timeout = 2"))
        proxy.arm_on("stall", BASIC_CONSUME)
        proc = subprocess.run([sys.executable, "-m", "dlxtool", "--config", str(config), "--broker", "faults",
                               "--format", "json", "purge", queue, "--backup", str(backup), "--yes"],
                              env=cli_env(tmp_path), capture_output=True, text=True, timeout=90, cwd=str(ROOT))
        ready_at_exit = _ready_now(broker, queue)
        assert proxy.injected and proxy.injected[0][0] == "stall"
    _let_go(broker, -1)  # the proxy is closed: the broker sees the reset at once
    settled = broker.wait_depth(queue, 300, timeout=15)
    assert proc.returncode in EXITS["stall"] - {0}, proc.stderr
    summary = _summary(proc.stdout)
    assert summary is not None, proc.stderr
    said_held = summary["held_when_lost"] + summary["held_on_the_way"]
    assert settled == 300 and ready_at_exit is not None
    assert settled - ready_at_exit <= said_held, (ready_at_exit, summary, proc.stderr)
    # The broker held what it had sent: none of it reached dlxtool (the stall began before the consume went).
    assert ready_at_exit < 300 and summary["held_when_lost"] == 0, (ready_at_exit, summary)
    assert "may be held by the lost connection" in proc.stderr, proc.stderr


BASIC_ACK = b"\x00\x3c\x00\x50"  # class 60 (basic), method 80 (ack)


def test_acks_never_proven_on_a_silent_connection_end_the_run_as_a_lost_connection(broker, tmp_path) -> None:
    # The campaign's seed 100032: dump --remove stalled at its end waited 30 s more on the silent connection and
    # said "N left … ack not proven" (exit 5) while the broker held every one of them until its heartbeat.
    trial = Trial(seed=990002, command="dump-remove", fault="stall", messages=1, at=0.0, prefetch=100, window=50)
    queue = "ch990002.q"
    _queue(broker, queue, _items(trial))
    out, config = tmp_path / "out.jsonl", tmp_path / "config.toml"
    with FaultProxy(broker.host, broker.amqp_port) as proxy:
        write_config(FaultNode(broker, ""), proxy.port, config)
        config.write_text(config.read_text().replace("timeout = 15", "timeout = 2"))
        proxy.arm_on("stall", BASIC_ACK, forward=False)  # the ack never reaches the broker
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "dlxtool", "--config", str(config), "--broker", "faults",
                               "--format", "json", "dump", queue, "--remove", "-o", str(out), "--yes"],
                              env=cli_env(tmp_path), capture_output=True, text=True, timeout=90, cwd=str(ROOT))
        took = time.monotonic() - started
        assert proxy.injected, "no ack went out"
    assert proc.returncode == 3, proc.stderr
    assert took < 20, took  # --timeout 2 bounds the waits (was 30 s more)
    summary = _summary(proc.stdout)
    assert summary is not None and summary["held_when_lost"] + summary["held_on_the_way"] >= 1, summary
    assert summary["possible_duplicates"] == 1 and summary["removed"] == 0, summary
    assert "the connection went silent" in proc.stderr and "may be held by the lost connection" in proc.stderr
    assert out.read_bytes().count(b"\n") == 1
    assert broker.wait_depth(queue, 1, timeout=15) == 1  # the broker let go once the proxy was closed: it is back
