"""The journal: who moved, removed or edited which messages, when, where, and where the backup is.

Every command that changes messages (replay, purge, load, dump --remove) appends a *start* line before it changes
anything and an *end* line once its outcome is known, to `$XDG_STATE_HOME/dlxtool/journal.jsonl`
(~/.local/state/dlxtool/): one JSON object per line, the run's id in both, so that a run killed half-way still
leaves its start (and `dlxtool journal` says it has no end). Written under an exclusive lock (several dlxtool
processes may end at once), created readable by its owner only (0600: queue names and message ids are an
incident's data), rotated by size (`journal.jsonl.1` … `.3`). A journal that cannot be written is a warning
(`Journal.problem`), never a reason to stop or to lose a move. The command line is recorded with secrets masked.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from dlxtool import secrets
from dlxtool.message_ids import MessageIds
from dlxtool.state import owner_only, state_dir

MAX_BYTES = 10 * 1024 * 1024  # rotated past this
KEEP = 3                       # journal.jsonl.1 … .3


def journal_path(env: Mapping[str, str]) -> Path:
    return state_dir(env) / "journal.jsonl"


def os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


@dataclass
class Journal:
    path: Path
    enabled: bool = True
    problem: str | None = None  # why the last write failed (said as a warning by the caller)

    def start(self, command: str, argv: Sequence[str], *, broker: str, broker_user: str | None, vhost: str,
              queues: Iterable[str], files: Iterable[str] = ()) -> str:
        """Append a run's start line; returns its id (for `end`)."""
        run = uuid.uuid4().hex[:12]
        self._append({"event": "start", "run": run, "at": _now(), "command": command,
                      "argv": [secrets.scrub(a) for a in argv], "os_user": os_user(), "broker": broker,
                      "broker_user": broker_user, "vhost": vhost, "queues": list(dict.fromkeys(queues)),
                      "files": list(files), "pid": os.getpid()})
        return run

    def end(self, run: str, *, status: str, message: str = "", counts: Mapping[str, Any] | None = None,
            files: Iterable[str] = (), message_ids: MessageIds | None = None, queues: Iterable[str] = ()) -> None:
        """Append a run's end line: its status (dlxtool.outcome.Status value), counts by outcome, the files it
        wrote (backups, --save, --failed), the ids of the messages it changed (dlxtool.message_ids: listed when
        few, else counted with a digest), the queues it put messages in that its start did not name (a replay's
        origins)."""
        self._append({"event": "end", "run": run, "at": _now(), "status": status,
                      "message": secrets.scrub(message), "counts": dict(counts or {}), "files": list(files),
                      "queues": list(dict.fromkeys(queues)),
                      **(message_ids.to_json() if message_ids is not None else {})})

    def decision(self, run: str, kind: str, facts: Mapping[str, Any]) -> None:
        """Append a decision a run took on its own while it went (`kind`: replay's "canary" verdict, its "brake"),
        with the facts it was taken on."""
        self._append({"event": "decision", "run": run, "at": _now(), "kind": kind, **facts})

    def _append(self, entry: dict[str, Any]) -> None:
        if not self.enabled:
            return
        line = orjson.dumps(entry, default=str) + b"\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.path.with_name(self.path.name + ".lock"), "a", opener=owner_only) as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # writers of several processes, and a rotation, one at a time
                try:
                    with contextlib.suppress(FileNotFoundError):
                        if self.path.stat().st_size + len(line) > MAX_BYTES:
                            self._rotate()
                    with open(self.path, "ab", opener=owner_only) as f:
                        f.write(line)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        except OSError as exc:
            self.problem = (f"the journal {self.path} could not be written ({exc.strerror or exc}): this run is not "
                            "recorded there")

    def _rotate(self) -> None:
        for n in range(KEEP, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            newer = self.path.with_name(f"{self.path.name}.{n - 1}") if n > 1 else self.path
            with contextlib.suppress(FileNotFoundError):
                newer.replace(older)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# -- reading it back -------------------------------------------------------------------------------------------


@dataclass
class Run:
    """A run as the journal tells it: its start line, and its end line (None: it never ended — killed)."""

    start: dict[str, Any]
    end: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def at(self) -> str:
        return str(self.start.get("at", ""))

    @property
    def queues(self) -> list[str]:
        """The queues the run named as it started, then those it put messages in (its end says: a replay's
        origins)."""
        return list(dict.fromkeys([*self.start.get("queues", []), *((self.end or {}).get("queues") or [])]))

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.start.items() if k != "event"}
        if self.end is None:
            out["status"] = "no end (killed, or still running)"
        else:
            out.update({k: v for k, v in self.end.items() if k not in ("event", "run", "files", "queues")})
            out["ended_at"] = self.end.get("at")
            out["files"] = list(dict.fromkeys([*self.start.get("files", []), *self.end.get("files", [])]))
            out["queues"] = self.queues
        if self.extra.get("decisions"):
            out["decisions"] = self.extra["decisions"]
        return out


def read_runs(path: Path) -> Iterator[Run]:
    """The runs of the journal and its rotated files, oldest first; lines that do not parse are skipped."""
    starts: dict[str, Run] = {}
    order: list[str] = []
    files = [path.with_name(f"{path.name}.{n}") for n in range(KEEP, 0, -1)] + [path]
    for file in files:
        try:
            data = file.read_bytes()
        except OSError:
            continue
        for raw in data.splitlines():
            try:
                entry = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(entry, dict) or not isinstance(entry.get("run"), str):
                continue
            run = entry["run"]
            if entry.get("event") == "start":
                starts[run] = Run(entry)
                order.append(run)
            elif entry.get("event") == "end" and run in starts:
                starts[run].end = entry
            elif entry.get("event") == "decision" and run in starts:
                starts[run].extra.setdefault("decisions", []).append(
                    {k: v for k, v in entry.items() if k not in ("event", "run")})
    for run in order:
        yield starts[run]
