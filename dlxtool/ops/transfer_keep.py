"""The route by which the engine republishes a message that stays to its source's tail with its own routing key
(dlxtool.ops.engine.Transfer._keep): a temporary exchange bound only to the source.

On the default exchange its key would become the queue's name, and where the source's dead-letter exchange routes
on the key (direct/topic) its next failure would be dropped; consumers that dispatch on the key would misread it.
Where the broker refuses the exchange, the default one is used instead and the run's notes say so."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.publisher import Publisher
    from dlxtool.ops.routes import TemporaryExchanges


class KeepRoute:
    """The exchange that takes kept messages back to `source`, made at the first keep (`exchange()`)."""

    def __init__(self, conn: AmqpConnection, source: str, timeout: float, notes: list[str]) -> None:
        self._conn = conn
        self._source = source
        self._timeout = timeout
        self._notes = notes  # the run's notes: a fall-back to the default exchange is said there
        self._exchanges: TemporaryExchanges | None = None
        self.name = ""  # "": the default exchange (not made yet, refused, or given up)

    @property
    def made(self) -> bool:
        return self._exchanges is not None

    def exchange(self) -> str:
        """The exchange to republish a kept message to ("" where the broker refused it: the default exchange)."""
        if self._exchanges is None:
            from dlxtool.ops.routes import RouteUnavailable, TemporaryExchanges

            self._exchanges = TemporaryExchanges(self._conn, self._timeout, purpose="keep")
            try:
                self.name = self._exchanges(self._source) or ""
            except RouteUnavailable as exc:
                self.name = ""
                self._notes.append(f"messages kept in {self._source} were republished with routing key "
                                   f"{self._source!r} (the queue's name), not their own: {exc.message}")
        return self.name

    def give_up(self) -> None:
        """The broker refused publishing to the exchange: the default one from now on."""
        self.name = ""

    def delete(self, keeper: Publisher | None) -> None:
        """After the last keep was confirmed: on the keeper's channel, after its publishes (`keeper`), else on a
        channel of its own (best effort: a leftover's name says what it was)."""
        exchanges = self._exchanges
        if exchanges is None:
            return
        with contextlib.suppress(Exception):
            if keeper is not None:
                exchanges.delete_on(keeper)
            exchanges.delete_all()
