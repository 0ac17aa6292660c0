"""No output of any command, failing or not, with or without --debug, ever shows the password.

A distinctive password (with characters that URL-encoding changes) is set on a real broker user; every
command runs with it — succeeding, and failing in the ways on-call sees: wrong password, bad URLs,
unreachable host, management API down, internal errors with --debug tracebacks — and all stdout and
stderr is searched for the password and its URL-encoded form.
"""

from __future__ import annotations

import stat
import uuid
from pathlib import Path
from urllib.parse import quote

import pika
import pytest

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only

PASSWORD = "Zq7-dlx pw/ü%40:@secret"  # space, slash, %, :, @ and non-ASCII: all change when URL-encoded
FORMS = [PASSWORD, quote(PASSWORD, safe=""), quote(PASSWORD), PASSWORD.encode().hex()]


@pytest.fixture(scope="module")
def secret_user(broker):
    user = f"dlxtool-secret-{uuid.uuid4().hex[:6]}"
    broker.mgmt.request("PUT", f"users/{user}", {"password": PASSWORD, "tags": "management"})
    broker.mgmt.request("PUT", f"permissions/{quote(broker.vhost, safe='')}/{user}",
                        {"configure": ".*", "write": ".*", "read": ".*"})
    yield user
    broker.mgmt.request("DELETE", f"users/{user}")


def _config(tmp_path: Path, broker, user: str) -> Path:
    host, port, http = broker.host, broker.amqp_port, broker.http_port
    enc = quote(PASSWORD, safe="")
    vhost = broker.vhost
    text = f"""
default = "good"
[brokers.good]
url = "amqp://{user}@{host}:{port}/"
vhost = "{vhost}"
password = {PASSWORD!r}
management_url = "http://{host}:{http}/"

[brokers.wrongpw]
url = "amqp://guest@{host}:{port}/"
vhost = "{vhost}"
password = {PASSWORD!r}
management_url = "http://{host}:{http}/"

[brokers.inurl]
url = "amqp://{user}:{enc}@{host}:{port}/"
vhost = "{vhost}"

[brokers.unreachable]
url = "amqp://{user}:{enc}@127.0.0.1:1/"
management_url = "http://{user}:{enc}@127.0.0.1:1/"

[brokers.mgmtdown]
url = "amqp://{user}@{host}:{port}/"
vhost = "{vhost}"
password_env = "SECRET_PW"
management_url = "http://{user}:{enc}@127.0.0.1:1/"

[brokers.badtls]
url = "amqps://{user}:{enc}@{host}:{port}/"
"""
    path = tmp_path / "config.toml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def _commands(queue: str, log: Path) -> list[list[str]]:
    return [
        ["brokers", "list"], ["brokers", "list", "--format", "table"], ["brokers", "check", "--all"],
        ["brokers", "check", "--all", "--format", "table"],
        ["peek", queue], ["peek", queue, "--format", "table", "--body"], ["peek", "no-such-queue"],
        ["history", queue], ["history", queue, "--summary", "--format", "table"],
        ["dump", queue], ["queues"], ["queues", "--format", "table", "-v"],
        ["replay", queue, "--dry-run"], ["replay", queue],  # no terminal, no --yes: refused
        ["purge", queue, "--dry-run"], ["purge", queue],
        ["decode", str(log)], ["completion", "bash"],
    ]


def test_no_command_prints_the_password(run, broker, secret_user, qname, tmp_path) -> None:
    cfg = _config(tmp_path, broker, secret_user)
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        # A message carrying the password text itself is data, not a leak: keep it out of the queue.
        ch.basic_publish("", qname, b"hello", pika.BasicProperties(headers={"x-retry-count": 2}))
    log = tmp_path / "app.log"
    log.write_text("ERROR body=CgVoZWxsbw== failed\n")
    env = {"SECRET_PW": PASSWORD}
    outputs = 0
    codes = set()
    queue = qname
    for broker_name in ("good", "wrongpw", "inurl", "unreachable", "mgmtdown", "badtls"):
        for command in _commands(queue, log):
            for debug in ((), ("--debug",), ("-v",)):
                args = [*debug, "--config", str(cfg), "--broker", broker_name, "--timeout", "2", *command]
                result = run(*args, env=env)
                codes.add(result.exit_code)
                if broker_name in ("good", "inurl") and command[0] in ("peek", "dump") and command[1] == queue:
                    assert result.exit_code == 0 and "aGVsbG8=" in result.stdout + result.stdout.replace(
                        "hello", "aGVsbG8="), result.stderr  # the password did log in and read
                _assert_clean(args, result.stdout + result.stderr)
                outputs += 1
    # Bad URLs given on the command line, and a crash with a traceback.
    enc = quote(PASSWORD, safe="")
    for url in (f"amqp://guest:{enc}@{broker.host}:{broker.amqp_port}/", f"amqp://guest:{enc}@host:notaport/",
                f"http://guest:{enc}@host/", f"amqp://guest:{enc}@[::1/", f"amqp://guest:{PASSWORD}@host/x"):
        for debug in ((), ("--debug",)):
            args = [*debug, "peek", "q", "--url", url, "--timeout", "2"]
            result = run(*args)
            codes.add(result.exit_code)
            _assert_clean(args, result.stdout + result.stderr)
            outputs += 1
    assert {0, 2, 3} <= codes, codes  # it did succeed and fail in the ways meant
    assert outputs > 300


def _assert_clean(args: list[str], text: str) -> None:
    for form in FORMS:
        assert form not in text, f"password ({form!r}) in the output of dlxtool {' '.join(args)}:\n{text[-3000:]}"


def test_world_readable_config_with_a_literal_password_is_warned_about(run, tmp_path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'[brokers.p]\nurl = "amqp://u@h/"\npassword = {PASSWORD!r}\n')
    cfg.chmod(0o644)
    result = run("brokers", "list", "--config", str(cfg))
    assert result.exit_code == 0
    assert "readable by others" in result.stderr and "chmod 600" in result.stderr
    _assert_clean(["brokers", "list"], result.stdout + result.stderr)
    cfg.chmod(0o600)
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600
    result = run("brokers", "list", "--config", str(cfg))
    assert "readable by others" not in result.stderr
    assert "literal password" in result.stderr  # still advised to use password_env / password_file


@pytest.mark.parametrize("url", ["amqp//guest:{pw}@localhost:5672/v", "amqp:/guest:{pw}@localhost:5672/v",
                                 "amqp:guest:{pw}@localhost:5672/v", "guest:{pw}@localhost:5672/v"])
def test_a_mistyped_scheme_does_not_print_the_password(run, url) -> None:
    """A URL that does not parse is echoed in its error: everything before its last "@" but the scheme is masked
    (which part was the user cannot be told). From --url, DLXTOOL_URL and --management-url alike."""
    for pw in (PASSWORD, quote(PASSWORD, safe=""), "S3cr3t"):
        bad = url.format(pw=pw)
        for args, env in ((["--url", bad, "peek", "q"], None), (["peek", "q"], {"DLXTOOL_URL": bad}),
                          (["--url", "amqp://guest@localhost:1/", "--management-url",
                            "http" + bad.removeprefix("amqp"), "peek", "q"], None)):
            result = run(*args, env=env)
            assert result.exit_code == 2, (args, result.stderr)
            assert "localhost" in result.stderr, result.stderr  # the rest is shown, so the typo can be seen
            assert pw not in result.stdout + result.stderr, (args, result.stderr)
            if pw == PASSWORD:
                _assert_clean(args, result.stdout + result.stderr)
