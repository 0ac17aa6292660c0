"""A small TCP proxy for fault tests: forwards to the broker and cuts every connection on demand or
after a given number of client->broker bytes (a reproducible "random moment").

Threads, bounded: one acceptor, two pumps per connection, all daemons with socket timeouts, joined by
close(). A cut closes both sides with RST (SO_LINGER 0), like a dropped network path or a dying broker.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from typing import Any


class CuttingProxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, cut_after_bytes: int | None = None) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.cut_after_bytes = cut_after_bytes
        self.bytes_up = 0
        self.cuts = 0
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._spawn(self._accept)

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.settimeout(0.2)
            with self._lock:
                self._socks += [client, server]
            self._spawn(self._pump, client, server, True)
            self._spawn(self._pump, server, client, False)

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        while not self._closed.is_set():
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            if upstream and self.cut_after_bytes is not None:
                with self._lock:
                    self.bytes_up += len(data)
                    due = self.bytes_up >= self.cut_after_bytes
                if due:
                    self.cut()
                    break
            try:
                dst.sendall(data)
            except OSError:
                break
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Drop every proxied connection now (RST both ways); new connections are still accepted."""
        with self._lock:
            socks, self._socks = self._socks, []
            self.cut_after_bytes = None
            self.cuts += 1
        for s in socks:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()

    def close(self) -> None:
        self.cut()
        self._closed.set()
        self._listener.close()
        for t in self._threads:
            t.join(timeout=2)
