"""Load: publish message records (dump, purge --backup, replay --save files) back to a broker.

Each record goes to its own queue (the record's `queue`) or to `to_queue`, mandatory and with publisher
confirms, through the engine's pipelined publisher (publish_records, below). As replay does
(dlxtool.ops.replay.Routes), it keeps the record's routing key — the one its queue's consumers saw, or with
`reset_history` the original one the provenance header records — through a temporary fanout exchange
bound only to the target queue; `default_exchange` publishes with routing key = the queue name instead,
and a target whose dead-letter exchange would not route that key gets none of its records (failed, with
the reason: the next dead-lettering would drop them). A record is counted
as loaded only on a clean confirm; returned (no such queue), nacked (queue full) and lost (the
connection died before the answer — maybe published) records are reported and can be written to a
"failed" file to load again.

The file is read twice: once to check every record (a bad line stops the load before anything is
published, naming FILE:LINE) and count them per queue, once to publish. A record cut short (a
backup interrupted mid-write: a last line without a newline, or a torn record merged with the next one
on a line by an older dlxtool's append) is reported with its FILE:LINE and skipped: its message was
never acked away. The result counts them (`skipped_torn`) so the CLI can fail unless told they are fine.

What a record cannot carry back: the original exchange (the delivery shows the temporary exchange, or
"" with `default_exchange`), `redelivered`, and the queue position (records are published in file order).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from dlxtool.broker.channel import IDLE_WAIT
from dlxtool.broker.frames import EncodeError
from dlxtool.broker.publisher import Outcome, Publisher
from dlxtool.errors import UsageError
from dlxtool.ops.engine import Progress, describe_error
from dlxtool.ops.interrupts import sigint_as_stop
from dlxtool.ops.record_files import Sink, iter_records
from dlxtool.record import MessageRecord

Opener = Callable[[], IO[bytes]]


@dataclass
class LoadSettings:
    name: str                           # the file's name, for messages and the provenance header
    to_queue: str | None = None
    reset_history: bool = False         # replay's count reset (dlxtool.ops.replay.replay_headers)
    reset_names: tuple[str, ...] = ()   # extra retry headers to remove with reset_history
    window: int = 1000
    default_exchange: bool = False      # routing key = queue name (opt-in), instead of the record's own


@dataclass
class LoadPlan:
    records: int = 0
    targets: Counter[str] = field(default_factory=Counter)   # queue -> records
    torn: list[str] = field(default_factory=list)             # FILE:LINE of each record cut short

    def to_json(self) -> dict[str, Any]:
        return {"records": self.records, "targets": dict(self.targets),
                "torn_last_line": self.torn[-1] if self.torn else None, "torn": self.torn,
                "skipped_torn": len(self.torn)}


@dataclass
class LoadResult:
    file: str
    records: int
    published: Counter[str] = field(default_factory=Counter)  # queue -> confirmed
    failed: Counter[str] = field(default_factory=Counter)     # "queue: why" -> records
    lost: int = 0              # no answer before the connection ended: maybe published (possible duplicates)
    not_sent: int = 0          # never published (stopped by an error or Ctrl-C)
    skipped_torn: int = 0      # records cut short in the file (their messages were never acked away)
    interrupted: bool = False
    error: str | None = None
    elapsed: float = 0.0

    @property
    def published_total(self) -> int:
        return sum(self.published.values())

    @property
    def failed_total(self) -> int:
        return sum(self.failed.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file, "records": self.records, "published": dict(self.published),
            "published_total": self.published_total, "failed": dict(self.failed),
            "failed_total": self.failed_total, "possible_duplicates": self.lost, "not_sent": self.not_sent,
            "skipped_torn": self.skipped_torn,
            "interrupted": self.interrupted, "error": self.error, "elapsed_s": round(self.elapsed, 3),
        }


def scan(open_stream: Opener, settings: LoadSettings) -> LoadPlan:
    """Check every record (UsageError naming FILE:LINE) and count them per target queue."""
    out = LoadPlan()
    with open_stream() as stream:
        for where, record in iter_records(stream, settings.name, lambda where, _n: out.torn.append(where)):
            out.targets[_target(record, settings, where)] += 1
            _check_encodes(record, settings, where)
            out.records += 1
    return out


def _check_encodes(record: MessageRecord, settings: LoadSettings, where: str) -> None:
    """Refuse a file with a record AMQP cannot carry before anything is published (frame size is checked
    per message at publish time: it depends on the connection)."""
    from dlxtool.broker.amqp_values import rabbitmq_refuses
    from dlxtool.broker.frames import encode_for_publish

    headers = _headers(record, settings)
    refused = rabbitmq_refuses(headers)
    if refused is not None:
        raise UsageError(f"{where}: header {refused!r} holds an AMQP short-int of kind 'U', which RabbitMQ does "
                         "not accept: publishing it would make the broker close the connection",
                         hint="RabbitMQ's short-int is kind 's' (the same two bytes): re-encode that $amqp value "
                              "with 's', or remove the header")
    try:
        encode_for_publish(record.pika_properties(headers), 0)
    except EncodeError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _target(record: MessageRecord, settings: LoadSettings, where: str) -> str:
    target = settings.to_queue or record.queue
    if not target:
        raise UsageError(f"{where}: the record names no queue", hint="give --to QUEUE")
    return target


def load(conn: Any, open_stream: Opener, settings: LoadSettings, *, total: int = 0,
         progress: Callable[[Progress], None] | None = None, failed: Sink | None = None,
         timeout: float = 30.0, handle_sigint: bool = True, management: Any | None = None,
         vhost: str = "/") -> LoadResult:
    """Publish the records; each failed (returned/nacked/lost/not sent, or a target whose route is not safe)
    record goes to `failed` if given. `management`: the broker's management API client (None: unreachable),
    which checks the default-exchange route."""
    from dlxtool.ops.replay import Routes, TemporaryExchanges
    from dlxtool.ops.routes import Router

    exchanges = None if settings.default_exchange else TemporaryExchanges(conn, timeout, "load")
    routes = Routes(settings.default_exchange, exchanges=exchanges,
                    router=Router(management, vhost) if management is not None else None)
    try:
        return _load(conn, open_stream, settings, routes, total=total, progress=progress, failed=failed,
                     timeout=timeout, handle_sigint=handle_sigint)
    finally:
        if exchanges is not None:
            exchanges.delete_all()


def _load(conn: Any, open_stream: Opener, settings: LoadSettings, routes: Any, *, total: int,
          progress: Callable[[Progress], None] | None, failed: Sink | None, timeout: float,
          handle_sigint: bool) -> LoadResult:
    result = LoadResult(settings.name, total)
    stop = threading.Event()
    started = time.monotonic()
    inflight: dict[int, MessageRecord] = {}  # yielded to the publisher, not settled yet
    last_report = 0.0

    def report(final: bool = False) -> None:
        nonlocal last_report
        now = time.monotonic()
        if progress is not None and (final or now - last_report >= 0.2):
            last_report = now
            done = result.published_total + result.failed_total
            progress(Progress(total, done, result.published_total, now - started))

    with open_stream() as stream, sigint_as_stop(stop, handle_sigint):
        def torn(_where: str, _skipped: int) -> None:
            result.skipped_torn += 1

        records = iter_records(stream, settings.name, torn)

        def items() -> Iterator[tuple[str, str, bytes, Any, Any]]:
            for where, record in records:
                # In `inflight` before anything else: read from the file, it is either settled or, if we
                # stop now, reported as not sent (and written to --failed) — never silently skipped.
                inflight[id(record)] = record
                if stop.is_set():
                    return
                target = _target(record, settings, where)
                route = routes(target)
                if isinstance(route, str):  # not published: it fails with the reason, the others go on
                    del inflight[id(record)]
                    _refused(result, target, route, record, failed)
                    continue
                exchange, keeps_key = route
                headers = _headers(record, settings)
                key = _routing_key(record, headers) if keeps_key else target
                yield exchange, key, record.body, record.pika_properties(headers), (target, record)

        try:
            for (target, record), outcome, detail in publish_records(conn, items(), window=settings.window,
                                                                      timeout=timeout):
                del inflight[id(record)]
                _count(result, target, outcome, detail, record, failed)
                report()
        except Exception as exc:  # noqa: BLE001 - connection lost: report what was and was not published
            result.error = describe_error(exc)
        result.interrupted = stop.is_set() and result.error is None
        # Never published: the one the error hit on its way out, and the rest of the file.
        for record in [*inflight.values(), *(r for _w, r in records)]:
            result.not_sent += 1
            if failed is not None:
                failed.write(record)
    if failed is not None:
        failed.flush()
    result.elapsed = time.monotonic() - started
    report(final=True)
    return result


def _headers(record: MessageRecord, settings: LoadSettings) -> dict[str, Any]:
    if not settings.reset_history:
        return record.headers
    from dlxtool.ops.replay import replay_headers

    return replay_headers(record, source=f"file {settings.name}", reset_names=settings.reset_names)


def _routing_key(record: MessageRecord, headers: dict[str, Any]) -> str:
    """The record's routing key; after a count reset, the original one its provenance header records."""
    from dlxtool.ops.replay import PROVENANCE_HEADER

    prov = headers.get(PROVENANCE_HEADER) if headers is not record.headers else None
    key = prov.get("routing-key") if isinstance(prov, dict) else None
    return key if isinstance(key, str) else record.routing_key


