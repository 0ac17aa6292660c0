"""Test harness: a real RabbitMQ, one fresh vhost per test run, and a CLI runner with no user config.

The broker is the one `scripts/dev-broker` starts (or reuses): AMQP on DLXTOOL_TEST_AMQP_PORT
(5672), management on DLXTOOL_TEST_HTTP_PORT (15672), user guest. Each run creates its own vhost
and deletes it afterwards, so runs never see each other's queues, even on a shared broker.
"""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner, Result

from tests.support.broker import BrokerEnv, open_vhost

ROOT = Path(__file__).resolve().parent.parent


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerEnv]:
    """The main test broker with a fresh vhost for this run."""
    amqp_port = int(os.environ.get("DLXTOOL_TEST_AMQP_PORT", "5672"))
    http_port = int(os.environ.get("DLXTOOL_TEST_HTTP_PORT", "15672"))
    if not (_port_open(amqp_port) and _port_open(http_port)):
        pytest.fail(f"no RabbitMQ with management on 127.0.0.1:{amqp_port}/{http_port}: run scripts/dev-broker "
                    "(scripts/test does it for you)")
    with open_vhost("localhost", amqp_port, http_port, f"dlxtool-test-{uuid.uuid4().hex[:8]}") as env:
        yield env


@pytest.fixture(scope="session")
def second_broker() -> Iterator[BrokerEnv]:
    """An independent second node (scripts/dev-broker second), for multi-broker tests."""
    amqp_port = int(os.environ.get("DLXTOOL_SECOND_PORT", "5673"))
    http_port = int(os.environ.get("DLXTOOL_SECOND_HTTP_PORT", "15673"))
    if not (_port_open(amqp_port) and _port_open(http_port)):
        proc = subprocess.run([str(ROOT / "scripts" / "dev-broker"), "second"], capture_output=True, text=True,
                              timeout=300)
        if proc.returncode != 0:
            pytest.fail(f"could not start the second broker: {proc.stderr[-2000:]}")
    with open_vhost("localhost", amqp_port, http_port, f"dlxtool-test-{uuid.uuid4().hex[:8]}") as env:
        yield env


@dataclass(frozen=True)
class TlsBroker:
    """The dev-broker `tls` node: amqps on `port`, plain management on `http_port`, test certs in `certs`."""

    env: BrokerEnv  # management (plain HTTP, guest) and a fresh vhost; AMQP there only over TLS
    port: int
    certs: Path
    client_user: str = "dlxtool-client"  # the CN of certs/client.pem: a user with no password


@pytest.fixture(scope="session")
def tls_broker() -> Iterator[TlsBroker]:
    """A node with an amqps listener and a CA made for the tests (scripts/dev-broker tls).

    Started once and reused while it runs: the script prints where it is (fast when it is up).
    """
    proc = subprocess.run([str(ROOT / "scripts" / "dev-broker"), "tls"], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"could not start the tls broker: {proc.stderr[-2000:]}")
    info = dict(kv.split("=", 1) for kv in proc.stdout.split())
    port = int(info["amqp"].rsplit(":", 1)[1].strip("/"))
    http_port = int(info["http"].rsplit(":", 1)[1].strip("/"))
    vhost = f"dlxtool-test-{uuid.uuid4().hex[:8]}"
    with open_vhost("localhost", port, http_port, vhost) as env:
        tls = TlsBroker(env=env, port=port, certs=Path(info["certs"]))
        # A user without a password: only its client certificate (EXTERNAL) can log it in.
        # Shared by runs, so created idempotently and left in place.
        env.mgmt.request("PUT", f"users/{tls.client_user}", {"password_hash": "", "tags": ""})
        env.mgmt.request("PUT", f"permissions/{quote(vhost, safe='')}/{tls.client_user}",
                         {"configure": ".*", "write": ".*", "read": ".*"})
        yield tls


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    """Each test starts with no registered secrets, so one test's secrets cannot hide another's leak."""
    from dlxtool import secrets

    secrets.clear()
    yield
    secrets.clear()


@pytest.fixture
def qname(request: pytest.FixtureRequest) -> str:
    """A queue-name prefix unique to this test."""
    return f"{request.node.name[:40]}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """An environment with no user config: HOME and XDG dirs point into the test's tmp dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLXTOOL_")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_CACHE_HOME=str(tmp_path / "cache"))
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
