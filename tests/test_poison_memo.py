"""The memo of queues holding a message AMQP 0.9.1 cannot be given (dlxtool.poison_memo): pure file logic. What it
spares on a broker is proved in tests/cli/test_read_past_poison.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlxtool import poison_memo
from dlxtool.poison_memo import PoisonMemo, QueueMemo, memo_key, memo_path


def test_remembered_seen_and_forgotten(tmp_path: Path) -> None:
    memo = QueueMemo(PoisonMemo(memo_path({"XDG_STATE_HOME": str(tmp_path)})), memo_key([("h", 5672)], "/", "q"),
                     "4.3.6")
    assert memo.seen() is None
    memo.remember(7)
    seen = memo.seen()
    assert seen is not None and (seen.position, seen.version) == (7, "4.3.6") and seen.at.endswith("+00:00")
    assert (tmp_path / "dlxtool" / "poison-091.json").stat().st_mode & 0o777 == 0o600
    memo.forget()
    assert memo.seen() is None


def test_keys_name_the_nodes_not_their_order_and_hold_no_secret() -> None:
    assert memo_key([("b", 1), ("a", 2)], "v", "q") == memo_key([("a", 2), ("b", 1)], "v", "q")
    assert memo_key([("a", 1)], "v", "q") != memo_key([("a", 1)], "w", "q")
    assert "guest" not in memo_key([("a", 1)], "v", "q")


def test_a_memo_that_cannot_be_read_is_empty_and_is_written_anew(tmp_path: Path) -> None:
    path = tmp_path / "poison-091.json"
    path.write_bytes(b"{not json")
    memo = PoisonMemo(path)
    assert memo.seen("k") is None
    memo.remember("k", 1, "4.3.6")
    assert memo.seen("k") is not None


def test_a_memo_in_a_place_that_cannot_be_written_stops_nothing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    memo = PoisonMemo(tmp_path / "file" / "poison-091.json")  # its directory is a file
    memo.remember("k", 1, "4.3.6")
    assert memo.seen("k") is None


def _ago(hours: float) -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(hours=hours)).isoformat(timespec="seconds")


def test_the_oldest_sightings_go_past_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(poison_memo, "MAX_ENTRIES", 2)
    path = tmp_path / "poison-091.json"
    path.write_text(f'{{"old": {{"position": 0, "at": "{_ago(3)}", "version": "4.3.6"}},'
                    f' "mid": {{"position": 0, "at": "{_ago(2)}", "version": "4.3.6"}}}}')
    memo = PoisonMemo(path)
    memo.remember("new", 3, "4.3.6")
    assert memo.seen("old") is None and memo.seen("mid") is not None and memo.seen("new") is not None


def test_a_sighting_older_than_its_age_is_let_go_of(tmp_path: Path) -> None:
    """A queue deeper than a read's bounds is never read whole: without an age a memo whose message has gone would
    keep its reads over 1.0 for good."""
    path = tmp_path / "poison-091.json"
    hours = poison_memo.MAX_AGE_S / 3600
    path.write_text(f'{{"stale": {{"position": 0, "at": "{_ago(hours + 1)}", "version": "4.3.6"}},'
                    f' "fresh": {{"position": 0, "at": "{_ago(hours - 1)}", "version": "4.3.6"}}}}')
    memo = PoisonMemo(path)
    assert memo.seen("stale") is None and memo.seen("fresh") is not None
