"""What reads from this machine learnt about queues holding a message AMQP 0.9.1 cannot be given (issue 39).

On RabbitMQ 4.3 an AMQP 1.0 message with a char or uuid application property closes the 0.9.1 connection it is
delivered to, and on a quorum queue that close counts a delivery attempt of it and of every message the read held
before it (dlxtool.broker.versions: quorum_give_back_counts "lost"). Where that message sits cannot be learnt without
delivering it, so the first --protocol auto read of such a queue pays once; this memo keeps what it learnt, so that
the next auto reads from here go straight over AMQP 1.0 (which gives such a message back without a cost) instead of
paying again on every run, toward the delivery limit at which the broker drops the message and those before it.

It only chooses which protocol a read starts with: what is shown, refused or warned of is decided by that read, on
what the broker says now. An entry goes once a read finds the queue (read whole) without such a message.

`$XDG_STATE_HOME/dlxtool/poison-091.json` (~/.local/state/dlxtool/), owner-only (queue names are an incident's data),
written whole under a lock and replaced atomically; bounded (the oldest sightings go first). A memo that cannot be
read or written is as if empty: it spares attempts, it never stops a read.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from dlxtool.state import owner_only, state_dir

MAX_ENTRIES = 1000  # queues remembered at most: the oldest sightings are let go of past this
# A sighting older than this is let go of: a queue deeper than a read's bounds is never read whole, so without an age
# a memo whose message has gone would keep its reads over 1.0 (and its moves refused) for good; the cost of an older
# sighting being wrong is one attempt of the messages before it, once per this long per machine
MAX_AGE_S = 12 * 3600


@dataclass(frozen=True)
class Sighting:
    """A read from this machine found such a message in the queue: at `position` from the head, `at` (ISO 8601,
    UTC), on RabbitMQ `version`."""

    position: int
    at: str
    version: str


def memo_path(env: Mapping[str, str]) -> Path:
    return state_dir(env) / "poison-091.json"


def memo_key(nodes: Sequence[tuple[str, int]], vhost: str, queue: str) -> str:
    """The queue, named by the broker's nodes as the profile reaches them (host:port, sorted: no user, no
    password), its vhost and its name."""
    where = ",".join(sorted(f"{host}:{port}" for host, port in nodes))
    return orjson.dumps([where, vhost, queue]).decode()


class PoisonMemo:
    """The memo file; each method reads it anew (several dlxtool processes may write it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def seen(self, key: str) -> Sighting | None:
        entry = self._load().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            seen = Sighting(int(entry["position"]), str(entry["at"]), str(entry["version"]))
            age = (datetime.now(UTC) - datetime.fromisoformat(seen.at)).total_seconds()
        except (KeyError, TypeError, ValueError):
            return None
        return seen if 0 <= age <= MAX_AGE_S else None

    def remember(self, key: str, position: int, version: str) -> bool:
        """Whether it is remembered now (the file could be written)."""
        at = datetime.now(UTC).isoformat(timespec="seconds")
        return self._change(lambda entries: entries.__setitem__(key, {"position": position, "at": at,
                                                                      "version": version}))

    def forget(self, key: str) -> None:
        self._change(lambda entries: entries.pop(key, None))

    def _load(self) -> dict[str, Any]:
        try:
            loaded = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def _change(self, change: Callable[[dict[str, Any]], object]) -> bool:
        """Apply `change` to the entries and write them whole (False: the file could not be written)."""
        fresh = self.path.with_name(self.path.name + f".{os.getpid()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(self.path.with_name(self.path.name + ".lock"), "a", opener=owner_only) as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                try:
                    entries = self._load()
                    change(entries)
                    if len(entries) > MAX_ENTRIES:  # the oldest sightings go (ISO times sort as times)
                        kept = sorted(entries.items(), key=lambda kv: str(kv[1].get("at", "")) if isinstance(
                            kv[1], dict) else "")[-MAX_ENTRIES:]
                        entries = dict(kept)
                    with open(fresh, "wb", opener=owner_only) as f:
                        f.write(orjson.dumps(entries))
                    fresh.replace(self.path)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
        except OSError:
            with contextlib.suppress(OSError):
                fresh.unlink()  # a write cut short leaves no stray file
            return False
        return True


@dataclass
class QueueMemo:
    """The memo of one queue, as a read uses it."""

    memo: PoisonMemo
    key: str
    version: str

    def seen(self) -> Sighting | None:
        return self.memo.seen(self.key)

    def remember(self, position: int) -> bool:
        return self.memo.remember(self.key, position, self.version)

    def forget(self) -> None:
        self.memo.forget(self.key)
