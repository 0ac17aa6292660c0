"""Where dlxtool keeps what it writes for later on this machine ($XDG_STATE_HOME/dlxtool, ~/.local/state/dlxtool/ by
default: the journal, the memo of poison messages), and how such a file is created: readable by its owner only
(queue names and message ids are an incident's data). Standard library only: a read that writes its memo imports
nothing else for it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def state_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(base) / "dlxtool"


def owner_only(path: str, flags: int) -> int:
    """An opener: a file created readable and writable by its owner only (0600)."""
    return os.open(path, flags, 0o600)
