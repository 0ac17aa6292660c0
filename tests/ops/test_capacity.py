"""Rooms: the per-publish count-down and the re-read when the room runs out (pure logic, fake depth reads)."""

from __future__ import annotations

from dlxtool.ops import capacity
from dlxtool.ops.capacity import Capacity, Rooms
from dlxtool.ops.stay import Stay


def test_room_counts_down_by_messages_and_by_body_bytes() -> None:
    rooms = Rooms(lambda q: Capacity(q, max_length=5, max_bytes=10, ready=2, body_bytes=4), role="origin")
    assert rooms.admit("q", 3) is None and rooms.admit("q", 3) is None  # 6 of the 6 free bytes
    why = rooms.admit("q", 1)
    assert why == "origin full (drop-head would push out its head): q"
    assert rooms.to_json()["q"]["admitted"] == 2 and rooms.stayed() == 1


def test_unacked_messages_count_against_the_room() -> None:
    """They come back to the queue if their consumer rejects them with requeue or disconnects."""
    assert Capacity("q", max_length=3, ready=1, unacked=2).room == 0


def test_reject_publish_is_not_guarded_and_allow_displace_lets_everything_through() -> None:
    assert Rooms(lambda q: Capacity(q, max_length=0, overflow="reject-publish")).admit("q", 1) is None
    assert Rooms(lambda q: Capacity(q, max_length=0), allow_displace=True).admit("q", 1) is None
    assert Rooms(lambda q: Capacity(q, max_length=0, overflow="reject-publish-dlx")).admit("q", 1) is not None


def test_room_run_out_reads_the_depth_again_counting_publishes_in_flight(monkeypatch) -> None:
    reads = iter([0, 0])
    rooms = Rooms(lambda q: Capacity(q, max_length=3, ready=2), reread=lambda _q: next(reads))
    monkeypatch.setattr(capacity, "REREAD_EVERY", 0.0)
    assert rooms.admit("q", 1, in_flight=0) is None             # room 1 at the start
    # Out of room: consumers took everything (ready 0), but 1 publish is still in flight: room 3 - 1.
    assert rooms.admit("q", 1, in_flight=1) is None
    assert rooms.admit("q", 1, in_flight=2) is None
    assert rooms.admit("q", 1, in_flight=3) is not None         # read again: 0 ready + 3 in flight = full


def test_re_reads_are_rate_limited() -> None:
    calls = []
    rooms = Rooms(lambda q: Capacity(q, max_length=1, ready=1), reread=lambda q: calls.append(q) or 0)
    assert rooms.admit("q", 1) is not None and rooms.admit("q", 1) is not None
    assert calls == []  # read at the lookup just now: not again within REREAD_EVERY




def test_a_nack_no_limit_of_the_queue_explains_is_not_now() -> None:
    """A nack from a queue whose limits cannot refuse a publish (none, or drop-head) means the queue cannot take a
    message now (a quorum queue between leaders: seen on a 3.10.8 cluster); a reject-publish limit, or limits not
    read, leave the generic "nacked"."""
    caps = {"free": Capacity("free"), "head": Capacity("head", max_length=5),
            "full": Capacity("full", max_length=5, overflow="reject-publish"),
            "dlx": Capacity("dlx", max_bytes=5, overflow="reject-publish-dlx"),
            "bytes": Capacity("bytes", max_bytes=5, overflow="reject-publish"),
            "unread": Capacity("unread", known=False, note="no management API")}
    rooms = Rooms(caps.__getitem__)
    for queue in caps:
        rooms.capacity(queue)
    for queue in ("free", "head"):
        why = rooms.nack_cause(queue)
        assert why is not None and why.kind is Stay.DESTINATION_DOWN and why.kind.not_now
        assert why.startswith(f"nacked by {queue}, ") and "cannot take messages now" in why
    assert "(no length limit)" in str(rooms.nack_cause("free"))
    assert "(max-length 5, drop-head)" in str(rooms.nack_cause("head"))
    assert [rooms.nack_cause(q) for q in ("full", "dlx", "bytes", "unread", "never-looked-up")] == [None] * 5
    # reject-publish-dlx with no limit refuses nothing: a nack from it is not now, and no copy was dead-lettered
    unlimited = Rooms(lambda q: Capacity(q, overflow="reject-publish-dlx"))
    unlimited.capacity("q")
    assert unlimited.nack_cause("q") is not None and unlimited.nack_copies("q") is None
    assert rooms.nack_copies("dlx") is not None
