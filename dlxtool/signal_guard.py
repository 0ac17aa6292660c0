"""Stop signals held back while pika's transport writes.

pika's writer sends the front of its buffer and only then takes the sent bytes off it
(`_AsyncTransportBase._produce`). A second stop signal raises StopSignal from its handler, between any two
bytecodes: raised in that gap, the bytes stay in the buffer although the broker has them, and the next write
(the close) sends them again — a publish the broker takes twice (seen once under load: a `load` stopped by
two signals left one record in its queue twice). While dlxtool drives pika's I/O (channel.process_io) such a
signal is held and raised as soon as the write is done; nothing there blocks, so it waits microseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0
_held: BaseException | None = None


def raise_or_hold(exc: BaseException) -> None:
    """From a signal handler: raise `exc` now, or when the write under way is done."""
    global _held
    if _depth:
        _held = exc
        return
    raise exc


@contextmanager
def writing() -> Iterator[None]:
    """Around pika I/O that must not be cut between a send and its bookkeeping (non-blocking code only)."""
    global _depth, _held
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if not _depth and _held is not None:  # reached without an exception: raise the held signal now
        exc, _held = _held, None
        raise exc


def raise_held() -> None:
    """Raise a held signal whose write ended in an exception (the next I/O call comes here first)."""
    global _held
    if _held is not None and not _depth:
        exc, _held = _held, None
        raise exc
