"""What a pass of the engine (dlxtool.ops.engine.Transfer) is told before it starts, by whom: the user's settings
(TransferOptions), what the run's owner knows of the source and the destinations (RunHooks: dlxtool.ops.pipeline
sets them), and how a guarded replay steers the pass (PassControl: dlxtool.ops.canary). None is changed during a
pass."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlxtool.ops.actions import Decider
    from dlxtool.ops.record_files import Sink
    from dlxtool.ops.session import Reporter
    from dlxtool.ops.stay import Why
    from dlxtool.ops.transfer_result import Progress


@dataclass
class TransferOptions:
    """The user's settings of a run (the command's options), the same for every pass of it."""

    prefetch: int = 2000          # unacked messages we may hold from the source
    window: int = 1000            # publishes in flight per publisher
    limit: int | None = None      # at most this many selected (non-KEEP) messages
    rate: float | None = None     # messages per second (decisions), None = as fast as possible
    sink: Sink | None = None      # MOVE and REMOVE records go here before the ack
    progress: Callable[[Progress], None] | None = None
    progress_every: float = 0.2
    settle_timeout: float = 30.0  # how long to wait for outstanding confirms when stopping
    handle_sigint: bool = True    # turn Ctrl-C into a clean stop (main thread only)
    # The byte budget (dlxtool.budget): the prefetch is lowered so that a window of bodies fits in it, from
    # RunHooks.size_hint and from the bodies seen (PrefetchWindow)
    max_bytes: int | None = None


@dataclass(frozen=True)
class RunHooks:
    """What the run's owner (dlxtool.ops.pipeline.run_move) knows of the source and the destinations, apart from the
    user's TransferOptions: set once, before the run, never changed during it."""

    # admit(target queue, body size, publishes in flight) -> None, or why a MOVE must stay in the source
    # instead (dlxtool.ops.capacity.Rooms.admit: the target is full and would displace its own messages)
    admit: Callable[[str, int, int], Why | None] | None = None
    # nack_copies(target queue) -> why a publish it nacked may have been dead-lettered by it too (a copy in its
    # DLX's queues: dlxtool.ops.capacity.Rooms.nack_copies), or None; such nacks count as possible duplicates
    nack_copies: Callable[[str], str | None] | None = None
    # nack_cause(target queue) -> why it nacked a publish when its own limits cannot explain it (it cannot take
    # messages now: Stay.DESTINATION_DOWN, dlxtool.ops.capacity.Rooms.nack_cause), or None: the generic "nacked"
    nack_cause: Callable[[str], Why | None] | None = None
    # Until something moves, messages that stay are held and given back in place at the end instead of being
    # republished to the tail: a run that moves nothing changes nothing. Only where a give-back is in place and
    # costs nothing (a classic queue; the caller knows the queue's type and the broker's version).
    hold_stays: bool = False
    keep_refused: str | None = None  # why stays cannot be republished to the tail: they are held instead
    report: Reporter | None = None   # what must be said while the run goes on (a blocked connection)
    size_hint: int | None = None     # the source's average body (management API): the prefetch's first guess


@dataclass(frozen=True)
class PassControl:
    """How a guarded replay (dlxtool.ops.canary) steers one pass, apart from the user's TransferOptions: built by
    the canary for each pass, never changed during it.

    `stop` is the run's stop event, shared with a watcher that stops the run from another thread (the brake) as
    Ctrl-C does; `read_at_most` caps the snapshot (a canary pass reads the DLQ's first messages only);
    `pace(received)` -> seconds to wait before taking the next delivery (--batch/--pause, with --rate), in place of
    TransferOptions.rate; `pick` wraps the decision (a canary pass picks its messages)."""

    stop: threading.Event | None = None
    read_at_most: int | None = None
    pace: Callable[[int], float] | None = None
    pick: Callable[[Decider], Decider] | None = None