def _refused(result: LoadResult, target: str, why: str, record: MessageRecord, failed: Sink | None) -> None:
    result.failed[why if why.startswith(f"{target}: ") else f"{target}: {why}"] += 1
    if failed is not None:
        failed.write(record)


def _count(result: LoadResult, target: str, outcome: Any, detail: str | None, record: MessageRecord,
           failed: Sink | None) -> None:
    if outcome is Outcome.CONFIRMED:
        result.published[target] += 1
        return
    if outcome is Outcome.LOST:
        result.lost += 1
    result.failed[f"{target}: {outcome.value} — {detail}"] += 1
    if failed is not None:
        failed.write(record)


def publish_records(conn: Any, items: Iterable[tuple[str, str, bytes, Any, Any]], *, window: int = 1000,
                    timeout: float = 30.0) -> Iterator[tuple[Any, Outcome, str | None]]:
    """For `load`: publish (exchange, routing_key, body, properties, token) with a window of confirms,
    yielding each (token, outcome, detail) as it settles. A seam, not used by replay itself."""
    pub = Publisher(conn, window=window, timeout=timeout)
    try:
        for exchange, routing_key, body, props, token in items:
            while not pub.has_room():
                pub.pump(IDLE_WAIT)
                yield from pub.take_settled()
            try:
                pub.publish(exchange, routing_key, body, props, token)
            except EncodeError as exc:  # nothing sent: this record fails, the others go on
                yield token, Outcome.REFUSED, str(exc)
                continue
            pub.pump(0)
            yield from pub.take_settled()
        yield from pub.flush(timeout)
    except Exception as exc:
        # The connection died: what was in flight may or may not be at the broker. Report it as LOST
        # (so the caller can count possible duplicates) before the error goes on.
        pub.abandon(f"connection lost before the confirm ({describe_error(exc)})")
        yield from pub.take_settled()
        raise
    finally:
        pub.close()
