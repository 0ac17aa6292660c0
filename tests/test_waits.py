"""dlxtool.waits: every wait that is not for the messages is bounded, noted under its name, and said with -v.
No timing is asserted (speed claims stay out of the tests): only what is recorded and that the bound ends a wait."""

from __future__ import annotations

import io

import pytest

from dlxtool import waits
from dlxtool.cli import _say_waits
from dlxtool.cli.app import App


@pytest.fixture(autouse=True)
def _fresh_record():
    waits.forget()
    yield
    waits.forget()


def test_a_wait_with_no_time_left_never_sleeps_nor_notes() -> None:
    wait = waits.Wait("nothing", 0.0, 0.5)
    assert wait.over()
    assert wait.pause() is False
    assert waits.taken() == []


def test_pauses_are_noted_under_the_waits_name_and_end_at_the_bound() -> None:
    wait = waits.Wait("the API's next sample of 'q'", 0.05, 0.5)
    pauses = 0
    while wait.pause():
        pauses += 1
        assert pauses < 100, "the bound must end the wait"
    assert pauses >= 1
    [taken] = waits.taken()
    assert taken.what == "the API's next sample of 'q'"
    assert taken.pauses == pauses
    assert taken.seconds > 0
    assert "at most 0.05 s" in taken.describe()


def test_the_same_wait_twice_is_one_line() -> None:
    for _ in range(2):
        waits.Wait("the probe queue", 0.01, 0.2).pause()
    assert [w.pauses for w in waits.taken()] == [2]


def test_verbose_says_each_wait_and_quiet_says_nothing() -> None:
    waits.note("the probe queue", 0.8, 0.3)
    quiet, loud = io.StringIO(), io.StringIO()
    _say_waits(App(err=quiet))
    _say_waits(App(err=loud, verbose=1))
    assert quiet.getvalue() == ""
    assert loud.getvalue() == "waited 0.30 s for the probe queue (at most 0.8 s; 1 poll)\n"


def test_many_bounded_waits_say_each() -> None:
    for _ in range(3):
        waits.note("the management API's answers", 10.0, 0.01, "answer")
    [taken] = waits.taken()
    assert taken.describe().endswith("(at most 10 s each; 3 answers)")
