"""amqps against a real RabbitMQ node (scripts/dev-broker tls) with a CA made for the tests.

Verification stays on in every case here: the right CA connects; a CA we do not trust, an expired
certificate and a name the certificate does not hold each fail with a clear reason and exit 3; a
client certificate logs in as its common name (SASL EXTERNAL) — a user that has no password at all.
"""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import pika

from dlxtool.broker.connection import close_quietly, connect
from dlxtool.config import load_config, select_profile


def _config(tmp_path: Path, tls_broker, *, url_host: str = "localhost", auth: str | None = None,
            **tls: str) -> Path:
    lines = ["[brokers.tls]", f'url = "amqps://guest@{url_host}:{tls_broker.port}/"',
             f'vhost = "{tls_broker.env.vhost}"', 'password_env = "TLS_PW"',
             f'management_url = "{tls_broker.env.management_url}"']
    if auth:
        lines.append(f'auth = "{auth}"')
    lines.append("[brokers.tls.tls]")
    lines += [f'{k} = "{v}"' for k, v in tls.items()]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(run, cfg: Path, *args: str):
    return run(*args, "--broker", "tls", "--config", str(cfg), "--format", "table", env={"TLS_PW": "guest"})


def _publish_over_tls(tls_broker, queue: str, body: bytes) -> None:
    ctx = ssl.create_default_context(cafile=str(tls_broker.certs / "ca.pem"))
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "localhost", tls_broker.port, tls_broker.env.vhost, pika.PlainCredentials("guest", "guest"),
        ssl_options=pika.SSLOptions(ctx, "localhost")))
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True)
        ch.basic_publish("", queue, body)
    finally:
        conn.close()


def test_trusted_ca_connects_and_peeks(run, tls_broker, qname, tmp_path) -> None:
    _publish_over_tls(tls_broker, qname, b"sent over amqps")
    cfg = _config(tmp_path, tls_broker, ca=str(tls_broker.certs / "ca.pem"))
    check = _run(run, cfg, "brokers", "check")
    assert check.exit_code == 0, check.stderr
    result = _run(run, cfg, "peek", qname)
    assert result.exit_code == 0, result.stderr
    assert "sent over amqps" in result.stdout


def test_untrusted_ca_is_refused_clearly(run, tls_broker, tmp_path) -> None:
    cfg = _config(tmp_path, tls_broker, ca=str(tls_broker.certs / "other-ca.pem"))
    result = _run(run, cfg, "peek", "any-queue")
    assert result.exit_code == 3
    assert "TLS certificate verification failed" in result.stderr
    assert "not signed by a CA dlxtool trusts" in result.stderr
    assert "tls.ca" in result.stderr  # the hint says what to change
    assert "Traceback" not in result.stderr


def test_system_store_does_not_trust_the_test_ca(run, tls_broker, tmp_path) -> None:
    cfg = _config(tmp_path, tls_broker)  # no tls.ca: the system's CAs
    result = _run(run, cfg, "brokers", "check")
    assert result.exit_code == 3
    assert "not signed by a CA dlxtool trusts" in result.stdout + result.stderr


def test_expired_certificate_is_refused_clearly(run, tls_broker, tmp_path) -> None:
    # The node serves its expired certificate to clients asking for this name (SNI).
    cfg = _config(tmp_path, tls_broker, ca=str(tls_broker.certs / "ca.pem"), server_name="expired.localhost")
    result = _run(run, cfg, "peek", "any-queue")
    assert result.exit_code == 3
    assert "certificate has expired" in result.stderr
    assert "Traceback" not in result.stderr


def test_ip_address_not_in_certificate_is_refused(run, tls_broker, tmp_path) -> None:
    # server.pem holds DNS:localhost only.
    cfg = _config(tmp_path, tls_broker, url_host="127.0.0.1", ca=str(tls_broker.certs / "ca.pem"))
    result = _run(run, cfg, "peek", "any-queue")
    assert result.exit_code == 3
    assert "not valid for the IP address" in result.stderr
    assert "tls.server_name" in result.stderr


def test_server_name_not_in_certificate_is_refused(run, tls_broker, tmp_path) -> None:
    cfg = _config(tmp_path, tls_broker, ca=str(tls_broker.certs / "ca.pem"), server_name="rabbit.example")
    result = _run(run, cfg, "peek", "any-queue")
    assert result.exit_code == 3
    assert "not valid for the host name" in result.stderr


def _client_cert_config(tmp_path: Path, tls_broker, cert: str) -> Path:
    certs = tls_broker.certs
    return _config(tmp_path, tls_broker, auth="external", ca=str(certs / "ca.pem"),
                   cert=str(certs / f"{cert}.pem"), key=str(certs / f"{cert}.key"))


def _wait_for_connection_of(tls_broker, user: str, timeout: float = 15.0) -> list[str]:
    """Auth mechanisms of `user`'s connections to our vhost, once the management API lists one."""
    deadline = time.monotonic() + timeout
    while True:
        rows = tls_broker.env.mgmt.get("connections", columns="user,auth_mechanism,vhost")
        found = [r["auth_mechanism"] for r in rows if r.get("vhost") == tls_broker.env.vhost and r["user"] == user]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_client_certificate_logs_in_as_its_common_name(run, tls_broker, tmp_path) -> None:
    cfg = _client_cert_config(tmp_path, tls_broker, "client")
    check = _run(run, cfg, "brokers", "check")
    assert check.exit_code == 0, check.stdout + check.stderr

    # Who did the broker let in? The certificate's CN, by EXTERNAL: a user with no password.
    profile = select_profile(load_config(str(cfg), {"TLS_PW": "guest"}), broker="tls")
    conn = connect(profile)
    try:
        mechanisms = _wait_for_connection_of(tls_broker, tls_broker.client_user)
    finally:
        close_quietly(conn)
    assert mechanisms and set(mechanisms) == {"EXTERNAL"}


def test_client_certificate_from_an_untrusted_ca_is_refused(run, tls_broker, tmp_path) -> None:
    cfg = _client_cert_config(tmp_path, tls_broker, "other-client")
    result = _run(run, cfg, "peek", "any-queue")
    assert result.exit_code == 3
    # The broker's alert, or (when it hangs up first) the closed handshake; the hint either way.
    assert "alert unknown ca" in result.stderr or "closed the connection during the TLS handshake" in result.stderr
    assert "did not accept the client certificate" in result.stderr
    assert "Traceback" not in result.stderr
