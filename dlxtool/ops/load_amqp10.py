"""`load --protocol 1.0` (issue 39): publish records that hold a whole AMQP 1.0 message (their `amqp10` field, written
by `dump --protocol 1.0`, `peek --protocol 1.0 --format jsonl`, `replay --protocol 1.0 --save`) over AMQP 1.0 on
RabbitMQ 4.x, so that each arrives as it was dumped.

What is sent is what a replay over 1.0 sends (dlxtool.ops.amqp10_outgoing.outgoing, the same code): every section,
property, application property and its type, and every message annotation but the delivery's own (x-exchange,
x-routing-key) and the death history (x-opt-deaths: a client's copy is no death history to the broker, and would
read as one to every reader after it), with dlxtool's provenance as the annotation x-opt-dlxtool-replay (its deaths
and origin kept there: dlxtool.ops.load.load_headers). --reset-history applies replay's whole reset as over 0.9.1.

The rules of the 0.9.1 load (dlxtool.ops.load) hold: the same routes (a temporary fanout exchange bound only to the
target, made over 0.9.1 and sent to as /exchanges/NAME/KEY; or /queues/NAME with --default-exchange, a missing queue
asked first: 4.0 gives a sender to a missing queue no credit), the same room and dead-letter checks, a window of
sends in flight (--window, --max-bytes). A record counts as loaded only on the broker's `accepted` outcome of its
transfer (settled then); `released` (routed to no queue) and `rejected` (refused: a full reject-publish queue …)
fail with the reason and go to --failed; a send whose outcome never came (the connection lost, a second Ctrl-C) is
lost — maybe published — and goes to --failed too; what was never sent is counted as not sent. Nothing is skipped
silently.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dlxtool.broker import queues
from dlxtool.budget import PrefetchWindow
from dlxtool.errors import DlxtoolError, NotFoundError, UnavailableError, UsageError
from dlxtool.ops.engine import describe_error
from dlxtool.ops.engine_amqp10 import missing_target, refused_by
from dlxtool.ops.interrupts import sigint_as_stop, signals_as_stop
from dlxtool.ops.load import (
    Load,
    LoadPlan,
    LoadResult,
    LoadSettings,
    Opener,
    fail_record,
    load_headers,
    load_routes,
    record_key,
    records_after,
    records_of,
    target_of,
)
from dlxtool.ops.pipeline_amqp10 import require_amqp10
from dlxtool.ops.record_files import Sink
from dlxtool.ops.routes import TemporaryExchanges
from dlxtool.ops.stay import Stay, Why
from dlxtool.ops.transfer_result import Progress
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from dlxtool.broker.amqp10.connection import Amqp10Connection
    from dlxtool.broker.amqp10.links import Sender
    from dlxtool.ops.capacity import Rooms
    from dlxtool.ops.routes import Routes
    from dlxtool.ops.session import Session


class Amqp10Load(Load):
    """A load over AMQP 1.0 (LoadSettings.protocol "1.0"): the 0.9.1 load's plan and checks, then load_amqp10."""

    def check_file(self, plan: LoadPlan) -> None:
        check_amqp10_load(self.session, plan, self.settings)

    def run(self, *, progress: Callable[[Progress], None] | None = None, failed: Sink | None = None,
            handle_sigint: bool = True) -> LoadResult:
        return load_amqp10(self.session, self.open_stream, self.settings, total=self.plan.records, progress=progress,
                           failed=failed, handle_sigint=handle_sigint, rooms=self.rooms)


def check_amqp10_load(session: Session, plan: LoadPlan, settings: LoadSettings) -> None:
    """Refuse (exit 2), before anything is asked or published: a broker without AMQP 1.0 (3.x), and a file with
    records that hold no AMQP 1.0 message (read over 0.9.1: there is nothing to send them as)."""
    require_amqp10(session)
    if plan.without_amqp10_total:
        shown = ", ".join(plan.without_amqp10) + ("…" if plan.without_amqp10_total > len(plan.without_amqp10) else "")
        raise UsageError(f"{plan.without_amqp10_total} of the {plan.records} record(s) of {settings.name} hold no AMQP "
                         f"1.0 message (no `amqp10` field: read over AMQP 0.9.1), e.g. {shown}: --protocol 1.0 "
                         "publishes what a read over AMQP 1.0 kept whole; nothing was published",
                         hint="load this file over 0.9.1: --protocol 0-9-1")


