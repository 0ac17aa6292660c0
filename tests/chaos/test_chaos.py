"""The fault campaign in CI (issue 35): every command that moves or removes messages, CI_TRIALS trials each, each
hit by one fault at a seeded moment (tests/support/chaos.py says which and what is checked). One test per command;
the files of this directory split the commands so that xdist's --dist loadfile spreads them over the workers.

    .venv/bin/pytest -q tests/chaos                              # 11 commands x 14 trials
    .venv/bin/pytest -q tests/chaos --chaos-seed 50017 -s        # one trial again (its command from the seed)
    .venv/bin/pytest -q tests/chaos --chaos-trials 40            # more per command (DLXTOOL_CHAOS_TRIALS)
    scripts/chaos -n 1000                                        # a long campaign, with its table
"""

from __future__ import annotations

import pytest

from tests.support.chaos import CI_TRIALS, ci_seeds, run_trials

pytestmark = [pytest.mark.faults, pytest.mark.chaos]
COMMANDS_HERE = ("replay", "replay-dx", "replay-to")


def check_command(command: str, broker, tmp_path, config: pytest.Config) -> None:
    only = config.getoption("--chaos-seed")
    from tests.support.chaos import COMMANDS
    seeds = [s for s in only if COMMANDS[s % len(COMMANDS)] == command] if only else \
        ci_seeds(command, config.getoption("--chaos-trials") or CI_TRIALS, config.getoption("--chaos-base"))
    if not seeds:
        pytest.skip(f"no seed of --chaos-seed is a {command} trial")
    results = run_trials(broker, seeds, tmp_path)
    for r in results:
        print(r.line())
    failed = [r for r in results if r.failures]
    assert not failed, "\n".join(f"{r.line()}\n  words: {r.words}\n  {r.trial.rerun()}" for r in failed)


@pytest.mark.parametrize("command", COMMANDS_HERE)
def test_chaos(command: str, broker, tmp_path, pytestconfig) -> None:
    check_command(command, broker, tmp_path, pytestconfig)
