"""`dlxtool move SRC DST` under each fault of the campaign (tests/support/chaos.py: the same proxy, signals, broker
close and accounting of every message id): nothing lost, duplicates found never above reported, the exit code one
the fault allows."""

from __future__ import annotations

import pytest

from tests.support.chaos import FAULTS, Trial, run_trial

pytestmark = [pytest.mark.faults, pytest.mark.chaos]


@pytest.mark.parametrize("fault", FAULTS)
def test_move_under_a_fault_loses_nothing(fault: str, broker, tmp_path) -> None:
    # seed 70205 for kill -9: a moment by work done (70005's, by time, came after the run had ended)
    trial = Trial.from_seed(70205 if fault == "kill9" else 70000 + FAULTS.index(fault), "move", fault)
    result = run_trial(broker, trial, tmp_path)
    print(result.line())
    assert not result.failures, f"{result.line()}\n  words: {result.words}"
