"""The ids of the messages a run changed, for the journal: listed when few, else counted with a digest.

A run may move a million messages: the ids are not kept, only the first MAX_LISTED, their count, and a digest that
does not depend on their order (the sum of each id's SHA-256 modulo 2**256), so a list of ids found later (from a
backup file, the origin queue) can be checked against it. A message without a message_id property is counted as
such. `message_id_of` reads the property from the encoded properties the fast delivery path keeps, without
decoding the rest (a skip over each field before it)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

MAX_LISTED = 100
_MOD = 1 << 256


def id_digest(ids: Any) -> str:
    """The order-independent digest of `ids` (an iterable of str), as the journal records it."""
    total = 0
    for message_id in ids:
        total = (total + int.from_bytes(hashlib.sha256(message_id.encode("utf-8", "surrogateescape")).digest())) % _MOD
    return f"{total:064x}"


@dataclass
class MessageIds:
    count: int = 0            # messages with a message_id
    without: int = 0          # messages without one
    listed: list[str] = field(default_factory=list)
    _sum: int = 0

    def add(self, message_id: str | None) -> None:
        if not message_id:
            self.without += 1
            return
        self.count += 1
        if len(self.listed) < MAX_LISTED:
            self.listed.append(message_id)
        # summed as it comes, reduced once (to_json): a Python int takes a million of them
        self._sum += int.from_bytes(hashlib.sha256(message_id.encode("utf-8", "surrogateescape")).digest())

    def to_json(self) -> dict[str, Any]:
        """`message_ids` (all of them) when few; else their count and digest (and the first MAX_LISTED)."""
        out: dict[str, Any] = {}
        if self.count <= MAX_LISTED:
            out["message_ids"] = list(self.listed)
        else:
            out.update(message_ids_count=self.count, message_ids_digest=f"{self._sum % _MOD:064x}",
                       message_ids_first=list(self.listed))
        if self.without:
            out["without_message_id"] = self.without
        return out


def message_id_of(props: bytes) -> str | None:
    """The message_id property from encoded basic properties (flags first), or None (absent, or bytes that do not
    read as expected). Each field before it is skipped by its encoding: content-type and content-encoding
    (shortstr), headers (a 4-byte length, then the table), delivery-mode and priority (octets), correlation-id,
    reply-to and expiration (shortstr). Unrolled: it runs once per message moved."""
    try:
        flags = (props[0] << 8) | props[1]
        if not flags & 0x0080:
            return None
        pos = 2
        if flags & 0x8000:
            pos += 1 + props[pos]
        if flags & 0x4000:
            pos += 1 + props[pos]
        if flags & 0x2000:
            pos += 4 + int.from_bytes(props[pos:pos + 4])
        pos += (flags & 0x1000 != 0) + (flags & 0x0800 != 0)
        if flags & 0x0400:
            pos += 1 + props[pos]
        if flags & 0x0200:
            pos += 1 + props[pos]
        if flags & 0x0100:
            pos += 1 + props[pos]
        end = pos + 1 + props[pos]
        if end > len(props):
            return None
        return props[pos + 1:end].decode("utf-8", "surrogateescape")
    except IndexError:
        return None
