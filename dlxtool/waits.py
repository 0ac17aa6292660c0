"""The waits a command makes that are not for its messages, in one place: each named, bounded, and said with -v.

A run of a few messages should spend its time on them (issue 40: a purge of 18 reported 2.9 s). Besides the
management API's answers themselves (each bounded by the profile's timeout; on a loaded broker they are most of a
small run's waiting, noted by dlxtool.broker.management), what a command waits for is a sample or a state the broker
has not reached yet: the management API's next statistics sample (every
5 s by default) for a queue declared moments ago, a probe queue the API's node does not know yet, a quorum queue's
new leader, connections the broker is still closing. Each such wait is a `Wait`: it has a bound (the caller's
deadline), polls short first (0.1 s, doubling up to the caller's interval) so that what comes soon ends it soon, and
adds what it took to this process's record, which `dlxtool -v` prints at the end (dlxtool.cli.main):

    waited 0.70 s for the management API's policy sample of 'orders' (...) (at most 10 s; 4 polls)
    waited 0.21 s for the management API's answers (at most 10 s each; 9 answers)

Speed claims stay out of the tests; tests/test_waits.py checks the record and the bound, not times.
"""

from __future__ import annotations

import threading
import time

FIRST_POLL = 0.1  # the first pause of a wait; each next one doubles, up to the caller's interval


class Waited:
    """What one kind of wait took in this process, all its occurrences together. (A plain class: every command
    imports this module, and a dataclass costs start-up time to build.)"""

    def __init__(self, what: str, bound: float, unit: str = "poll") -> None:
        self.what, self.bound, self.unit = what, bound, unit
        self.seconds = 0.0
        self.pauses = 0

    def describe(self) -> str:
        """`unit` "poll": one wait, polled (its bound is for all the polls); any other: as many waits, each bounded."""
        each = "" if self.unit == "poll" else " each"
        count = f"; {self.pauses} {self.unit}{'s' if self.pauses != 1 else ''}" if self.pauses else ""
        return f"waited {self.seconds:.2f} s for {self.what} (at most {self.bound:g} s{each}{count})"


_RECORD: dict[str, Waited] = {}
_LOCK = threading.Lock()  # `queues` asks brokers in parallel, each thread noting its answers


class Wait:
    """One bounded wait: `while not done: if not wait.pause(): break`. `bound` seconds in all from its creation;
    `interval`: the longest pause between two looks (the caller's poll interval)."""

    def __init__(self, what: str, bound: float, interval: float) -> None:
        self.what, self.bound, self.interval = what, bound, interval
        self.started = time.monotonic()
        self.deadline = self.started + bound
        self._next = min(FIRST_POLL, interval)

    def over(self) -> bool:
        return time.monotonic() >= self.deadline

    def pause(self) -> bool:
        """Sleep until the next look (never past the bound) and note it; False, without sleeping, once the bound
        has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        step = min(self._next, left)
        self._next = min(self._next * 2, self.interval)
        began = time.monotonic()
        try:
            time.sleep(step)
        finally:
            note(self.what, self.bound, time.monotonic() - began)
        return True


def note(what: str, bound: float, seconds: float, unit: str = "poll") -> None:
    """Add `seconds` waited for `what` (bounded by `bound`) to this process's record; `unit`: what one occurrence is
    ("poll": a pause of one bounded wait; e.g. "answer": one of many waits, each bounded by `bound`)."""
    with _LOCK:
        waited = _RECORD.setdefault(what, Waited(what, bound, unit))
        waited.seconds += seconds
        waited.pauses += 1
        waited.bound = max(waited.bound, bound)


def taken() -> list[Waited]:
    """What this process waited for, in the order the waits began."""
    with _LOCK:
        return list(_RECORD.values())


def total() -> float:
    return sum(w.seconds for w in taken())


def forget() -> None:
    _RECORD.clear()
