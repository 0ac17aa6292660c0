"""What a pass of the engine (dlxtool.ops.engine.Transfer) reports: its result, counted per message as each was
settled, and the progress it reports while it runs. Read by every command that moves messages (the pipeline's
MoveRun wraps it) and by the outcome that gives the exit code (dlxtool.ops.outcomes)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dlxtool.message_ids import MessageIds
from dlxtool.ops.stay import Why


@dataclass
class Progress:
    total: int
    done: int
    moved: int
    elapsed: float


@dataclass
class TransferResult:
    source: str
    snapshot: int
    moved: Counter[str] = field(default_factory=Counter[str])  # target -> count (confirmed and acked)
    ids: MessageIds = field(default_factory=MessageIds)    # the message ids of what moved or was removed
    removed: int = 0                                       # REMOVE: in the sink and acked
    kept: Counter[str] = field(default_factory=Counter[str])   # not selected (reason) -> count
    left: Counter[Why] = field(default_factory=Counter[Why])   # selected but stayed (reason) -> count
    unprocessed: int = 0          # not reached (limit, interrupt, error): still in the source, untouched
    requeued: int = 0             # delivered to us but returned untouched (beyond the snapshot, or at a stop)
    possible_duplicates: int = 0  # copies made whose source ack may not have reached the broker
    interrupted: bool = False
    error: str | None = None
    connection_lost: bool = False  # error came from the broker connection (else: a local error, e.g. the sink)
    refused_by_broker: str | None = None  # the broker refused where messages go (an exchange): the run stopped
    unavailable: str | None = None  # why it stopped: not now (publishing blocked by a resource alarm …)
    unavailable_hint: str | None = None  # what to do about it, where the cause said (else: the alarm's advice)
    # The connection was lost holding this many deliveries unacked: the broker returns them to the source when it
    # notices — at once if it saw the connection close, else (half-open) by `given_back_by` (epoch seconds: two
    # heartbeats); a rerun before then does not see them
    held_when_lost: int = 0
    # ... and up to this many more: deliveries the broker had sent that never reached us (on their way through a
    # stalled or half-open path when it was lost) are held for that connection too, within the prefetch left free
    # (the fault campaign: a stalled replay said 0 held while the broker held 16 for it until its heartbeat)
    held_on_the_way: int = 0
    given_back_by: float | None = None
    # "HOST:PORT refuses connections now" where the lost connection was (dlxtool.broker.connection.node_refuses):
    # that node, or the path to it (a tunnel, a port-forward), is down; a dead node's deliveries come back when the
    # cluster notices, not by a heartbeat (and a 3.10 quorum queue kept them until its leader moved)
    node_down: str | None = None
    source_deleted: bool = False   # the source queue was deleted during the run (its messages with it)
    republished: int = 0           # messages that stay, republished to the source's tail (the summary says so)
    elapsed: float = 0.0
    notes: list[str] = field(default_factory=list[str])  # what the operator should know of how the run went

    @property
    def changed(self) -> bool:
        """Whether the run changed anything: moved, removed, or republished a message to the source's tail."""
        return bool(self.moved_total or self.removed or self.republished)

    @property
    def moved_total(self) -> int:
        return sum(self.moved.values())

    @property
    def left_total(self) -> int:
        return sum(self.left.values())

    def left_by_kind(self) -> dict[str, int]:
        """What stayed, by the kind of its reason (dlxtool.ops.stay.Stay): what a script may branch on."""
        out: Counter[str] = Counter()
        for why, n in self.left.items():
            out[why.kind.value] += n
        return dict(out)

    @property
    def complete(self) -> bool:
        """True when nothing stayed behind for a reason other than the selection."""
        return not (self.left_total or self.interrupted or self.error)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source, "snapshot": self.snapshot, "moved": dict(self.moved),
            "moved_total": self.moved_total, "removed": self.removed, "kept": dict(self.kept),
            "left": dict(self.left), "left_total": self.left_total, "left_by_kind": self.left_by_kind(),
            "unprocessed": self.unprocessed,
            "requeued": self.requeued, "possible_duplicates": self.possible_duplicates,
            "interrupted": self.interrupted, "error": self.error, "elapsed_s": round(self.elapsed, 3),
            "refused_by_broker": self.refused_by_broker, "unavailable": self.unavailable,
            "source_deleted": self.source_deleted, "held_when_lost": self.held_when_lost,
            "held_on_the_way": self.held_on_the_way, "given_back_by": _iso(self.given_back_by),
            "node_down": self.node_down,
            "republished_to_tail": self.republished, "notes": list(self.notes),
        }


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds")
