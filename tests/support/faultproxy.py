"""A loopback TCP proxy that injects network faults between dlxtool and the broker (tests only).

Every connection through it is a Link: a client socket (dlxtool's side) and a server socket (the broker's), two
pump threads copying between them. The faults, on every link open at the moment (new ones are unaffected unless
said otherwise):

    reset      both sides closed with RST (SO_LINGER 0): a dropped path, a dying middlebox
    half-open  the client side closed with RST, the broker side left open and silent: the broker keeps the
               connection — and every delivery it holds unacked — until its heartbeat gives up on it (a NAT or
               firewall that forgot the flow on one side only)
    refuse     new connections are reset as soon as they are accepted (a reconnect finds the path still down);
               `refuse(False)` lets them through again. `reset` + `refuse` is "the network went away"
    stall      nothing is forwarded either way, both sides stay open (a silent stall: no RST, no FIN); `resume()`
    delay      each chunk is forwarded `delay` seconds late, both ways (a slow path; the order is kept)

`inject(mode)` does one now; `arm(mode, at_bytes)` does it when the traffic through the proxy (both ways) reaches
`at_bytes` — a moment drawn from a seed is then the same moment of the protocol on every run. Threads are bounded:
one acceptor, two pumps per link, daemons with socket timeouts, joined by close() (which resets whatever is left).

CuttingProxy (tests/support/proxy.py) is this proxy used for `reset` only.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any

MODES = ("reset", "half-open", "refuse", "stall", "delay")
_RST = struct.pack("ii", 1, 0)


def _rst(sock: socket.socket) -> None:
    """Close with RST, now. A pump thread blocked in recv() on the socket holds the kernel's file until it returns
    (close() alone sent the RST up to a recv timeout later: the broker saw a reset connection 0.2 s late); a
    shutdown(SHUT_RD) wakes it at once and sends nothing on the wire."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RST)
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


