"""The optional C extension dlxtool.broker._hotpath, or None.

It is built by `pip install` (setup.py) where a C compiler is available, and carries the transfer
engine's per-message work (reading deliveries, replay's header rewrite, publish frames); the Python
code it stands in for gives the same results, slower. DLXTOOL_NO_HOTPATH=1 turns it off: for
comparing the two (scripts/bench/replay.py) and as an escape hatch should it ever misbehave.

`active` is the one switch: every user (frames, replay) reads it at call time, so setting it to None
(tests: `monkeypatch.setattr(hotpath, "active", None)`) takes the Python path everywhere at once.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def disabled_by_env() -> bool:
    """DLXTOOL_NO_HOTPATH is set (to anything but 0)."""
    return os.environ.get("DLXTOOL_NO_HOTPATH", "") not in ("", "0")


def _import() -> ModuleType | None:
    if disabled_by_env():
        return None
    try:
        return importlib.import_module("dlxtool.broker._hotpath")
    except ImportError:  # not built here (no C compiler at install time): the Python path does the work
        return None


active: ModuleType | None = _import()


def load() -> ModuleType | None:
    """The extension, or None where it is not built or switched off."""
    return active
