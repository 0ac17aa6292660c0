"""The fault campaign in CI for replay-select, replay-edit (see test_chaos.py)."""

from __future__ import annotations

import pytest

from tests.chaos.test_chaos import check_command

pytestmark = [pytest.mark.faults, pytest.mark.chaos]


@pytest.mark.parametrize("command", ('replay-select', 'replay-edit',))
def test_chaos(command: str, broker, tmp_path, pytestconfig) -> None:
    check_command(command, broker, tmp_path, pytestconfig)
