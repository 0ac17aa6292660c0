"""The tap: watching a DLQ for this run's own messages dying again, without touching the DLQ or the origins.

A replay's copies carry the `dlxtool-replay` provenance header, whose `id` is `<run>-<n>` (dlxtool.ops.provenance).
When a replayed message fails again, the broker dead-letters it with its headers, that one included; a framework
that parks it (Spring's republish recoverer, a team's parking-lot publisher) copies the headers it received too.
So the dead letters of *this* run are the ones whose provenance names this run.

To see them without consuming, reordering or spending delivery attempts on the DLQ (or the origins), the tap is a
queue of our own — exclusive to the tap's connection, so the broker deletes it when that connection goes (over AMQP
1.0: durable and auto-delete, below) — bound to every exchange the DLQ is bound to, with the DLQ's own binding keys
and arguments (read from the management API).
Whatever those exchanges route to the DLQ from now on, they route to the tap too: a copy, consumed with auto-ack
on a connection and thread of its own, so the replay's engine is never slowed or blocked by it.

A replay over AMQP 1.0 is watched over AMQP 1.0 too (`amqp10`): a replayed message that RabbitMQ cannot give a 0.9.1
consumer (4.x: a char or uuid application property, dlxtool.broker.versions) would close a 0.9.1 tap's connection
when it dies again, and end the watch. A 1.0 receiver cannot consume a queue exclusive to another connection, so
that tap queue is durable (4.3 refuses transient non-exclusive ones) and auto-delete: the broker deletes it when the
receiver detaches — the process's end, a kill -9 included — or, where the process died before it attached, once
unused for TAP_EXPIRES_MS. The other way round, a 0.9.1 message with a decimal header ends the 1.0 session it is
delivered to (4.0.5, 4.3.6: versions.decimal_poison_amqp10): another application's such dead letter routed to the
DLQ's exchanges during the run ends a 1.0 tap's watch, which the run then says (the brake is off from there on).

What the tap cannot see (docs/canary.md):
  * dead letters that reach the DLQ through the default exchange (x-dead-letter-exchange "" with a routing key
    naming the DLQ, or a parking-lot publisher that publishes to the queue by name): the default exchange cannot be
    bound. Then no tap can be made (TapUnavailable) and the caller says so.
  * a dead-letter route changed during the run (a policy applied, a binding added): the tap has the bindings of its
    start.
  * a replayed message that dies into another queue than this DLQ (an origin whose dead-letter exchange routes
    elsewhere, a parking lot not bound to the DLQ's exchanges).
  * a consumer that drops a message, or republishes it without its headers: nothing of the run is left on it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from dlxtool import waits
from dlxtool.amqp10_view import PROVENANCE_ANNOTATION
from dlxtool.errors import DlxtoolError
from dlxtool.json_shapes import is_array, is_object
from dlxtool.ops.provenance import PROVENANCE_HEADER

if TYPE_CHECKING:
    from dlxtool.broker.management import ManagementClient
    from dlxtool.broker.pika_types import Basic, BasicProperties, BlockingChannel, BlockingConnection
    from dlxtool.config import BrokerProfile

TAP_MAX_LENGTH = 100_000  # a flood of others' dead letters drops the tap's oldest copies, never the broker's memory
TAP_EXPIRES_MS = 60_000   # a 1.0 tap's queue left unused this long (its process died before attaching) is deleted


class TapUnavailable(DlxtoolError):
    """No tap can be made on this DLQ (why: no management API, bound only through the default exchange …)."""


@dataclass(frozen=True)
class Binding:
    exchange: str
    routing_key: str
    arguments: Mapping[str, Any]

    def describe(self) -> str:
        return f"{self.exchange!r} ({self.routing_key!r})" if self.routing_key else repr(self.exchange)


@dataclass(frozen=True)
class Death:
    """One of this run's messages seen dead again: the run (canary or main pass) and its publish number there, the
    message's name, and the failure it carries now (dlxtool.failures: its group key and the text as it is)."""

    run: str
    number: int
    name: str
    failure: str        # the failure's group (error pattern, or exception + frame)
    example: str        # the failure's text as this message carries it
    seen: float         # time.monotonic() when the tap saw it


def dlq_bindings(management: ManagementClient, vhost: str, dlq: str) -> list[Binding]:
    """The DLQ's bindings but the default exchange's (which every queue has and no other queue can share)."""
    path = f"queues/{quote(vhost, safe='')}/{quote(dlq, safe='')}/bindings"
    listed = management.get(path)
    out: list[Binding] = []
    for b in listed if is_array(listed) else []:
        if is_object(b) and b.get("source"):
            out.append(Binding(str(b["source"]), str(b.get("routing_key") or ""), dict(b.get("arguments") or {})))
    return out


