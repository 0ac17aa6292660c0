"""The guard's pure logic (dlxtool.ops.canary): the brake's sliding window, the pacer, the canary's picks."""

from __future__ import annotations

import time

from dlxtool.ops.actions import Action, Decision
from dlxtool.ops.canary import NOT_IN_CANARY, Brake, CanaryPicker, Pacer
from dlxtool.record import MessageRecord


def test_brake_trips_on_a_share_of_the_window_not_on_sparse_deaths() -> None:
    brake = Brake(0.1, window=100, minimum=3)
    for n in (50, 400, 900):  # 3 deaths, far apart: never more than 10% of a window
        assert brake.add(n) is None
    sparse = Brake(0.1, window=100, minimum=3)
    assert [sparse.add(n) for n in range(1000, 1100, 10)] == [None] * 10  # 10 of 100: not more than 10%
    assert sparse.add(1095) is not None  # the 11th in the window
    assert "11 of the last 100" in (sparse.tripped or "")


def test_brake_needs_its_minimum_and_says_it_once() -> None:
    brake = Brake(0.1, window=100, minimum=3)
    assert brake.add(1) is None and brake.add(2) is None  # 2 of 2, under the minimum
    assert brake.add(3) == "3 of the last 3 message(s) replayed died again (more than 10%, --brake)"
    assert brake.add(4) is None and brake.tripped is not None


def test_pacer_pauses_after_each_batch_and_keeps_the_rate() -> None:
    pace = Pacer(None, 10, 0.2)
    assert pace(0) <= 0 and pace(9) <= 0
    assert 0.15 < pace(10) <= 0.201    # the pause starts as the 10th is taken
    assert 0.1 < pace(10) <= 0.201     # asked again: the same pause, not a second one
    time.sleep(0.21)
    assert pace(10) <= 0 and pace(11) <= 0
    rated = Pacer(100.0, None, 0.0)
    assert rated(0) <= 0 and 0.4 < rated(50) <= 0.5


def _record(i: int, error: str) -> MessageRecord:
    return MessageRecord(queue="dlq", body=b"x", properties={"message_id": f"m-{i}"},
                         headers={"x-exception-message": error})


def test_canary_picks_each_failure_group_the_head_and_the_end() -> None:
    picker = CanaryPicker(size=5, scan=20)

    def origin(_record: MessageRecord) -> Decision:
        return Decision(Action.MOVE, "orders")

    decide = picker(origin)
    errors = ["CHF missing"] * 10 + ["SEK missing"] + ["CHF missing"] * 9
    got = [decide(_record(i, e)).action for i, e in enumerate(errors)]
    # m-0 (new group), m-1 and m-2 (the head: half the canary), m-10 (new group), m-19 (the end of the scan)
    assert picker.picked == ["m-0", "m-1", "m-2", "m-10", "m-19"]
    assert [i for i, a in enumerate(got) if a is Action.MOVE] == [0, 1, 2, 10, 19]


def test_canary_keeps_what_would_not_move() -> None:
    picker = CanaryPicker(size=2, scan=5)
    decide = picker(lambda _r: Decision.leave("no origin"))
    assert decide(_record(0, "x")) == Decision.keep(NOT_IN_CANARY) and not picker.picked
