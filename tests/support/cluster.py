"""The three-node cluster of scripts/dev-broker cluster, for tests of what a cluster does to dlxtool.

Which cluster: $DLXTOOL_TEST_CLUSTER_TARGET, `cluster` (3.x: dlxtool-c1..3@localhost, the default) or `cluster43`
(RabbitMQ 4.3 with Khepri, from the v43 chroot: dlxtool-k1..3@localhost, whose rabbitmqctl is the chroot's). The
tests name the members c1, c2, c3 either way (for cluster43: k1, k2, k3 in that order) and read node names, ports
and the version from here.

`Cluster` (the session fixture `cluster`, tests/conftest.py) names the members c1, c2, c3 (their AMQP and
management ports, Erlang node names), has a vhost of this run on the cluster, and changes the cluster the
way an incident does: a member's app stopped (`stop_app`), its VM killed (`kill`), a memory or disk alarm,
a quorum queue's leader moved. Each change is remembered and undone by `restore()`, which the fixture
`_cluster_restored` runs after every test that uses the cluster, failed or not: alarms cleared, every
member's app running again, killed members relaunched (scripts/dev-broker cluster), and all three seen
running by c1.

Measured on the local 3.10.8 cluster (tests/scripts/test_dev_broker_cluster.py asserts each):
- a classic queue lives on the node whose connection declared it (its "home"); with that node's app
  stopped, queue.declare(passive), basic.get, basic.consume and queue.purge through another member close
  the channel with 404 "NOT_FOUND - home node 'dlxtool-c2@localhost' of durable queue 'q' in vhost 'v' is
  down or inaccessible"; a mandatory publish to it on the default exchange comes back (basic.return, 312
  NO_ROUTE); /api/queues lists it with state "down" and no figures (messages, consumers... absent), and
  /api/queues/VHOST/NAME answers 404. Its messages are there again when the node is back.
- memory and disk alarms are cluster-wide: an alarm on one member blocks publishers on every member;
  connection.blocked (reason "low on memory" / "low on disk") reaches a connection when it publishes,
  not when the alarm is raised; /api/nodes shows mem_alarm / disk_free_alarm on the member that has it,
  after its next statistics round (up to 5 s).
- 3.10.8's rabbitmq-queues has no transfer_leadership; `move_leader` asks the node itself
  (rabbit_quorum_queue:transfer_leadership/2, what maintenance mode uses).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dlxtool.broker.management import ManagementClient
from dlxtool.errors import DlxtoolError
from tests.support.broker import BrokerEnv

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = ("c1", "c2", "c3")
# A watermark under any node's use (0.0001 of the 4 GB each member takes the machine to have: 400 kB)
# and a disk limit above any disk's free space: the alarm is on at the node's next check.
ALARM_WATERMARK = "0.0001"
ALARM_DISK_LIMIT = "100000GB"


class ClusterError(RuntimeError):
    pass


def cluster_target() -> str:
    """The scripts/dev-broker target the cluster tests run against ($DLXTOOL_TEST_CLUSTER_TARGET)."""
    target = os.environ.get("DLXTOOL_TEST_CLUSTER_TARGET") or "cluster"
    if target not in ("cluster", "cluster43"):
        raise ClusterError(f"DLXTOOL_TEST_CLUSTER_TARGET must be cluster or cluster43, not {target!r}")
    return target


@dataclass(frozen=True)
class Member:
    name: str  # c1, c2, c3 (the tests' names; scripts/dev-broker's own are in `broker`)
    node: str  # Erlang node name, e.g. dlxtool-c1@localhost
    amqp_port: int
    http_port: int
    broker: str = ""  # scripts/dev-broker's name: c1... or k1...
    chroot: str | None = None  # where the member's RabbitMQ tools are (cluster43: the v43 chroot)

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@localhost:{self.amqp_port}/"

    @property
    def http_url(self) -> str:
        return f"http://localhost:{self.http_port}/"


def start_cluster(timeout: float = 600, target: str | None = None) -> tuple[dict[str, Member], str]:
    """scripts/dev-broker TARGET (cluster_target() by default; reuses a running cluster): the members by the tests'
    names (c1, c2, c3, in the order printed), and the script's stderr. Raises ClusterError with the script's output
    when it fails."""
    target = target or cluster_target()
    proc = subprocess.run([str(ROOT / "scripts" / "dev-broker"), target], capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise ClusterError(f"scripts/dev-broker {target} failed: {proc.stderr[-2000:]}")
    members = {}
    for name, line in zip(MEMBERS, proc.stdout.splitlines(), strict=False):
        info = dict(kv.split("=", 1) for kv in line.split())
        members[name] = Member(
            name=name, node=info["node"], broker=info["broker"], chroot=info.get("chroot"),
            amqp_port=int(info["amqp"].rsplit(":", 1)[1].strip("/")),
            http_port=int(info["http"].rsplit(":", 1)[1].strip("/")))
    if len(proc.stdout.splitlines()) != len(MEMBERS):
        raise ClusterError(f"scripts/dev-broker {target} printed {proc.stdout!r}")
    return members, proc.stderr


def tool_command(member: Member, tool: str = "rabbitmqctl") -> list[str]:
    """How to run one of RabbitMQ's tools for the member's node: the host's, or its chroot's (with the chroot's
    Erlang cookie and a clean environment, as scripts/dev-broker runs them)."""
    if not member.chroot:
        return [tool]
    return ["chroot", member.chroot, "/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
            "LANG=C.UTF-8", "ERL_EPMD_ADDRESS=127.0.0.1", tool]


@dataclass
class Cluster:
    members: dict[str, Member]
    vhost: str
    envs: dict[str, BrokerEnv] = field(default_factory=dict)  # per member: this vhost through its ports
    # what restore() undoes: member -> original absolute limit in bytes; members stopped or killed
    _watermarks: dict[str, int] = field(default_factory=dict)
    _disk_limits: dict[str, int] = field(default_factory=dict)
    _stopped: set[str] = field(default_factory=set)
    _killed: set[str] = field(default_factory=set)

    # -- where things are --------------------------------------------------------------------------------

    def env(self, member: str = "c1") -> BrokerEnv:
        """This run's vhost through one member: its AMQP port for channels, its management API."""
        if member not in self.envs:
            m = self.members[member]
            mgmt = ManagementClient(f"http://localhost:{m.http_port}/", "guest", "guest", timeout=30)
            version = str(mgmt.overview(["rabbitmq_version"]).get("rabbitmq_version") or "0")
            self.envs[member] = BrokerEnv(host="localhost", amqp_port=m.amqp_port, http_port=m.http_port,
                                          vhost=self.vhost, mgmt=mgmt, version=version)
        return self.envs[member]

    def node(self, member: str) -> str:
        return self.members[member].node

    def member_of(self, node: str) -> str:
        """c1/c2/c3 for an Erlang node name."""
        return next(m.name for m in self.members.values() if m.node == node)

    def api(self, path: str, via: str | None = None) -> Any:
        """GET /api/PATH from a member's management API (the first running one when not named)."""
        last: Exception | None = None
        for member in [via] if via else [m for m in MEMBERS if m not in self._stopped | self._killed]:
            try:
                return self.env(member).mgmt.request("GET", path)
            except DlxtoolError as exc:  # that member's API is down: ask the next
                last = exc
        raise ClusterError(f"no member's management API answered GET /api/{path}: {last}")

    def nodes(self, via: str | None = None) -> dict[str, dict[str, Any]]:
        """/api/nodes by node name (name, running, mem_alarm, disk_free_alarm, mem_limit, disk_free_limit...)."""
        return {row["name"]: row for row in self.api("nodes", via)}

    def running(self, via: str | None = None) -> set[str]:
        """The members (c1...) the cluster reports running."""
        return {self.member_of(name) for name, row in self.nodes(via).items() if row.get("running")}

    def reporting(self) -> set[str]:
        """The members running and with their figures in /api/nodes: a member whose app just started lacks
        mem_limit, disk_free_limit, the alarms... until its first statistics round (up to 5 s)."""
        return {self.member_of(name) for name, row in self.nodes().items()
                if row.get("running") and "mem_limit" in row and "disk_free_limit" in row}

    def queue_row(self, queue: str, via: str | None = None) -> dict[str, Any] | None:
        """The queue's row in /api/queues/VHOST (the list: /api/queues/VHOST/NAME answers 404 for a classic
        queue whose home node is down, the list still has it), or None."""
        rows = self.api(f"queues/{quote(self.vhost, safe='')}", via)
        return next((row for row in rows if row["name"] == queue), None)

    def home_node(self, queue: str) -> str:
        """A classic queue's home node (the API's `node`), as c1/c2/c3."""
        row = self.queue_row(queue)
        if row is None:
            raise ClusterError(f"no queue {queue!r} in {self.vhost!r}")
        return self.member_of(row["node"])

    def leader(self, queue: str) -> str:
        """A quorum queue's leader (the API's `leader`; `node` lags behind a transfer), as c1/c2/c3."""
        row = self.queue_row(queue)
        if row is None or not row.get("leader"):
            raise ClusterError(f"no quorum queue {queue!r} with a known leader in {self.vhost!r}: {row}")
        return self.member_of(row["leader"])

    def wait(self, what: str, ready: Any, timeout: float = 60.0, every: float = 0.5) -> Any:
        """Poll ready() until it returns something true; that value. Errors while polling count as not yet."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            with suppress(Exception):
                last = ready()
                if last:
                    return last
            if time.monotonic() >= deadline:
                raise ClusterError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")
            time.sleep(every)

    # -- rabbitmqctl ---------------------------------------------------------------------------------------

    def ctl(self, member: str, *args: str, timeout: float = 120) -> str:
        """rabbitmqctl -n NODE ARGS...: its stdout; ClusterError with its output when it fails."""
        proc = subprocess.run([*tool_command(self.members[member]), "-q", "-n", self.node(member), *args],
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise ClusterError(f"rabbitmqctl -n {self.node(member)} {' '.join(args)}: exit {proc.returncode}: "
                               f"{proc.stdout[-1000:]}{proc.stderr[-1000:]}")
        return proc.stdout.strip()

    # -- incidents, each undone by restore() ---------------------------------------------------------------

    def stop_app(self, member: str) -> None:
        """rabbitmqctl stop_app: the member's RabbitMQ stops (its VM stays); the others see it down."""
        self._stopped.add(member)
        self.ctl(member, "stop_app")

    def start_app(self, member: str) -> None:
        """rabbitmqctl start_app, then wait until c1... see it running again."""
        self.ctl(member, "start_app")
        self._stopped.discard(member)
        self.wait(f"{member} running", lambda: member in self.reporting())

    def kill(self, member: str) -> int:
        """kill -9 the member's Erlang VM (no goodbye to the others); its OS pid."""
        said = self.ctl(member, "eval", "os:getpid().")
        found = re.findall(r'"(\d+)"', said)  # the answer is a quoted string; other lines may carry digits
        if not found:
            raise ClusterError(f"no pid in rabbitmqctl eval's answer: {said!r}")
        pid = int(found[-1])
        self._killed.add(member)
        subprocess.run(["kill", "-9", str(pid)], check=True)
        return pid

    def relaunch(self) -> None:
        """Start what is down (scripts/dev-broker cluster relaunches dead VMs and start_apps stopped apps)."""
        start_cluster()
        self._killed.clear()
        self._stopped.clear()
        self.wait("all members running", lambda: self.reporting() == set(MEMBERS))

    def set_memory_alarm(self, member: str, *, sampled: bool = True) -> None:
        """A memory alarm on the member (vm_memory_high_watermark 0.0001), on in /api/nodes when it shows; with
        `sampled=False` only until the member itself says it (its live health check), not the API's sample."""
        self._watermarks.setdefault(member, int(self.wait(f"{member}'s mem_limit", lambda: self.nodes()[
            self.node(member)].get("mem_limit"))))
        self.ctl(member, "set_vm_memory_high_watermark", ALARM_WATERMARK)
        if sampled:
            self.wait(f"mem_alarm on {member}", lambda: self.nodes()[self.node(member)].get("mem_alarm"))
        else:
            self.wait(f"{member}'s own alarm check failing", lambda: self.local_alarms(member), every=0.1)

    def clear_memory_alarm(self, member: str, *, sampled: bool = True) -> None:
        """The member's watermark back to the limit it had (absolute bytes); waits for the alarm to go (from the
        API's sample, or with `sampled=False` only from the member's live health check)."""
        limit = self._watermarks.pop(member, None)
        if limit is not None:
            self.ctl(member, "set_vm_memory_high_watermark", "absolute", str(limit))
            if sampled:
                self.wait(f"mem_alarm off on {member}",
                          lambda: self.nodes()[self.node(member)].get("mem_alarm") is False)
            else:
                self.wait(f"{member}'s own alarm check passing", lambda: self.local_alarms(member) == [],
                          every=0.1)

    def local_alarms(self, member: str) -> list[Any]:
        """The member's alarms now (GET /api/health/checks/local-alarms through its own API: live, not sampled)."""
        env = self.env(member)
        said = env.mgmt.request("GET", "health/checks/local-alarms", accept=(503,))
        return list(said.get("alarms") or []) if said.get("status") == "failed" else []

    def set_disk_alarm(self, member: str) -> None:
        """A disk alarm on the member (disk_free_limit far above the free space)."""
        self._disk_limits.setdefault(member, int(self.wait(f"{member}'s disk_free_limit", lambda: self.nodes()[
            self.node(member)].get("disk_free_limit"))))
        self.ctl(member, "set_disk_free_limit", ALARM_DISK_LIMIT)
        self.wait(f"disk_free_alarm on {member}",
                  lambda: self.nodes()[self.node(member)].get("disk_free_alarm"))

    def clear_disk_alarm(self, member: str) -> None:
        limit = self._disk_limits.pop(member, None)
        if limit is not None:
            self.ctl(member, "set_disk_free_limit", str(limit))
            self.wait(f"disk_free_alarm off on {member}",
                      lambda: self.nodes()[self.node(member)].get("disk_free_alarm") is False)

    @contextmanager
    def memory_alarm(self, member: str = "c2") -> Iterator[None]:
        self.set_memory_alarm(member)
        try:
            yield
        finally:
            self.clear_memory_alarm(member)

    @contextmanager
    def disk_alarm(self, member: str = "c2") -> Iterator[None]:
        self.set_disk_alarm(member)
        try:
            yield
        finally:
            self.clear_disk_alarm(member)

    @contextmanager
    def member_down(self, member: str) -> Iterator[None]:
        """The member's app stopped for the block."""
        self.stop_app(member)
        try:
            yield
        finally:
            self.start_app(member)

    def move_leader(self, queue: str, to: str) -> str:
        """Make `to` the leader of a quorum queue (3.10.8's rabbitmq-queues has no transfer_leadership: the
        node is asked directly, as maintenance mode does; 4.3 the same); the leader the API then reports."""
        if self.leader(queue) == to:
            return to
        resource = f"rabbit_misc:r({_erl_binary(self.vhost)}, queue, {_erl_binary(queue)})"
        answer = self.ctl("c1", "eval", f"{{ok, Q}} = rabbit_amqqueue:lookup({resource}), "
                                         f"rabbit_quorum_queue:transfer_leadership(Q, '{self.node(to)}').")
        # 3.10 answers migrated / not_migrated; 4.3 {ok, Node}
        if ("migrated" not in answer or "not_migrated" in answer) and f"{{ok,'{self.node(to)}'}}" not in answer:
            raise ClusterError(f"moving {queue!r}'s leader to {to}: {answer}")
        return str(self.wait(f"{queue!r} led by {to}", lambda: self.leader(queue) == to and to))

    def restore(self) -> None:
        """Undo every incident this object caused: alarms cleared, apps started, killed VMs relaunched;
        then wait until c1 sees all three running. Raises ClusterError when the cluster does not come back."""
        errors = []
        for member in list(self._watermarks):
            if member not in self._killed:
                try:
                    self.clear_memory_alarm(member)
                except (ClusterError, subprocess.SubprocessError) as exc:
                    errors.append(str(exc))
        for member in list(self._disk_limits):
            if member not in self._killed:
                try:
                    self.clear_disk_alarm(member)
                except (ClusterError, subprocess.SubprocessError) as exc:
                    errors.append(str(exc))
        self._watermarks.clear()  # a relaunched VM starts with its configured limits
        self._disk_limits.clear()
        if self._stopped or self._killed:
            try:
                self.relaunch()
            except (ClusterError, subprocess.SubprocessError) as exc:
                errors.append(str(exc))
        if errors:
            raise ClusterError("the cluster could not be restored: " + "; ".join(errors))

    def heal(self) -> None:
        """Clear the alarms a run that was killed mid-test may have left (the members' configured defaults:
        watermark 0.4, disk limit 50 MB, scripts/dev-broker), before a session starts using the cluster."""
        for name, row in self.nodes().items():
            if row.get("mem_alarm"):
                self.ctl(self.member_of(name), "set_vm_memory_high_watermark", "0.4")
            if row.get("disk_free_alarm"):
                self.ctl(self.member_of(name), "set_disk_free_limit", "50MB")

    @property
    def dirty(self) -> bool:
        return bool(self._watermarks or self._disk_limits or self._stopped or self._killed)


def _erl_binary(text: str) -> str:
    """An Erlang binary literal for a UTF-8 string, for rabbitmqctl eval."""
    return "<<" + json.dumps(text, ensure_ascii=False) + "/utf8>>"
