"""`import pika` without its asyncio adapter: dlxtool never uses it, and every start would pay for it.

pika/adapters/__init__.py imports `AsyncioConnection` unconditionally, which brings in asyncio (and with
it concurrent.futures, subprocess, ssl protocol layers): about a fifth of pika's import time, measured
with `python -X importtime`, on every `dlxtool peek`. pika offers no switch for that, so while pika
itself is imported a placeholder module stands in for pika.adapters.asyncio_connection; afterwards it is
taken out again, and `pika.adapters.AsyncioConnection` or `import pika.adapters.asyncio_connection` load
the real one on first use. If pika ever imports more than that name from it, the placeholder is dropped
and pika is imported the ordinary way: slower, never broken.

Call :func:`load` before the first pika import of a command (dlxtool.broker.connection does).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, cast

_ASYNCIO = "pika.adapters.asyncio_connection"


def load() -> types.ModuleType:
    """The pika package, imported lean when this is its first import."""
    if "pika" in sys.modules:
        return sys.modules["pika"]
    stub = types.ModuleType(_ASYNCIO)
    stub.AsyncioConnection = None  # type: ignore[attr-defined]  # the one name pika.adapters imports
    sys.modules[_ASYNCIO] = stub
    try:
        import pika
    except ImportError:
        _forget_pika()
        import pika
    finally:
        if sys.modules.get(_ASYNCIO) is stub:
            del sys.modules[_ASYNCIO]
    adapters = vars(sys.modules["pika.adapters"])
    if adapters.get("AsyncioConnection", stub) is None:  # the placeholder's value: replace it by a loader
        del adapters["AsyncioConnection"]
        if adapters.get("asyncio_connection") is stub:
            del adapters["asyncio_connection"]
        adapters["__getattr__"] = _adapters_getattr  # PEP 562: pika.adapters.AsyncioConnection on first use
    return cast(types.ModuleType, pika)


def _adapters_getattr(name: str) -> Any:
    if name in ("AsyncioConnection", "asyncio_connection"):
        module = importlib.import_module(_ASYNCIO)
        return module if name == "asyncio_connection" else module.AsyncioConnection
    raise AttributeError(f"module 'pika.adapters' has no attribute {name!r}")


def _forget_pika() -> None:
    """Undo a half-done import (the placeholder was not enough), so the next one starts clean."""
    for name in [n for n in sys.modules if n == "pika" or n.startswith("pika.")]:
        del sys.modules[name]
