"""HTTP/1.1 for the management API: one keep-alive connection per client, worked by a thread of its own.

Why not urllib (which this replaces where no proxy is configured):
- its import (http.client, email, tempfile, bz2, hashlib…) cost every command that asks the API about 15 ms
  (python -X importtime), this module costs none of that;
- it opens a TCP connection per request and sends a request only when its answer is awaited. Here a request
  goes out when it is submitted, and its answer is read when the caller asks for it: the management API's
  overview travels while the AMQP handshake runs, and requests submitted together are pipelined on the one
  connection (RabbitMQ's web server answers them in order: checked on 3.10 and 4.0.5, a 404 in between too);
- the answers a command uses come over the TCP connection its identity proof came over
  (dlxtool.broker.identity; `Response.connection` says which one): a port-forward switched to another
  broker cannot switch a connection that is open.

A thread, not non-blocking sockets: connecting to a host that does not answer blocks until the timeout, and
that must not hold up the AMQP connection the command opens meanwhile. The thread only moves bytes; callers
wait for their answer (`Pending.result`), in any thread.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

IDEMPOTENT = ("GET", "HEAD", "PUT", "DELETE")  # sent again on a fresh connection when a kept-alive one was gone
# A connection with nothing to do for this long is closed and its thread ends (a later request opens another):
# `queues --watch` makes a client per refresh, and an idle socket the server has closed would stay open here.
IDLE_CLOSE = 15.0
MAX_HEADER_LINE = 65536
MAX_HEADERS = 200


class HttpProtocolError(OSError):
    """The server's answer is not HTTP/1.x as expected (an OSError: reported as "not reachable")."""

    def __init__(self, what: str) -> None:
        super().__init__(0, what)


class Response:
    """One answer. (A plain class: a dataclass costs about a millisecond of start-up to create.)"""

    __slots__ = ("body", "connection", "headers", "reason", "status")

    def __init__(self, status: int, reason: str, headers: dict[str, str], body: bytes, connection: int) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers  # names in lower case
        self.body = body
        self.connection = connection  # which TCP connection of its HttpConnection answered (1, 2, …; 0: urllib)


