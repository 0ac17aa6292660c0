"""The test harness itself (tests/conftest.py): tests are marked `broker` by the fixtures they use, and a
broker test with no broker skips with a hint, or fails where the run requires brokers (scripts/test)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
A_BROKER_TEST = "tests/cli/test_dump.py::test_remove_drains_without_the_unacked_bound"  # `broker`, no hand mark
NO_BROKER = {"DLXTOOL_TEST_AMQP_PORT": "1", "DLXTOOL_TEST_HTTP_PORT": "1"}  # nothing listens on port 1


def pytest_run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "DLXTOOL_TEST_REQUIRE_BROKER"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args],
                          capture_output=True, text=True, cwd=ROOT, env={**clean, **env}, timeout=300)


def test_a_test_using_a_broker_fixture_is_marked_broker() -> None:
    selected = pytest_run("--collect-only", "-q", "-m", "broker", A_BROKER_TEST)
    deselected = pytest_run("--collect-only", "-q", "-m", "not broker", A_BROKER_TEST)
    assert A_BROKER_TEST in selected.stdout
    assert A_BROKER_TEST not in deselected.stdout and "1 deselected" in deselected.stdout


def test_no_broker_skips_with_the_way_to_start_one() -> None:
    proc = pytest_run(A_BROKER_TEST, **NO_BROKER)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "1 skipped" in proc.stdout and "scripts/dev-broker" in proc.stdout


def test_no_broker_fails_where_the_run_requires_brokers() -> None:
    proc = pytest_run(A_BROKER_TEST, **NO_BROKER, DLXTOOL_TEST_REQUIRE_BROKER="1")
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert "1 error" in proc.stdout and "DLXTOOL_TEST_REQUIRE_BROKER=1" in proc.stdout
