"""The ids of the messages a run changed, for the journal: listed when few, else counted with a digest.

A run may move a million messages: the ids are not kept, only the first MAX_LISTED, their count, and a digest that
does not depend on their order (the sum of each id's SHA-256 modulo 2**256), so a list of ids found later (from a
backup file, the origin queue) can be checked against it. A message without a message_id property is counted as
such. `message_id_of` reads the property from the encoded properties the fast delivery path keeps, without
decoding the rest (a skip over each field before it)."""

from __future__ import annotations

import hashlib
import json
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

    def add_digest(self, other: MessageIds) -> None:
        """Add `other`'s digest to this one's: the digest is a sum, so two runs' ids merge by adding."""
        self._sum += other._sum

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


# -- naming one message (tables, --message-id, dry-run lists) ------------------------------------------------------

FINGERPRINT_PREFIX = "fp:"
NAME_HELP = ("a message's name is its message_id property, else fp: and the 16 hex digits of its fingerprint: a "
             "hash of its body and properties without the headers, so it stays the same however often the message "
             "is dead-lettered or peeked (the `src` a replay records in its provenance header)")


def fingerprint_name(record: Any) -> str | None:
    """'fp:' + the replay fingerprint of a record (dlxtool.ops.provenance.record_fingerprint: body and properties,
    not the headers), or None where its properties cannot be encoded."""
    from dlxtool.ops.provenance import record_fingerprint

    fingerprint = record_fingerprint(record)
    return None if fingerprint is None else FINGERPRINT_PREFIX + fingerprint


def message_name(record: Any) -> str:
    """What names a message in a table, a dry run's list and --message-id: its message_id property when it has one
    (text), else its fingerprint name ('fp:…'; '?' where even that cannot be made)."""
    message_id = record.properties.get("message_id")
    if isinstance(message_id, bytes | bytearray):
        message_id = bytes(message_id).decode("utf-8", "replace")
    if isinstance(message_id, str) and message_id:
        return message_id
    return fingerprint_name(record) or "?"


def is_fingerprint_name(text: str) -> bool:
    """'fp:' and 8 to 16 hex digits (a prefix of the fingerprint is enough, as with git's short hashes)."""
    digits = text[len(FINGERPRINT_PREFIX):]
    return (text.startswith(FINGERPRINT_PREFIX) and 8 <= len(digits) <= 16
            and not digits.strip("0123456789abcdefABCDEF"))


def read_id_lines(lines: Any, where: str) -> list[str]:
    """Message ids from a file's lines (--message-ids FILE): one a line, surrounding blanks dropped, empty lines
    skipped. A line of JSON text ("o-1", as `jq` prints without -r) is read as that text."""
    out: list[str] = []
    for number, raw in enumerate(lines, 1):
        line = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else str(raw)
        line = line.strip()
        if not line:
            continue
        if len(line) >= 2 and line[0] == line[-1] == '"':
            try:
                line = str(json.loads(line))
            except ValueError:
                from dlxtool.errors import UsageError

                raise UsageError(f"{where}, line {number}: {line[:60]!r} starts and ends with a quote but is not a "
                                 "JSON string", hint="one message id a line, as is (jq -r prints them so)") from None
        out.append(line)
    return out
