"""The byte budget: how many bytes of messages a command may hold at once (--max-bytes, config max_bytes).

Counts alone do not bound memory: 24 dead letters of 8-64 MB held by one peek took 1.8 GB. Every command that
holds messages also has a budget in bytes (default 256 MiB):

- readers (peek, history, dump): stop before the message that would take the bodies held past the budget
  (dlxtool.ops.peek); that message was taken already (basic.get hands over whole messages) and is given back
  unshown, so the most held is the budget plus one message;
- the one-pass engine (replay, purge, dump --remove): RabbitMQ ignores basic.qos prefetch_size (only the count
  is applied), so the prefetch count is chosen from the body sizes (PrefetchWindow); a window of bodies larger
  than any seen so far can arrive before they are seen: the overshoot is at most one window;
- load: it reads the records itself, so it publishes only while the bodies in flight are within the budget.

Other code that holds bytes for the same command (decompressed previews) takes the same budget from the CLI's
App (`App.max_bytes`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
DEFAULT_MAX_BYTES = 256 * MiB
SIZE_HELP = "bytes, or with a unit: 64MiB, 512K, 1G (K, M, G, T and KiB, MiB, GiB, TiB: powers of 1024; kB, MB, " \
            "GB, TB: powers of 1000)"

_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)
_UNITS = {"": 1, "b": 1,
          **{f"{p}{tail}": 1024 ** i for i, p in enumerate("kmgt", 1) for tail in ("", "ib")},
          **{f"{p}b": 1000 ** i for i, p in enumerate("kmgt", 1)}}


def parse_size(value: Any) -> int:
    """A size in bytes from an int or a text like "64MiB", "1G", "1.5GiB", "500MB", "4096" (units in any case);
    ValueError saying what is wrong. A bare letter and the -iB units are powers of 1024; kB, MB, GB and TB are
    powers of 1000."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"expected a size like 256MiB or a number of bytes, got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        match = _SIZE.fullmatch(value)
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(f"{value!r} is not a size: {SIZE_HELP}")
        n = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if n < 1:
        raise ValueError(f"a byte budget must be at least 1 byte, got {value!r}")
    return n


def human(n: float) -> str:
    """1536 -> '1.5 KiB' (B, KiB, MiB, GiB)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - the loop returns at GiB


def average_body(raw: Mapping[str, Any] | None) -> int | None:
    """The average body size of a queue's ready messages from its management API row (message_bytes_ready over the
    ready count), or None where the row has no such figures (no API, statistics off, an empty queue)."""
    if not raw:
        return None
    size, status = raw.get("message_bytes_ready"), raw.get("backing_queue_status")
    # a classic queue's backing_queue_status.len comes from the same sample as its bytes; messages_ready may not
    count = status.get("len") if isinstance(status, dict) and isinstance(status.get("len"), int) else \
        raw.get("messages_ready")
    if not isinstance(size, int) or not isinstance(count, int) or count <= 0 or size <= 0:
        return None
    return max(1, size // count)


class PrefetchWindow:
    """The prefetch count of a consumer that holds each delivery's body until it is settled, from the byte budget
    and the sizes it learns (RabbitMQ applies basic.qos prefetch_count only: the count must do the work).

    Each message is counted twice (COPIES): its body, and its copy on the way out (the publish frames, or the
    record written to a file) until that is written. The size the window is made for is the largest body seen
    lately, decaying by half for every HALF_LIFE deliveries (at least a window's worth) without one as large: one
    huge message narrows the window at once, a run of small ones widens it again, step by step. Before any body
    is seen, twice the queue's average (the management API's, when known) stands for the largest; with no figure
    at all the window starts at one message.

    `learn(largest, n)` after n deliveries whose largest body was `largest`: the new prefetch when it should
    change — at once when it must shrink; when it may grow, twice as wide (or the ceiling) once it can be, never
    more at a time (each change costs a new consumer: RabbitMQ applies a new basic.qos to consumers started after
    it; and a size learnt from a few bodies is a guess) — else None."""

    COPIES = 2
    HALF_LIFE = 64

    def __init__(self, max_bytes: int, ceiling: int, average: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.ceiling = max(1, ceiling)
        self.size: float | None = 2.0 * average if average else None  # the body size the window is made for
        self.prefetch = self.count_for(self.size)

    def count_for(self, size: float | None) -> int:
        if size is None:
            return 1
        return max(1, min(self.ceiling, int(self.max_bytes // (self.COPIES * max(1.0, size)))))

    def learn(self, largest: int, n: int) -> int | None:
        if n <= 0:
            return None
        if self.size is None:
            self.size = float(largest)
        else:
            fading = self.size * 0.5 ** (n / max(self.HALF_LIFE, self.prefetch))
            self.size = max(float(largest), fading)
        wanted = self.count_for(self.size)
        if wanted < self.prefetch:
            return wanted
        # Wider by doubling at most: the size comes from the bodies seen so far, few of them at first.
        step = min(wanted, 2 * self.prefetch)
        return step if step > self.prefetch and step >= min(2 * self.prefetch, self.ceiling) else None
