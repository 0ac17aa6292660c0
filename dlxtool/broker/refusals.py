"""The broker's "no", read: what RabbitMQ says when it closes a channel over something it was sent.

A channel close carries a reply code and a text ("406 PRECONDITION_FAILED - invalid expiration '-100':
{value_negative,-100}"). After it, nothing more comes on that channel: no confirm for what was in flight
(dlxtool.broker.publisher settles those at once), so it is an answer, never a reason to wait. The texts
below were taken from RabbitMQ 3.10.8, 4.0.5 and 4.3.6; tests/broker/test_refusals.py makes them happen on each
broker the suite runs (expiration, user_id, a missing and an internal exchange, and on 4.x a body over
max_message_size; a refused write permission is tests/cli/test_broker_refusals.py's; the header pattern is not made
to happen there: a header type RabbitMQ's parser does not know closes the connection, 541, not the channel). A text
they do not match is still said as the broker wrote it, only not pinned to one message.

A Refusal says which publish it was about where the text names something of the message (its expiration,
its user_id, its size, a header) or the exchange it went to (permission, a missing or internal exchange):
RabbitMQ handles a channel's publishes in order, so the first unsettled publish that fits is the refused
one — those before it were routed (their confirm is lost with the channel: maybe delivered), those after it
were never looked at (not delivered).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_EXPIRATION = re.compile(r"invalid expiration '(.*?)'")
_USER_ID = re.compile(r"user_id property set to '(.*?)' but authenticated user was '(.*?)'")
_SIZE = re.compile(r"message size (\d+) is larger than (?:configured )?max size (\d+)")
_HEADER = re.compile(r"unacceptable_type_in_header,\s*(?:<<)?\"?([^\",>]+)\"?")
_EXCHANGE = re.compile(r"(?:access to|no|internal) exchange '(.*?)' in vhost")
_INTERNAL = re.compile(r"cannot publish to internal exchange '(.*?)'")

ACCESS_REFUSED, NOT_FOUND, PRECONDITION_FAILED = 403, 404, 406


@dataclass(frozen=True)
class Refusal:
    """A channel close by the broker: `code`, `text` (as the broker said it), and what it names."""

    code: int | None
    text: str
    exchange: str | None = None    # the exchange refused (no write permission, missing, internal)
    expiration: str | None = None  # the expiration property refused
    user_id: str | None = None     # the user_id property refused (it is not the connection's user)
    size: int | None = None        # the body size refused …
    max_size: int | None = None    # … and the broker's max_message_size
    header: str | None = None      # a header of a type the broker refuses

    @classmethod
    def read(cls, code: int | None, text: str | None) -> Refusal:
        text = text or ""
        found: dict[str, Any] = {}
        if (m := _EXPIRATION.search(text)) is not None:
            found["expiration"] = m.group(1)
        if (m := _USER_ID.search(text)) is not None:
            found["user_id"] = m.group(1)
        if (m := _SIZE.search(text)) is not None:
            found["size"], found["max_size"] = int(m.group(1)), int(m.group(2))
        if (m := _HEADER.search(text)) is not None:
            found["header"] = m.group(1)
        if (m := _INTERNAL.search(text) or _EXCHANGE.search(text)) is not None:
            found["exchange"] = m.group(1)
        return cls(code, text, **found)

    @property
    def said(self) -> str:
        """What the broker said: "406 PRECONDITION_FAILED - invalid expiration …"."""
        return f"{self.code} {self.text}" if self.code is not None else self.text

    @property
    def per_message(self) -> bool:
        """The broker refused something of one message (its expiration, user_id, size, a header): the others
        may go on, on a new channel. Otherwise it refused where messages go (an exchange), or said too little."""
        return self.code == PRECONDITION_FAILED and any(
            v is not None for v in (self.expiration, self.user_id, self.size, self.header))

    def names_exchange(self, exchange: str) -> bool:
        """Whether the broker refused publishing to `exchange` ("" is the default exchange, amq.default)."""
        return self.exchange is not None and self.exchange == (exchange or "amq.default")

    def refuses(self, exchange: str, body_size: int, properties: Any) -> bool:
        """Whether this refusal can be about a publish of a body of `body_size` bytes to `exchange` with these
        (pika) properties. False where the refusal names nothing of a message (then no publish is pinned)."""
        if self.exchange is not None:
            return self.names_exchange(exchange)
        if self.expiration is not None:
            return getattr(properties, "expiration", None) == self.expiration
        if self.user_id is not None:
            return getattr(properties, "user_id", None) == self.user_id
        if self.size is not None:
            return body_size == self.size
        if self.header is not None:
            return self.header in (getattr(properties, "headers", None) or {})
        return False