def run_of(headers: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """(run, publish number) from a message's provenance `id` (`<run>-<n>`), or None (never replayed). A replay over
    AMQP 1.0 sends the provenance as the message annotation x-opt-dlxtool-replay, which RabbitMQ gives a 0.9.1
    reader (this tap) as a table header of that name (measured on 4.3.6)."""
    found = headers or {}
    prov = found.get(PROVENANCE_HEADER)
    if prov is None:
        prov = found.get(PROVENANCE_ANNOTATION)
    if not is_object(prov):
        return None
    publish_id = prov.get("id")
    if isinstance(publish_id, bytes | bytearray):
        publish_id = bytes(publish_id).decode("utf-8", "replace")
    if not isinstance(publish_id, str) or "-" not in publish_id:
        return None
    run, number = publish_id.rsplit("-", 1)
    return (run, int(number)) if number.isdigit() else None


def failure_of(headers: Mapping[str, Any], body: bytes, queue: str) -> tuple[str, str]:
    """(group, text) of the failure a dead letter carries now: as `history --summary` groups failures (a recorded
    stack's exception and first application frame, else the error text without what varies); where no convention
    recorded an error (a plain reject), the broker's reason and queue."""
    from dlxtool.conventions import Message, explain
    from dlxtool.deaths import parse_history
    from dlxtool.failures import failure_key

    try:
        x = explain(Message(headers=headers, body=body, queue=queue))
    except Exception:  # noqa: BLE001 - odd headers: the failure is unknown, the death still counts
        return "(failure not readable)", "(failure not readable)"
    stack = x.stack
    if x.error:
        key = failure_key(x.error, stack.stack if stack else None, exception=stack.exception if stack else None)
        if key.signature is not None:
            group = " at ".join(p for p in (key.signature.exception, key.signature.short_frame()) if p)
        else:
            group = key.pattern or x.error
        return group, x.error
    deaths = parse_history(headers).deaths
    if deaths:
        d = deaths[0]  # the most recent: the death just now
        text = f"{d.reason or 'dead-lettered'} in {d.queue or '?'} (no error text recorded)"
        return text, text
    return "(no failure recorded)", "(no failure recorded)"


class Tap:
    """A tap on `dlq` for the messages of `runs` (their provenance ids' run part); `on_death(Death)` is called from
    the tap's own thread for each one seen (once per publish id). `start()` returns once the tap queue is bound:
    from then on every dead letter routed to the DLQ is seen."""

    def __init__(self, connect: Callable[[], BlockingConnection], bindings: list[Binding], dlq: str, runs: set[str], *,
                 on_death: Callable[[Death], None] | None = None, timeout: float = 30.0,
                 amqp10: BrokerProfile | None = None) -> None:
        """`amqp10`: watch over AMQP 1.0, connecting with this profile (a replay over 1.0); `connect` declares and
        binds the tap queue either way."""
        self._connect = connect
        self.amqp10 = amqp10
        self.bindings = bindings
        self.dlq = dlq
        self.runs = set(runs)
        self.on_death = on_death
        self.timeout = timeout
        self.deaths: list[Death] = []
        self.others = 0            # dead letters of others (not this run) seen meanwhile
        self.unreadable = 0        # copies a 1.0 tap could not read as AMQP 1.0 messages (said at the end)
        self.queue: str | None = None
        self.error: str | None = None  # why the tap stopped watching before it was asked to
        self._seen: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: BlockingConnection | None = None  # the tap thread's, while it runs

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"dlxtool-tap-{self.dlq}", daemon=True)
        self._thread.start()
        began = time.monotonic()
        ready = self._ready.wait(self.timeout)
        waits.note(f"the tap on {self.dlq!r} to be ready (its connection, queue and bindings)", self.timeout,
                   time.monotonic() - began, "wait")
        if not ready:
            self._stopping.set()
            raise TapUnavailable(f"the tap on {self.dlq!r} was not ready within {self.timeout:g}s")
        if self.error is not None:
            raise TapUnavailable(f"no tap on {self.dlq!r}: {self.error}")

    def stop(self, linger: float = 0.0) -> None:
        """Stop watching (after `linger` seconds more: what a consumer fails just after the run is still seen);
        the tap queue goes with its connection."""
        began = time.monotonic()
        if linger > 0 and self.error is None:
            time.sleep(linger)
        self._stopping.set()
        conn = self._conn
        if conn is not None:  # its loop ends now, not at the end of its 0.1 s wait for frames (every small run's cost)
            from dlxtool.broker.connection import wake

            wake(conn)
        if self._thread is not None:
            self._thread.join(self.timeout)
        waits.note(f"the tap on {self.dlq!r}: dead letters on their way, then its connection closing",
                   linger + self.timeout, time.monotonic() - began, "wait")

    def died(self, run: str | None = None) -> list[Death]:
        with self._lock:
            return [d for d in self.deaths if run is None or d.run == run]

    @property
    def watching(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.error is None

    # -- the tap's thread --------------------------------------------------------------------------------------

    def _run(self) -> None:
        conn = None
        try:
            conn = self._conn = self._connect()
            ch = conn.channel()
            name = f"dlxtool.tap.{'.'.join(sorted(self.runs))}"[:255]
            # over 0.9.1 exclusive: only this connection sees it, and the broker deletes it when the connection goes
            # (a kill -9 included); never durable
            arguments: dict[str, Any] = {"x-max-length": TAP_MAX_LENGTH, "x-queue-type": "classic"}
            if self.amqp10 is None:
                ch.queue_declare(name, exclusive=True, auto_delete=True, arguments=arguments)
            else:  # consumed by a 1.0 receiver on another connection (the module docstring)
                ch.queue_declare(name, durable=True, auto_delete=True,
                                 arguments={**arguments, "x-expires": TAP_EXPIRES_MS})
            self.queue = name
            for b in self.bindings:
                ch.queue_bind(name, b.exchange, routing_key=b.routing_key, arguments=dict(b.arguments) or None)
            if self.amqp10 is not None:
                self._conn = None
                from dlxtool.broker.connection import close_quietly

                close_quietly(conn)  # its part is done: the queue outlives it until the receiver detaches
                conn = None
                self._watch_amqp10(self.amqp10, name)
                return
            ch.basic_qos(prefetch_count=500)
            ch.basic_consume(name, self._on_message, auto_ack=True)
            self._ready.set()
            while not self._stopping.is_set():
                # pika takes seconds as a float (its stub in typeshed says int)
                conn.process_data_events(time_limit=0.1)  # pyright: ignore[reportArgumentType]
        except Exception as exc:  # noqa: BLE001 - said by the caller: the run goes on without watching
            from dlxtool.broker.connection import describe_failure

            self.error = describe_failure(exc)
        finally:
            self._ready.set()
            self._conn = None
            if conn is not None:
                from dlxtool.broker.connection import close_quietly

                close_quietly(conn)

    def _watch_amqp10(self, profile: BrokerProfile, queue: str) -> None:
        """Take what reaches the tap queue over AMQP 1.0 until stopped (each message read whole: its 0.9.1 view's
        headers carry the provenance, MessageRecord.from_amqp10)."""
        from dlxtool.amqp10_message import Amqp10Error
        from dlxtool.broker.amqp10.addresses import queue_address
        from dlxtool.broker.amqp10.connection import open_connection
        from dlxtool.broker.amqp10.links import Consumer
        from dlxtool.record import MessageRecord

        conn = open_connection(profile)
        try:
            consumer = Consumer(conn, queue_address(queue))
            self._ready.set()
            while not self._stopping.is_set():
                for delivery in consumer.take(0.1):
                    try:
                        record = MessageRecord.from_amqp10(queue, delivery.raw)
                    except Amqp10Error:  # not ours (dlxtool sent this run's messages), and said at the end
                        self.unreadable += 1
                        continue
                    self._saw(record.headers, record.body, record.properties.get("message_id"))
            consumer.close()
        finally:
            conn.close()

    def _on_message(self, _ch: BlockingChannel, _method: Basic.Deliver, props: BasicProperties, body: bytes) -> None:
        self._saw(getattr(props, "headers", None) or {}, body, getattr(props, "message_id", None))

    def _saw(self, headers: Mapping[str, Any], body: bytes, message_id: object) -> None:
        """One dead letter routed to the DLQ: a Death where it is one of this run's (once per publish id).
        `message_id`: str, or bytes where it is not UTF-8."""
        found = run_of(headers)
        if found is None or found[0] not in self.runs:
            self.others += 1
            return
        if found in self._seen:  # a second copy (bound through two exchanges): one death
            return
        self._seen.add(found)
        group, example = failure_of(headers, body, self.dlq)
        if isinstance(message_id, bytes | bytearray):
            message_id = bytes(message_id).decode("utf-8", "replace")
        death = Death(found[0], found[1], message_id if isinstance(message_id, str) and message_id else
                      f"{found[0]}-{found[1]}", group, example, time.monotonic())
        with self._lock:
            self.deaths.append(death)
        if self.on_death is not None:
            self.on_death(death)
