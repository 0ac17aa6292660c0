"""The one-pass mover over AMQP 1.0 (RabbitMQ 4.x): `replay`, `move`, `purge` (its reading modes) and
`dump --remove` with `--protocol 1.0` (issue 39).

The same policies decide (dlxtool.ops.pipeline.MovePolicy: replay's, move's, purge's) and the same TransferResult
comes out; underneath, AMQP 1.0 instead of the 0.9.1 engine (dlxtool.ops.engine):

- the source's ready count is the snapshot (a passive declare over 0.9.1, which takes nothing); the messages are read
  by a HeadReader (dlxtool.broker.amqp10.links): credit granted by us and drained, each delivery unsettled until it
  is settled one way;
- each message is read whole (MessageRecord.from_amqp10: every section and type, and the 0.9.1 view the deciders
  read) and decided (the decider's record form: no fast `.raw` over 1.0);
- MOVE: its original sections, re-encoded with only the decision's changes (dlxtool.ops.amqp10_outgoing), are sent
  unsettled to /queues/NAME (the default exchange's route) or /exchanges/NAME/KEY (an exchange, a temporary one
  included), on a connection of its own, a window of them in flight (--window, at most one drain's worth: the
  outcomes are read before the next drain); only after the broker's `accepted` (and the record in the sink, where
  there is one, flushed) is the source delivery settled `accepted`. `released` (routed nowhere) and `rejected`
  (refused: a full reject-publish queue …) leave it in the source, with the reason as a Stay kind (exit codes come
  from those);
- REMOVE (purge, dump --remove): settled `accepted` with the window's moves, only after its record (the AMQP 1.0
  message whole, as read: `amqp10`) is written to the sink and flushed — one flush per window, not an fsync each;
- KEEP/LEAVE, and whatever was read but not decided (a stop, --limit): held unsettled and given back at the end with
  the outcome the version's table names for a give-back that spends no delivery attempt (`released` on 4.3), in
  place. Holding them is what keeps them in place without a republish to the tail (which the 0.9.1 engine does): at
  most --prefetch are held, and a run that reaches that many stops reading there and says so;
- a stop signal (Ctrl-C) ends the run after the message in hand; a lost connection or a broker's refusal of the
  link ends it too. Either way what is unsettled goes back to the source: nothing is lost. A move whose `accepted`
  arrived but whose settlement of the source may not have reached the broker is a possible duplicate
  (TransferResult.possible_duplicates); each drain's answer proves the settlements sent before it (one session: the
  broker handles its frames in order).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dlxtool.broker.connection import heartbeat_for, refuses
from dlxtool.errors import DlxtoolError, NotFoundError, UnavailableError
from dlxtool.ops.actions import Action, Decider, Decision
from dlxtool.ops.engine import describe_error
from dlxtool.ops.interrupts import sigint_as_stop
from dlxtool.ops.stay import Stay, Why
from dlxtool.ops.transfer_pace import ReadPace
from dlxtool.ops.transfer_result import Progress, TransferResult
from dlxtool.ops.transfer_settings import PassControl, RunHooks, TransferOptions
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from dlxtool.broker.amqp10.connection import Amqp10Connection
    from dlxtool.broker.amqp10.links import Delivery, HeadReader, Sender
    from dlxtool.broker.amqp10.outcomes import DeliveryState
    from dlxtool.record import MessageRecord

TAKE = 200  # deliveries asked for per drain at most (each drain's answer proves the settlements before it)
HELD_FULL = ("{n} message(s) that stay are held unsettled, the most this run holds (--prefetch): reading stopped "
             "there, the rest of {source!r} was not read; give them another route or a larger --prefetch")


class Amqp10Transfer:
    """One pass over `source` read on `conn` (AMQP 1.0); MOVEs are sent on `send_conn` (AMQP 1.0; default: `conn`).
    `snapshot`: the source's ready messages at the start (the caller counts them over 0.9.1); `give_back`: the
    outcome that returns a message without spending a delivery attempt (dlxtool.broker.versions); `exists`: whether
    a destination queue exists (None: not asked, the broker's answer to the send says it)."""

    def __init__(self, conn: Amqp10Connection, source: str, decide: Decider, *, snapshot: int,
                 give_back: DeliveryState, send_conn: Amqp10Connection | None = None,
                 options: TransferOptions | None = None, hooks: RunHooks | None = None,
                 control: PassControl | None = None, timeout: float = 30.0,
                 exists: Callable[[str], bool] | None = None) -> None:
        self.conn = conn
        self.exists = exists  # whether a destination queue exists (a passive declare), asked once per queue
        self.send_conn = send_conn or conn
        self.source = source
        self.opts = options or TransferOptions()
        self.hooks = hooks or RunHooks()
        self.control = control or PassControl()
        self.decide = self.control.pick(decide) if self.control.pick is not None else decide
        self.pace = ReadPace(self.opts.rate, self.control.pace)
        self.give_back = give_back
        self.timeout = timeout
        self.result = TransferResult(source=source, snapshot=snapshot)
        if self.control.read_at_most is not None:
            self.result.snapshot = min(snapshot, self.control.read_at_most)
        self._stop = self.control.stop or threading.Event()
        self.head: HeadReader | None = None
        self._senders: dict[str, Sender | Why] = {}
        self._received = 0
        self._decided = 0
        self._selected = 0
        self._held = 0            # stays held unsettled (given back at the end)
        self._unproven = 0        # accepted settlements of the source not yet proven by a drain's answer
        self._pending: list[_Sent] = []  # sent, outcome not read yet: each may have been taken
        # REMOVEs (purge, dump --remove) not settled yet: their records go to the sink at _complete, just before its
        # flush; a run that ends before that writes none of them and gives them back with what is unsettled
        self._removing: list[tuple[Delivery, MessageRecord]] = []
        self._last_report = 0.0

    def run(self) -> TransferResult:
        started = time.monotonic()
        with sigint_as_stop(self._stop, self.opts.handle_sigint):
            try:
                self._run()
            except UnavailableError as exc:
                self.result.unavailable, self.result.unavailable_hint = exc.message, exc.hint
                self.result.error = exc.message
                self._lost()
            except Exception as exc:  # noqa: BLE001 - a lost connection, a refused link, a local error: reported
                self.result.error = describe_error(exc)
                self.result.connection_lost = not self.conn.is_open or not self.send_conn.is_open
                self._lost()
            except KeyboardInterrupt:  # a second stop signal: no more waiting; what is unsettled goes back
                self._stop.set()
                self._lost()
        self.result.interrupted = self._stop.is_set() and self.result.error is None
        self.result.unprocessed = max(0, self.result.snapshot - self._decided)
        self.result.elapsed = time.monotonic() - started
        self._report(started, final=True)
        return self.result

    # -- the pass ----------------------------------------------------------------------------------------------

    def _run(self) -> None:
        from dlxtool.broker.amqp10.addresses import queue_address
        from dlxtool.broker.amqp10.links import HeadReader

        started = time.monotonic()
        if not self.result.snapshot:
            return
        self.head = HeadReader(self.conn, queue_address(self.source), give_back=self.give_back)
        cap = max(1, self.opts.prefetch)
        limit = self.opts.limit
        while self._received < self.result.snapshot and not self._stop.is_set():
            if limit is not None and self._selected >= limit:
                break
            if self._held >= cap:
                self.result.notes.append(HELD_FULL.format(n=self._held, source=self.source))
                break
            want = min(TAKE, self.result.snapshot - self._received, cap - self._held)
            if self.pace.active:
                want = 1
            batch = self.head.read(want, self.timeout)
            self._unproven = 0  # the drain's answer came after every settlement sent before it
            if not batch:
                break  # fewer ready than the snapshot: others took some
            self._received += len(batch)
            for i, delivery in enumerate(batch):
                if self._stop.is_set() or (limit is not None and self._selected >= limit):
                    self.result.requeued += len(batch) - i  # read, not decided: given back untouched
                    break
                self._pace()
                self._handle(delivery)
                if len(self._pending) + len(self._removing) >= max(1, self.opts.window):
                    self._complete()
                self._report(started)
            self._complete()
        self._finish()

    def _pace(self) -> None:
        """--rate (or a guarded pass's pace): wait until the next message is due (dlxtool.ops.transfer_pace)."""
        if not self.pace.active:
            return
        self.pace.begin()
        wait = self.pace.delay(self._received)
        if wait > 0:
            self._stop.wait(wait)

    def _handle(self, delivery: Delivery) -> None:
        from dlxtool.amqp10_message import Amqp10Error

        try:
            record = MessageRecord.from_amqp10(self.source, delivery.raw, position=delivery.position)
        except Amqp10Error as exc:
            self._decided += 1
            self._stay(Decision.leave(Why(f"cannot be read as AMQP 1.0 ({exc})", Stay.NOT_SENT)))
            return
        decision = self.decide(record)
        self._decided += 1
        if decision.action is Action.KEEP:
            self._stay(decision)
            return
        self._selected += 1
        if decision.action is Action.LEAVE:
            self._stay(decision)
        elif decision.action is Action.REMOVE:
            self._remove(delivery, decision, record)
        else:
            self._move(delivery, decision, record)

    def _stay(self, decision: Decision, why: Why | None = None) -> None:
        """Held unsettled, given back in place at the end."""
        self._held += 1
        if decision.action is Action.KEEP and why is None:
            self.result.kept[decision.group] += 1
        else:
            self.result.left[why or decision.why] += 1

    def _remove(self, delivery: Delivery, decision: Decision, record: MessageRecord) -> None:
        """Settled `accepted` with the window's (_complete), after its record (where there is a sink) is written
        and flushed: one flush for a drain's worth of removals, not an fsync each."""
        self._removing.append((delivery, decision.record or record))

    def _move(self, delivery: Delivery, decision: Decision, record: MessageRecord) -> None:
        """Send it (its outcome is read with the window's, _complete); or hold it, with why it stays."""
        from dlxtool.ops.amqp10_outgoing import outgoing

        raw = outgoing(record, decision.record)
        if isinstance(raw, Why):
            self._stay(decision, raw)
            return
        if self.hooks.admit is not None:
            why = self.hooks.admit(decision.group, len(record.body), len(self._pending))
            if why is not None:
                self._stay(decision, why)
                return
        sender = self._sender(decision)
        if isinstance(sender, Why):
            self._stay(decision, sender)
            return
        try:
            handle = sender.start(raw, self.timeout)
        except NotFoundError as exc:  # the address is not there (nothing was sent: no credit came)
            why = self._senders[sender.address] = missing_target(exc, sender.address)
            self._stay(decision, why)
            return
        self._pending.append(_Sent(delivery, decision, record, sender, handle, raw))

    def _complete(self) -> None:
        """Wait for the outcomes of the sends in flight; then the records of those taken go to the sink (flushed
        once), and only then is each one's source delivery settled `accepted`. What the broker did not take stays."""
        from dlxtool.broker.amqp10 import outcomes
        from dlxtool.broker.amqp10.links import answered

        pending, removing = self._pending, self._removing
        if not pending and not removing:
            return
        senders = {id(p.sender): p.sender for p in pending}.values()
        if pending:
            self.send_conn.wait(lambda: all(answered(p.handle) for p in pending)
                                or any(s.events.closed_by_broker is not None for s in senders),
                                f"waiting for the outcomes of {len(pending)} send(s)", self.timeout)
        taken: list[_Sent] = []
        refused: list[tuple[_Sent, Why]] = []
        for sent in pending:
            said = sent.sender.outcome(sent.handle)  # a link the broker detached: raised (all still count in flight)
            assert said is not None
            if said.taken:
                taken.append(sent)
            else:
                refused.append((sent, refused_by(said, sent.sender.address)))
        sink = self.opts.sink
        if sink is not None and (taken or removing):
            from dlxtool.amqp10_message import parse_message

            for sent in taken:  # the record as sent: its 0.9.1 view, and the AMQP 1.0 message whole (amqp10)
                sink.write(replace(sent.decision.record or sent.record, amqp10=parse_message(sent.raw)))
            for _delivery, record in removing:  # the record as read: the AMQP 1.0 message whole (amqp10)
                sink.write(record)
            # a failure: raised, every one in flight counted as a possible duplicate (_lost); the removals stay
            # unsettled and go back (the sink dropped their records: RecordSink.unsaved)
            sink.flush()
        self._pending, self._removing = [], []
        for sent, why in refused:
            self._stay(sent.decision, why)
        assert self.head is not None
        for sent in taken:
            self.head.settle(sent.delivery, outcomes.ACCEPT)
            self._unproven += 1
            self.result.moved[sent.decision.group] += 1
            self.result.ids.add(_message_id(sent.record))
        for delivery, record in removing:
            self.head.settle(delivery, outcomes.ACCEPT)
            self._unproven += 1
            self.result.removed += 1
            self.result.ids.add(_message_id(record))
        self.conn.pump()

    def _sender(self, decision: Decision) -> Sender | Why:
        """The sender to the decision's address, made once per address (a refused one: why its messages stay)."""
        from dlxtool.broker.amqp10.addresses import exchange_address, queue_address
        from dlxtool.broker.amqp10.links import Sender

        address = exchange_address(decision.exchange, decision.routing_key) if decision.exchange \
            else queue_address(decision.routing_key)
        found = self._senders.get(address)
        if found is None:
            if not decision.exchange and self.exists is not None and not self.exists(decision.routing_key):
                # asked before a sender is made: 4.0 attaches a sender to a missing queue and never gives it credit
                found = Why(f"queue {decision.routing_key!r} does not exist", Stay.QUEUE_MISSING)
            else:
                found = Sender(self.send_conn, address)
            self._senders[address] = found
        return found

    def _finish(self) -> None:
        """Give back what is held (settled with the give-back outcome, then the reader detaches: its answer proves
        every settlement before it)."""
        head = self.head
        if head is None:
            return
        while True:
            try:
                head.close()
                break
            except KeyboardInterrupt:  # a settlement cut short would leave them to the detach: finish it
                self._stop.set()
        self._unproven = 0
        for sender in self._senders.values():
            if not isinstance(sender, Why):
                sender.close()

    def _lost(self) -> None:
        """The run ended on an error: what is unsettled goes back to the source (given back here where the
        connection still answers, else by the broker when it sees the connection go)."""
        head = self.head
        held = len(head.unsettled) if head is not None else 0
        self.result.possible_duplicates += self._unproven + len(self._pending)
        self._unproven, self._pending, self._removing = 0, [], []  # removals not flushed: back with the unsettled
        if head is not None and self.conn.is_open:
            try:
                head.close()
                return
            except (DlxtoolError, KeyboardInterrupt):
                pass
        self.result.held_when_lost = held
        if held:  # the broker returns them when it sees the connection go: a half-open one, by its heartbeat

            self.result.given_back_by = time.time() + 2 * heartbeat_for(self.conn.profile.timeout)
            self.result.node_down = refuses(self.conn.node.host, self.conn.node.port)

    def _report(self, started: float, final: bool = False) -> None:
        progress = self.opts.progress
        if progress is None:
            return
        now = time.monotonic()
        if not final and now - self._last_report < self.opts.progress_every:
            return
        self._last_report = now
        progress(Progress(total=self.result.snapshot, done=self._decided, moved=self.result.moved_total,
                          elapsed=now - started))


@dataclass(slots=True)
class _Sent:
    """A MOVE sent, its outcome not read yet: the source delivery it settles, the decision and record (the sink's),
    the sender, proton's delivery of the send and the bytes sent."""

    delivery: Delivery
    decision: Decision
    record: MessageRecord
    sender: Sender
    handle: Any
    raw: bytes


def refused_by(said: DeliveryState, address: str) -> Why:
    """Why a message the broker did not take stays: `released` (routed to no queue), `rejected` (refused, with the
    broker's reason: a full queue with overflow reject-publish, a message it will not take)."""
    if said.kind == "released":
        return Why(f"released: routed to no queue by {address}", Stay.UNROUTABLE)
    return Why(f"{said.describe()} (by {address})", Stay.NACKED)


def _message_id(record: MessageRecord) -> str | None:
    found = record.properties.get("message_id")
    return found if isinstance(found, str) else None


def missing_target(exc: NotFoundError, address: str) -> Why:
    """A sender's address the broker does not know (amqp:not-found): its messages stay (a queue: the destination is
    missing; an exchange: the broker refused publishing there)."""
    kind = Stay.QUEUE_MISSING if address.startswith("/queues/") else Stay.EXCHANGE_REFUSED
    return Why(f"{address}: {exc.message}", kind)
