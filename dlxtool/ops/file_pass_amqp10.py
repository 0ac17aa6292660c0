"""The file pass over AMQP 1.0 (RabbitMQ 4.x): `load --protocol 1.0` (issue 39), the same policy and result as over
0.9.1 (dlxtool.ops.file_pass), sending each record's whole AMQP 1.0 message.

What is sent is what a replay over 1.0 sends (dlxtool.ops.amqp10_outgoing.outgoing, the same code): every section,
property, application property and its type, and every message annotation but the delivery's own and the death
history, with the decision's headers (LoadPolicy: the provenance as x-opt-dlxtool-replay). A MOVE goes to
/exchanges/NAME/KEY (a temporary exchange, made over 0.9.1) or /queues/NAME (the default exchange's route: a missing
queue asked first, as 4.0 gives a sender to a missing queue no credit), a window of sends in flight (--window,
--max-bytes). A record counts as moved only on the broker's `accepted`; `released` (routed to no queue) and
`rejected` (refused: a full reject-publish queue …) stay with the reason; a send whose outcome never came (the
connection lost, a second Ctrl-C) is a possible duplicate; what was never sent is not reached. Every record that
stays goes to --failed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlxtool.broker import queues
from dlxtool.budget import PrefetchWindow
from dlxtool.errors import NotFoundError
from dlxtool.ops.actions import Action, Decide, Decision
from dlxtool.ops.engine_amqp10 import missing_target, refused_by
from dlxtool.ops.file_pass import FileCounts
from dlxtool.ops.interrupts import sigint_as_stop
from dlxtool.ops.stay import Stay, Why
from dlxtool.ops.transfer_result import TransferResult
from dlxtool.ops.transfer_settings import RunHooks, TransferOptions

if TYPE_CHECKING:
    from dlxtool.broker.amqp10.connection import Amqp10Connection
    from dlxtool.broker.amqp10.links import Sender
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.ops.record_source import RecordFile
    from dlxtool.record import MessageRecord


@dataclass(slots=True)
class _Sent:
    """A record sent, its outcome not read yet: it may be at the broker."""

    record: MessageRecord
    decision: Decision
    sender: Sender
    handle: Any
    size: int  # what it holds of the byte budget


class Amqp10FilePass:
    """One pass over the records of `source`, sent on `conn` (AMQP 1.0); `conn091` asks whether a queue exists."""

    def __init__(self, conn: Amqp10Connection, conn091: AmqpConnection, source: RecordFile, decide: Decide, *,
                 options: TransferOptions, hooks: RunHooks, timeout: float = 30.0) -> None:
        self.conn, self.conn091, self.source, self.decide = conn, conn091, source, decide
        self.options, self.admit, self.timeout = options, hooks.admit, timeout
        self.counts = FileCounts(source, options)
        self.pending: list[_Sent] = []
        self.held = 0  # bytes the sends in flight hold (PrefetchWindow.COPIES per body)
        self.senders: dict[str, Sender | Why] = {}

    def run(self) -> TransferResult:
        counts, source = self.counts, self.source
        stop = threading.Event()
        with source.reading() as records, sigint_as_stop(stop, self.options.handle_sigint):
            taken = 0  # records read from the file (where a give-up resumes reading it)
            current: MessageRecord | None = None  # read, not handed to the broker: not sent if the run ends here
            rest: Iterable[MessageRecord] = (r for _w, r in records)
            try:
                for _where, record in records:
                    current = record
                    taken += 1
                    if stop.is_set():  # Ctrl-C: what is in flight is answered below; the rest is not sent
                        break
                    self._send(record)
                    current = None
                    if len(self.pending) >= max(1, self.options.window):
                        self._complete()
                    counts.report()
                self._complete()
            except Exception as exc:  # noqa: BLE001 - connection lost, link refused: reported, nothing hidden
                counts.failed(exc)
                self._lose_pending("no outcome before the run ended")
            except KeyboardInterrupt:  # a second stop signal: no more waiting for outcomes
                stop.set()
                self._lose_pending("stopped before its outcome")
                rest = source.after(taken)  # the signal may have ended `records`
            finally:
                self._close()
            counts.not_sent([*([current] if current is not None else []), *rest])
        return counts.end(stop)

    def _send(self, record: MessageRecord) -> None:
        """Send one record (its outcome is read with the window's: _complete), or let it stay with the reason."""
        from dlxtool.ops.amqp10_outgoing import outgoing

        decision = self.decide(record)
        if decision.action is not Action.MOVE:
            self.counts.stays(decision.why, record)
            return
        why = self.admit(decision.group, len(record.body), len(self.pending)) if self.admit is not None else None
        if why is not None:  # no room: the reason names the queue
            self.counts.stays(why, record)
            return
        raw = outgoing(record, decision.record)
        if isinstance(raw, Why):  # what 1.0 cannot carry of it
            self.counts.stays(raw.prefixed(f"{decision.group}: "), record)
            return
        sender = self._sender(decision)
        if isinstance(sender, Why):
            self.counts.stays(sender.prefixed(f"{decision.group}: "), record)
            return
        size = PrefetchWindow.COPIES * len(raw)
        max_bytes = self.options.max_bytes
        if self.pending and max_bytes is not None and self.held + size > max_bytes:
            self._complete()  # the budget: one in flight at least
        try:
            handle = sender.start(raw, self.timeout)
        except NotFoundError as exc:  # the address is not there (nothing was sent: no credit came)
            why = self.senders[sender.address] = missing_target(exc, sender.address)
            self.counts.stays(why.prefixed(f"{decision.group}: "), record)
            return
        self.pending.append(_Sent(record, decision, sender, handle, size))
        self.held += size

    def _sender(self, decision: Decision) -> Sender | Why:
        """The sender to the decision's address, made once (a refused one: why its records stay)."""
        from dlxtool.broker.amqp10.addresses import exchange_address, queue_address
        from dlxtool.broker.amqp10.links import Sender

        exchange, key = decision.exchange, decision.routing_key
        address = exchange_address(exchange, key) if exchange else queue_address(key)
        found = self.senders.get(address)
        if found is None:
            if not exchange and not queues.exists(self.conn091, key, self.timeout):
                # asked before a sender is made: 4.0 attaches a sender to a missing queue and never gives it credit
                found = Why("not found — the queue does not exist (nothing was sent)", Stay.QUEUE_MISSING)
            else:
                found = Sender(self.conn, address)
            self.senders[address] = found
        return found

    def _complete(self) -> None:
        """Read the outcomes of the sends in flight, in order: `accepted` counts as moved; the others stay with what
        the broker said. A link the broker detached raises (what is still in flight: lost)."""
        from dlxtool.broker.amqp10.links import answered

        while self.pending:
            sent = self.pending[0]

            def come(first: _Sent = sent) -> bool:  # its outcome, or the link gone
                return answered(first.handle) or first.sender.events.closed_by_broker is not None

            self.conn.wait(come, f"waiting for the outcomes of {len(self.pending)} send(s)", self.timeout)
            said = sent.sender.outcome(sent.handle)  # settled here; a detached link: raised
            assert said is not None
            self.pending.pop(0)
            self.held -= sent.size
            if said.taken:
                self.counts.moved(sent.decision, sent.record)
            else:
                why = refused_by(said, sent.sender.address).prefixed(f"{sent.decision.group}: ")
                self.counts.stays(why, sent.record)
            self.counts.report()

    def _lose_pending(self, why: str) -> None:
        """The run ended with sends in flight: each may be at the broker — a possible duplicate, written to --failed
        (loading that file again may duplicate it, never lose it)."""
        for sent in self.pending:
            self.counts.stays(Why(f"{sent.decision.group}: lost — {why} (maybe published)", Stay.UNCONFIRMED),
                              sent.record, lost=True)
        self.pending, self.held = [], 0

    def _close(self) -> None:
        for sender in self.senders.values():
            if not isinstance(sender, Why):
                with contextlib.suppress(Exception):  # a link on a connection that is going: nothing to keep
                    sender.close()
