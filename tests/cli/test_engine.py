"""One mapping from a run's result to the exit status and its wording (dlxtool.cli.engine.exit_for)."""

from __future__ import annotations

import pytest

from dlxtool.cli.engine import exit_for
from dlxtool.errors import ConnectError, PartialError
from dlxtool.ops.transfer import TransferResult


def test_a_local_error_is_not_reported_as_a_lost_connection() -> None:
    result = TransferResult("q.dlq", 10, error="[Errno 28] No space left on device", possible_duplicates=2)
    with pytest.raises(PartialError) as err:
        exit_for(result, "replay")
    assert "connection" not in err.value.message and "nothing was lost" not in err.value.message
    assert "2 message(s) may now exist twice" in err.value.message


def test_a_lost_connection_says_so() -> None:
    result = TransferResult("q.dlq", 10, error="StreamLostError", connection_lost=True)
    with pytest.raises(ConnectError):
        exit_for(result, "replay")
