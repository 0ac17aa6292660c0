"""dlxtool.broker.http and ManagementClient's answers sent ahead: one kept-alive connection, pipelined.

Against RabbitMQ's own web server where it decides (pipelining, keep-alive, 404 in between); against a small
local server where a behaviour cannot be asked of RabbitMQ (closing after every answer, chunked bodies, never
answering, a proxy)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from urllib.parse import quote

import pytest

from dlxtool.broker.http import HttpConnection, proxied
from dlxtool.broker.management import ManagementClient
from dlxtool.errors import ConnectError, NotFoundError
from tests.support.broker import BrokerEnv


def test_requests_submitted_together_are_answered_in_order_over_one_connection(broker: BrokerEnv) -> None:
    client = ManagementClient(broker.management_url, "guest", "guest")
    vhost = quote(broker.vhost, safe="")
    client.prefetch("overview", columns="rabbitmq_version")
    client.prefetch(f"queues/{vhost}/no-such-queue")  # a 404 in the middle of the pipeline
    client.prefetch(f"vhosts/{vhost}", columns="name")
    assert client.get("overview", columns="rabbitmq_version")["rabbitmq_version"] == broker.version
    with pytest.raises(NotFoundError):
        client.get(f"queues/{vhost}/no-such-queue")
    assert client.get(f"vhosts/{vhost}", columns="name") == {"name": broker.vhost}
    assert client.last_connection == 1  # all three over the first connection
    assert client.get("overview", columns="rabbitmq_version") and client.last_connection == 1  # kept alive


@contextmanager
def server(answer: Callable[[socket.socket, bytes, int], bool]) -> Iterator[int]:
    """A local server on a free port: answer(conn, request head, n) per request (n counts from 1), which
    returns whether to keep the connection open. Yields the port."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    count = [0]
    stop = threading.Event()

    def serve() -> None:
        # This thread alone closes the listener: closed from the test's thread while this one was about to accept,
        # its descriptor went to the next test's listener, and this thread answered that test's requests (a run's
        # failure: {"path": "/api/x"} == {"n": 2}).
        with listener:
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                except OSError:
                    return
                conn.settimeout(None)
                _serve_one(conn)

    def _serve_one(conn: socket.socket) -> None:
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        break
                    buffer += data
                if b"\r\n\r\n" not in buffer:
                    break
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                count[0] += 1
                if not answer(conn, head, count[0]):
                    break

    port = listener.getsockname()[1]
    threading.Thread(target=serve, daemon=True).start()
    try:
        yield port
    finally:
        stop.set()


def json_answer(body: bytes, *, close: bool = False) -> bytes:
    extra = b"Connection: close\r\n" if close else b""
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def test_requests_the_server_did_not_answer_before_closing_are_sent_again() -> None:
    """A server that ends the connection after each answer: the requests pipelined behind go again, each
    on a new connection, and every one gets its own answer."""
    def answer(conn: socket.socket, head: bytes, n: int) -> bool:
        path = head.split(b" ")[1]
        conn.sendall(json_answer(b'{"path": "' + path + b'"}', close=True))
        return False

    with server(answer) as port:
        client = ManagementClient(f"http://127.0.0.1:{port}/", "u", "p", timeout=5)
        for name in ("a", "b", "c"):
            client.prefetch(name)
        assert [client.get(name)["path"] for name in ("a", "b", "c")] == ["/api/a", "/api/b", "/api/c"]
        assert client.last_connection == 3


def test_a_kept_alive_connection_the_server_dropped_is_opened_again() -> None:
    def answer(conn: socket.socket, head: bytes, n: int) -> bool:
        conn.sendall(json_answer(b'{"n": %d}' % n))
        return False  # drops the connection without saying so (an idle timeout)

    with server(answer) as port:
        client = ManagementClient(f"http://127.0.0.1:{port}/", "u", "p", timeout=5)
        assert client.get("x") == {"n": 1}
        assert client.get("x") == {"n": 2} and client.last_connection == 2


def test_a_request_that_must_not_go_twice_is_not_sent_again() -> None:
    """POST goes on a new connection; one that is dropped unanswered is an error, never a second POST."""
    def answer(conn: socket.socket, head: bytes, n: int) -> bool:
        if head.startswith(b"GET"):
            conn.sendall(json_answer(b"{}"))
            return True
        return False  # drops the POST unanswered

    with server(answer) as port:
        client = ManagementClient(f"http://127.0.0.1:{port}/", "u", "p", timeout=5)
        client.get("x")
        with pytest.raises(ConnectError, match="closed the connection"):
            client.request("POST", "queues/v/q/get", {"count": 1})
        assert client.last_connection == 1


