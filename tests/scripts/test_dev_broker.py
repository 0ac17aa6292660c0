"""scripts/dev-broker stop/status: what 'all' covers, on a state directory of the test's own.

No node is started or stopped here: the records point at a process that is not a RabbitMQ VM, so the
script takes the "no longer running" path for each target it goes through, and every port is one
nothing listens on. (The brokers other runs use are never touched.)
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNUSED = {"DLXTOOL_BROKER_PORT": "1", "DLXTOOL_BROKER_HTTP_PORT": "1", "DLXTOOL_SECOND_PORT": "1",
          "DLXTOOL_SECOND_HTTP_PORT": "1", "DLXTOOL_TLS_PORT": "1", "DLXTOOL_TLS_HTTP_PORT": "1",
          "DLXTOOL_FAULTS_PORT": "1", "DLXTOOL_FAULTS_HTTP_PORT": "1", "DLXTOOL_V4_PORT": "1",
          "DLXTOOL_V4_HTTP_PORT": "1", "DLXTOOL_V43_PORT": "1", "DLXTOOL_V43_HTTP_PORT": "1",
          # the cluster's members take this port and the next two
          "DLXTOOL_CLUSTER_PORT": "1", "DLXTOOL_CLUSTER_HTTP_PORT": "1",
          "DLXTOOL_CLUSTER43_PORT": "1", "DLXTOOL_CLUSTER43_HTTP_PORT": "1"}


@pytest.fixture
def not_a_node() -> int:
    proc = subprocess.Popen(["sleep", "300"])
    yield proc.pid
    proc.kill()
    proc.wait()


def dev_broker(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **UNUSED, "DLXTOOL_DEV_BROKER_DIR": str(state)}
    return subprocess.run([str(ROOT / "scripts" / "dev-broker"), *args], env=env, capture_output=True, text=True,
                          timeout=60)


def record(state: Path, target: str, pid: int) -> Path:
    path = state / f"{target}.started"
    path.write_text(f"node=dlxtool-{target}-test@localhost\npid={pid}\n")
    return path


def test_stop_without_a_target_goes_through_every_node_it_started(tmp_path: Path, not_a_node: int) -> None:
    tls, faults = record(tmp_path, "tls", not_a_node), record(tmp_path, "faults", not_a_node)
    status = dev_broker(tmp_path, "status")
    assert status.returncode == 3  # nothing answers on port 1
    assert [line.split()[0] for line in status.stdout.splitlines()] == [
        "broker=main", "broker=second", "broker=tls", "broker=faults"]  # main, second + what it started
    assert "started_by_dev_broker=yes" in status.stdout.splitlines()[2]

    stopped = dev_broker(tmp_path, "stop")
    assert stopped.returncode == 0, stopped.stderr
    for target in ("tls", "faults"):
        assert (f"{target}: the node dev-broker started (dlxtool-{target}-test@localhost, pid {not_a_node}) "
                "is no longer running") in stopped.stderr
    assert "main: nothing to stop" in stopped.stderr and "second: nothing to stop" in stopped.stderr
    assert not tls.exists() and not faults.exists()
    assert os.path.exists(f"/proc/{not_a_node}")  # stop only ever asks rabbitmqctl to stop a VM it started


def test_status_lists_only_main_and_second_when_it_started_nothing_else(tmp_path: Path) -> None:
    status = dev_broker(tmp_path, "status")
    assert [line.split()[0] for line in status.stdout.splitlines()] == ["broker=main", "broker=second"]


@pytest.mark.parametrize(("target", "names"), [("cluster", ("c1", "c2", "c3")), ("cluster43", ("k1", "k2", "k3"))])
def test_the_cluster_is_listed_and_stopped_member_by_member(tmp_path: Path, not_a_node: int, target: str,
                                                            names: tuple[str, str, str]) -> None:
    members = [record(tmp_path, member, not_a_node) for member in names]
    status = dev_broker(tmp_path, "status")
    assert status.returncode == 3
    assert [line.split()[0] for line in status.stdout.splitlines()] == [
        "broker=main", "broker=second", *(f"broker={m}" for m in names)]

    stopped = dev_broker(tmp_path, "stop", target)
    assert stopped.returncode == 0, stopped.stderr
    said = [line for line in stopped.stderr.splitlines() if "is no longer running" in line]
    order = [line.split(":")[1].strip() for line in said]
    assert sorted(order[:2]) == list(names[1:]) and order[2:] == [names[0]]  # the two together, then the seed
    assert not any(path.exists() for path in members)
    assert os.path.exists(f"/proc/{not_a_node}")


def test_help_names_every_target() -> None:
    usage = subprocess.run([str(ROOT / "scripts" / "dev-broker"), "--help"], capture_output=True, text=True,
                           timeout=30).stdout
    assert "[COMMAND] [main|second|tls|faults|v4|v43|cluster|cluster43|all]" in usage.splitlines()[0]
    for target in ("second", "tls", "faults", "v4", "v43", "cluster", "cluster43"):  # each with a paragraph
        assert f"\n  {target} " in usage, target
