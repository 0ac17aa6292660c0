"""Which queues are dead-letter queues, and which are retry (wait) stages, from the topology alone: queue settings
(arguments, policies and operator policies: the API's effective definition), exchanges and bindings. Pure: the
listings come from dlxtool.ops.queues; no message is read (a read on a quorum queue costs a delivery attempt on
3.x, and a queue name says nothing RabbitMQ acts on).

A queue dead-letters through its dead-letter exchange with its dead-letter routing key, or, without one, with
the key each message came with: the keys it is bound with (a topic binding's pattern stands for every key that
matches it; a fanout or headers binding for any key) and its own name (the default exchange). Where that leads is
the route RabbitMQ would take (dlxtool.ops.routes.Router: direct, topic, fanout, exchange-to-exchange bindings,
alternate exchanges, the default exchange), keeping the maybes: an exchange that routes on more than the key
(headers) counts every binding.

  wait  a retry stage: nobody consumes it (the API's count), messages leave it by expiring (a message TTL, or
        per-message expiration where no consumer ever took one from it), and its dead-letter route leads to a
        queue they go back to be processed in: one that is consumed, or that dead-letters back here (a retry
        loop), or that dead-letters on elsewhere itself (a work queue, whose failures go there).
  dlq   a dead-letter target of some queue that is not a retry stage, and not a retry stage itself.

What the topology cannot show — an application that moves failed messages into a queue itself — peek and history
tell from the messages (dlxtool.ops.dead_letter_roles.unpredicted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dlxtool.errors import DlxtoolError, ManagementMismatch
from dlxtool.ops.routes import ANY_KEY, Key, Router


class QueueRow(Protocol):
    """What the roles read of a queue row and set on it (dlxtool.ops.queue_flags.QueueRow is one): here as a
    protocol, so that the rows' module may use the roles without the two needing each other."""

    vhost: str
    queue: str
    type: str
    dead_letter_exchange: str | None
    dead_letter_routing_key: str | None
    message_ttl: int | None
    consumers: int
    consumer_deliveries: int
    figures_known: bool
    role: str | None
    role_reason: str | None

ROLES = ("dlq", "wait")
SHOWN_SOURCES = 3  # a DLQ's reason names this many of the queues that dead-letter into it, then counts the rest


@dataclass
class Listings:
    """One vhost's routing as the management API listed it."""

    # name -> {"type", "arguments"}
    exchanges: dict[str, dict[str, Any]] = field(default_factory=dict[str, dict[str, Any]])
    # source exchange -> its bindings
    bindings: dict[str, list[dict[str, Any]]] = field(default_factory=dict[str, list[dict[str, Any]]])
    # queue -> the bindings into it (read for the queues whose dead-letter key is the message's own:
    # dead_letter_keys)
    into: dict[str, list[dict[str, Any]]] = field(default_factory=dict[str, list[dict[str, Any]]])

    @classmethod
    def from_api(cls, exchanges: Iterable[Mapping[str, Any]], bindings: Iterable[Mapping[str, Any]]) -> Listings:
        """From API rows (exchange rows with name/type/arguments; binding rows with source/destination/
        destination_type/routing_key)."""
        out = cls()
        for ex in exchanges:
            out.exchanges[str(ex.get("name", ""))] = dict(ex)
        for b in bindings:
            out.add_binding(b)
        return out

    def add_binding(self, b: Mapping[str, Any]) -> None:
        row = dict(b)
        if row.get("source"):  # the default exchange's implicit bindings: routed by name anyway
            self.bindings.setdefault(str(row["source"]), []).append(row)
        if row.get("destination_type", "queue") == "queue":
            self.into.setdefault(str(row.get("destination", "")), []).append(row)


class ListedRouter(Router):
    """Router answering from listings read once (no request per exchange)."""

    def __init__(self, vhost: str, listings: Listings, queues: Iterable[str]) -> None:
        super().__init__(None, vhost)  # type: ignore[arg-type]  # never asks: every read is overridden
        self.listings = listings
        self.queue_names = set(queues)

    def exchange(self, name: str) -> dict[str, Any] | None:
        return self.listings.exchanges.get(name)

    def bindings(self, exchange: str) -> list[dict[str, Any]]:
        return self.listings.bindings.get(exchange, [])

    def has_queue(self, name: str) -> bool:
        return name in self.queue_names


