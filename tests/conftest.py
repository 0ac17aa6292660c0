"""Test harness: a real RabbitMQ, one fresh vhost per test run, and a CLI runner with no user config.

The broker is the one `scripts/dev-broker` starts (or reuses): AMQP on DLXTOOL_TEST_AMQP_PORT
(5672), management on DLXTOOL_TEST_HTTP_PORT (15672), user guest. Each run creates its own vhost
and deletes it afterwards, so runs never see each other's queues, even on a shared broker.
Any node works, e.g. the RabbitMQ 4.x one: DLXTOOL_TEST_AMQP_PORT=5674 DLXTOOL_TEST_HTTP_PORT=15674
(`scripts/dev-broker v4`); the CLI runner then points `--url` at that node's management API too.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import quote

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, settings

from dlxtool.broker.wire.codec import Codec
from tests.support import deprecated
from tests.support.broker import TEST_TIMEOUT, BrokerEnv, open_vhost
from tests.support.codecs import wire_codec

# Hypothesis's timing checks measure the machine, not the code: on a shared 2-core machine under load its input
# generation was "too slow" (a failure with nothing wrong). Every property test runs without them; each test keeps
# its own example counts.
settings.register_profile("dlxtool", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("dlxtool")

if TYPE_CHECKING:
    from tests.support.cluster import Cluster

ROOT = Path(__file__).resolve().parent.parent


# A test that uses one of these fixtures (directly or through another fixture) needs a running RabbitMQ:
# pytest_collection_modifyitems marks it `broker`, so `pytest -m "not broker"` is the offline run.
BROKER_FIXTURES = frozenset({"broker", "second_broker", "tls_broker", "faults_node", "cluster"})


# The settings a pass runs every command under (the wire codec, the read protocol: scripts/test), kept in the
# environment of each command a test runs.
_CODEC_SETTINGS = ("DLXTOOL_CODEC", "DLXTOOL_NO_HOTPATH", "DLXTOOL_PROTOCOL")


def pytest_configure(config: pytest.Config) -> None:
    """Library code in the tests runs on the codec the run's environment names (dlxtool itself takes it from a
    command's environment, in connect())."""
    from dlxtool.broker.wire import codec

    codec.configure(os.environ)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks (above), and DLXTOOL_TEST_BROKER_ONLY=1 keeps only the tests that use the broker under test
    (the `broker` fixture): scripts/test's second pass, on RabbitMQ 4.x, need not rerun what no broker
    decides."""
    for item in items:
        used = BROKER_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if used:
            item.add_marker(pytest.mark.broker)
        if "second_broker" in used:
            item.add_marker(pytest.mark.second_broker)
        if "cluster" in used:
            item.add_marker(pytest.mark.cluster)
    if os.environ.get("DLXTOOL_TEST_BROKER_ONLY") != "1":
        return
    keep = [item for item in items if "broker" in getattr(item, "fixturenames", ())]
    if len(keep) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in keep])
        items[:] = keep


def _no_broker(what: str) -> NoReturn:
    """No broker answers: skip with how to get one, or fail where the run promised brokers (scripts/test
    exports DLXTOOL_TEST_REQUIRE_BROKER=1 after starting them: there a missing broker is a broken run)."""
    if os.environ.get("DLXTOOL_TEST_REQUIRE_BROKER", "") not in ("", "0"):
        pytest.fail(f"{what} (DLXTOOL_TEST_REQUIRE_BROKER=1: this run needs it)")
    pytest.skip(f"{what}: start one with scripts/dev-broker, or run offline with -m 'not broker'")


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def test_ports() -> tuple[int, int]:
    """AMQP and management ports of the broker under test."""
    return (int(os.environ.get("DLXTOOL_TEST_AMQP_PORT", "5672")),
            int(os.environ.get("DLXTOOL_TEST_HTTP_PORT", "15672")))


test_ports.__test__ = False  # a helper, not a test


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerEnv]:
    """The main test broker with a fresh vhost for this run."""
    amqp_port, http_port = test_ports()
    if not (_port_open(amqp_port) and _port_open(http_port)):
        _no_broker(f"no RabbitMQ with management on 127.0.0.1:{amqp_port}/{http_port}")
    with open_vhost("localhost", amqp_port, http_port, f"dlxtool-test-{uuid.uuid4().hex[:8]}") as env:
        yield env


@pytest.fixture
def v4(broker: BrokerEnv) -> BrokerEnv:
    """The main test broker where it speaks AMQP 1.0 as a core protocol (RabbitMQ 4.x); the test skips below."""
    from dlxtool.broker import versions

    if not versions.speaks_amqp10(broker.version):
        pytest.skip(f"RabbitMQ {broker.version}: no AMQP 1.0 path here (4.x only)")
    return broker


@pytest.fixture(scope="session")
def second_broker() -> Iterator[BrokerEnv]:
    """An independent second node (scripts/dev-broker second), for multi-broker tests."""
    amqp_port = int(os.environ.get("DLXTOOL_SECOND_PORT", "5673"))
    http_port = int(os.environ.get("DLXTOOL_SECOND_HTTP_PORT", "15673"))
    if not (_port_open(amqp_port) and _port_open(http_port)):
        proc = subprocess.run([str(ROOT / "scripts" / "dev-broker"), "second"], capture_output=True, text=True,
                              timeout=300)
        if proc.returncode != 0:
            _no_broker(f"could not start the second broker (scripts/dev-broker second): {proc.stderr[-2000:]}")
    with open_vhost("localhost", amqp_port, http_port, f"dlxtool-test-{uuid.uuid4().hex[:8]}") as env:
        yield env


@dataclass(frozen=True)
class TlsBroker:
    """The dev-broker `tls` node: amqps on `port`, plain management on `http_port`, test certs in `certs`."""

    env: BrokerEnv  # management (plain HTTP, guest) and a fresh vhost; AMQP there only over TLS
    port: int
    certs: Path
    client_user: str = "dlxtool-client"  # the CN of certs/client.pem: a user with no password


def _dev_broker(target: str) -> tuple[dict[str, str], int, int]:
    """Start (or reuse) a dev-broker node: its key=value line, AMQP port and management port."""
    proc = subprocess.run([str(ROOT / "scripts" / "dev-broker"), target], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        _no_broker(f"could not start the {target} broker (scripts/dev-broker {target}): {proc.stderr[-2000:]}")
    info = dict(kv.split("=", 1) for kv in proc.stdout.split())
    port = int(info["amqp"].rsplit(":", 1)[1].strip("/"))
    return info, port, int(info["http"].rsplit(":", 1)[1].strip("/"))


@pytest.fixture(scope="session")
def tls_broker() -> Iterator[TlsBroker]:
    """A node with an amqps listener and a CA made for the tests (scripts/dev-broker tls).

    Started once and reused while it runs: the script prints where it is (fast when it is up).
    """
    info, port, http_port = _dev_broker("tls")
    vhost = f"dlxtool-test-{uuid.uuid4().hex[:8]}"
    with open_vhost("localhost", port, http_port, vhost) as env:
        tls = TlsBroker(env=env, port=port, certs=Path(info["certs"]))
        # A user without a password: only its client certificate (EXTERNAL) can log it in.
        # Shared by runs, so created idempotently and left in place.
        env.mgmt.request("PUT", f"users/{tls.client_user}", {"password_hash": "", "tags": ""})
        env.mgmt.request("PUT", f"permissions/{quote(vhost, safe='')}/{tls.client_user}",
                         {"configure": ".*", "write": ".*", "read": ".*"})
        yield tls


@pytest.fixture(scope="session")
def faults_node() -> Iterator[object]:
    """The dedicated node the fault matrix restarts (scripts/dev-broker faults), with a vhost of this run.

    Held under an exclusive lock: two matrices on one machine would restart each other's runs."""
    import fcntl

    from tests.support.faults import FaultNode

    info, port, http_port = _dev_broker("faults")
    with open(f"/tmp/dlxtool-faults-{port}.lock", "w") as lock:  # a machine-wide lock on purpose
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open_vhost("localhost", port, http_port, f"dlxtool-faults-{uuid.uuid4().hex[:8]}") as env:
            yield FaultNode(env=env, node=info["node"])


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The three-node cluster (scripts/dev-broker cluster: c1 c2 c3 on 5701-5703 / 15701-15703, started when
    not up) with a vhost of this run, created through c1. Held under a machine-wide lock: two runs stopping
    each other's members and raising alarms would see each other's incidents. Every test that uses it
    gets it back whole (`_cluster_restored`)."""
    import fcntl

    from tests.support.cluster import Cluster, ClusterError, start_cluster

    try:
        members, _ = start_cluster()
    except (ClusterError, subprocess.SubprocessError) as exc:
        _no_broker(f"no cluster: {exc}")
    c1 = members["c1"]
    with open(f"/tmp/dlxtool-cluster-{c1.amqp_port}.lock", "w") as lock:  # a machine-wide lock on purpose
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open_vhost("localhost", c1.amqp_port, c1.http_port, f"dlxtool-cluster-{uuid.uuid4().hex[:8]}") as env:
            found = Cluster(members=members, vhost=env.vhost, envs={"c1": env})
            found.heal()  # a run killed mid-test may have left an alarm behind
            yield found


@pytest.fixture(autouse=True)
def _cluster_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test that uses the cluster, passed or failed: alarms cleared, every member running."""
    if "cluster" not in request.fixturenames:
        yield
        return
    found = request.getfixturevalue("cluster")
    yield
    if found.dirty:
        found.restore()


