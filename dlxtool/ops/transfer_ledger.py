"""What each delivery of an engine pass became (dlxtool.ops.engine.Transfer): the deliveries held unacked, in
delivery-tag order, and the run's result counted as each settles.

A delivery is WAIT (decided, its copy — a publish, a republish to the tail — not settled yet), DONE (settled: to be
acked) or HOLD (stays unacked, given back in place when the pass ends: the channel close returns it at the head).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from dlxtool.message_ids import message_id_of
from dlxtool.ops.actions import Action, Decision
from dlxtool.ops.stay import Why
from dlxtool.ops.transfer_result import TransferResult
from dlxtool.record import MessageRecord

WAIT, DONE, HOLD = 0, 1, 2


@dataclass
class Item:
    """One delivery: its tag, properties (encoded bytes on the fast path, else pika's BasicProperties), body,
    record (where one was made), decision and state."""

    __slots__ = ("tag", "props", "body", "record", "decision", "state", "copy", "outcome_group", "routing_key")
    tag: int
    props: Any  # bytes | pika.BasicProperties (the codec's choice: dlxtool.broker.wire.codec)
    body: bytes
    record: MessageRecord | None
    decision: Decision | None
    state: int
    copy: bool            # a copy exists (or may) elsewhere until our ack is certain
    outcome_group: Why | None
    routing_key: str      # the delivery's: a message kept in the source keeps it (Transfer._keep)


def message_id(item: Item) -> str | None:
    """The message_id of a moved or removed message, for the journal: from the encoded properties on the fast
    path, else from the decoded ones."""
    props = item.props
    if type(props) is bytes:
        return message_id_of(props)
    found = getattr(props, "message_id", None)
    return found if isinstance(found, str) else None


def removes(item: Item) -> bool:
    return item.decision is not None and item.decision.action is Action.REMOVE


class Ledger:
    """The deliveries held unacked and what they became, counted into `result`."""

    def __init__(self, result: TransferResult) -> None:
        self.result = result
        self.items: deque[Item] = deque()  # unacked deliveries, in delivery-tag order
        self.held = 0                      # items to give back at the end (HOLD)
        self.waiting = 0                   # items whose copy is not settled yet (WAIT)
        self.lost_copies = 0               # given back while a copy may exist elsewhere (possible duplicates)

    def decided(self, item: Item) -> None:
        self.items.append(item)
        self.waiting += 1

    def untouched(self, tag: int, props: Any) -> None:
        """A delivery never decided (past the snapshot, or after a stop): given back untouched at the end."""
        self.items.append(Item(tag, props, b"", None, None, HOLD, False, None, ""))
        self.held += 1
        self.result.requeued += 1

    def done(self, item: Item, how: str) -> None:
        """Settled: "moved", "removed", or stays by a republish to the tail that the broker confirmed."""
        self.waiting -= item.state == WAIT
        item.state = DONE
        d = item.decision
        assert d is not None
        if how == "moved":
            self.result.moved[d.group] += 1
            self.result.ids.add(message_id(item))
        elif how == "removed":
            self.result.removed += 1
            self.result.ids.add(message_id(item))
        else:
            self.count_stayed(item, item.outcome_group or d.why)

    def count_stayed(self, item: Item, why: Why) -> None:
        d = item.decision
        if d is not None and d.action is Action.KEEP and item.outcome_group in (None, d.group):
            self.result.kept[d.group] += 1  # not selected: that is the selection, not a failure
        else:
            self.result.left[why] += 1

    def hold(self, item: Item, why: Why) -> None:
        """It stays unacked, given back in place at the end (it could not be copied to the tail, or need not)."""
        self.waiting -= item.state == WAIT
        item.state = HOLD
        self.held += 1
        self.count_stayed(item, why)
        # The broker gives it back (the close at the end): its bytes are not needed here until then.
        item.body, item.record = b"", None

    def not_removed(self, item: Item, why: Why) -> None:
        """A REMOVE settled but never acked goes back to the source with the rest: it was not removed after all
        (with a --backup its record is on disk too: a copy, item.copy)."""
        if item.state == DONE and removes(item):
            self.result.removed -= 1
            self.hold(item, why)

    def ackable(self, budget: int) -> tuple[list[Item], list[Item]]:
        """Up to `budget` settled deliveries, taken out to be acked: the settled run at the front (one multiple-ack
        covers it), then — where held ones are in between — settled ones behind them (acked one by one)."""
        items = self.items
        taken: list[Item] = []
        while items and items[0].state == DONE and len(taken) < budget:
            taken.append(items.popleft())
        singles: list[Item] = []
        if self.held and items:
            singles = [i for i in items if i.state == DONE][:max(0, budget - len(taken))]
            for item in singles:
                items.remove(item)
        return taken, singles

    def give_back_all(self, why: Why, unsettled: Why) -> int:
        """Every delivery still held goes back (the caller closes the channel): an unsettled copy stays with
        `unsettled`, a settled removal with `why`. Returns how many."""
        for item in self.items:
            if item.state == WAIT and item.decision is not None:
                self.hold(item, unsettled)
            else:
                self.not_removed(item, why)
            self.lost_copies += item.copy
        given_back = len(self.items)
        self.items.clear()
        return given_back
