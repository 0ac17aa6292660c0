"""Purge: plain `queue.purge`, or the reading modes on the one-pass engine (dlxtool.ops.engine).

Reading modes — `--backup FILE`, any selection filter or `--limit`, `--move-to QUEUE`, and `dump --remove`
— consume the queue once (the messages present at the start) and settle each message one way:

- selected, no --move-to: REMOVE — its record is written to the backup (if any) and flushed + fsynced,
  then the message is acked. A crash or a cut before the ack leaves it in the queue (maybe also in the
  file: at-least-once, counted as a possible duplicate).
- selected, --move-to: MOVE — published unchanged (body, properties, headers) to that queue on the
  default exchange, mandatory and confirmed; acked only after a clean confirm. Returned (target
  deleted) or nacked (target full) messages stay in the source.
- not selected: KEEP — stays, relative order kept (the engine republishes it to the tail and then acks
  it: memory bounded, no delivery attempt used on quorum queues; see the engine's notes).

Quorum queues: acks and republishes use no delivery attempt, so the reading modes are safe with a
delivery limit. Only messages delivered to us beyond the start snapshot (published during the run) are
given back, which is one attempt each (on 3.x without a limit: to the back); `requeued` counts them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlxtool.broker.management import ManagementClient
from dlxtool.errors import ConnectError, DlxtoolError, NotFoundError, RefusedError, UsageError
from dlxtool.ops.engine import Action, Decision
from dlxtool.record import MessageRecord
from dlxtool.selection import Selection

if TYPE_CHECKING:
    from dlxtool.ops.engine import TransferOptions, TransferResult


@dataclass
class QueueState:
    name: str
    type: str | None  # None when the management API could not tell
    ready: int
    unacked: int | None
    consumers: int
    note: str | None = None  # e.g. which check could not be made
    tail_republish_risk: str | None = None  # see QueueInfo.tail_republish_risk

    def to_json(self) -> dict[str, Any]:
        return {"queue": self.name, "type": self.type, "ready": self.ready, "unacked": self.unacked,
                "consumers": self.consumers}


def queue_state(channel: Any, mgmt: ManagementClient | None, vhost: str, queue: str) -> QueueState:
    """Ready and consumer counts from the broker itself (a passive declare is exact and current);
    type and unacked from the management API, whose figures are sampled every few seconds."""
    ok = passive_declare(channel, queue, vhost)
    note = None
    qtype, unacked, risk = None, None, None
    if mgmt is None:
        note = "no management API: queue type and unacked count unknown"
    else:
        try:
            info = mgmt.queue(vhost, queue)
            qtype, unacked = info.type, info.messages_unacked
            risk = info.tail_republish_risk
        except DlxtoolError as exc:
            note = f"management API unavailable ({exc.message}): queue type and unacked count unknown"
    return QueueState(queue, qtype, ok.message_count, unacked, ok.consumer_count, note, risk)


def passive_declare(channel: Any, queue: str, vhost: str) -> Any:
    import pika.exceptions as pe

    try:
        return channel.queue_declare(queue, passive=True).method
    except pe.ChannelClosedByBroker as exc:
        if exc.reply_code == 404:
            raise NotFoundError(f"queue {queue!r} not found in vhost {vhost!r}",
                                hint="list queues with `dlxtool queues`") from None
        if exc.reply_code == 405:
            raise DlxtoolError(f"queue {queue!r} is exclusive to another connection; no other connection "
                               "can read or purge it", hint="it disappears with the connection that owns it") from None
        if exc.reply_code == 403:
            raise ConnectError(f"access to queue {queue!r} in vhost {vhost!r} refused: {exc.reply_text}",
                               hint="the user needs read/configure permissions on it") from None
        raise


def check_tail_republish(risk: str | None) -> None:
    """Refuse a run that keeps messages by republishing them when the queue would drop its head."""
    if risk:
        raise RefusedError(risk, hint="lift the length limit for the run, or set overflow to reject-publish "
                                      "(a kept message that does not fit is then held and given back)")


def check_purgeable(state: QueueState, what: str = "purged") -> None:
    if state.type == "stream":
        raise RefusedError(f"{state.name!r} is a stream: streams cannot be {what}",
                           hint="streams are trimmed by retention (x-max-length-bytes, x-max-age); "
                                "`dlxtool dump` reads one without removing anything")


def purge(channel: Any, queue: str) -> int:
    """queue.purge: removes ready messages only; returns how many the broker says it removed."""
    return channel.queue_purge(queue).method.message_count


# -- reading modes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PurgeSettings:
    queue: str
    selection: Selection = field(default_factory=Selection)
    move_to: str | None = None
    backup: str | None = None  # a file name, for summaries; the sink itself goes in TransferOptions

    @property
    def reads_messages(self) -> bool:
        """Whether this purge must read messages one by one (else queue.purge does it in bulk)."""
        return bool(self.backup or self.move_to or self.selection.filters_anything
                    or self.selection.limit is not None)

    def check(self) -> None:
        if self.move_to is not None and self.move_to == self.queue:
            raise UsageError("--move-to names the queue being purged")

    def describe(self) -> dict[str, Any]:
        return {"filters": self.selection.describe(), "limit": self.selection.limit, "move_to": self.move_to,
                "backup": self.backup}


class PurgeDecider:
    """decide(record) for the engine: not selected → KEEP; selected → MOVE to move_to, else REMOVE.

    A moved message keeps its routing key: it goes through `exchanges(move_to)`, a temporary fanout exchange
    bound only to move_to (dlxtool.ops.replay.TemporaryExchanges), so that a consumer of move_to, or its
    dead-letter exchange, sees the key it had (on the default exchange it would be move_to's name, which a
    direct or topic dead-letter exchange may route nowhere: the next dead-lettering would drop it). Without
    `exchanges` (the plan), the default exchange."""

    def __init__(self, settings: PurgeSettings, *, exchanges: Callable[[str], str | None] | None = None) -> None:
        self.selection = settings.selection
        self.move_to = settings.move_to
        self.exchanges = exchanges

    def __call__(self, record: MessageRecord) -> Decision:
        if not self.selection.matches(record):
            return Decision.keep()
        if self.move_to is None:
            return Decision(Action.REMOVE, "removed")
        # Parked unchanged: the engine publishes the source body and properties as they are.
        if self.exchanges is None or type(record.routing_key) is not str:
            return Decision(Action.MOVE, self.move_to, "", self.move_to)
        exchange = self.exchanges(self.move_to)
        if exchange is None:
            return Decision.leave(f"{self.move_to}: queue missing (no temporary exchange can be bound to it)")
        return Decision(Action.MOVE, self.move_to, exchange, record.routing_key)


def remove_all(_record: MessageRecord) -> Decision:
    """decide() for `dump --remove`: every message goes to the file."""
    return Decision(Action.REMOVE, "removed")


def run_reading_purge(conn: Any, settings: PurgeSettings, options: TransferOptions, *,
                      timeout: float = 30.0) -> TransferResult:
    """One engine pass over settings.queue (the sink for --backup is options.sink)."""

    from dlxtool.ops.replay import TemporaryExchanges

    options.limit = settings.selection.limit
    exchanges = TemporaryExchanges(conn, timeout, "purge") if settings.move_to else None
    try:
        return drain(conn, settings.queue, PurgeDecider(settings, exchanges=exchanges), options, timeout=timeout)
    finally:
        if exchanges is not None:
            exchanges.delete_all()


def drain(conn: Any, queue: str, decide: Any, options: TransferOptions, *, timeout: float = 30.0) -> TransferResult:
    from dlxtool.ops.engine import Transfer

    if options.limit is not None:
        # Deliveries beyond the limit would only be given back (on quorum queues, a delivery attempt each).
        options.prefetch = max(1, min(options.prefetch, options.limit))
    return Transfer(conn, queue, decide, options=options, timeout=timeout).run()


@dataclass
class PurgePlan:
    """What a reading purge would do, from the first `looked_at` messages (read with peek semantics)."""

    looked_at: int = 0
    actions: Counter[str] = field(default_factory=Counter)  # remove | move | keep

    def to_json(self) -> dict[str, Any]:
        return {"looked_at": self.looked_at, "would_remove": self.actions["remove"],
                "would_move": self.actions["move"], "would_keep": self.actions["keep"]}


def plan(records: Iterable[MessageRecord], settings: PurgeSettings) -> PurgePlan:
    """Apply the decider to records (from a peek), honouring --limit the way the engine does."""
    decide = PurgeDecider(settings)
    limit = settings.selection.limit
    out = PurgePlan()
    selected = 0
    for record in records:
        out.looked_at += 1
        if limit is not None and selected >= limit:
            out.actions["keep"] += 1
            continue
        action = decide(record).action
        selected += action is not Action.KEEP
        out.actions[action.value] += 1
    return out
