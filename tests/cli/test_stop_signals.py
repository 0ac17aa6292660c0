"""SIGINT, SIGTERM and SIGHUP at random moments of every command that moves or removes messages.

Fault-matrix style (tests/support/faults.py, seeded): broker-made dead letters (real rejects) or filled
queues, a real `dlxtool` subprocess, the signal sent when the run reaches a random fraction of its work —
one run in three sends a second signal soon after the first. SIGHUP comes with the terminal gone: the
command's stdout and stderr are a pty whose master is closed first, so its summary must reach the file
under $XDG_STATE_HOME/dlxtool/. The oracle then counts every message in every queue and file: nothing
lost, every extra copy reported as `possible_duplicates`, a summary present, the signal's exit status.

    .venv/bin/pytest -q tests/cli/test_stop_signals.py -s    # one line per run
"""

from __future__ import annotations

import pytest

from tests.support.faults import COMMANDS, STOP_SIGNALS, FaultNode, Scenario, run_scenario

pytestmark = pytest.mark.broker

SIGNALS = ("sigint", "sigterm", "sighup")
SCENARIOS = [Scenario.stop_signal(7000 + i, command, fault)
             for i, (command, fault) in enumerate((c, f) for f in SIGNALS for c in COMMANDS)]


@pytest.fixture(scope="module")
def node(broker) -> FaultNode:
    return FaultNode(broker, node="")  # no restarts here: the main test broker will do


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[f"{s.seed}-{s.command}-{s.fault}" for s in SCENARIOS])
def test_stop_signal_loses_nothing_and_reports(node, scenario: Scenario, tmp_path) -> None:
    report = run_scenario(node, scenario, tmp_path)
    print(report.line() + (f" second after {scenario.second}s" if scenario.second is not None else ""))
    where = f"{report.line()}\n{report.stderr}"
    assert "Traceback" not in report.stderr and "internal error" not in report.stderr, where
    assert not report.notes, report.notes
    assert report.lost == 0 and report.foreign == 0, where
    assert report.duplicates_found <= report.duplicates_reported, f"unreported duplicates: {where}"
    status = 128 + STOP_SIGNALS[scenario.fault]
    assert report.exit_code in ({status, 0} if report.injected else {0}), where
    if report.injected:
        assert report.summary is not None, f"no summary: {where}"
        assert report.exit_code == 0 or "interrupted" in report.stderr or "terminated" in report.stderr \
            or "hung up" in report.stderr, where
    if scenario.fault == "sighup" and report.injected and report.exit_code != 0:
        # the terminal was gone: the summary and the stderr lines are in the file, nowhere else
        assert "possible_duplicates" in report.summary_file, where
        assert "hung up (SIGHUP)" in report.summary_file, where
