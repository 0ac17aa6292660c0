"""What a guarded replay is asked for (dlxtool.ops.canary): the canary, the brake and the pace, as settings — apart from
the guard's machinery (the tap, the engine, pika), so that the command line's options and `replay --help` need none
of it."""

from __future__ import annotations

import math
from dataclasses import dataclass

BRAKE_DEFAULT = 0.10
BRAKE_WINDOW = 50
BRAKE_MINIMUM = 3
GRACE = 2.0             # an origin with no ready message for this long: its canaries were taken and not returned


@dataclass(frozen=True)
class GuardSettings:
    canary: int | None = None            # messages in the canary
    canary_percent: float | None = None  # or a share of the DLQ's ready messages (at least one)
    canary_wait: float = 60.0
    grace: float = GRACE
    brake: float | None = BRAKE_DEFAULT  # None: no brake
    brake_window: int = BRAKE_WINDOW
    brake_minimum: int = BRAKE_MINIMUM
    batch: int | None = None
    pause: float = 0.0
    rate: float | None = None

    @property
    def wants_canary(self) -> bool:
        return bool(self.canary or self.canary_percent)

    @property
    def watches(self) -> bool:
        return self.wants_canary or self.brake is not None

    def canary_size(self, ready: int) -> int:
        if self.canary:
            return self.canary
        return max(1, math.ceil(ready * (self.canary_percent or 0) / 100))