def pytest_report_header(config: pytest.Config) -> str | None:
    """Which RabbitMQ the run tests (scripts/test runs the suite on 3.x and on 4.x)."""
    from dlxtool.broker.management import ManagementClient

    amqp_port, http_port = test_ports()
    try:
        version = ManagementClient(f"http://localhost:{http_port}/", "guest", "guest", timeout=3).overview().get(
            "rabbitmq_version")
    except Exception:  # noqa: BLE001 - no broker: the broker fixture says so, with what to do
        return None
    return f"broker under test: RabbitMQ {version} (AMQP {amqp_port}, HTTP {http_port})"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dlxtool fault matrix (tests/faults)")
    group.addoption("--faults-long", action="store_true", default=os.environ.get("DLXTOOL_FAULTS_LONG") == "1",
                    help="More and bigger runs [env DLXTOOL_FAULTS_LONG=1].")
    group.addoption("--faults-runs", type=int, default=int(os.environ.get("DLXTOOL_FAULTS_RUNS", "0")) or None,
                    help="How many runs [env DLXTOOL_FAULTS_RUNS; default 55, long 250].")
    group.addoption("--faults-base", type=int, default=int(os.environ.get("DLXTOOL_FAULTS_BASE", "1000")),
                    help="First seed; runs use consecutive seeds [env DLXTOOL_FAULTS_BASE; default 1000].")
    chaos = parser.getgroup("dlxtool fault campaign (tests/chaos)")
    chaos.addoption("--chaos-trials", type=int, default=int(os.environ.get("DLXTOOL_CHAOS_TRIALS", "0")) or None,
                    help="Trials per command [env DLXTOOL_CHAOS_TRIALS; default 9: one per fault].")
    chaos.addoption("--chaos-base", type=int, default=int(os.environ.get("DLXTOOL_CHAOS_BASE", "50006")),
                    help="First seed, a multiple of 11 [env DLXTOOL_CHAOS_BASE; default 50006].")
    chaos.addoption("--chaos-seed", type=int, action="append",
                    default=[int(s) for s in os.environ.get("DLXTOOL_CHAOS_SEED", "").split(",") if s],
                    help="Run only this trial (repeatable): a failing trial's seed [env DLXTOOL_CHAOS_SEED].")
    group.addoption("--faults-seed", type=int, action="append",
                    default=[int(s) for s in os.environ.get("DLXTOOL_FAULTS_SEED", "").split(",") if s],
                    help="Run only this seed (repeatable), e.g. to replay a failing run [env DLXTOOL_FAULTS_SEED].")


