"""Stop signals held back while pika's transport writes.

pika's writer sends the front of its buffer and only then takes the sent bytes off it
(`_AsyncTransportBase._produce`). A second stop signal raises StopSignal from its handler, between any two
bytecodes: raised in that gap, the bytes stay in the buffer although the broker has them, and the next write
(the close) sends them again — a publish the broker takes twice (seen once under load: a `load` stopped by
two signals left one record in its queue twice). While dlxtool drives pika's I/O (dlxtool.broker.channel:
process_io, and the waits of AsyncChannel.wait_for) such a signal is held and raised as soon as that call
is done; those calls do not block, so it waits microseconds. Held when the call fails instead, it is raised
by the next I/O call (raise_held), and forgotten when a command installs its handlers again (reset).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_state: list[Any] = [0, None]  # [depth of guarded calls, the held exception]


def raise_or_hold(exc: BaseException) -> None:
    """From a signal handler: raise `exc` now, or when the guarded I/O call under way is done."""
    if _state[0]:
        _state[1] = exc
        return
    raise exc


def guarded(call: Callable[[Any], None], arg: Any) -> None:
    """call(arg): pika I/O that must not be cut between a send and its bookkeeping (non-blocking calls only).
    A plain counter, not a context manager: process_io runs thousands of times a second."""
    held = _state[1]
    if held is not None and not _state[0]:
        _state[1] = None
        raise held
    _state[0] += 1
    try:
        call(arg)
    finally:
        _state[0] -= 1
    held = _state[1]
    if held is not None and not _state[0]:  # reached without an exception: raise the held signal now
        _state[1] = None
        raise held


def hold(exc: BaseException) -> None:
    """From a signal handler: raise `exc` at the next I/O call (guarded, raise_held), never where the handler
    happened to interrupt (between two steps of the engine's bookkeeping). A signal held already wins."""
    if _state[1] is None:
        _state[1] = exc


def drop(exc: BaseException) -> None:
    """`exc` is no longer to be raised (held by a handler whose run is over)."""
    if _state[1] is exc:
        _state[1] = None


def raise_held() -> None:
    """Raise a held signal whose I/O call ended in an exception (before an I/O wait)."""
    held = _state[1]
    if held is not None and not _state[0]:
        _state[1] = None
        raise held


def reset() -> None:
    """A command's handlers are being installed: nothing held from an earlier run in this process."""
    _state[0], _state[1] = 0, None
