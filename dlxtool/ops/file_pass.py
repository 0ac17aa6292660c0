"""The engine pass of a move whose source is a file of records (dlxtool.ops.record_source), over AMQP 0.9.1: the
queue engine's counterpart (dlxtool.ops.engine) for `load`.

Each record is decided by the policy (dlxtool.ops.load.LoadPolicy: its route, the headers it is published with),
admitted by the destinations' room (RunHooks.admit), and published mandatory with publisher confirms through a
pipelined publisher, a window of them in flight (--window) within the byte budget (--max-bytes). A record counts as
moved only on a clean confirm; returned (no such queue), nacked (queue full) and refused ones stay with the reason
(their Why); one the connection died under before its answer stays as a possible duplicate (maybe published); the
rest of the file is not reached. Every record that stays goes to the source's --failed file: the file pass has no
queue to give anything back to. A second stop signal stops waiting for confirms (those in flight: possible
duplicates). A resource alarm that blocks publishing is waited on for the run's timeout, then said.

The same TransferResult as the queue engine's comes out: `moved` per queue, `left` per reason, `possible_duplicates`,
`unprocessed` (never sent).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from dlxtool import secrets
from dlxtool.broker.channel import IDLE_WAIT
from dlxtool.broker.connection import blocked, is_connection_failure
from dlxtool.broker.publisher import PublishAnswer, Publisher
from dlxtool.broker.wire.frames import EncodeError
from dlxtool.budget import PrefetchWindow
from dlxtool.errors import DlxtoolError, UnavailableError
from dlxtool.ops.actions import Action, Decide, Decision
from dlxtool.ops.engine import describe_error
from dlxtool.ops.interrupts import sigint_as_stop, signals_as_stop
from dlxtool.ops.stay import Stay, Why, answers
from dlxtool.ops.transfer_result import Progress, TransferResult
from dlxtool.ops.transfer_settings import RunHooks, TransferOptions

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.pika_types import BasicProperties
    from dlxtool.ops.record_source import RecordFile
    from dlxtool.record import MessageRecord

Token = TypeVar("Token")  # what publish_records hands back with each answer: the caller's own


class FileCounts:
    """What a file pass counts, over either protocol: a TransferResult, the progress it reports, and where each
    record that stays goes (its source's --failed file)."""

    def __init__(self, source: RecordFile, options: TransferOptions) -> None:
        self.source, self.options = source, options
        self.result = TransferResult(source=source.name, snapshot=source.total)
        self.started = time.monotonic()
        self.last_report = 0.0

    def moved(self, decision: Decision, record: MessageRecord) -> None:
        self.result.moved[decision.group] += 1
        message_id = record.properties.get("message_id")
        self.result.ids.add(message_id if isinstance(message_id, str) else None)

    def stays(self, why: Why, record: MessageRecord, *, lost: bool = False) -> None:
        """It stays (`lost`: maybe published, no answer came): counted by its reason, written to --failed."""
        self.result.left[why] += 1
        if lost:
            self.result.possible_duplicates += 1
        self.source.stays(record)

    def answered(self, decision: Decision, answer: PublishAnswer, detail: str | None, record: MessageRecord) -> None:
        if answer is PublishAnswer.CONFIRMED:
            self.moved(decision, record)
            return
        self.stays(Why(f"{decision.group}: {answer.value} — {detail}", answers().get(answer, Stay.NOT_SENT)), record,
                   lost=answer is PublishAnswer.LOST)

    def not_sent(self, records: Iterable[MessageRecord]) -> None:
        """Never published: the one in hand when the run ended, and the rest of the file. Writing them to --failed
        takes a while (a large file): a stop signal now only takes note of itself."""
        with signals_as_stop(threading.Event(), self.options.handle_sigint):
            for record in records:
                self.result.unprocessed += 1
                self.source.stays(record)

    def failed(self, exc: Exception) -> None:
        """The run stopped on `exc`: the connection lost, publishing blocked too long, a local error."""
        result = self.result
        # the message alone: a connection error's hint speaks of a reader's unsettled messages, which a file has none of
        result.error = secrets.scrub(exc.message) if isinstance(exc, DlxtoolError) else describe_error(exc)
        if isinstance(exc, UnavailableError):
            result.unavailable, result.unavailable_hint = exc.message, exc.hint
        result.connection_lost = is_connection_failure(exc) or isinstance(exc, UnavailableError)

    def report(self, final: bool = False) -> None:
        progress = self.options.progress
        now = time.monotonic()
        if progress is not None and (final or now - self.last_report >= self.options.progress_every):
            self.last_report = now
            result = self.result
            done = result.moved_total + result.left_total
            progress(Progress(result.snapshot, done, result.moved_total, now - self.started))

    def end(self, stop: threading.Event) -> TransferResult:
        result = self.result
        result.interrupted = stop.is_set() and result.error is None
        self.source.flush()
        result.elapsed = time.monotonic() - self.started
        self.report(final=True)
        return result


class FilePass:
    """One pass over the records of `source`, published on `conn` (the module docstring)."""

    def __init__(self, conn: AmqpConnection, source: RecordFile, decide: Decide, *, options: TransferOptions,
                 hooks: RunHooks, timeout: float = 30.0) -> None:
        self.conn, self.source, self.decide = conn, source, decide
        self.options, self.admit, self.timeout = options, hooks.admit, timeout
        self.counts = FileCounts(source, options)

    def run(self) -> TransferResult:
        counts, source = self.counts, self.source
        stop = threading.Event()
        # Read from the file, not settled yet: each is settled or, if the run stops now, not sent — never skipped.
        # id(record) -> (it, its queue once decided). Undecided (None): a stop now leaves it not sent; decided: handed
        # to the publisher, a second stop signal now leaves it maybe published. One assignment moves it from the one
        # to the other, so that no stop signal finds it in both or in neither.
        inflight: dict[int, tuple[MessageRecord, str | None]] = {}
        taken = 0  # records read from the file so far (where a give-up resumes reading it)
        unsent: list[MessageRecord] = []  # undecided when a second stop signal came
        with source.reading() as records, sigint_as_stop(stop, self.options.handle_sigint):
            def items() -> Iterator[tuple[str, str, bytes, BasicProperties, tuple[Decision, MessageRecord]]]:
                nonlocal taken
                for _where, record in records:
                    inflight[id(record)] = (record, None)  # before anything else (above)
                    taken += 1
                    if stop.is_set():
                        return
                    decision = self.decide(record)
                    why = self._stays(decision, record, len(inflight) - 1)
                    if why is not None:
                        del inflight[id(record)]
                        counts.stays(why, record)
                        continue
                    inflight[id(record)] = (record, decision.group)
                    assert not isinstance(decision.properties, bytes | None)  # LoadPolicy: pika's properties
                    yield (decision.exchange, decision.routing_key, decision.body or record.body,
                           decision.properties, (decision, record))

            rest: Iterable[MessageRecord] = (r for _w, r in records)
            try:
                for (decision, record), answer, detail in publish_records(
                        self.conn, items(), window=self.options.window, timeout=self.timeout,
                        max_bytes=self.options.max_bytes):
                    del inflight[id(record)]
                    counts.answered(decision, answer, detail, record)
                    counts.report()
            except Exception as exc:  # noqa: BLE001 - connection lost: report what was and was not published
                counts.failed(exc)
            except KeyboardInterrupt:  # a second stop signal: no more waiting for confirms, account for the rest
                stop.set()
                for record, target in inflight.values():
                    if target is None:  # read, not decided: never published
                        unsent.append(record)
                        continue
                    # it may be at the broker: published, its confirm not waited for
                    counts.stays(Why(f"{target}: lost — stopped before its confirm (maybe published)",
                                     Stay.UNCONFIRMED), record, lost=True)
                inflight.clear()
                rest = source.after(taken)  # the signal may have ended `records`
            counts.not_sent([*unsent, *(record for record, _target in inflight.values()), *rest])
        return counts.end(stop)

    def _stays(self, decision: Decision, record: MessageRecord, in_flight: int) -> Why | None:
        """Why the record is not published (the policy's LEAVE, a destination without room), or None."""
        if decision.action is not Action.MOVE:
            return decision.why
        if self.admit is None:
            return None
        return self.admit(decision.group, len(decision.body or record.body), in_flight)


def publish_records(conn: AmqpConnection, items: Iterable[tuple[str, str, bytes, Any, Token]], *,
                    window: int = 1000, timeout: float = 30.0,
                    max_bytes: int | None = None) -> Iterator[tuple[Token, PublishAnswer, str | None]]:
    """Publish (exchange, routing_key, body, properties, token) with a window of confirms, yielding each (token,
    answer, detail) as it settles.

    `max_bytes`: publish only while the bodies awaiting a confirm fit in it, each counted twice (its record is held
    until it settles, and its frames until they are written: PrefetchWindow.COPIES); one is always let through."""
    pub = Publisher(conn, window=window, timeout=timeout)
    blocked_since: list[float] = []
    in_flight: dict[int, int] = {}  # id(token) -> its body's size, until it settles
    held = 0

    def settled() -> Iterator[tuple[Token, PublishAnswer, str | None]]:
        nonlocal held
        for token, outcome, detail in pub.take_settled():
            held -= in_flight.pop(id(token), 0)
            yield token, outcome, detail

    def fits(size: int) -> bool:
        return max_bytes is None or not held or held + PrefetchWindow.COPIES * size <= max_bytes

    def still_blocked() -> None:
        """A blocked connection (a resource alarm) is waited on for `timeout` at most."""
        why = blocked(conn)
        if why is None:
            blocked_since.clear()
        elif not blocked_since:
            blocked_since.append(time.monotonic())
        elif time.monotonic() - blocked_since[0] >= timeout:
            raise UnavailableError(f"the broker blocked publishing ({why}: a resource alarm)")

    try:
        for exchange, routing_key, body, props, token in items:
            while not pub.has_room() or not fits(len(body)):
                pub.pump(IDLE_WAIT)
                still_blocked()
                yield from settled()
            try:
                pub.publish(exchange, routing_key, body, props, token)
            except EncodeError as exc:  # nothing sent: this record fails, the others go on
                yield token, PublishAnswer.REFUSED, str(exc)
                continue
            in_flight[id(token)] = PrefetchWindow.COPIES * len(body)
            held += in_flight[id(token)]
            pub.pump(0)
            still_blocked()
            yield from settled()
        yield from pub.flush(timeout)
    except Exception as exc:
        # The connection died: what was in flight may or may not be at the broker. Report it as LOST
        # (so the caller can count possible duplicates) before the error goes on.
        pub.abandon(f"connection lost before the confirm ({describe_error(exc)})")
        yield from pub.take_settled()
        raise
    finally:
        pub.close()
