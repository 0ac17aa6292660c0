"""The byte budget's arithmetic: sizes as users write them, the API's average body, the prefetch window."""

from __future__ import annotations

import pytest

from dlxtool.budget import DEFAULT_MAX_BYTES, KiB, MiB, PrefetchWindow, average_body, human, parse_size


@pytest.mark.parametrize(("text", "size"), [
    ("64MiB", 64 * MiB), ("64mib", 64 * MiB), ("64M", 64 * MiB), ("64m", 64 * MiB), ("1G", 1024 * MiB),
    ("1.5GiB", 1536 * MiB), ("512k", 512 * KiB), ("500MB", 500_000_000), ("2kB", 2000), ("4096", 4096),
    (" 3 MiB ", 3 * MiB), ("1T", 1024 ** 4), ("7b", 7), (4096, 4096),
])
def test_sizes_users_write(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(("value", "words"), [
    ("12XB", "'12XB' is not a size"), ("MiB", "is not a size"), ("-1", "is not a size"), ("1e6", "is not a size"),
    ("", "is not a size"), ("0", "at least 1 byte"), (0, "at least 1 byte"), ("0.4", "at least 1 byte"),
    (True, "expected a size"), (1.5, "expected a size"), (None, "expected a size"),
])
def test_what_is_not_a_size_says_so(value: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_size(value)


def test_the_default_is_256_mib_and_reads_back() -> None:
    assert parse_size("256MiB") == DEFAULT_MAX_BYTES
    assert human(DEFAULT_MAX_BYTES) == "256.0 MiB"
    assert human(100) == "100 B" and human(1536) == "1.5 KiB" and human(3 * 1024 ** 3) == "3.0 GiB"


def test_the_average_body_comes_from_the_api_row() -> None:
    assert average_body({"message_bytes_ready": 1000, "messages_ready": 4}) == 250
    # a classic queue's backing_queue_status.len is of the same sample as its bytes
    assert average_body({"message_bytes_ready": 1000, "messages_ready": 9, "backing_queue_status": {"len": 2}}) == 500
    for row in (None, {}, {"messages_ready": 3}, {"message_bytes_ready": 10, "messages_ready": 0},
                {"message_bytes_ready": 0, "messages_ready": 5}):
        assert average_body(row) is None


def test_a_window_holds_each_body_twice_within_the_budget() -> None:
    w = PrefetchWindow(256 * MiB, ceiling=2000, average=30 * MiB)
    assert w.prefetch == 2  # twice the average stands for the largest: 256 / (2 x 60)
    assert PrefetchWindow(256 * MiB, ceiling=2000, average=100).prefetch == 2000  # small bodies: the ceiling
    assert PrefetchWindow(256 * MiB, ceiling=2000).prefetch == 1  # nothing known: one at a time until a body is seen
    assert PrefetchWindow(1, ceiling=10, average=5).prefetch == 1  # never below one


def test_the_window_narrows_at_once_and_widens_step_by_step() -> None:
    w = PrefetchWindow(1 * MiB, ceiling=100)
    assert w.learn(1 * KiB, 1) == 2  # the first body: twice as wide, no more (one body says little)
    w.prefetch = 100
    assert w.learn(256 * KiB, 5) == 2  # one big body narrows it at once: 1 MiB / (2 x 256 KiB)
    w.prefetch = 2
    assert w.learn(1 * KiB, 10) is None  # a few small ones: not yet
    changes = []
    for _ in range(40):
        wanted = w.learn(1 * KiB, 16)
        if wanted is not None:
            changes.append(wanted)
            w.prefetch = wanted
    assert changes and changes[-1] == 100  # back to the ceiling, each step a doubling (or the ceiling)
    assert all(b >= min(2 * a, 100) for a, b in zip([2, *changes], changes, strict=False))
    assert w.learn(1 * KiB, 0) is None
