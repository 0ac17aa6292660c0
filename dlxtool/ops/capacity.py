"""Destination capacity: how many messages a queue with a length limit takes before it displaces its own.

A queue with `x-max-length` / `x-max-length-bytes` (argument or policy, operator policies included; the
stricter of argument and policy applies) acts on overflow:

    drop-head           (the default) makes room by dead-lettering — or dropping — its OLDEST messages:
                        healthy messages pushed out by a replay/load/move into it.
    reject-publish-dlx  nacks the publish AND dead-letters a copy of it (seen on 3.10: the nacked message
                        arrives in the DLX's queue with reason maxlen): the original stays with us, a copy
                        comes back through the dead-letter exchange — a duplicate in the DLQ.
    reject-publish      nacks the publish, nothing else: the engine keeps the message where it was.

So for drop-head and reject-publish-dlx destinations we move only what fits; the rest stays where it is,
with the reason. `allow_displace` accepts the displacement knowingly.

What counts against the limit (checked on RabbitMQ 3.10, classic and quorum alike): the READY messages only
— messages held unacked by consumers are not counted — and for bytes, the message BODIES only (a 5-byte body
with 500 bytes of headers counts 5). Messages held unacked come back if their consumer rejects them with
requeue or disconnects, and a drop-head queue then drops its head; so we count them too (conservative: the
room shown is what is free even if every consumer gave its messages back).

The ready count is read with a passive declare (exact, current); unacked and byte figures come from the
management API (sampled, up to a few seconds old). Depth moves during a run: the room is counted down per
publish from the figures at the start, and when it runs out the ready count is read again (at most once a
second per queue), minus every publish still in flight (it may or may not be counted yet). Producers that
publish into the destination during the run can still fill it behind our back: that is the one case this
cannot see.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlxtool import waits
from dlxtool.broker.management import POLICIES_PENDING, STATS_WAIT, ManagementClient, QueueInfo
from dlxtool.errors import DlxtoolError, ManagementMismatch, RefusedError
from dlxtool.json_shapes import is_object
from dlxtool.ops.stay import Stay, Why

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection

DROP_HEAD = "drop-head"
REJECT_PUBLISH = "reject-publish"
REJECT_PUBLISH_DLX = "reject-publish-dlx"
DISPLACING = (DROP_HEAD, REJECT_PUBLISH_DLX)  # overflow modes that hurt messages when a publish does not fit
EFFECT = {DROP_HEAD: "drop-head would push out its head",
          REJECT_PUBLISH_DLX: "reject-publish-dlx would dead-letter a copy of each refused publish"}
ALLOW_HINT = "--allow-displace accepts that (the queue then pushes out its oldest messages, or dead-letters copies)"
MISSING = "queue missing"
# A queue whose limits cannot be read (no management API, or it would not answer) may be a full drop-head
# queue: publishing into it could push out its head, so nothing goes there unless --allow-displace says so.
UNREAD = "limits unknown, it may push out its head"
REREAD_EVERY = 1.0  # seconds between two reads of one queue's depth when its room runs out
# A byte-limited queue whose body bytes the API does not give (no sample yet; none kept where statistics are off)
BYTES_UNKNOWN = "body bytes unknown: no figures from the management API (none yet, or statistics off): counted as full"


@dataclass
class Capacity:
    """One destination queue's limits and depth, and the room they leave (None: unlimited or unknown)."""

    queue: str
    max_length: int | None = None
    max_bytes: int | None = None
    overflow: str = DROP_HEAD
    ready: int = 0              # passive declare: exact
    unacked: int = 0            # management API: sampled
    body_bytes: int = 0         # management API: ready + unacked body bytes, sampled
    known: bool = True          # False: the limits could not be read (no management API)
    note: str | None = None

    @property
    def limited(self) -> bool:
        """A length limit is set (messages or body bytes)."""
        return self.max_length is not None or self.max_bytes is not None

    @property
    def unreadable(self) -> bool:
        """The queue exists but its limits could not be read: it may be a full drop-head queue."""
        return not self.known and self.note != MISSING

    @property
    def guarded(self) -> bool:
        """Whether publishing beyond the room would (or, unread, might) displace or duplicate messages."""
        if self.unreadable:
            return True  # safe by default: an unread limit is treated as no room (--allow-displace accepts)
        return self.overflow in DISPLACING and self.limited

    @property
    def depth(self) -> int:
        return self.ready + self.unacked

    @property
    def room(self) -> int | None:
        """Messages that fit now by count (None: no length limit; 0 when the limits could not be read)."""
        if self.unreadable:
            return 0
        return None if self.max_length is None else max(0, self.max_length - self.depth)

    @property
    def room_bytes(self) -> int | None:
        return None if self.max_bytes is None else max(0, self.max_bytes - self.body_bytes)

    def limits(self) -> str:
        parts = [f"max-length {self.max_length}"] if self.max_length is not None else []
        parts += [f"max-length-bytes {self.max_bytes}"] if self.max_bytes is not None else []
        return ", ".join(parts + [self.overflow]) if parts else "no length limit"

    def describe(self) -> str:
        """For the plan: "room 0 (max-length 3, drop-head; 3 ready, 0 unacked)"."""
        if not self.known:
            return f"room unknown ({self.note})" if self.note else "room unknown"
        if not self.limited:
            return "no limit"
        rooms = [f"{self.room}" if self.room is not None else "", f"{self.room_bytes} body bytes"
                 if self.room_bytes is not None else ""]
        room = " and ".join(r for r in rooms if r)
        depth = f"{self.ready} ready, {self.unacked} unacked" + (
            f", {self.body_bytes} body bytes" if self.max_bytes is not None else "")
        how = "" if self.guarded else ": a publish that does not fit is nacked and stays"
        note = f"; {self.note}" if self.note else ""
        return f"room {room} ({self.limits()}; {depth}{note}){how}"

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.queue, "max_length": self.max_length, "max_length_bytes": self.max_bytes,
                "overflow": self.overflow, "ready": self.ready, "unacked": self.unacked,
                "body_bytes": self.body_bytes, "room": self.room, "room_bytes": self.room_bytes,
                "guarded": self.guarded, "known": self.known, "note": self.note}




