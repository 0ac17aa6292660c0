"""amqps against a server whose certificate we do not trust: a clear error, exit 3, no hang.

A full TLS broker listener (right CA, client certificates) is part of the hardening work; here a bare
TLS server with a self-signed certificate is enough to prove verification is on by default.
"""

import shutil
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest


@pytest.fixture
def untrusted_tls_port(tmp_path: Path):
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            try:
                ctx.wrap_socket(conn, server_side=True).close()
            except (ssl.SSLError, OSError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], cert
    stop.set()
    thread.join()
    server.close()


def test_untrusted_certificate_is_refused_clearly(run, untrusted_tls_port) -> None:
    port, _cert = untrusted_tls_port
    result = run("brokers", "check", "--url", f"amqps://guest:guest@localhost:{port}/", "--format", "table")
    assert result.exit_code == 3
    assert "TLS certificate verification failed" in result.stderr
    assert "self-signed" in result.stderr or "self signed" in result.stderr


def test_verify_off_gets_past_tls(run, untrusted_tls_port, tmp_path: Path) -> None:
    port, _cert = untrusted_tls_port
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[brokers.insecure]\nurl = "amqps://guest@localhost:{port}/"\npassword = "guest"\n'
                   '[brokers.insecure.tls]\nverify = false\n')
    result = run("brokers", "check", "insecure", "--config", str(cfg), "--timeout", "2", "--format", "table")
    assert result.exit_code == 3
    assert "TLS certificate verification failed" not in result.stderr  # it got further: the server hung up


def test_trusting_the_ca_gets_past_verification(run, untrusted_tls_port, tmp_path: Path) -> None:
    port, cert = untrusted_tls_port
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[brokers.pinned]\nurl = "amqps://guest@localhost:{port}/"\npassword_env = "PW"\n'
                   f'[brokers.pinned.tls]\nca = "{cert}"\n')
    result = run("brokers", "check", "pinned", "--config", str(cfg), "--timeout", "2", "--format", "table",
                 env={"PW": "guest"})
    assert result.exit_code == 3
    assert "verification failed" not in result.stderr
