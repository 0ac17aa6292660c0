"""When the engine may take its next delivery: --rate (messages a second, counted from the first delivery taken),
or a guarded replay's pace in its place (PassControl.pace: --batch/--pause with --rate). Without either, at once."""

from __future__ import annotations

import time
from collections.abc import Callable


class ReadPace:
    """The pace of one pass: `delay(received)` is how long to wait before the next delivery (<= 0: take it now)."""

    def __init__(self, rate: float | None, pace: Callable[[int], float] | None) -> None:
        self.rate = rate
        self.pace = pace
        self._start: float | None = None  # when reading started: the rate counts from there

    @property
    def active(self) -> bool:
        return bool(self.rate or self.pace)

    def begin(self) -> None:
        """Reading starts now (the first call counts; later ones change nothing)."""
        if self.active and self._start is None:
            self._start = time.monotonic()

    def delay(self, received: int) -> float:
        if self.pace is not None:
            return self.pace(received)
        if not self.rate or self._start is None:  # not reading yet: nothing to pace
            return 0.0
        return self._start + received / self.rate - time.monotonic()