def from_info(info: QueueInfo, ready: int) -> Capacity:
    """Limits from the management API's view of the queue (arguments and effective policy), depth from
    `ready` (a passive declare) and the sampled unacked / body byte counts."""
    raw = info.raw
    return Capacity(
        queue=info.name,
        max_length=_int(info.setting("max-length")),
        max_bytes=_int(info.setting("max-length-bytes")),
        overflow=str(info.setting("overflow") or DROP_HEAD),
        ready=ready,
        unacked=info.messages_unacked,
        body_bytes=int(raw.get("message_bytes_ready") or 0) + int(raw.get("message_bytes_unacknowledged") or 0),
        # without the API's figures (statistics off) the unacked count reads 0: say it is not known
        note=None if info.figures_known else "unacked count unknown (the management API has no figures): not counted",
    )


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def read(mgmt: ManagementClient | None, vhost: str, queue: str, ready: Callable[[str], int | None]) -> Capacity:
    """The queue's capacity; `ready(queue)` is its exact ready count (None: the queue does not exist)."""
    count = ready(queue)
    if count is None:
        return Capacity(queue, known=False, note=MISSING)
    if mgmt is None:
        return Capacity(queue, ready=count, known=False, note="no management API: its limits cannot be read")
    try:
        info = mgmt.queue(vhost, queue, settled=True)
        if not info.policies_known:
            return Capacity(queue, ready=count, known=False, note=POLICIES_PENDING)
        if _int(info.setting("max-length-bytes")) is not None:
            info = _current_bytes(mgmt, vhost, queue, info, count)
        cap = from_info(info, count)
    except ManagementMismatch:
        raise  # the API answers for another broker now: exit 3, not a reason to stay
    except DlxtoolError as exc:
        return Capacity(queue, ready=count, known=False, note=f"management API: {exc.message}")
    if cap.max_bytes is not None:
        _ready_bytes(cap, info)
    return cap




def _bytes_sample(info: QueueInfo) -> int | None:
    """How many ready messages the byte figure counts. The API's messages_ready and message_bytes_ready come
    from different samples (seen on 3.10: "1 ready, 0 bytes" for 1.6 s); a classic queue's
    backing_queue_status.len comes with its bytes. Elsewhere messages_ready is the best there is."""
    if info.raw.get("message_bytes_ready") is None:
        return None
    status = info.raw.get("backing_queue_status")
    counted = int(status["len"]) if is_object(status) and isinstance(status.get("len"), int) else info.messages_ready
    # Ready messages and no body bytes: the bytes come from an older sample than the count (seen on 4.0.5 under load:
    # "1 ready, 0 body bytes", room for a body that then pushed the queue's head out). Not a sample of those messages
    # (a queue of empty bodies only is counted as full for it: safe).
    return None if counted and not info.raw.get("message_bytes_ready") else counted


