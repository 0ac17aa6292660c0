"""Output streams that survive a terminal that is gone: what a command could not show goes to a file.

A terminal that hangs up (SIGHUP, a closed ssh session) fails writes with EIO; a reader that leaves (`| head`)
with EPIPE. Where that may mean the summary of a run that moved messages is lost, `FallbackStream` writes on to
`summary_file` ($XDG_STATE_HOME/dlxtool, from the command's environment), and the command says where."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from dlxtool import secrets
from dlxtool.ops.interrupts import describe, received

# -- when the terminal is gone ------------------------------------------------------------------------

_GONE = (errno.EIO, errno.EPIPE, errno.ENXIO, errno.EBADF)


def summary_file_dir(env: Mapping[str, str]) -> Path:
    """Where output that could not be shown is saved: $XDG_STATE_HOME/dlxtool (~/.local/state/dlxtool)."""
    base = env.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "dlxtool"


class _SummaryFile:
    """One file per process, created at the first write that could not reach its stream."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.path: Path | None = None
        self._file: IO[str] | None = None
        self.env: Mapping[str, str] = env or {}  # the command's environment (App.env), set when streams are made

    def write(self, text: str) -> None:
        if self._file is None:
            self._file = self._open()
            if self._file is None:
                return
        with contextlib.suppress(OSError, ValueError):
            self._file.write(text)
            self._file.flush()

    def _open(self) -> IO[str] | None:
        name = f"summary-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}Z-{os.getpid()}.log"
        for folder in (summary_file_dir(self.env), Path.cwd()):  # the working dir if the state dir cannot be made
            try:
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                # 0600: it may hold message data, like the records a dump writes
                fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                handle = os.fdopen(fd, "w", encoding="utf-8")
            except OSError:
                continue
            self.path = folder / name
            command = secrets.scrub(" ".join(sys.argv[1:]))  # --url may carry a password
            handle.write(f"# dlxtool {command}\n# pid {os.getpid()}, "
                         f"{describe() if received() else 'no stop signal'}; output its terminal could not "
                         "take:\n")
            return handle
        return None


summary_file = _SummaryFile()


class _RecentlyShown:
    """What the terminal took in the last RECENT seconds. A terminal that closes may never have read what it took
    just before (seen: a purge's JSON summary written a moment before the hang-up, in neither the terminal's output
    nor the summary file). At the first write after a SIGHUP, on any terminal stream, those lines go to the summary
    file too, and from then on every line does."""

    RECENT = 2.0

    def __init__(self) -> None:
        self._lines: deque[tuple[float, str]] = deque()  # dropped from the left as they age: O(1) a line
        self._saved = False

    def took(self, text: str) -> None:
        if text.startswith("\r"):  # a progress bar's redraw means nothing in a file
            return
        now = time.monotonic()
        if received() == signal.SIGHUP:
            self.save()
            summary_file.write(text)
            return
        self._lines.append((now, text))
        while self._lines and now - self._lines[0][0] > self.RECENT:
            self._lines.popleft()

    def save(self) -> None:
        """Once, at the hang-up: the recent lines to the summary file."""
        if not self._saved:
            self._saved = True
            for _at, line in self._lines:
                summary_file.write(line)
            self._lines.clear()


_recently_shown = _RecentlyShown()


class FallbackStream:
    """A text stream that, once a write to it fails because the terminal or the reader is gone, writes to
    `summary_file` instead. `always`: stderr diverts at any such failure; stdout only after a stop signal
    (a reader that goes away otherwise, `| head`, ends the command quietly as before). While it may divert,
    each write is flushed at once, so that what fails is what goes to the file."""

    def __init__(self, stream: IO[str], *, always: bool) -> None:
        self._stream = stream
        # A terminal that hangs up fails our writes with EIO, sometimes before its SIGHUP reaches us (seen:
        # the summary lost with an internal error as the run ended): on a terminal, divert at once.
        self._always = always or _is_terminal(stream)
        self.diverted = False

    @property
    def on_terminal(self) -> bool:
        """Whether what it takes is kept as recently shown (`_RecentlyShown`): a terminal's, or stderr's."""
        return self._always

    def may_divert(self) -> bool:
        """A failed write may now mean the terminal is gone: it is one, or a stop signal came."""
        return self._always or received() is not None

    def write(self, text: str) -> int:
        if not self.diverted:
            try:
                written = self._stream.write(text)
                if self.may_divert():
                    self._stream.flush()
                if self.on_terminal:
                    _recently_shown.took(text)
                return written
            except (OSError, ValueError) as exc:
                if not self.gone(exc):
                    raise
                self.diverted = True
        _recently_shown.save()  # what the terminal took just before it went may never have been read
        if not text.startswith("\r"):  # a progress bar's redraw means nothing in a file
            summary_file.write(text)
        return len(text)

    def flush(self) -> None:
        if self.diverted:
            return
        try:
            self._stream.flush()
        except (OSError, ValueError) as exc:
            if not self.gone(exc):
                raise
            self.diverted = True

    def gone(self, exc: BaseException) -> bool:
        """`exc`, from a write or flush, says the stream is gone (divert to the summary file), not a bug."""
        if not self.may_divert():
            return False
        return isinstance(exc, ValueError) or getattr(exc, "errno", None) in _GONE

    def isatty(self) -> bool:
        return not self.diverted and self._stream.isatty()

    @property
    def buffer(self) -> _FallbackBuffer | None:
        """The byte stream under it (dlxtool.render writes JSON bytes there), diverting the same way."""
        raw = getattr(self._stream, "buffer", None)
        return None if raw is None else _FallbackBuffer(self, raw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (OSError, ValueError, AttributeError):
        return False


class _FallbackBuffer:
    def __init__(self, text: FallbackStream, raw: Any) -> None:
        self._text, self._raw = text, raw

    def write(self, data: bytes) -> int:
        if not self._text.diverted:
            try:
                written: int = self._raw.write(data)
                if self._text.may_divert():
                    self._raw.flush()
                if self._text.on_terminal:  # the JSON summary comes this way (dlxtool.render): kept as the text's
                    _recently_shown.took(bytes(data).decode("utf-8", "replace"))
                return written
            except (OSError, ValueError) as exc:
                if not self._text.gone(exc):
                    raise
                self._text.diverted = True
        _recently_shown.save()  # as FallbackStream.write: what the terminal took just before may never have been read
        summary_file.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        if not self._text.diverted:
            self._text.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)