@dataclass(eq=False)
class Link:
    client: socket.socket
    server: socket.socket
    frozen: bool = False  # half-open: the pumps leave it alone; the broker side stays open until close()
    done: bool = False
    opened: float = field(default_factory=time.monotonic)


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int, *, delay: float = 0.0) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay = delay
        self.bytes_up = 0      # client -> broker
        self.bytes_total = 0   # both ways (what `arm` counts)
        self.accepted = 0
        self.refused = 0       # connections reset at accept while refusing
        self.injected: list[tuple[str, float]] = []  # (mode, monotonic time) of every fault done
        self._armed: tuple[str, int] | None = None
        self._armed_on: tuple[str, bytes, bool] | None = None
        self.stalled = threading.Event()
        self.refusing = False
        self._lock = threading.Lock()
        self._links: list[Link] = []
        self._threads: list[threading.Thread] = []
        self._closed = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._spawn(self._accept)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- faults ------------------------------------------------------------------------------------------

    def inject(self, mode: str, *, delay: float | None = None) -> None:
        """Do fault `mode` (one of MODES) now."""
        if mode == "reset":
            self.reset()
        elif mode == "half-open":
            self.half_open()
        elif mode == "refuse":
            self.reset()
            self.refuse(True)
        elif mode == "stall":
            self.stall()
        elif mode == "delay":
            self.delay = 0.05 if delay is None else delay
        else:
            raise ValueError(f"unknown fault {mode!r}; one of {', '.join(MODES)}")
        with self._lock:
            self.injected.append((mode, time.monotonic()))

    def arm(self, mode: str, at_bytes: int) -> None:
        """Do `mode` when the traffic through the proxy (both ways, from now on counted from 0) reaches `at_bytes`."""
        if mode not in MODES:
            raise ValueError(f"unknown fault {mode!r}")
        with self._lock:
            self.bytes_total = 0
            self._armed = (mode, at_bytes)

    def arm_on(self, mode: str, pattern: bytes, *, forward: bool = True) -> None:
        """Do `mode` as a client -> broker chunk holding `pattern` is forwarded (e.g. an AMQP method's class
        and method ids: b"\\x00\\x3c\\x00\\x14" is basic.consume): a moment of the protocol, not of the clock."""
        if mode not in MODES:
            raise ValueError(f"unknown fault {mode!r}")
        self._armed_on = (mode, pattern, forward)

    def reset(self) -> None:
        """RST both sides of every open link; new connections are still accepted (unless refusing)."""
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.done = True
            _rst(link.client)
            _rst(link.server)

    def half_open(self) -> None:
        """The client side of every open link reset; the broker side left open, nothing sent on it any more."""
        with self._lock:
            links = [link for link in self._links if not link.frozen and not link.done]
            for link in links:
                link.frozen = True
        for link in links:
            _rst(link.client)

    def refuse(self, on: bool = True) -> None:
        self.refusing = on

    def stall(self) -> None:
        self.stalled.set()

    def resume(self) -> None:
        self.stalled.clear()

    def open_links(self) -> int:
        with self._lock:
            return sum(1 for link in self._links if not link.done)

    def close(self) -> None:
        """Reset everything still open (half-open broker sides included) and stop the threads. Reset before the
        stall ends, and a pump forwards nothing once its link is reset: a chunk a stall held back (an ack armed with
        forward=False) never reaches the broker at the end. With resume() first, a pump sent it in the moment
        before the reset (seen: the broker removed the message a test had proven held)."""
        self.reset()
        self.resume()
        self._closed.set()
        self._listener.close()
        for t in self._threads:
            t.join(timeout=2)

    # -- plumbing ----------------------------------------------------------------------------------------

    def _spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads = [th for th in self._threads if th.is_alive()]
            self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if self.refusing:
                self.refused += 1
                _rst(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _rst(client)
                continue
            for s in (client, server):
                s.settimeout(0.2)
            link = Link(client, server)
            with self._lock:
                self._links.append(link)
                self.accepted += 1
            self._spawn(self._pump, link, True)
            self._spawn(self._pump, link, False)

    def _pump(self, link: Link, upstream: bool) -> None:
        src, dst = (link.client, link.server) if upstream else (link.server, link.client)
        while not self._closed.is_set() and not link.done and not link.frozen:
            if self.stalled.is_set():
                time.sleep(0.02)
                continue
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data or link.frozen:
                break
            if self._count(len(data), upstream, link) and (link.done or link.frozen):
                break  # the fault this chunk triggered took its link: the chunk is not forwarded
            armed_on, this_one = self._armed_on, False
            if upstream and armed_on is not None and armed_on[1] in data:
                # The fault starts before the chunk is forwarded (so that nothing the broker answers to it gets
                # through first), and the chunk itself still goes (`forward`), unless the fault took its link;
                # else a stall keeps it with the rest.
                self._armed_on, this_one = None, armed_on[2]
                self.inject(armed_on[0])
                if link.done or link.frozen:
                    break
            if self.delay:
                time.sleep(self.delay)
            while self.stalled.is_set() and not this_one and not link.done and not self._closed.is_set():
                time.sleep(0.02)  # a chunk read just before the stall waits with the rest
            if link.done or self._closed.is_set():
                break  # reset (or closed) while the chunk waited: a reset link forwards nothing more
            try:
                dst.sendall(data)
            except OSError:
                break
        if link.frozen or link.done:
            return  # reset by a fault (or half-open: the broker side stays as it is until close())
        link.done = True
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _count(self, n: int, upstream: bool, link: Link) -> bool:
        """Count traffic; True when an armed fault fired on it."""
        with self._lock:
            self.bytes_total += n
            if upstream:
                self.bytes_up += n
            armed = self._armed
            due = armed is not None and self.bytes_total >= armed[1]
            if due:
                self._armed = None
        if due and armed is not None:
            self.inject(armed[0])
            return True
        return False
