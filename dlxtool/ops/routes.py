"""Where RabbitMQ would route a message, read from the management API's exchanges and bindings.

Two questions replay (and history) ask:

* `dead_letter_drop(queue, key)`: would the next dead-lettering of a message with routing key `key`
  from `queue` reach a queue, or be dropped? (DESIGN: the default exchange changes the key to the
  queue name; a direct/topic dead-letter exchange then often routes it nowhere.)
* `through_wait_queue(queue, key, dlq)`: a message whose deaths are only TTL expiries waited in
  `queue`; which queue did that wait queue send it back to (the queue that processes it)?

Direct, topic and fanout exchanges, the default exchange, exchange-to-exchange bindings and
alternate exchanges (by argument) are followed. A headers exchange routes on the message's headers,
which these questions do not have: its answer is "unknown" (None), never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from dlxtool.errors import DlxtoolError, NotFoundError

MAX_HOPS = 8  # exchange-to-exchange bindings followed at most this deep (and never in a cycle)


class Management(Protocol):
    def get(self, path: str, **query: Any) -> Any: ...

    def queue(self, vhost: str, name: str) -> Any: ...


@dataclass(frozen=True)
class Resolved:
    queue: str | None
    why: str


def topic_matches(pattern: str, key: str) -> bool:
    """AMQP topic matching: words split on '.', '*' = one word, '#' = zero or more."""
    def match(p: list[str], k: list[str]) -> bool:
        if not p:
            return not k
        if p[0] == "#":
            return any(match(p[1:], k[i:]) for i in range(len(k) + 1))
        if not k:
            return False
        return (p[0] == "*" or p[0] == k[0]) and match(p[1:], k[1:])

    return match(pattern.split("."), key.split("."))


class Router:
    """Routing questions against one vhost, each exchange and queue read once (a replay asks per origin)."""

    def __init__(self, mgmt: Management, vhost: str) -> None:
        self.mgmt = mgmt
        self.vhost = vhost
        self._exchanges: dict[str, dict[str, Any] | None] = {}
        self._bindings: dict[str, list[dict[str, Any]]] = {}
        self._queues: dict[str, Any] = {}

    # -- reading the broker ---------------------------------------------------------------------------

    def _path(self, *parts: str) -> str:
        return "/".join(quote(p, safe="") for p in parts)

    def exchange(self, name: str) -> dict[str, Any] | None:
        if name not in self._exchanges:
            try:
                self._exchanges[name] = self.mgmt.get("exchanges/" + self._path(self.vhost, name or "amq.default"))
            except NotFoundError:
                self._exchanges[name] = None
        return self._exchanges[name]

    def bindings(self, exchange: str) -> list[dict[str, Any]]:
        if exchange not in self._bindings:
            self._bindings[exchange] = list(self.mgmt.get(
                "exchanges/" + self._path(self.vhost, exchange) + "/bindings/source") or [])
        return self._bindings[exchange]

    def queue(self, name: str) -> Any:
        """QueueInfo, or None when the queue does not exist."""
        if name not in self._queues:
            try:
                self._queues[name] = self.mgmt.queue(self.vhost, name)
            except NotFoundError:
                self._queues[name] = None
        return self._queues[name]

    # -- routing --------------------------------------------------------------------------------------

    def route(self, exchange: str, key: str) -> set[str] | None:
        """The queues a message with routing key `key` published to `exchange` would reach (empty: it
        would be unroutable), or None when that cannot be told (a headers exchange on the way)."""
        return self._route(exchange, key, set())

    def _route(self, exchange: str, key: str, seen: set[str]) -> set[str] | None:
        if exchange in seen or len(seen) > MAX_HOPS:
            return set()  # RabbitMQ visits an exchange once per publish
        seen.add(exchange)
        if exchange == "":  # the default exchange: the queue named by the key, if any
            return {key} if key and self.queue(key) is not None else set()
        ex = self.exchange(exchange)
        if ex is None:
            return set()
        kind = ex.get("type")
        if kind not in ("direct", "topic", "fanout"):
            return None
        matched = [b for b in self.bindings(exchange)
                   if kind == "fanout" or (b.get("routing_key", "") == key if kind == "direct"
                                           else topic_matches(b.get("routing_key", ""), key))]
        queues: set[str] = set()
        for binding in matched:
            if binding.get("destination_type") == "queue":
                queues.add(binding.get("destination", ""))
            else:
                more = self._route(binding.get("destination", ""), key, seen)
                if more is None:
                    return None
                queues |= more
        alternate = (ex.get("arguments") or {}).get("alternate-exchange")
        if not queues and alternate:
            return self._route(str(alternate), key, seen)
        return queues

    def dead_letter_drop(self, queue: str, key: str) -> str | None:
        """Why the next dead-lettering of a message with routing key `key` from `queue` would reach no
        queue (so RabbitMQ drops it), or None when it would reach one, has no dead-letter exchange, or
        cannot be told."""
        info = self.queue(queue)
        if info is None:
            return None  # the publish itself is returned: the message stays where it is
        dlx = info.dead_letter_exchange
        if dlx is None:
            return None
        fixed = info.dead_letter_routing_key
        reaches = self.route(str(dlx), str(fixed) if fixed is not None else key)
        if reaches is None or reaches:
            return None
        if fixed is not None:
            return f"its dead-letter exchange {dlx!r} routes its dead-letter routing key {fixed!r} to no queue"
        kind = (self.exchange(str(dlx)) or {}).get("type", "missing") if dlx else "default"
        return (f"its dead-letter exchange {dlx!r} ({kind}) routes routing key {key!r} to no queue: "
                "the next dead-lettering would drop the message")

    def through_wait_queue(self, queue: str, key: str | None, dlq: str) -> Resolved:
        """A message expired out of `queue` (with routing key `key` there) and its deaths say nothing else:
        follow where `queue` dead-letters to. Reaching `dlq` itself means it expired where it was meant
        to be consumed (a TTL on the work queue): that queue is the origin. Reaching one other queue
        means `queue` is a wait queue: the queue it sends messages back to is the origin."""
        try:
            info = self.queue(queue)
            if info is None:
                return Resolved(None, f"only TTL expiries, from {queue!r}, which no longer exists")
            dlx = info.dead_letter_exchange
            if dlx is None:
                if info.setting("message-ttl") is None:
                    # Not a wait queue (any more): nothing sends its messages anywhere, and no queue TTL would
                    # expire them there and drop them (no dead-letter exchange): it is where they belong.
                    return Resolved(queue, "expired there (it has no TTL and no dead-letter exchange now)")
                return Resolved(None, f"only TTL expiries, from {queue!r}, which has no dead-letter exchange now "
                                      "(its TTL would drop a replayed message)")
            fixed = info.dead_letter_routing_key
            use = str(fixed) if fixed is not None else key
            if use is None:
                return Resolved(None, f"only TTL expiries, from {queue!r}; the routing key it had there is not "
                                      "recorded")
            reaches = self.route(str(dlx), use)
        except DlxtoolError as exc:
            return Resolved(None, f"only TTL expiries, from {queue!r}; cannot read its routes ({exc.message})")
        where = f"{queue!r} dead-letters to exchange {dlx!r} with routing key {use!r}"
        if reaches is None:
            return Resolved(None, f"only TTL expiries: {where}, which routes on headers (cannot follow)")
        if dlq in reaches:
            return Resolved(queue, "expired there (it dead-letters to this DLQ)")
        if len(reaches) == 1:
            target = next(iter(reaches))
            return Resolved(target, f"after waiting in {queue!r} (its dead-letter route leads to {target!r})")
        if not reaches:
            return Resolved(None, f"only TTL expiries: {where}, which routes to no queue")
        return Resolved(None, f"only TTL expiries: {where}, which routes to several queues "
                              f"({', '.join(sorted(reaches))})")