def needs_keys(row: QueueRow, listings: Listings) -> bool:
    """Whether where `row` dead-letters to depends on the keys its messages come with (so the bindings into it are
    to be read): a dead-letter exchange that routes on the key (the default exchange: the key names the queue), and
    no dead-letter routing key."""
    if row.dead_letter_exchange is None or row.dead_letter_routing_key is not None or row.type == "stream":
        return False
    kind = (listings.exchanges.get(row.dead_letter_exchange) or {}).get("type")
    return row.dead_letter_exchange == "" or kind in ("direct", "topic")


def dead_letter_keys(row: QueueRow, listings: Listings) -> list[Key]:
    """The routing keys `row`'s dead letters go out with: its dead-letter routing key, else the keys its messages
    came with — its own name (published on the default exchange) and those of the bindings into it (a topic
    binding: the keys matching its pattern; fanout, headers…: any key)."""
    if row.dead_letter_routing_key is not None:
        return [Key(row.dead_letter_routing_key)]
    keys = {Key(row.queue)}
    for b in listings.into.get(row.queue, []):
        kind = (listings.exchanges.get(str(b.get("source", ""))) or {}).get("type")
        key = str(b.get("routing_key", ""))
        keys.add(Key(key) if kind == "direct" else Key(key, pattern=True) if kind == "topic" else ANY_KEY)
    return sorted(keys, key=lambda k: (k.pattern, k.text))


@dataclass
class Edges:
    """Where each queue of one vhost dead-letters to (itself left out), and what was taken on trust on the way."""

    targets: dict[str, set[str]] = field(default_factory=dict[str, set[str]])
    notes: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    _sources: dict[str, list[str]] | None = field(default=None, repr=False)

    def sources(self, queue: str) -> list[str]:
        if self._sources is None:  # once: every queue asks
            self._sources = {}
            for source, targets in sorted(self.targets.items()):
                for target in targets:
                    self._sources.setdefault(target, []).append(source)
        return self._sources.get(queue, [])


def dead_letter_edges(rows: Sequence[QueueRow], listings: Listings) -> Edges:
    """The dead-letter routes of one vhost's queues (rows), followed through its listings."""
    router = ListedRouter(rows[0].vhost if rows else "", listings, (r.queue for r in rows))
    edges = Edges()
    for row in rows:
        if row.dead_letter_exchange is None or row.type == "stream":  # streams never dead-letter
            continue
        reached: set[str] = set()
        notes: list[str] = []
        for key in dead_letter_keys(row, listings):
            found, said = router.may_reach(row.dead_letter_exchange, key)
            reached |= found
            notes += [n for n in said if n not in notes]
        reached.discard(row.queue)
        if reached:
            edges.targets[row.queue] = reached
            edges.notes[row.queue] = notes
    return edges


class Roles:
    """role -> reason for each queue of one vhost (dlq, wait, or none)."""

    def __init__(self, rows: Sequence[QueueRow], edges: Edges) -> None:
        self.rows = {r.queue: r for r in rows}
        self.edges = edges
        self._onward: dict[str, set[str]] = {}
        self._wait: dict[str, str | None] = {}

    def of(self, queue: str) -> tuple[str, str] | None:
        wait = self.wait_reason(queue)
        if wait is not None:
            return "wait", wait
        sources = [s for s in self.edges.sources(queue) if self.wait_reason(s) is None]
        if not sources:
            return None
        named = ", ".join(sources[:SHOWN_SOURCES]) + (f" and {len(sources) - SHOWN_SOURCES} more"
                                                       if len(sources) > SHOWN_SOURCES else "")
        notes = sorted({n for s in sources for n in self.edges.notes.get(s, [])})
        return "dlq", f"target of {named}" + (f" ({'; '.join(notes)})" if notes else "")

    def wait_reason(self, queue: str) -> str | None:
        if queue not in self._wait:
            self._wait[queue] = self._wait_reason(queue)
        return self._wait[queue]

    def _wait_reason(self, queue: str) -> str | None:
        row = self.rows.get(queue)
        if row is None or not waits(row):
            return None
        how = (f"message TTL {row.message_ttl} ms" if row.message_ttl is not None else
               "no consumer ever took a message from it: they leave by per-message expiration")
        for target in sorted(self.edges.targets.get(queue, ())):
            back = self._goes_back(row, target)
            if back:
                return f"retry stage ({how}): dead-letters to {target}, {back}"
        return None

    def _goes_back(self, wait: QueueRow, target: str) -> str | None:
        """Why `target` is where the messages waiting in `wait` go back to be processed, or None."""
        row = self.rows.get(target)
        if row is None:
            return None
        if row.figures_known and row.consumers:
            return f"which has {row.consumers} consumer(s)"
        if wait.queue in self.onward(target):  # a loop: the one of the two that expires messages is the wait
            if row.message_ttl is None or wait.message_ttl is not None:
                return "which dead-letters back here (a retry loop)"
            return None
        if row.dead_letter_exchange is not None:
            return "a work queue: it dead-letters its own failures on"
        return None

    def onward(self, queue: str) -> set[str]:
        """Every queue `queue`'s dead letters can reach, through any number of dead-letterings."""
        if queue not in self._onward:
            seen: set[str] = set()
            todo = list(self.edges.targets.get(queue, ()))
            while todo:
                q = todo.pop()
                if q not in seen:
                    seen.add(q)
                    todo += self.edges.targets.get(q, ())
            self._onward[queue] = seen
        return self._onward[queue]


