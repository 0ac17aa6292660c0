"""Fuzz driver for the C hot path (dlxtool/broker/wire/_hotpath.c), run by test_hotpath_sanitized.py in a
process with AddressSanitizer and UBSan preloaded, against a sanitizer build of the extension:

    python -m tests.fuzz.hotpath_fuzz PATH_TO_SO SEED ITERATIONS

Mutates encoded dead-letter properties and delivery frames (bytes flipped, cut, inserted) and feeds
them to every function of the module. Any out-of-bounds read or undefined behaviour aborts with the
sanitizer's report; answers are not checked here (tests/broker/test_hotpath.py compares them)."""

from __future__ import annotations

import importlib.util
import random
import sys
from datetime import UTC, datetime

import pika
from pika.compat import long

from dlxtool.broker.wire.frames import encode_properties
from tests.broker.test_frames import deliver_frames

WHEN = datetime(2026, 11, 21, tzinfo=UTC)
SEEDS = [encode_properties(pika.BasicProperties(content_type="x", delivery_mode=2, message_id="m", headers={
    "tenant": "acme", "nested": {"a": [1, "x", {"b": None}], "t": WHEN}, "x-retry-count": 3, "count": "7",
    "x-death": [{"count": long(i), "reason": reason, "queue": f"q{i}", "time": WHEN, "exchange": "e",
                 "routing-keys": ["k", "k2"]}
                for i, reason in enumerate(["expired", "rejected", "maxlen", "delivery_limit"])],
    "dlxtool-replay": {"count": 3, "from": "d"}})),
    encode_properties(pika.BasicProperties(headers={"x-death": [{"count": long(1), "reason": "rejected",
                                                                 "queue": "q"}]}))]


# What replay's fast path passes (dlxtool.ops.replay_raw), and a pick of a header that is not a table
DROP = (b"x-death", b"CC", b"x-first-death-queue", b"x-retry-count", b"count", b"dlxtool-replay")
REPORT = (b"x-retry-count", b"count")
PICKS = ((b"x-death", (b"queue", b"reason", b"count", b"exchange", b"original-expiration")),
         (b"x-death", (b"routing-keys",)), (b"dlxtool-replay", (b"count", b"exchange", b"routing-key")),
         (b"dlxtool-replay", (b"src", b"id")), (b"nested", (b"a", b"t")), (b"tenant", (b"x",)))
SLOW = ((b"x-original-exchange", b"rascal"), (b"nservicebus.", b"mt-"))


def mutate(rnd: random.Random, data: bytes) -> bytes:
    raw = bytearray(data)
    for _ in range(rnd.randint(1, 6)):
        at = rnd.randrange(len(raw))
        what = rnd.random()
        if what < 0.5:
            raw[at] = rnd.randrange(256)
        elif what < 0.7:
            del raw[at:at + rnd.randint(1, 20)]
        elif what < 0.85:
            raw[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 20)))
        else:
            raw[at] = rnd.choice([0, 0xFF, ord("F"), ord("A"), ord("S")])
        if not raw:
            raw = bytearray(b"\x00")
    return bytes(raw)


def main(path: str, seed: int, iterations: int) -> int:
    spec = importlib.util.spec_from_file_location("_hotpath", path)
    assert spec is not None and spec.loader is not None
    hotpath = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hotpath)
    rnd = random.Random(seed)
    answered = 0
    for i in range(iterations):
        raw = mutate(rnd, rnd.choice(SEEDS))
        drop = DROP if rnd.random() < 0.8 else (b"dlxtool-replay",)
        out = hotpath.scan_headers(raw, drop, REPORT, PICKS, *SLOW[:rnd.randint(0, 2)])
        answered += out is not None
        hotpath.splice_headers(raw, drop, raw[:rnd.randint(0, 40)])
        frames = mutate(rnd, deliver_frames(1, "ctag", i + 1, pika.BasicProperties(), raw[:50], 16))
        hotpath.read_deliveries(frames, rnd.randint(0, 5), 1, (b"ctag",))
        hotpath.publish_frames(rnd.randint(1, 65535), raw[:10], raw, raw[:rnd.randint(0, 300)], rnd.randint(1, 100))
    print(f"{iterations} inputs, {answered} scanned")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
