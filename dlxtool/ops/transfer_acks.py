"""Which of the engine's acks the broker has proven (dlxtool.ops.engine.Transfer).

An ack is a message with no answer: one lost with its connection leaves the message in the source while its copy
exists elsewhere (a possible duplicate), or, for a removal, in the source after all. So every batch of acks is
followed by a pipelined basic.qos (a no-op with the same prefetch): the broker handles a channel's methods in order,
and its qos-ok proves the acks before it were processed. A channel close the broker answered proves them too.
"""

from __future__ import annotations

import time
from typing import Any

from dlxtool.broker.channel import IDLE_WAIT, AsyncChannel


class AckProof:
    """Acks sent and not yet proven: `uncertain` of messages with a copy elsewhere, `removals` of removed ones."""

    def __init__(self) -> None:
        self.uncertain = 0
        self.removals = 0
        self._marker: int | None = None  # acks covered by the qos in flight

    @property
    def pending(self) -> bool:
        """Acks sent whose proof has not come (or a proof on its way)."""
        return self._marker is not None or bool(self.uncertain or self.removals)

    def sent(self, *, copy: bool, removal: bool) -> None:
        """An ack is about to go for a message with (or without) a copy elsewhere, removed (or not)."""
        self.uncertain += copy
        self.removals += removal

    def ask(self, channel: AsyncChannel, prefetch: int) -> None:
        """Ask the broker to prove what was sent so far (one question in flight at a time)."""
        if self._marker is not None or not (self.uncertain or self.removals):
            return
        covered, removals = self.uncertain, self.removals

        def proven(_frame: Any) -> None:
            self.uncertain -= covered
            self.removals -= removals
            self._marker = None

        self._marker = covered
        channel.qos(prefetch, callback=proven)

    def wait(self, channel: AsyncChannel, prefetch: int, timeout: float) -> None:
        """Ask and wait up to `timeout` for the proof; a channel closed meanwhile leaves the rest unproven."""
        deadline = time.monotonic() + timeout
        while self.pending and time.monotonic() < deadline:
            if not channel.is_open:
                return  # closed without a close-ok: what it proved stays uncertain (possible duplicates)
            self.ask(channel, prefetch)
            channel.pump(IDLE_WAIT)

    def all_proven(self) -> None:
        """The broker answered a channel close: every ack sent before it was processed."""
        self.uncertain = self.removals = 0
        self._marker = None
