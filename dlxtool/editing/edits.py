"""What an edit changed in each message, and the messages shown, found again when the replay reads the queue.

A message is found again by its fingerprint (dlxtool.ops.provenance.source_fingerprint: its body and properties,
not its headers, which a quorum queue adds to) together with its origin (`delivery_origin`: where it was
dead-lettered from, as the conventions read its headers). The fingerprint alone is not enough: one fanout publish
that fails in two queues leaves two dead letters with the same body and properties, one per origin, and the copy
shown must be the copy replayed. The replay's decider (dlxtool.ops.replay_decision) takes the
edit of each delivery it meets (`Edits.take`), applies it (`Edited.apply`: only the properties and headers that
changed are set or removed, the rest is the delivery's own) and replays the result as any other dead letter.
Each message shown carries the destination its question named (`Edited.destination`); the decider leaves one
whose destination changed meanwhile. Identical messages from one origin are matched in queue order. What is never
met again (consumed, purged, replayed by someone else meanwhile) is `Edits.remaining()`.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dlxtool.record import MessageRecord


@dataclass
class Edited:
    """One message of the document as saved: `number` in the document, its `position` in the queue when it was
    read, its `fingerprint`; the new body (None: unchanged), the properties and headers set and removed (a
    headers table whose names are not all text is replaced whole: `headers`)."""

    number: int
    position: int
    fingerprint: str
    original_body: bytes
    message_id: Any = None
    body: bytes | None = None
    set_properties: dict[str, Any] = field(default_factory=dict)
    unset_properties: tuple[str, ...] = ()
    set_headers: dict[Any, Any] = field(default_factory=dict)
    unset_headers: tuple[Any, ...] = ()
    headers: dict[Any, Any] | None = None  # the whole table, where it is replaced whole
    how: str = ""                          # how an edited body was made (BodyView.how_edited)
    diff: list[str] = field(default_factory=list)  # the section's unified diff (the document's lines)
    # Which delivery this is beside its fingerprint (delivery_origin of the message as read), and where it goes as
    # the question said: a queue or an exchange route's key; None where the run decides it (a wait queue's way out)
    origin: str | None = None
    destination: str | None = None
    destination_text: str = ""

    @property
    def changed(self) -> tuple[str, ...]:
        """What the edit changed: body, properties, headers (none: replayed as it is)."""
        parts = []
        if self.body is not None:
            parts.append("body")
        if self.set_properties or self.unset_properties:
            parts.append("properties")
        if self.set_headers or self.unset_headers or self.headers is not None:
            parts.append("headers")
        return tuple(parts)

    @property
    def original_sha256(self) -> str:
        return hashlib.sha256(self.original_body).hexdigest()

    def apply(self, record: MessageRecord) -> MessageRecord:
        """`record` (the delivery met again) with this edit's changes; the record itself where nothing changed."""
        if not self.changed:
            return record
        properties = dict(record.properties)
        for name in self.unset_properties:
            properties.pop(name, None)
        properties.update(self.set_properties)
        headers = dict(self.headers) if self.headers is not None else dict(record.headers or {})
        for name in self.unset_headers:
            headers.pop(name, None)
        headers.update(self.set_headers)
        return replace(record, body=self.body if self.body is not None else record.body, properties=properties,
                       headers=headers, decoded=None)

    def label(self) -> str:
        """`message 2 (position 1, message_id 'm-1')`, for what is said about it."""
        mid = f", message_id {self.message_id!r}" if self.message_id is not None else ""
        return f"message {self.number} (position {self.position}{mid})"


def delivery_origin(record: MessageRecord, conventions: Sequence[Any] = (),
                    origin_from: str | None = None) -> str | None:
    """Where a dead letter was dead-lettered from, as the conventions read its headers (no wait queue followed: the
    same answer when it is shown and when the replay meets it again): what tells twin copies apart."""
    from dlxtool.selection import explain_for_selection

    origins = explain_for_selection(record, conventions, origin_from).origins
    return " ".join(origins) if origins else None


class Edits:
    """The messages to replay, by fingerprint and origin, each taken once."""

    def __init__(self, edited: Iterable[Edited]) -> None:
        self.all = list(edited)
        self._waiting: dict[tuple[str, str | None], deque[Edited]] = {}
        for e in self.all:
            self._waiting.setdefault((e.fingerprint, e.origin), deque()).append(e)

    def take(self, fingerprint: str | None, origin: str | None) -> Edited | None:
        """The edit of the delivery with this fingerprint and origin (the next one, for identical messages), or
        None: it was not shown (it stays where it is)."""
        waiting = self._waiting.get((fingerprint, origin)) if fingerprint is not None else None
        if not waiting:
            return None
        return waiting.popleft()

    def remaining(self) -> list[Edited]:
        """The messages shown that the run never met again."""
        return sorted((e for q in self._waiting.values() for e in q), key=lambda e: e.number)

    def __len__(self) -> int:
        return len(self.all)

    def counts(self) -> dict[str, int]:
        """For the journal: messages in the run, how many were changed, and which parts."""
        changed = [e.changed for e in self.all]
        return {"edit_messages": len(self.all), "edited": sum(1 for c in changed if c),
                "bodies_edited": sum("body" in c for c in changed),
                "properties_edited": sum("properties" in c for c in changed),
                "headers_edited": sum("headers" in c for c in changed)}