def waits(row: QueueRow) -> bool:
    """Whether messages only wait in `row`: no consumer now, and none ever took a message from it since its statistics
    began (a peek's basic.get is no consumer); where the API keeps no statistics, a message TTL says so."""
    if row.type == "stream":
        return False
    if row.figures_known:
        return not row.consumers and not row.consumer_deliveries
    return row.message_ttl is not None


def assign(rows: Sequence[QueueRow], listings_of: Callable[[str], Listings]) -> None:
    """Set `role` and `role_reason` on rows (of one broker), vhost by vhost."""
    by_vhost: dict[str, list[QueueRow]] = {}
    for row in rows:
        by_vhost.setdefault(row.vhost, []).append(row)
    for vhost, group in by_vhost.items():
        edges = dead_letter_edges(group, listings_of(vhost))
        if not edges.targets:  # nothing dead-letters to a queue here: no role (a vhost of idle queues, issue 40)
            for row in group:
                row.role = row.role_reason = None
            continue
        roles = Roles(group, edges)
        for row in group:
            found = roles.of(row.queue)
            row.role, row.role_reason = found if found else (None, None)


# -- what the messages say: dead letters the topology did not put there (peek, history) -----------------------------


def unpredicted(router: Router, queue: str, came_from: Mapping[tuple[str, tuple[str, ...] | None], int]
                ) -> str | None:
    """A short note when dead letters read from `queue` are not where the topology sends them. `came_from`: how many
    of them each queue dead-lettered, with the routing keys they had there (None: not known), as the messages say —
    the last x-death entry, else a known convention's origin (dlxtool.cli.reading.topology_note). A queue whose
    dead-letter route does not lead to `queue` did not put them here: an application (or a person) moved them, which
    `queues` cannot see. None when every such route leads here, or it cannot be told (the queue is gone, its
    policies not known yet, the API not answering)."""
    elsewhere = {source for (source, keys) in came_from if _leads_to(router, source, keys, queue) is False}
    moved = sum(n for (source, _keys), n in came_from.items() if source in elsewhere)
    if not moved:
        return None
    return (f"{moved} of the {sum(came_from.values())} dead letter(s) read here came from "
            f"{', '.join(sorted(elsewhere))}, whose dead-letter route does not lead to {queue}: an application (or a "
            "person) moved them here, which the topology does not show (`queues` gives no dlq role for them)")


def _leads_to(router: Router, source: str, keys: tuple[str, ...] | None, target: str) -> bool | None:
    """Whether `source`'s dead-letter route reaches `target` for messages with `keys` (None: any key), or None when
    that cannot be told."""
    try:
        info = router.queue(source)
        if info is None or not info.policies_known:
            return None
        dlx = info.dead_letter_exchange
        if dlx is None:
            return False
        fixed = info.dead_letter_routing_key
        wanted = [Key(str(fixed))] if fixed is not None else [Key(k) for k in keys] if keys else [ANY_KEY]
        return any(target in router.may_reach(str(dlx), key)[0] for key in wanted)
    except ManagementMismatch:
        raise
    except DlxtoolError:
        return None
