"""What the broker says against the engine's publishing, and what the engine makes of it
(dlxtool.ops.engine.Transfer):

  * refusals: a channel close that names one message (its expiration, user_id, size …: that one stays, the others
    go on), an exchange (no write permission, missing, internal: what goes there stays from then on) or nothing
    (the run stops: nothing more is published);
  * blocks: a publishing connection blocked by a resource alarm is said at once, and the run stops if it is still
    blocked after the run's timeout.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from dlxtool.broker.connection import blocked
from dlxtool.errors import UnavailableError
from dlxtool.ops.stay import Stay, Why

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.refusals import Refusal
    from dlxtool.ops.session import Reporter
    from dlxtool.ops.transfer_keep import KeepRoute


class PublishingBlocked(UnavailableError):
    """The broker blocked a publishing connection (a resource alarm) for longer than the run's timeout."""


class PublishRefusals:
    """The refusals of one run so far. `keep_refused`: why stays cannot be republished to the source's tail (they
    are held and given back in place instead), from the start (the caller's reason) or from a refusal."""

    def __init__(self, keep_refused: str | None) -> None:
        self.keep_refused = keep_refused
        self.stopped_by: str | None = None  # the broker's words, where a refusal named nothing (the run stops)
        self._exchanges: dict[str, Why] = {}  # exchange refused -> why what goes there stays
        self._all: Why | None = None          # set with stopped_by: nothing more is published

    @property
    def any(self) -> bool:
        return bool(self._exchanges) or self._all is not None

    def of_exchange(self, exchange: str) -> Why | None:
        """Why a message published to `exchange` ("" the default) stays, where the broker refused that exchange."""
        return self._exchanges.get(exchange or "amq.default")

    def of_move(self, exchange: str) -> Why | None:
        """Why a move to `exchange` must stay instead: its exchange refused, or all publishing stopped."""
        return self.of_exchange(exchange) or self._all

    def refused(self, refusal: Refusal, keep_route: KeepRoute | None) -> bool:
        """Take in the broker's refusal; True where it named nothing, so that the run reads no more."""
        said = Why(f"refused by the broker: {refusal.said}", Stay.MESSAGE_REFUSED)
        if refusal.exchange is None and not refusal.per_message:  # it named nothing: stop, give the rest back
            self.stopped_by = refusal.said
            self._all = said
            self.keep_refused = said
            return True
        if refusal.per_message:
            return False
        said = Why(f"the broker refused publishing to {refusal.exchange!r}: {refusal.said}", Stay.EXCHANGE_REFUSED)
        self._exchanges[refusal.exchange or ""] = said
        if keep_route is not None and keep_route.made and refusal.names_exchange(keep_route.name):
            if keep_route.name:  # the keep route's own exchange: the default one then, as when refused
                keep_route.give_up()
            else:
                self.keep_refused = said
        return False


class BlockWatch:
    """Whether the run's publishing connections are blocked, and for how long (check() each loop turn)."""

    def __init__(self, conns: tuple[AmqpConnection, ...], timeout: float, report: Reporter | None) -> None:
        self._conns = conns
        self._timeout = timeout
        self._report = report
        self._since: float | None = None  # when a publishing connection was first seen blocked

    def any_blocked(self) -> bool:
        return any(blocked(c) is not None for c in self._conns)

    def check(self) -> None:
        """A publishing connection the broker blocked (a memory or disk alarm: it reads nothing more from it until
        the alarm clears) is said at once, and PublishingBlocked is raised if it is still blocked after the timeout:
        what was published may have been read before the block (possible duplicates), the rest goes back from the
        consumer's connection, which an alarm does not block."""
        why = next((b for b in map(blocked, self._conns) if b is not None), None)
        if why is None:
            self._since = None
            return
        now = time.monotonic()
        if self._since is None:
            self._since = now
            if self._report is not None:
                self._report.warn(f"the broker blocked publishing ({why}: a resource alarm); stopping in "
                                  f"{self._timeout:g}s unless it clears")
        elif now - self._since >= self._timeout:
            raise PublishingBlocked(f"the broker blocked publishing ({why}: a resource alarm)")
