"""A stop signal raised from its handler while pika writes is held until the write's bookkeeping is done."""

import pytest

from dlxtool import signal_guard


class Stop(KeyboardInterrupt):
    pass


def test_a_signal_during_a_write_is_raised_when_the_write_is_done() -> None:
    done = []
    with pytest.raises(Stop):
        with signal_guard.writing():
            signal_guard.raise_or_hold(Stop())  # what the handler does, between a send and its bookkeeping
            done.append("bookkeeping")
    assert done == ["bookkeeping"]


def test_outside_a_write_it_is_raised_at_once_and_a_held_one_survives_an_error() -> None:
    with pytest.raises(Stop):
        signal_guard.raise_or_hold(Stop())
    with pytest.raises(ConnectionError):  # the write failed: the error goes first ...
        with signal_guard.writing():
            signal_guard.raise_or_hold(Stop())
            raise ConnectionError
    with pytest.raises(Stop):  # ... and the next I/O call raises the held signal
        signal_guard.raise_held()
    signal_guard.raise_held()  # nothing held any more
