"""CopyGuard: plain replay's pairing of the copies a kill -9 left with their sources (pure logic)."""

from __future__ import annotations

import random

from dlxtool.ops.provenance import CopyGuard


def fp(i: int) -> str:
    return f"{random.Random(i).getrandbits(64):016x}"


def test_the_copy_after_its_source_stays() -> None:
    guard = CopyGuard()
    assert not guard.stays(fp(1), None)          # the source a kill left at the head: replayed
    assert guard.stays(fp(1), (fp(1), "run-a"))  # its copy, failed again behind it: stays


def test_the_source_after_its_copy_stays() -> None:
    guard = CopyGuard()
    assert not guard.stays(fp(1), (fp(1), "run-a"))
    assert guard.stays(fp(1), None)


def test_copies_of_one_source_from_two_runs_are_a_pair_from_one_run_not() -> None:
    guard = CopyGuard()
    assert not guard.stays(fp(1), (fp(1), "run-a"))
    assert not guard.stays(fp(1), (fp(1), "run-a"))  # identical sources copied by one run: two messages
    assert guard.stays(fp(1), (fp(1), "run-b"))


def test_identical_never_replayed_messages_are_all_replayed() -> None:
    guard = CopyGuard()
    assert not any(guard.stays(fp(1), None) for _ in range(3))
    assert not guard.stays(None, None)


def test_unrelated_copies_pass_among_many_sources() -> None:
    """False hits of the filter can only hold a copy back; with 100,000 sources, about none do."""
    guard = CopyGuard()
    for i in range(100_000):
        assert not guard.stays(fp(i), None)
    held = sum(guard.stays(fp(i), (fp(i), "run-a")) for i in range(100_000, 110_000))
    assert held <= 5, held
    assert all(guard.stays(fp(i), (fp(i), "run-a")) for i in range(0, 100_000, 997))  # real pairs, every one


def test_a_src_is_kept_as_exactly_its_text() -> None:
    """Kept as a number where it is 16 lowercase hex digits: texts int() would read as the same number
    (odd provenances from elsewhere) are different sources."""
    guard = CopyGuard()
    assert not guard.stays("000000000000001f", ("000000000000001f", "run-a"))
    for other in ("0x000000000000001f", "000000000000001F", "+00000000000001f", "00_0000000000001f", "short"):
        assert not guard.stays(other, (other, "run-b")), other
    assert guard.stays("000000000000001f", ("000000000000001f", "run-b"))
