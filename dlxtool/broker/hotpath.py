"""The optional C extension dlxtool.broker._hotpath, or None.

It is built by `pip install` (setup.py) where a C compiler is available, and carries the transfer
engine's per-message work (reading deliveries, replay's header rewrite, publish frames); the Python
code it stands in for gives the same results, slower. DLXTOOL_NO_HOTPATH=1 turns it off: for
comparing the two (scripts/bench/replay.py) and as an escape hatch should it ever misbehave.
"""

from __future__ import annotations

import os
from types import ModuleType


def load() -> ModuleType | None:
    if os.environ.get("DLXTOOL_NO_HOTPATH", "") not in ("", "0"):
        return None
    try:
        from dlxtool.broker import _hotpath
    except ImportError:
        return None
    return _hotpath
