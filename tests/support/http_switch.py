"""An HTTP proxy for the management API that sends each new client connection to the next backend of a list
(the last one repeats) and closes a connection after `close_after` answers: what a load balancer or a
re-established port-forward in front of two brokers can do to a client that keeps its connection alive."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class HttpSwitch:
    def __init__(self, backends: list[int], close_after: int) -> None:
        self.backends = backends
        self.close_after = close_after
        self.log: list[tuple[int, int, str]] = []  # (client connection, backend port, request line)
        self._count = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                backend = self.backends[min(self._count, len(self.backends) - 1)]
                self._count += 1
                number = self._count
            threading.Thread(target=self._serve, args=(client, backend, number), daemon=True).start()

    def _serve(self, client: socket.socket, backend: int, number: int) -> None:
        reader = client.makefile("rb")
        try:
            for answered in range(1, self.close_after + 1):
                line = reader.readline()
                if not line:
                    return
                method, target, _version = line.decode().split(" ", 2)
                headers = {}
                while (header := reader.readline()) not in (b"\r\n", b"\n", b""):
                    key, value = header.decode().split(":", 1)
                    headers[key.strip()] = value.strip()
                length = int(headers.get("Content-Length", 0) or 0)
                body = reader.read(length) if length else None
                headers.pop("Host", None)
                upstream = http.client.HTTPConnection("localhost", backend, timeout=30)
                upstream.request(method, target, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                upstream.close()
                self.log.append((number, backend, f"{method} {target}"))
                last = answered == self.close_after
                head = (f"HTTP/1.1 {response.status} {response.reason}\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(data)}\r\n" + ("Connection: close\r\n" if last else "") + "\r\n")
                client.sendall(head.encode() + data)
        except OSError:
            return
        finally:
            reader.close()
            client.close()


@contextmanager
def http_switch(backends: list[int], close_after: int) -> Iterator[HttpSwitch]:
    switch = HttpSwitch(backends, close_after)
    try:
        yield switch
    finally:
        switch.close()