def test_chunked_answers_are_read_whole() -> None:
    def answer(conn: socket.socket, head: bytes, n: int) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"4\r\n{\"a\"\r\n3;x=y\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n")
        return True

    with server(answer) as port:
        client = ManagementClient(f"http://127.0.0.1:{port}/", "u", "p", timeout=5)
        assert client.get("x") == {"a": 1}
        assert client.get("y") == {"a": 1} and client.last_connection == 1


def test_a_server_that_never_answers_times_out() -> None:
    with server(lambda conn, head, n: (threading.Event().wait(10), True)[1]) as port:
        client = ManagementClient(f"http://127.0.0.1:{port}/", "u", "p", timeout=0.3)
        with pytest.raises(ConnectError, match=r"not reachable: timed out after 0\.3s"):
            client.get("x")


def test_an_answer_sent_ahead_is_used_only_over_the_proven_connection() -> None:
    """ManagementClient.proven_connection: an answer that came over another connection than the identity
    proof's is asked for again (a port-forward may have switched brokers in between)."""
    def answer(conn: socket.socket, head: bytes, n: int) -> bool:
        conn.sendall(json_answer(b'{"n": %d}' % n))
        return False  # one answer per connection: the n-th answer comes over connection n

    with server(answer) as port:
        client = ManagementClient(f"http://127.0.0.1:{port}/", "u", "p", timeout=5)
        client.prefetch("q")
        assert client.get("x") == {"n": 2}  # "q" was answered first, over connection 1
        client.proven_connection = 2
        assert client.get("q") == {"n": 3}  # not connection 1's answer: asked again
        client.prefetch("q")
        client.proven_connection = 4
        assert client.get("q") == {"n": 4}  # over the proven connection: used as it came


def test_a_proxy_in_the_environment_is_used_through_urllib(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bytes] = []

    def answer(conn: socket.socket, head: bytes, n: int) -> bool:
        seen.append(head.split(b"\r\n")[0])
        conn.sendall(json_answer(b'{"via": "proxy"}', close=True))
        return False

    assert not proxied("http", {}) and proxied("http", {"HTTP_PROXY": "http://p:3128"})
    assert proxied("https", {"all_proxy": "http://p:3128"}) and not proxied("https", {"http_proxy": "x"})
    with server(answer) as port:
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{port}")
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        # urllib takes the proxy from the process's environment; dlxtool decides to use urllib from the command's
        assert not ManagementClient("http://rabbit.example:15672/", "u", "p", env={}).via_proxy
        client = ManagementClient("http://rabbit.example:15672/", "u", "p", timeout=5, env=dict(os.environ))
        client.prefetch("overview")  # nothing goes ahead through a proxy
        assert seen == []
        assert client.get("overview") == {"via": "proxy"}
        assert seen == [b"GET http://rabbit.example:15672/api/overview HTTP/1.1"]


def test_connection_refused_is_one_line() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    connection = HttpConnection("http", "127.0.0.1", port, timeout=2)
    with pytest.raises(ConnectionRefusedError):
        connection.submit("GET", "/", {}).result()
    with pytest.raises(ConnectError, match="not reachable: connection refused"):
        ManagementClient(f"http://127.0.0.1:{port}/", "u", "p").get("overview")


def test_an_idle_connection_is_closed_and_its_thread_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """`queues --watch` makes a client per refresh: an idle one must not keep its socket and thread."""
    from dlxtool.broker import http

    monkeypatch.setattr(http, "IDLE_CLOSE", 0.2)
    closed = threading.Event()

    def answer(conn: socket.socket, head: bytes, n: int) -> bool:
        conn.sendall(json_answer(b'{"n": %d}' % n))
        conn.settimeout(5)
        if conn.recv(1) == b"":  # the client closed its end
            closed.set()
        return False

    with server(answer) as port:
        client = ManagementClient(f"http://127.0.0.1:{port}/", "u", "p", timeout=5)
        assert client.get("x") == {"n": 1}
        assert closed.wait(3)
        deadline = time.monotonic() + 3
        while any(t.name == f"http 127.0.0.1:{port}" for t in threading.enumerate()):
            assert time.monotonic() < deadline, "the idle connection's thread did not end"
            time.sleep(0.01)
        assert client.get("x") == {"n": 2} and client.last_connection == 2  # a new connection, a new thread
