"""The fault matrix: replay, purge --backup, purge --move-to (selective), load and dump --remove, each cut
at a random moment by a connection reset, a broker restart, Ctrl-C, the destination deleted or full.

After every run the oracle (tests/support/faults.py) checks across all queues and files: nothing lost,
nothing foreign, and every extra copy reported by the command's JSON summary (`possible_duplicates`).
The summary table is printed at the end of the session (and per run with -s).

    .venv/bin/pytest -q tests/faults                         # 55 runs, seeds 1000..1054 (< 5 min)
    .venv/bin/pytest -q tests/faults --faults-long           # 250 bigger runs (DLXTOOL_FAULTS_LONG=1)
    .venv/bin/pytest -q tests/faults --faults-seed 1017      # one run again (DLXTOOL_FAULTS_SEED=1017)
    .venv/bin/pytest -q tests/faults --faults-base 5000      # another 55 runs
"""

from __future__ import annotations

import pytest

from tests.support.faults import REPORTS, Scenario, run_scenario

pytestmark = pytest.mark.faults


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "scenario" not in metafunc.fixturenames:
        return
    opt = metafunc.config.getoption
    long = opt("--faults-long")
    seeds = opt("--faults-seed") or range(opt("--faults-base"), opt("--faults-base") + (opt("--faults-runs")
                                                                                        or (250 if long else 55)))
    scenarios = [Scenario.from_seed(seed, long=long) for seed in seeds]
    metafunc.parametrize("scenario", scenarios, ids=[f"{s.seed}-{s.command}-{s.fault}" for s in scenarios])


def test_fault_run(faults_node, scenario: Scenario, tmp_path) -> None:
    report = run_scenario(faults_node, scenario, tmp_path)
    REPORTS.append(report)
    print(report.line())
    replay_hint = f"replay with: .venv/bin/pytest -q tests/faults --faults-seed {scenario.seed} -s"
    assert "Traceback" not in report.stderr and "internal error" not in report.stderr, report.stderr
    assert not report.notes, report.notes
    assert report.foreign == 0, f"{report.line()}\n{replay_hint}"
    assert report.lost == 0, f"{report.line()}\n{report.stderr}\n{replay_hint}"
    assert report.duplicates_found <= report.duplicates_reported, \
        f"unreported duplicates: {report.line()}\n{report.summary}\n{report.stderr}\n{replay_hint}"
    assert report.exit_code in _expected_exits(scenario, report), f"{report.line()}\n{report.stderr}"
    if report.exit_code != 0 or report.injected:
        assert report.summary is not None or report.exit_code == 3, \
            f"no JSON summary: {report.line()}\n{report.stderr}"


def _expected_exits(scenario: Scenario, report) -> set[int]:
    if not report.injected:
        return {0}
    return {"reset": {0, 3}, "restart": {0, 3}, "sigint": {0, 130},
            "dest-deleted": {0, 5}, "dest-full": {0, 5}}[scenario.fault]
