"""The optional C extension dlxtool.broker.wire._hotpath, or None where it is not built.

It is built by `pip install` (setup.py) where a C compiler is available, and carries the transfer
engine's per-message work (reading deliveries, scanning and splicing replay's header tables, publish frames); the Python
code it stands in for gives the same results, slower. Whether it is *used* is the codec setting's
business (dlxtool.broker.wire.codec): this module only says whether it is there.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType


@functools.cache
def load() -> ModuleType | None:
    """The extension, or None where it is not built (no C compiler at install time)."""
    try:
        return importlib.import_module("dlxtool.broker.wire._hotpath")
    except ImportError:
        return None
