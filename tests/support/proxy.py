"""CuttingProxy: the fault proxy (tests/support/faultproxy.py) used for one fault — every connection cut with RST
both ways, on demand (`cut()`) or once dlxtool has sent `cut_after_bytes` bytes to the broker (a reproducible
"random moment": the same point of the protocol on every run). New connections are still accepted after a cut."""

from __future__ import annotations

from tests.support.faultproxy import FaultProxy, Link


class CuttingProxy(FaultProxy):
    def __init__(self, upstream_host: str, upstream_port: int, *, cut_after_bytes: int | None = None) -> None:
        self.cut_after_bytes = cut_after_bytes
        self.cuts = 0
        super().__init__(upstream_host, upstream_port)

    def cut(self) -> None:
        """Drop every proxied connection now (RST both ways); new connections are still accepted."""
        self.cut_after_bytes = None
        self.cuts += 1
        self.reset()

    def close(self) -> None:
        self.cut()
        super().close()

    def _count(self, n: int, upstream: bool, link: Link) -> bool:
        # Counted on client -> broker bytes only, and the chunk that reaches the mark is not forwarded.
        super()._count(n, upstream, link)
        if not upstream or self.cut_after_bytes is None:
            return False
        with self._lock:
            due = self.bytes_up >= self.cut_after_bytes
        if due:
            self.cut()
        return due
