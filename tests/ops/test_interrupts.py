"""Stop signals in a run (dlxtool.ops.interrupts), and what a write to a terminal that is gone does
(dlxtool.cli.streams.FallbackStream; pure logic)."""

from __future__ import annotations

import errno
import io
import signal

import pytest

from dlxtool.cli import streams
from dlxtool.ops import interrupts


class GoneTerminal(io.StringIO):
    """A terminal whose other side hung up: every write fails with EIO."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        raise OSError(errno.EIO, "Input/output error")


@pytest.fixture
def saved(tmp_path, monkeypatch: pytest.MonkeyPatch):
    # a fresh file, where the command's environment says
    monkeypatch.setattr(streams, "summary_file", streams._SummaryFile({"XDG_STATE_HOME": str(tmp_path)}))  # noqa: SLF001
    interrupts.forget_signals()  # an earlier test's in-process command may have noted a Ctrl-C
    return tmp_path / "dlxtool"


def test_a_hung_up_terminal_diverts_stdout_even_before_its_sighup_arrives(saved) -> None:
    """Seen as the run ended: the pty hung up, the summary's write failed with EIO before the SIGHUP handler
    ran, and the command died with an internal error and no summary anywhere."""
    assert interrupts.received() is None
    out = streams.FallbackStream(GoneTerminal(tty=True), always=False)
    out.write('{"moved_total": 3}\n')
    assert out.diverted
    (saved_file,) = saved.glob("summary-*.log")
    assert '{"moved_total": 3}' in saved_file.read_text()


class LiveTerminal(io.TextIOWrapper):
    """A terminal that still takes what is written (its other side may never read it)."""

    def isatty(self) -> bool:
        return True


def test_json_the_terminal_took_just_before_its_hang_up_goes_to_the_summary_file(saved, monkeypatch) -> None:
    """Seen in CI (test_stop_signals 7011 purge-backup sighup): the JSON summary, written as bytes through the
    stream's buffer (dlxtool.render) a moment before the hang-up, was in neither the terminal's output nor the summary
    file, which held the text lines written before it: the lines the terminal took recently are saved at the hang-up,
    and the buffer's writes were not among them."""
    monkeypatch.setattr(streams, "_recently_shown", streams._RecentlyShown())  # noqa: SLF001
    out = streams.FallbackStream(LiveTerminal(io.BytesIO(), encoding="utf-8"), always=False)
    out.write("q: 382 ready\n")
    assert out.buffer is not None
    out.buffer.write(b'{"purged": 382}\n')
    interrupts._note(signal.SIGHUP)  # noqa: SLF001 - the handler's own record, as the signal leaves it
    try:
        out.write("dlxtool: error: hung up (SIGHUP) as the run ended\n")
    finally:
        interrupts.forget_signals()
    (saved_file,) = saved.glob("summary-*.log")
    text = saved_file.read_text()
    assert "q: 382 ready" in text and '{"purged": 382}' in text and "as the run ended" in text


def test_a_pipe_whose_reader_left_still_ends_the_command_quietly(saved) -> None:
    """Not a terminal (`| head`): without a stop signal the error goes up, as before (a quiet end)."""
    out = streams.FallbackStream(GoneTerminal(tty=False), always=False)
    with pytest.raises(OSError):
        out.write("x\n")
    assert not saved.exists()


def test_a_command_does_not_inherit_an_earlier_commands_stop_signal(run, tmp_path) -> None:
    """In one process (the suite's CliRunner, a program embedding dlxtool) a Ctrl-C noted by one command
    decided the next one's output: its stdout went to the summary file (seen: this file's tests failed
    after an in-process interrupted command ran earlier in the same pytest process)."""
    interrupts._note(signal.SIGINT)  # noqa: SLF001 - what an earlier command's Ctrl-C leaves behind
    result = run("decode", input="payload=CgJoaQ==\n")
    assert result.exit_code == 0, result.stderr
    assert '"string":"hi"' in result.stdout
    assert interrupts.received() is None


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_two_signals_as_a_run_ends_still_let_its_summary_out(sig) -> None:
    """The run is over and its summary on the way (armed, no engine handler inside): a second signal only
    takes note too. It used to raise and cut the summary off (fault matrix under load: load, SIGHUP as it
    finished, a second SIGHUP 5 ms later: exit 129 and no summary)."""
    import os

    from dlxtool.errors import Interrupted

    interrupts.forget_signals()
    written = []
    with pytest.raises(Interrupted), interrupts.catch_stop_signals(), interrupts.summary_before_ctrl_c() as ctrl_c:
        ctrl_c.arm()
        os.kill(os.getpid(), sig)
        os.kill(os.getpid(), sig)
        written.append("summary")
    assert written == ["summary"]
    assert interrupts.received() == sig
    interrupts.forget_signals()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_second_signal_in_a_run_is_raised_by_the_next_io_call_not_where_it_lands(sig) -> None:
    """The engine's bookkeeping between two I/O calls is never cut in two: the second signal gives up the
    waiting at the next I/O call. Raised where the handler ran, it once hit a purge --backup between queuing
    its multiple-ack and counting those 200 acks as unproven: 200 messages in the queue and in the file,
    possible_duplicates 0."""
    import os
    import threading

    from dlxtool import signal_guard

    interrupts.forget_signals()
    stop = threading.Event()
    steps = []
    with pytest.raises(interrupts.StopSignal), interrupts.catch_stop_signals(), \
            interrupts.signals_as_stop(stop):
        os.kill(os.getpid(), sig)
        assert stop.is_set()
        os.kill(os.getpid(), sig)
        steps.append("bookkeeping done")  # the signal was delivered above: nothing raised here
        signal_guard.guarded(lambda _arg: steps.append("I/O"), None)  # raised as it starts
    assert steps == ["bookkeeping done"]
    interrupts.forget_signals()


def test_a_second_signal_held_when_the_run_ends_is_forgotten() -> None:
    """The run ended before any I/O call raised it: nothing is left to give up, and it must not surface in
    whatever I/O comes next (a temporary exchange's delete: the command died with no summary)."""
    import os
    import threading

    from dlxtool import signal_guard

    interrupts.forget_signals()
    with interrupts.catch_stop_signals():
        with interrupts.signals_as_stop(threading.Event()):
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
        signal_guard.guarded(lambda _arg: None, None)  # no StopSignal here
        signal_guard.raise_held()
    assert interrupts.received() == signal.SIGTERM  # noted: the run's summary says it was stopped
    interrupts.forget_signals()
