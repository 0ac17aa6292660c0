"""A stop signal raised from its handler while pika writes is held until the write's bookkeeping is done."""

import pytest

from dlxtool import signal_guard


class Stop(KeyboardInterrupt):
    pass


def test_a_signal_during_a_write_is_raised_when_the_write_is_done() -> None:
    done = []

    def write(_arg: object) -> None:
        signal_guard.raise_or_hold(Stop())  # what the handler does, between a send and its bookkeeping
        done.append("bookkeeping")

    with pytest.raises(Stop):
        signal_guard.guarded(write, None)
    assert done == ["bookkeeping"]


def test_outside_a_write_it_is_raised_at_once_and_a_held_one_survives_an_error() -> None:
    with pytest.raises(Stop):
        signal_guard.raise_or_hold(Stop())

    def failing(_arg: object) -> None:
        signal_guard.raise_or_hold(Stop())
        raise ConnectionError

    with pytest.raises(ConnectionError):  # the write failed: the error goes first ...
        signal_guard.guarded(failing, None)
    with pytest.raises(Stop):  # ... and the next I/O call raises the held signal
        signal_guard.guarded(lambda _arg: None, None)
    signal_guard.raise_held()  # nothing held any more


def test_process_io_holds_a_signal_that_arrives_inside_it(monkeypatch) -> None:
    """Through dlxtool.broker.channel.process_io, as the engine's loop calls it: a signal raised while pika
    sends is held until the call returns."""
    from dlxtool.broker import channel

    done = []

    def inner(_connection: object) -> None:
        signal_guard.raise_or_hold(Stop())
        done.append("popped")

    monkeypatch.setattr(channel, "_process_io", inner)
    with pytest.raises(Stop):
        channel.process_io(object())
    assert done == ["popped"]