@dataclass(slots=True)
class _Sent:
    """A record sent, its outcome not read yet: it may be at the broker."""

    record: MessageRecord
    target: str
    sender: Sender
    handle: Any
    size: int  # what it holds of the byte budget


class _Amqp10Load:
    def __init__(self, conn: Amqp10Connection, session: Session, settings: LoadSettings, routes: Routes,
                 result: LoadResult, *, failed: Sink | None, rooms: Rooms | None,
                 progress: Callable[[Progress], None] | None) -> None:
        self.conn, self.session, self.settings, self.routes = conn, session, settings, routes
        self.result, self.failed, self.rooms, self.progress = result, failed, rooms, progress
        self.timeout = session.timeout
        self.pending: list[_Sent] = []
        self.held = 0  # bytes the sends in flight hold (PrefetchWindow.COPIES per body)
        self.senders: dict[str, Sender | Why] = {}
        self.exists: dict[str, bool] = {}
        self.started = time.monotonic()
        self.last_report = 0.0

    def send(self, where: str, record: MessageRecord) -> None:
        """Send one record (its outcome is read with the window's: complete), or fail it with the reason."""
        from dlxtool.broker.amqp10.addresses import exchange_address, queue_address
        from dlxtool.ops.amqp10_outgoing import outgoing

        settings, result = self.settings, self.result
        target = target_of(record, settings, where)
        headers = load_headers(record, settings)
        key = record_key(record, headers, settings)
        route = self.routes.with_key(target, key)
        if isinstance(route, Why):
            fail_record(result, target, route, record, self.failed)
            return
        why = self.rooms.admit(target, len(record.body), len(self.pending)) if self.rooms is not None else None
        if why is not None:
            result.stayed_full[target] += 1
            result.failed[why] += 1
            if self.failed is not None:
                self.failed.write(record)
            return
        raw = outgoing(record, replace(record, headers=headers))
        if isinstance(raw, Why):
            fail_record(result, target, raw, record, self.failed)
            return
        exchange, keeps_key = route
        address = exchange_address(exchange, key if keeps_key else target) if exchange else queue_address(target)
        sender = self._sender(address, target, exchange)
        if isinstance(sender, Why):
            fail_record(result, target, sender, record, self.failed)
            return
        size = PrefetchWindow.COPIES * len(raw)
        max_bytes = settings.max_bytes
        if self.pending and max_bytes is not None and self.held + size > max_bytes:
            self.complete()  # the budget: one in flight at least
        try:
            handle = sender.start(raw, self.timeout)
        except NotFoundError as exc:  # the address is not there (nothing was sent: no credit came)
            why = self.senders[address] = missing_target(exc, address)
            fail_record(result, target, why, record, self.failed)
            return
        self.pending.append(_Sent(record, target, sender, handle, size))
        self.held += size

    def _sender(self, address: str, target: str, exchange: str) -> Sender | Why:
        """The sender to `address`, made once (a refused one: why its records fail)."""
        from dlxtool.broker.amqp10.links import Sender

        found = self.senders.get(address)
        if found is None:
            if not exchange and not queues.exists(self.session.conn, target, self.timeout):
                # asked before a sender is made: 4.0 attaches a sender to a missing queue and never gives it credit
                found = Why("not found — the queue does not exist (nothing was sent)", Stay.QUEUE_MISSING)
            else:
                found = Sender(self.conn, address)
            self.senders[address] = found
        return found

    def complete(self) -> None:
        """Read the outcomes of the sends in flight, in order: `accepted` counts as loaded; the others fail with what
        the broker said. A link the broker detached raises (what is still in flight: lost)."""
        from dlxtool.broker.amqp10.links import answered

        result = self.result
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
                result.published[sent.target] += 1
                message_id = sent.record.properties.get("message_id")
                result.ids.add(message_id if isinstance(message_id, str) else None)
            else:
                fail_record(result, sent.target, refused_by(said, sent.sender.address), sent.record, self.failed)
            self.report()

    def lose_pending(self, why: str) -> None:
        """The run ended with sends in flight: each may be at the broker — counted lost (a possible duplicate),
        written to --failed (loading that file again may duplicate it, never lose it)."""
        for sent in self.pending:
            self.result.lost += 1
            self.result.failed[Why(f"{sent.target}: lost — {why} (maybe published)", Stay.UNCONFIRMED)] += 1
            if self.failed is not None:
                self.failed.write(sent.record)
        self.pending, self.held = [], 0

    def report(self, final: bool = False) -> None:
        now = time.monotonic()
        if self.progress is not None and (final or now - self.last_report >= 0.2):
            self.last_report = now
            result = self.result
            done = result.published_total + result.failed_total
            self.progress(Progress(result.records, done, result.published_total, now - self.started))

    def close(self) -> None:
        for sender in self.senders.values():
            if not isinstance(sender, Why):
                with contextlib.suppress(Exception):  # a link on a connection that is going: nothing to keep
                    sender.close()