# The deprecated-features check (tests/support/deprecated.py, DLXTOOL_TEST_DENY_DEPRECATED): each test's
# violations, and (=report) the whole run's.
_VIOLATIONS = pytest.StashKey[list[deprecated.Violation]]()
_REPORTED = pytest.StashKey[int]()
_RUN_VIOLATIONS: list[tuple[str, deprecated.Violation]] = []


@pytest.fixture(autouse=True)
def _deny_deprecated(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test during which dlxtool sends basic.qos with global=true or declares a transient non-exclusive queue
    fails (what hosted RabbitMQ 4.3 brokers deny; see tests/support/deprecated.py). On by default, on every broker;
    DLXTOOL_TEST_DENY_DEPRECATED=0 turns it off, =report lists the violations at the end instead."""
    if not deprecated.mode():
        yield
        return
    with deprecated.watch() as found:
        request.node.stash[_VIOLATIONS] = found
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    found = item.stash.get(_VIOLATIONS, None)
    if not found or call.when == "setup":
        return
    new = found[item.stash.get(_REPORTED, 0):]
    item.stash[_REPORTED] = len(found)
    if not new:
        return
    report = outcome.get_result()
    if deprecated.mode() == "report":
        _RUN_VIOLATIONS.extend((item.nodeid, v) for v in new)
        return
    text = "\n".join(str(v) for v in dict.fromkeys(new))
    report.sections.append(("deprecated features (tests/support/deprecated.py)", text))
    if report.outcome != "failed":
        report.outcome = "failed"
        report.longrepr = f"{text}\n(dlxtool used a deprecated feature: tests/support/deprecated.py)"


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    """Each test starts with no registered secrets, so one test's secrets cannot hide another's leak."""
    from dlxtool import secrets

    secrets.clear()
    yield
    secrets.clear()


@pytest.fixture
def codec(request: pytest.FixtureRequest) -> Iterator[Codec]:
    """The wire codec this test runs on: parametrize it indirectly with "c", "python" or "pika"
    (`@pytest.mark.parametrize("codec", CODECS, indirect=True)`); unparametrized, the environment's.
    The one switch (dlxtool.broker.wire.codec); tests.support.codecs.wire_codec says what skips."""
    with wire_codec(getattr(request, "param", None)) as chosen:
        yield chosen


@pytest.fixture
def qname(request: pytest.FixtureRequest) -> str:
    """A queue-name prefix unique to this test."""
    return f"{request.node.name[:40]}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """An environment with no user config: HOME and XDG dirs point into the test's tmp dir.

    `--url` (the tests' usual way to name the broker under test) finds that broker's management API
    through DLXTOOL_MANAGEMENT_URL: derived from the URL it would be host:15672, which on a machine with
    several nodes is another broker (dlxtool then refuses: the API answers for another broker). A test
    naming another broker with --url or a profile names its API too (`--broker` typed ignores this)."""
    # The wire codec setting stays: a pass pinned to a codec (scripts/test's DLXTOOL_CODEC=python) runs its
    # commands on it (connect() takes it from the command's environment).
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLXTOOL_") or k in _CODEC_SETTINGS}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_CACHE_HOME=str(tmp_path / "cache"),
               DLXTOOL_MANAGEMENT_URL=f"http://localhost:{test_ports()[1]}/",
               # the tests' patience (tests.support.broker.TEST_TIMEOUT: load, not what a test is about; tests
               # of time-outs pass --timeout, which wins over this).
               DLXTOOL_TIMEOUT=f"{TEST_TIMEOUT:g}")
    return env


@pytest.fixture
def run(cli_env: dict[str, str]):
    """run("peek", "q", env={...}, input="...") -> click Result with .exit_code, .stdout, .stderr."""
    from dlxtool.cli import cli
    from dlxtool.cli.app import App

    def _run(*args: str, env: dict[str, str] | None = None, input: str | bytes | None = None) -> Result:
        full_env = {**cli_env, **(env or {})}
        runner = CliRunner()
        # App.env must see the same environment click sees through os.environ.
        return runner.invoke(cli, list(args), input=input, env=full_env, obj=App(env=full_env),
                             catch_exceptions=False)

    return _run


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault matrix's figures, when it ran (tests/faults)."""
    from tests.support.faults import REPORTS, summary_lines

    if _RUN_VIOLATIONS:
        terminalreporter.section("deprecated features dlxtool used (DLXTOOL_TEST_DENY_DEPRECATED=report)")
        sites: dict[tuple[str, str], list[str]] = {}
        for nodeid, v in _RUN_VIOLATIONS:
            sites.setdefault((v.site, v.method), []).append(nodeid)
        for (site, method), nodeids in sorted(sites.items()):
            tests = sorted(set(nodeids))
            terminalreporter.write_line(f"{site}: {method}: {len(nodeids)} times in {len(tests)} tests, e.g. "
                                        + ", ".join(tests[:3]))
    if REPORTS:
        terminalreporter.section("fault matrix")
        for line in summary_lines(REPORTS):
            terminalreporter.write_line(line)
    from tests.support.chaos import RESULTS, table

    if RESULTS:  # this process's trials (with xdist, a worker's table is not shown: scripts/chaos has the whole one)
        terminalreporter.section("fault campaign")
        for line in table(RESULTS):
            terminalreporter.write_line(line)
