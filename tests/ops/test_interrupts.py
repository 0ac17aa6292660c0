"""dlxtool.ops.interrupts.FallbackStream: what a write to a terminal that is gone does (pure logic)."""

from __future__ import annotations

import errno
import io
import signal

import pytest

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
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.setattr(interrupts, "summary_file", interrupts._SummaryFile())  # noqa: SLF001 - a fresh file
    interrupts.forget_signals()  # an earlier test's in-process command may have noted a Ctrl-C
    return tmp_path / "dlxtool"


def test_a_hung_up_terminal_diverts_stdout_even_before_its_sighup_arrives(saved) -> None:
    """Seen as the run ended: the pty hung up, the summary's write failed with EIO before the SIGHUP handler
    ran, and the command died with an internal error and no summary anywhere."""
    assert interrupts.received() is None
    out = interrupts.FallbackStream(GoneTerminal(tty=True), always=False)
    out.write('{"moved_total": 3}\n')
    assert out.diverted
    (saved_file,) = saved.glob("summary-*.log")
    assert '{"moved_total": 3}' in saved_file.read_text()


def test_a_pipe_whose_reader_left_still_ends_the_command_quietly(saved) -> None:
    """Not a terminal (`| head`): without a stop signal the error goes up, as before (a quiet end)."""
    out = interrupts.FallbackStream(GoneTerminal(tty=False), always=False)
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