def load_amqp10(session: Session, open_stream: Opener, settings: LoadSettings, *, total: int = 0,
                progress: Callable[[Progress], None] | None = None, failed: Sink | None = None,
                handle_sigint: bool = True, rooms: Rooms | None = None) -> LoadResult:
    """Publish the records over AMQP 1.0 (the module docstring); each that failed, was lost or was not sent goes to
    `failed` if given."""
    from dlxtool.broker.amqp10.connection import open_connection

    assert session.profile is not None  # check_amqp10_load
    result = LoadResult(settings.name, total)
    stop = threading.Event()
    started = time.monotonic()
    exchanges = None if settings.default_exchange else TemporaryExchanges(session.conn, session.timeout, "load")
    routes = load_routes(settings, exchanges, session.management, session.vhost)
    try:
        conn = open_connection(session.profile)
        run = _Amqp10Load(conn, session, settings, routes, result, failed=failed, rooms=rooms, progress=progress)
        try:
            _run(run, open_stream, stop, handle_sigint)
        finally:
            run.close()
            conn.close()
    finally:
        if exchanges is not None:
            exchanges.delete_all()
    if failed is not None:
        failed.flush()
    result.routes = {q: routes.describe(q) for q in sorted(result.published)}
    result.elapsed = time.monotonic() - started
    run.report(final=True)
    return result


def _run(run: _Amqp10Load, open_stream: Opener, stop: threading.Event, handle_sigint: bool) -> None:
    result, settings, failed = run.result, run.settings, run.failed
    with open_stream() as stream, sigint_as_stop(stop, handle_sigint):
        def torn(_where: str, _skipped: int) -> None:
            result.skipped_torn += 1

        records = records_of(stream, settings, torn)
        taken = 0  # records read from the file (where a give-up resumes reading it)
        current: MessageRecord | None = None  # read, not handed to the broker: not sent if the run ends here
        try:
            for where, record in records:
                current = record
                taken += 1
                if stop.is_set():  # Ctrl-C: what is in flight is answered below; the rest is not sent
                    break
                run.send(where, record)
                current = None
                if len(run.pending) >= max(1, settings.window):
                    run.complete()
                run.report()
            run.complete()
        except Exception as exc:  # noqa: BLE001 - connection lost, link refused: reported, nothing hidden
            # the message alone: the connection's hint speaks of a reader's unsettled messages, which a load has none of
            result.error = exc.message if isinstance(exc, DlxtoolError) else describe_error(exc)
            result.unavailable = isinstance(exc, UnavailableError)
            run.lose_pending("no outcome before the run ended")
        except KeyboardInterrupt:  # a second stop signal: no more waiting for outcomes
            stop.set()
            run.lose_pending("stopped before its outcome")
            records = records_after(open_stream, settings, taken)  # the signal may have ended `records`
        result.interrupted = stop.is_set() and result.error is None
        # Never sent: the one in hand when the run ended, and the rest of the file. Writing them to --failed takes a
        # while (a large file): a signal now only takes note of itself.
        with signals_as_stop(threading.Event(), handle_sigint):
            for left in [*([current] if current is not None else []), *(r for _w, r in records)]:
                result.not_sent += 1
                if failed is not None:
                    failed.write(left)