class Pending:
    """A submitted request: its answer, once read."""

    def __init__(self, method: str, head: bytes, body: bytes, timeout: float | None = None) -> None:
        self.method = method
        self.data = head + body
        self.timeout = timeout  # how long its answer may take to come (None: the connection's timeout)
        self._done = threading.Event()
        self._response: Response | None = None
        self._error: BaseException | None = None

    def result(self) -> Response:
        """The response; raises what the exchange failed with (OSError: refused, timed out, TLS…)."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._response is not None
        return self._response

    @property
    def answered(self) -> bool:
        return self._done.is_set()

    def finish(self, response: Response | None = None, error: BaseException | None = None) -> None:
        """Give the request its answer (the connection that read it, or the error that ended the exchange)."""
        self._response, self._error = response, error
        self._done.set()


class HttpConnection:
    """One keep-alive connection to scheme://host:port, opened on the first request, opened again when the
    server closed it. `timeout` bounds connecting and every wait for bytes."""

    def __init__(self, scheme: str, host: str, port: int, *, timeout: float,
                 context: ssl.SSLContext | None = None) -> None:
        self.scheme, self.host, self.port, self.timeout = scheme, host, port, timeout
        self._context = context
        default = 443 if scheme == "https" else 80
        name = f"[{host}]" if ":" in host else host
        self.host_header = name if port == default else f"{name}:{port}"
        self._lock = threading.Condition()
        self._queue: deque[Pending] = deque()  # submitted, not sent yet
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._reader: Any = None
        self._opened = 0  # connections opened so far: Response.connection
        self._fresh = False  # no answer read yet on the connection open now

    def submit(self, method: str, target: str, headers: Mapping[str, str], body: bytes | None = None, *,
               timeout: float | None = None) -> Pending:
        """Queue a request (sent at once when the connection is free, pipelined behind earlier ones). `timeout`:
        how long each wait for its answer's bytes may be, when it is not the connection's (a listing the server
        takes seconds to make, asked once the server has answered a quick request ahead of it)."""
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header}",
                 *(f"{k}: {v}" for k, v in headers.items())]
        if body is not None or method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(body or b'')}")
        pending = Pending(method, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), body or b"", timeout)
        with self._lock:
            self._queue.append(pending)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"http {self.host_header}", daemon=True)
                self._thread.start()
            self._lock.notify()
        return pending

    # -- the connection's thread ----------------------------------------------------------------------------

    def _run(self) -> None:
        in_flight: deque[Pending] = deque()  # sent, answer not read yet
        while True:
            with self._lock:
                if not self._queue and not in_flight:
                    self._lock.wait(IDLE_CLOSE)
                    if not self._queue:
                        self._close()
                        self._thread = None  # under the lock: submit() starts a new one
                        return
                batch = list(self._queue)
                self._queue.clear()
            try:
                self._send(batch, in_flight)
                if in_flight:
                    self._answer(in_flight)
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for these requests
                self._close()
                for pending in (*in_flight, *batch):
                    if not pending.answered:
                        pending.finish(error=exc)
                in_flight.clear()

    def _send(self, batch: list[Pending], in_flight: deque[Pending]) -> None:
        if not batch:
            return
        if self._sock is None or (batch[0].method not in IDEMPOTENT and not in_flight):
            # A request that must not be sent twice goes on a connection just opened: it cannot have been
            # closed by the server meanwhile.
            self._close()
            self._open()
        assert self._sock is not None
        self._sock.sendall(b"".join(p.data for p in batch))
        in_flight.extend(batch)

    def _answer(self, in_flight: deque[Pending]) -> None:
        pending = in_flight[0]
        assert self._sock is not None
        self._sock.settimeout(pending.timeout or self.timeout)
        try:
            response, keep = self._read_response(pending.method)
        except (_ClosedBeforeAnswer, ConnectionResetError) as exc:
            if isinstance(exc, ConnectionResetError) and self._fresh:
                raise  # reset before any answer on this connection: the server's (or the path's) refusal
            # A kept-alive connection the server had closed (idle timeout): the request never reached it. Or one it
            # reset after answering some of the requests pipelined on it (a proxy that closes after N answers with
            # the rest unread: its close is a reset that may also cut the last answer short): the unanswered ones
            # go again on a new connection, where nothing it answers is used before that connection is proven.
            resend = list(in_flight)
            in_flight.clear()
            self._close()
            if any(p.method not in IDEMPOTENT for p in resend) or self._fresh:
                raise HttpProtocolError("the server closed the connection without answering") from None
            self._open()
            assert self._sock is not None
            self._sock.sendall(b"".join(p.data for p in resend))
            in_flight.extend(resend)
            return
        in_flight.popleft()
        pending.finish(response)
        if not keep:
            # The rest were sent on a connection the server ends after this answer: send them again.
            resend = list(in_flight)
            in_flight.clear()
            self._close()
            if resend:
                if any(p.method not in IDEMPOTENT for p in resend):
                    raise HttpProtocolError("the server closed the connection before answering every request")
                self._open()
                assert self._sock is not None
                self._sock.sendall(b"".join(p.data for p in resend))
                in_flight.extend(resend)

    def _open(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.scheme == "https":
            import ssl

            context = self._context or ssl.create_default_context()
            sock = context.wrap_socket(sock, server_hostname=self.host)
        self._sock = sock
        self._reader = sock.makefile("rb")
        self._opened += 1
        self._fresh = True  # no answer read on it yet

    def _close(self) -> None:
        for closable in (self._reader, self._sock):
            if closable is not None:
                with contextlib.suppress(OSError):
                    closable.close()
        self._sock = self._reader = None

    def _read_response(self, method: str) -> tuple[Response, bool]:
        """One response; whether the connection stays open after it."""
        status_line = self._reader.readline(MAX_HEADER_LINE + 1)
        if not status_line:
            raise _ClosedBeforeAnswer
        self._fresh = False
        version, _, rest = status_line.decode("latin-1").rstrip("\r\n").partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise HttpProtocolError(f"not an HTTP response: {status_line[:60]!r}")
        headers = self._read_headers()
        status = int(code)
        if 100 <= status < 200:  # an interim answer (none is asked for): the real one follows
            return self._read_response(method)
        if method == "HEAD" or status in (204, 304):
            body = b""
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            body = self._read_chunked()
        elif "content-length" in headers:
            body = self._read_exactly(_length(headers["content-length"]))
        else:
            return Response(status, reason, headers, self._reader.read(), self._opened), False
        connection = headers.get("connection", "").lower()
        keep = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
        return Response(status, reason, headers, body, self._opened), keep

    def _read_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS):
            line = self._reader.readline(MAX_HEADER_LINE + 1)
            if not line:
                raise HttpProtocolError("the connection closed in the middle of a response")
            if line in (b"\r\n", b"\n"):
                return headers
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise HttpProtocolError(f"bad header line {line[:60]!r}")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        raise HttpProtocolError("too many headers")

    def _read_exactly(self, n: int) -> bytes:
        data = self._reader.read(n)
        if len(data) != n:
            raise HttpProtocolError("the connection closed in the middle of a response")
        return bytes(data)

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        while True:
            line = self._reader.readline(MAX_HEADER_LINE + 1)
            size = line.split(b";", 1)[0].strip()
            try:
                n = int(size, 16)
            except ValueError:
                raise HttpProtocolError(f"bad chunk size {line[:40]!r}") from None
            if n == 0:
                self._read_headers()  # trailers, up to the blank line
                return b"".join(parts)
            parts.append(self._read_exactly(n))
            self._read_exactly(2)  # the CRLF after each chunk


class _ClosedBeforeAnswer(Exception):
    pass


def _length(value: str) -> int:
    try:
        n = int(value.split(",")[0].strip())
    except ValueError:
        raise HttpProtocolError(f"bad content-length {value[:40]!r}") from None
    if n < 0:
        raise HttpProtocolError(f"bad content-length {value[:40]!r}")
    return n


def proxied(scheme: str, env: Mapping[str, str]) -> bool:
    """A proxy is configured for `scheme` in the environment (<scheme>_proxy or all_proxy, any case): then
    urllib does the request, with its proxy and no_proxy rules."""
    names = (f"{scheme}_proxy", "all_proxy")
    return any(value and key.lower() in names for key, value in env.items())


def urllib_exchange(method: str, url: str, headers: Mapping[str, str], body: bytes | None, *, timeout: float,
                    context: ssl.SSLContext | None) -> Response:
    """The same request through urllib (proxies); an HTTP error status is a Response too."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return Response(resp.status, resp.reason, {k.lower(): v for k, v in resp.headers.items()},
                            resp.read(), 0)
    except urllib.error.HTTPError as exc:
        try:
            payload = exc.read()
        except OSError:
            payload = b""
        return Response(exc.code, str(exc.reason), {k.lower(): v for k, v in (exc.headers or {}).items()},
                        payload, 0)
    except urllib.error.URLError as exc:  # the reason is the OSError (refused, timed out, TLS…)
        reason = exc.reason
        raise reason if isinstance(reason, OSError) else OSError(0, str(reason)) from None


def done(response: Response | None = None, error: BaseException | None = None) -> Pending:
    """A Pending already answered (urllib's synchronous exchanges)."""
    pending = Pending("GET", b"", b"")
    pending.finish(response, error)
    return pending
