"""The fault campaign in CI for dump-remove, load (see test_chaos.py)."""

from __future__ import annotations

import pytest

from tests.chaos.test_chaos import check_command

pytestmark = [pytest.mark.faults, pytest.mark.chaos]


@pytest.mark.parametrize("command", ('dump-remove', 'load',))
def test_chaos(command: str, broker, tmp_path, pytestconfig) -> None:
    check_command(command, broker, tmp_path, pytestconfig)
