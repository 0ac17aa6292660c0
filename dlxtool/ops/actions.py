"""What the one-pass engine (dlxtool.ops.engine) does with a message — an Action, in a Decision that a decider
(replay's, purge's, a route check) returns for each record. Apart from the engine so that the deciders and
the route checks (dlxtool.ops.routes) need not import the engine itself."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dlxtool.ops.stay import NOT_SELECTED, Why

if TYPE_CHECKING:  # at run time the model is the engine's business: the queue survey needs only Action
    from dlxtool.broker.pika_types import BasicProperties
    from dlxtool.record import MessageRecord


class Action(enum.Enum):
    MOVE = "move"
    REMOVE = "remove"
    KEEP = "keep"
    LEAVE = "leave"


@dataclass(slots=True)
class Decision:
    action: Action
    group: str = ""              # summary key: the target (MOVE) or the reason (KEEP/LEAVE)
    exchange: str = ""
    routing_key: str = ""
    # to publish with (MOVE): pika's BasicProperties, or already encoded (a raw decider's splice: replay_raw)
    properties: BasicProperties | bytes | None = None
    body: bytes | None = None    # default: the source body
    record: MessageRecord | None = None  # what the sink writes (default: the source record)
    # LEAVE: the broker would refuse the message as it is (another user's user_id), so it cannot stay by being
    # republished to the source's tail either: it is held and given back in place
    hold: bool = False

    @property
    def why(self) -> Why:
        """Why a KEEP or LEAVE stays (its group)."""
        group = self.group
        assert isinstance(group, Why), "a KEEP or LEAVE decision's group is its Why"
        return group

    @classmethod
    def keep(cls, why: Why = NOT_SELECTED) -> Decision:
        return cls(Action.KEEP, why)

    @classmethod
    def leave(cls, why: Why, *, hold: bool = False) -> Decision:
        return cls(Action.LEAVE, why, hold=hold)


Decide = Callable[["MessageRecord"], Decision]
# A decider's fast path (its `raw`, which the engine reads where there is one): decide(routing key, encoded properties,
# body) on the bytes of a delivery, None where decide(record) must answer instead. The routing key is bytes where it is
# not UTF-8.
RawDecide = Callable[[str | bytes, bytes, bytes], Decision | None]


class Decider(Protocol):
    """What a MovePolicy decides with (dlxtool.ops.pipeline): decide(record), and its fast form on the bytes, `raw`
    (RawDecide), declared by every decider — None where it has none for this run (the engine then calls it)."""

    def __call__(self, record: MessageRecord, /) -> Decision: ...

    @property
    def raw(self) -> RawDecide | None: ...


@dataclass(frozen=True, slots=True)
class Deciding:
    """A plain decide function as a Decider: `raw` its fast form, if any (None: decide(record) only)."""

    decide: Decide
    raw: RawDecide | None = None

    def __call__(self, record: MessageRecord, /) -> Decision:
        return self.decide(record)