def _current_bytes(mgmt: ManagementClient, vhost: str, queue: str, info: QueueInfo, ready: int) -> QueueInfo:
    """Wait (a little) for a byte sample that counts the ready messages we count."""
    wait = waits.Wait(f"the management API's byte sample of {queue!r} to count its {ready} ready message(s)",
                      STATS_WAIT, 0.5)
    while _bytes_sample(info) != ready and wait.pause():
        info = mgmt.queue(vhost, queue)
    return info


def _ready_bytes(cap: Capacity, info: QueueInfo) -> None:
    """When the sample still counts other messages than the queue holds now (producers, consumers at work),
    scale its ready bytes to the exact count; with no sample to scale, count the queue as full by bytes."""
    sampled = _bytes_sample(info)
    if sampled == cap.ready:
        return
    unacked_bytes = int(info.raw.get("message_bytes_unacknowledged") or 0)
    if sampled:
        ready_bytes = int(info.raw.get("message_bytes_ready") or 0)
        cap.body_bytes = -(-ready_bytes * cap.ready // sampled) + unacked_bytes
        cap.note = f"body bytes estimated from a sample of {sampled} messages"
    elif cap.ready:
        cap.body_bytes = cap.max_bytes or 0
        cap.note = BYTES_UNKNOWN


def ready_counter(conn: AmqpConnection, timeout: float) -> Callable[[str], int | None]:
    """ready(queue) by passive declare on a throwaway channel (None: no such queue)."""
    from dlxtool.broker import queues

    return lambda queue: queues.ready(conn, queue, timeout)


# admit(destination queue, body size, publishes in flight) -> None: it may go; else why it stays (RunHooks.admit)
Admit = Callable[[str, int, int], Why | None]

def full_reason(role: str, cap: Capacity) -> Why:
    """The reason a message stays: "origin full (drop-head would push out its head): small.q"; where the queue only
    counts as full because its body bytes are not known, that is said too."""
    if cap.unreadable:
        return Why(f"{role} {UNREAD} ({cap.note}): {cap.queue}", Stay.DESTINATION_FULL)
    unknown = f" ({BYTES_UNKNOWN})" if cap.note == BYTES_UNKNOWN else ""
    return Why(f"{role} full ({EFFECT.get(cap.overflow, cap.overflow)}): {cap.queue}{unknown}", Stay.DESTINATION_FULL)


@dataclass
class Rooms:
    """The per-message hook of a run: admit(queue, body size, publishes in flight) → None to publish, or the
    reason it stays. Counts the room down per publish; reads the depth again when it runs out."""

    lookup: Callable[[str], Capacity]
    role: str = "destination"                    # "origin" for replay, as in the reason
    reread: Callable[[str], int | None] | None = None
    allow_displace: bool = False
    caps: dict[str, Capacity] = field(default_factory=dict[str, Capacity])
    admitted: Counter[str] = field(default_factory=Counter[str])   # guarded queues only
    refused: Counter[str] = field(default_factory=Counter[str])
    # guarded queue -> [messages, bytes] left
    _left: dict[str, list[int | None]] = field(default_factory=dict[str, list[int | None]])
    _read_at: dict[str, float] = field(default_factory=dict[str, float])
    # queues that take anything: the per-message fast path
    _free: set[str] = field(default_factory=set[str])

    def capacity(self, queue: str) -> Capacity:
        cap = self.caps.get(queue)
        if cap is None:
            cap = self.caps[queue] = self.lookup(queue)
            self._read_at[queue] = time.monotonic()
            if self.allow_displace or not cap.guarded:
                self._free.add(queue)
            else:
                self._left[queue] = [cap.room, cap.room_bytes]
        return cap

    def forget(self) -> None:
        """Read every queue again at its next message: a plan's figures are old once the user has read it."""
        self.caps.clear()
        self._free.clear()
        self._left.clear()

    def admit(self, queue: str, size: int, in_flight: int = 0) -> Why | None:
        if queue in self._free:  # the per-message fast path
            return None
        return self.admit_all((queue,), size, in_flight)

    def admit_all(self, queues: tuple[str, ...], size: int, in_flight: int = 0) -> Why | None:
        """One publish that reaches every queue of `queues` (an exchange route): it goes only if it fits in
        each of them, and then takes room in each."""
        guarded = [q for q in queues if q not in self._free]
        for queue in guarded:
            if self._left.get(queue) is None:
                self.capacity(queue)
        guarded = [q for q in guarded if q not in self._free]
        for queue in guarded:
            left = self._left[queue]
            if not _fits(left, size):
                self._reread(queue, in_flight)  # consumers may have made room meanwhile
                if not _fits(left, size):
                    self.refused[queue] += 1
                    return full_reason(self.role, self.caps[queue])
        for queue in guarded:
            left = self._left[queue]
            if left[0] is not None:
                left[0] -= 1
            if left[1] is not None:
                left[1] -= size
            self.admitted[queue] += 1
        return None

    def _reread(self, queue: str, in_flight: int) -> None:
        """Read the ready count again (bytes stay counted down: the byte figures are sampled and could be
        older than our own publishes). Publishes still in flight may not be counted in it yet: count them as
        taking room (maybe twice: conservative)."""
        cap = self.caps[queue]
        now = time.monotonic()
        if self.reread is None or cap.max_length is None or now - self._read_at.get(queue, 0) < REREAD_EVERY:
            return
        self._read_at[queue] = now
        ready = self.reread(queue)
        if ready is None:
            return
        cap.ready = ready
        self._left[queue][0] = max(0, (cap.room or 0) - in_flight)

    def stayed(self) -> int:
        return sum(self.refused.values())

    def nack_copies(self, queue: str) -> str | None:
        """Why a publish `queue` nacked may have been dead-lettered by it as well (x-overflow
        reject-publish-dlx: the broker refuses the publish and dead-letters the message, a copy in its DLX's
        queues — the DLQ it came from, for a replay — or its limits are not known); None when it cannot. Room
        counted at the start can be taken by producers meanwhile, so such a nack is a possible duplicate."""
        cap = self.caps.get(queue)
        if cap is None or cap.unreadable:
            return "its limits are not known: it may have dead-lettered a copy as well"
        if cap.overflow == "reject-publish-dlx" and cap.limited:  # no limit refuses nothing: not the cause
            return "its x-overflow reject-publish-dlx dead-letters a refused message: a copy went there as well"
        return None

    def nack_cause(self, queue: str) -> Why | None:
        """Why `queue` nacked a publish when its own limits cannot have refused it (read, and none set to
        reject-publish: a drop-head queue never refuses), else None (the generic "nacked"). The broker then nacks
        because the queue cannot take a message now: measured on a 3.10.8 cluster, a replay started just after
        the node leading its quorum origin was killed had every publish nacked (345 of 345, in 0.4 s), and a rerun
        seconds later moved them all. Not full, not refused: not now (exit 7, Stay.not_now)."""
        cap = self.caps.get(queue)
        if cap is None or not cap.known or (cap.limited and cap.overflow in (REJECT_PUBLISH, REJECT_PUBLISH_DLX)):
            return None
        return Why(f"nacked by {queue}, which no limit of its own explains ({cap.limits()}): it cannot take messages "
                   "now (a quorum queue without a leader, while a member's node is down or an election is under "
                   "way, or a queue whose node is down)", Stay.DESTINATION_DOWN)

    def to_json(self) -> dict[str, Any]:
        return {q: {**c.to_json(), "admitted": None if q in self._free else self.admitted[q],
                    "stayed_full": self.refused[q]} for q, c in sorted(self.caps.items())}


def _fits(left: list[int | None], size: int) -> bool:
    return (left[0] is None or left[0] >= 1) and (left[1] is None or left[1] >= size)


def refuse_when_no_room(caps: list[Capacity], role: str, allow_displace: bool) -> None:
    """Before anything moves (purge --move-to, load): refuse (exit 6) when no destination has room at all."""
    if allow_displace or not caps:
        return
    full = [c for c in caps if c.guarded and (c.room == 0 or c.room_bytes == 0)]
    if len(full) == len(caps):
        raise RefusedError("; ".join(f"{full_reason(role, c)} — {c.describe()}" for c in full)
                           + ": nothing would be moved", hint=ALLOW_HINT)


def rooms(conn: AmqpConnection, mgmt: ManagementClient | None, vhost: str, timeout: float, *, role: str,
          allow_displace: bool = False) -> Rooms:
    """The Rooms of a run whose destinations are on `conn` (limits from `mgmt`, depth by passive declare)."""
    ready = ready_counter(conn, timeout)
    return Rooms(lambda queue: read(mgmt, vhost, queue, ready), role=role, reread=ready,
                 allow_displace=allow_displace)
