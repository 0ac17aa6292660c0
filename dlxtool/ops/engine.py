"""The one-pass engine under replay, selective purge, `purge --move-to` and `dump --remove`.

It reads a source queue once (a snapshot of the ready count taken at the start, so dead letters that
arrive — or fail again — during the run are not taken in a loop), asks a `decide(record)` callback
what to do with each message, and settles every message exactly one way:

    MOVE    publish elsewhere (mandatory, confirmed), optionally write a record to a sink,
            then ack the source. Returned (unroutable) or nacked publishes stay in the source.
    REMOVE  write a record to the sink (flushed), then ack the source: purge --backup, dump --remove.
    KEEP    not selected: stays in the source, relative order kept (see "keeping" below).
    LEAVE   selected but not movable (no origin, loop guard …): stays in the source, counted by reason.

Nothing is lost: the source is acked only after the copy exists (broker confirm without return, or
sink flushed). A dropped connection, broker restart or Ctrl-C leaves unacked messages in the source.
The price is at-least-once: a copy whose source ack may not have reached the broker is a possible
duplicate, and `TransferResult.possible_duplicates` counts them. To keep that number small, every
batch of acks is followed by a pipelined basic.qos (a no-op with the same prefetch): the broker
handles a channel's methods in order, so its qos-ok proves the acks before it were processed.

Keeping non-selected messages in order — the trade-off (also in `dlxtool replay --help`):
  * nack-requeue at the end would hold every kept message unacked for the whole pass: unbounded
    for big queues (holding ~1M unacked has crashed brokers) and, on quorum queues, a delivery
    attempt per kept message (x-delivery-count; with a delivery-limit that can dead-letter them).
  * so KEEP/LEAVE messages are republished, unchanged, to the tail of the source (default exchange,
    confirmed) and only then acked. Memory stays bounded by the prefetch window and kept messages
    keep their relative order. Costs: they end up behind messages that arrive during the run; the
    delivery's exchange/routing key becomes ""/source (x-death keeps the original ones); a
    per-message TTL starts again; `redelivered` is cleared.
  If --limit is reached before anything was kept, the rest is simply not read (it stays in place).
  If a message must stay but its republish fails (source full/deleted), it is held unacked and
  requeued at the end instead.

Acks are paced so that the broker never has room to deliver more than what is still to be read (see
`_ack_budget`), and the consumer is cancelled as soon as that is read: our own kept (republished)
messages and messages published during the run are not delivered to us, so nothing has to be given
back — which on a quorum queue would be a delivery attempt. Only a stop (Ctrl-C, error) or other
consumers taking part of the snapshot can still leave deliveries to requeue untouched at the end
(`TransferResult.requeued` says how many).

A classic queue (hooks.hold_stays: the caller knows the queue's type) is different on both counts: it takes a
given-back delivery back in place and counts no attempt, so there KEEP/LEAVE messages met before anything moved
are held unacked and given back in place at the end (up to half the window: a run that moves nothing changes
nothing), every settled message is acked at once (a kill -9 leaves at most the window's copies twice), and the
consumer is cancelled without waiting for deliveries in flight. Where the queue's type is unknown (no management
API), the quorum rules apply.

Reuse: `purge --backup` and `dump --remove` = decide() returning REMOVE with a `RecordSink`
(dlxtool.ops.record_files: records flushed and fsynced before the acks that follow them); selective purge
without a backup = REMOVE without a sink; `purge --move-to` = MOVE to one queue (dlxtool.ops.purge);
`load` reads a file, not a queue: its pass is dlxtool.ops.file_pass, under the same pipeline. The replay plan reads
with dlxtool.ops.peek's reader; Ctrl-C handling is dlxtool.ops.interrupts.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections import deque
from collections.abc import Generator
from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

from dlxtool.broker import queues
from dlxtool.broker.channel import IDLE_WAIT, AsyncChannel
from dlxtool.broker.connection import (
    amqp_failure,
    blocked,
    describe_failure,
    heartbeat_of,
    is_connection_failure,
    node_refuses,
)
from dlxtool.broker.giveback import close_channel
from dlxtool.broker.publisher import PublishAnswer, Publisher
from dlxtool.broker.refusals import Refusal
from dlxtool.broker.wire.frames import EncodeError, decode_properties
from dlxtool.budget import PrefetchWindow, human
from dlxtool.errors import ConnectError, DlxtoolError, UnavailableError
from dlxtool.ops.actions import Action as Action
from dlxtool.ops.actions import Decide as Decide
from dlxtool.ops.actions import Decision as Decision
from dlxtool.ops.interrupts import sigint_as_stop
from dlxtool.ops.publish_troubles import BlockWatch, PublishRefusals
from dlxtool.ops.publish_troubles import PublishingBlocked as PublishingBlocked
from dlxtool.ops.record_files import SetAside, Sink
from dlxtool.ops.stay import Stay, Why, answered
from dlxtool.ops.transfer_acks import AckProof
from dlxtool.ops.transfer_keep import KeepRoute
from dlxtool.ops.transfer_ledger import DONE, WAIT, Item, Ledger, message_id, removes
from dlxtool.ops.transfer_pace import ReadPace
from dlxtool.ops.transfer_result import Progress as Progress
from dlxtool.ops.transfer_result import TransferResult as TransferResult
from dlxtool.ops.transfer_settings import PassControl as PassControl
from dlxtool.ops.transfer_settings import RunHooks as RunHooks
from dlxtool.ops.transfer_settings import TransferOptions as TransferOptions
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.pika_types import Basic, BasicProperties
    from dlxtool.ops.actions import Decider, RawDecide

TAKE_BATCH = 200  # deliveries decided per loop turn, between sink flushes and acks
# With this many publishes in flight, an idle wait lets input gather GATHER s once it starts arriving:
# 100,000-message replays used ~40% less CPU per message here, and the broker less too
# (scripts/bench/replay.py)
GATHER = 0.003
GATHER_MIN_IN_FLIGHT = 100


class SourceDeleted(DlxtoolError):
    """The source queue was deleted during the run; the messages in it went with it."""




REMOVAL_UNPROVEN = Why("ack not proven before the end (removed, or still in the source)", Stay.UNPROVEN)
BEYOND_LIMIT = Why("beyond --limit", Stay.NOT_SELECTED)
NO_CONFIRM = Why("no confirm", Stay.UNCONFIRMED)
KEPT = Why("kept", Stay.NOT_SELECTED)  # (never said: a keep-republish always has its reason)



def _sink_record(decision: Decision, record: MessageRecord | None) -> MessageRecord:
    """What the sink writes for a decided message: the decision's record, else the source record (a raw
    decision, taken without decoding, always carries its own)."""
    written = decision.record or record
    assert written is not None, "a raw decision that moves or removes must carry its record"
    return written


class Transfer:
    """One pass over `source` on `source_conn`; MOVEs are published on `target_conn` (may be the same)."""

    def __init__(self, source_conn: AmqpConnection, source: str, decide: Decider, *,
                 target_conn: AmqpConnection | None = None, keep_conn: AmqpConnection | None = None,
                 options: TransferOptions | None = None, hooks: RunHooks | None = None,
                 control: PassControl | None = None, timeout: float = 30.0) -> None:
        self.source_conn = source_conn
        self.target_conn = target_conn or source_conn
        # Stays are republished to the source's tail on keep_conn (default: the source's own). A connection that
        # publishes is the one a resource alarm blocks: a caller that keeps publishing off source_conn keeps the
        # consumer's acks and give-backs flowing while publishing is blocked.
        self.keep_conn = keep_conn or source_conn
        self.source = source
        self.opts = options or TransferOptions()
        self.hooks = hooks or RunHooks()
        # Where MOVE and REMOVE records go (TransferOptions.sink); after a sink failed, a SetAside of it (_salvage)
        self.sink: Sink | None = self.opts.sink
        self.control = control or PassControl()
        if self.control.pick is not None:
            decide = self.control.pick(decide)
        self.decide = decide
        # decide(routing_key, encoded properties, body) -> Decision | None (None: decide(record) instead). Only
        # for MOVEs that need no record: with a sink, every record must be written.
        self._decide_raw: RawDecide | None = decide.raw if self.opts.sink is None else None
        self.timeout = timeout
        self.result = TransferResult(source=source, snapshot=0)
        self.ledger = Ledger(self.result)        # the deliveries held unacked, and what each became
        self._incoming: deque[tuple[Basic.Deliver, BasicProperties | bytes, bytes]] = deque()
        self._missing_seen = False  # _source_drained found the source empty short of the snapshot once
        self._received = 0
        self._selected = 0
        self._kept_any = False                   # a message was republished to the tail (order not kept)
        self._changed_any = False                # a MOVE confirmed or a REMOVE: holding stays no longer helps
        self._held_stays = 0                     # stays held instead of republished (hooks.hold_stays)
        self._hold_limit = 0                     # at most this many (set in _setup)
        self.refusals = PublishRefusals(self.hooks.keep_refused)
        self.blocks = BlockWatch(tuple(dict.fromkeys((self.target_conn, self.keep_conn))), timeout, self.hooks.report)
        self.keep_route = KeepRoute(source_conn, source, timeout, self.result.notes)  # kept messages keep their key
        self.acks = AckProof()
        self.pace = ReadPace(self.opts.rate, self.control.pace)
        self._stop_reading = False
        self._given_back_unproven = 0            # given back by a channel close the broker did not answer
        self._cancelled_by_broker = False
        self._nacked_copies = 0                  # nacked publishes the target may have dead-lettered as well
        self._stop = self.control.stop or threading.Event()
        # Set by _setup() when the run starts; None before (a run that failed early salvages without them).
        self.channel: AsyncChannel | None = None
        self.prefetch = 0                        # our basic.qos: min(opts.prefetch, snapshot), at least 1
        self.window: PrefetchWindow | None = None  # the prefetch the byte budget allows (opts.max_bytes)
        self.prefetches: list[int] = []          # every prefetch this run's consumers had, in order
        self._retarget: int | None = None        # a prefetch to change to: a new consumer once the old one is settled
        self._old_held = 0                       # held deliveries of earlier consumers: they take no slot of this one
        self._said_window = 1 << 30              # the narrowest window said so far (_say_window)
        self.mover: Publisher | None = None      # MOVEs, on target_conn
        self.keeper: Publisher | None = None     # KEEP/LEAVE to the source's tail (= mover on one connection)
        self.consumer_tag: str | None = None     # None: not consuming (nothing to read, or cancelled)

    # What _setup() made; the steps that use these run only after it (the salvage checks `channel` first).
    @property
    def _channel(self) -> AsyncChannel:
        assert self.channel is not None, "used before _setup()"
        return self.channel

    @property
    def _mover(self) -> Publisher:
        assert self.mover is not None, "used before _setup()"
        return self.mover

    @property
    def _keeper(self) -> Publisher:
        assert self.keeper is not None, "used before _setup()"
        return self.keeper

    # -- public ------------------------------------------------------------------------------------

    def run(self) -> TransferResult:
        started = time.monotonic()
        with sigint_as_stop(self._stop, self.opts.handle_sigint), _fewer_gc_passes():
            try:
                try:
                    self._setup()
                    self._loop(started)
                    self._finish()
                    self.keep_route.delete(self.keeper)
                except UnavailableError as exc:  # not now (a node down, a queue timing out): settle, report
                    self.result.unavailable, self.result.unavailable_hint = exc.message, exc.hint
                    self.result.error = exc.message
                    self._salvage()
                    self.keep_route.delete(None)
                except Exception as exc:  # noqa: BLE001 - connection/channel loss or a local error: settle, report
                    self.result.error = describe_error(exc)
                    self.result.connection_lost = _is_connection_error(exc)
                    unavailable = _unavailable(exc)
                    if unavailable is not None:  # the broker said why: a node down, no majority (exit 7, not 3)
                        self.result.unavailable, self.result.unavailable_hint = unavailable.message, unavailable.hint
                    self._salvage()
                    self.keep_route.delete(None)
            except KeyboardInterrupt:  # a second Ctrl-C (also while salvaging): no more waiting, count copies
                self._stop.set()
                self._give_up()
        self._unproven_removals()
        self.result.interrupted = self._stop.is_set() and self.result.error is None
        self.result.unprocessed = max(0, self.result.snapshot - self._decided_count())
        self.result.elapsed = time.monotonic() - started
        self._report(started, final=True)
        return self.result

    def stop(self) -> None:
        """Ask for a clean stop (what Ctrl-C does): finish in-flight work, requeue the rest."""
        self._stop.set()

    # -- setup -------------------------------------------------------------------------------------

    def _setup(self) -> None:
        self.channel = AsyncChannel(self.source_conn, self.timeout)
        self.result.snapshot = queues.declare(self.channel, self.source).ready
        if self.control.read_at_most is not None:
            self.result.snapshot = min(self.result.snapshot, self.control.read_at_most)
        self.prefetch = max(1, min(self.opts.prefetch, self.result.snapshot or 1))
        if self.opts.max_bytes is not None:
            self.window = PrefetchWindow(self.opts.max_bytes, self.prefetch, self.hooks.size_hint)
            self.prefetch = self.window.prefetch
            self._say_window()
        self.prefetches.append(self.prefetch)
        if self.hooks.hold_stays:  # half the window at most where there is more to read: deliveries go on
            # (with a byte budget, half the --prefetch window: a new consumer takes over when the held ones fill a
            # narrower one, see _loop; held stays keep no bytes)
            window = self.window.ceiling if self.window is not None else self.prefetch
            self._hold_limit = window if window >= self.result.snapshot else window // 2
        self.channel.call("basic_qos", prefetch_count=self.prefetch)
        self.mover = Publisher(self.target_conn, window=self.opts.window, timeout=self.timeout)
        self.keeper = (self.mover if self.keep_conn is self.target_conn
                       else Publisher(self.keep_conn, window=self.opts.window, timeout=self.timeout))
        self.channel.on_cancel(self._on_cancel)
        if self.result.snapshot:
            self._consume()
        else:
            self._stop_reading = True

    def _consume(self) -> None:
        # properties left encoded until needed (bytes), runs of deliveries at once; on the `pika` codec,
        # pika's deliveries one by one (BasicProperties): _handle takes either
        self.consumer_tag = self._channel.consume(self.source, self._on_message, raw=True,
                                                  batch=(self._on_message, self._incoming.extend))

    def _on_message(self, _channel: object, method: Basic.Deliver, props: BasicProperties | bytes,
                    body: bytes) -> None:
        self._incoming.append((method, props, body))

    def _on_cancel(self, _frame: object) -> None:
        self._cancelled_by_broker = True

    # -- main loop ---------------------------------------------------------------------------------

    def _loop(self, started: float) -> None:
        last_report = 0.0
        idle_since = still_since = time.monotonic()
        last_mark = self._progress_mark()
        while not self._stop.is_set():
            worked = self._take_incoming()
            if self._retarget is not None:
                self._change_prefetch()
            if self._all_read() and self.consumer_tag:
                self._cancel_consumer()  # before the acks that follow: nothing more may come to us
            elif self.consumer_tag and self._all_arrived():
                self._cancel_consumer(keep=True)  # acks may flow from now on: a smaller kill -9 window
            self._pump(0.0 if worked else self._idle_wait(), self._gather())
            self._settle_outcomes()
            if self._ack_ready() and worked:
                self._channel.pump(0.0)  # send the acks now, not after the next batch is written
            now = time.monotonic()
            if now - last_report >= self.opts.progress_every:
                self._report(started)
                last_report = now
            if self._all_read() and not self._busy():
                return
            if self._cancelled_by_broker:
                self._consumer_cancelled()
            held = self.ledger.held - self._old_held
            # every prefetch slot holds a message to give back: none can come. (Not while deliveries wait to be
            # decided: they may be selected, and a selection then changes something; seen with a filter and -n.)
            if held and self.consumer_tag and not self._incoming and held >= self.prefetch and not self._busy():
                if self.window is not None and self.hooks.hold_stays and self._retarget is None:
                    self._retarget = self.prefetch  # a new consumer, whose slots are free (_change_prefetch)
                else:
                    self.result.notes.append(f"stopped reading: {self.ledger.held} message(s) held to be given back in "
                                             "place took every prefetch slot")
                    self._cancel_consumer()
            if worked or self._incoming:
                idle_since = now
                self._missing_seen = False  # deliveries came: a source short of the snapshot is asked twice again
            elif now - idle_since > 2.0 and not self._busy():
                if self._source_drained():
                    return  # someone else took the rest of the snapshot
                idle_since = now  # asked: the next ask after another idle spell
            moved_on = self._progress_mark()
            if moved_on != last_mark:
                last_mark, still_since = moved_on, now
            elif now - still_since > self.timeout and (self._busy() or self._incoming):
                self._prove_answering()  # nothing came for a whole timeout while confirms or room are due
                still_since = now

    def _idle_wait(self) -> float:
        delay = self.pace.delay(self._received) if self.pace.active else 0.0
        if delay > 0:
            return min(delay, 0.05)
        return IDLE_WAIT

    def _pump(self, wait: float, gather: float = 0.0) -> None:
        others = [c for c in dict.fromkeys((self.target_conn, self.keep_conn)) if c is not self.source_conn]
        self._channel.pump(wait, *others, gather=gather)
        self._check_publishers()
        try:
            self.blocks.check()
        except PublishingBlocked as exc:  # said as such even where a salvage swallows it (exit 7, not 3)
            self.result.unavailable = exc.message
            raise

    def _check_publishers(self) -> None:
        """A publisher channel the broker closed: its publishes are settled by what the broker said
        (Publisher.closed_by_broker), the run goes on on a new channel (_broker_refused)."""
        for pub in self._publishers():
            refusal = pub.closed_by_broker()  # ConnectError where the connection went with it
            if refusal is not None:
                self._broker_refused(pub, refusal)

    def _broker_refused(self, pub: Publisher, refusal: Refusal) -> None:
        """Where the broker refused one message (its expiration, user_id, size …), that one stays (given back in
        place, with the broker's words) and the others go on. Where it refused an exchange (no write permission,
        a missing or internal one), nothing more is published there: what goes there stays, with its words. A
        refusal that names neither stops the run at once (the broker's words in the summary). (PublishRefusals)"""
        if self.refusals.refused(refusal, self.keep_route):
            self.result.refused_by_broker = self.refusals.stopped_by
            self._stop_reading = True
        pub.reopen()

    def _consumer_cancelled(self) -> None:
        """The broker cancelled our consumer: the source queue was deleted (its messages went with it), or it
        said why (a node down, a quorum queue losing its leader: the messages are still there)."""
        if queues.ready(self.source_conn, self.source, self.timeout) is None:
            self.result.source_deleted = True
            raise SourceDeleted(f"{self.source!r} was deleted during the run: the messages still in it were deleted "
                                "with it")
        raise ConnectError(f"the broker cancelled our consumer on {self.source!r}; its messages are still in it")

    def _gather(self) -> float:
        """How long to let input gather after an idle wait (AsyncChannel.pump). Only with many publishes in
        flight: the broker has their confirms (and the deliveries acks free) to work on meanwhile, and each
        turn then handles a larger batch. With few in flight (a small --window or --prefetch, the start,
        the tail) a pause would only leave the broker waiting for us."""
        if self._mover.outstanding >= max(GATHER_MIN_IN_FLIGHT, self._mover.window // 4):
            return GATHER
        return 0.0

    def _busy(self) -> bool:
        return bool(self._mover.outstanding or self._keeper.outstanding or self.ledger.waiting)

    def _all_read(self) -> bool:
        return self._stop_reading or self._received >= self.result.snapshot

    def _all_arrived(self) -> bool:
        """Every message of the snapshot is delivered to us (some not yet decided): the consumer can go,
        and then every settled message may be acked at once. Until then the last `prefetch` of a run stay
        unacked after their confirm (an ack would make room for a delivery past the snapshot), and a
        kill -9 then left up to that many copies in both queues instead of about --window.

        With --limit too: the whole snapshot can arrive only where it fits in the prefetch, which run_move caps at
        the limit, so nothing past the limit is on its way (a replay --edit of its document's messages is such a
        run: a kill -9 left all of them twice, seen in the fault campaign, seed 50054)."""
        return self._received + len(self._incoming) >= self.result.snapshot

    def _decided_count(self) -> int:
        r = self.result
        return (r.moved_total + r.removed + sum(r.kept.values()) + r.left_total)

    # -- deliveries --------------------------------------------------------------------------------

    def _take_incoming(self) -> bool:
        pace = self.pace
        pace.begin()
        incoming = self._incoming
        if not incoming:
            return False
        # At most one batch per loop turn: the sink is flushed and acks go out between batches, so a crash
        # or a cut leaves fewer written-but-unacked messages (possible duplicates) than a whole prefetch.
        # A delivery takes at most one publish slot, of the mover or of the keeper.
        # Acks of moved messages the broker has not proven yet (AckProof) take room too: a kill -9, which no handler
        # sees, resets the connection, and the acks the broker had not read go with it, their messages left in the
        # source beside their copies. So at most --window of those, and --window publishes in flight: about twice
        # --window left twice (CI under load once saw 105 with --window 10 when only the publishes were bounded).
        # The loop goes on pumping meanwhile: the proof comes in, a stop or a block is seen as always.
        room = min(TAKE_BATCH, len(incoming), self._mover.room(), self._keeper.room(),
                   max(0, self.opts.window - self.acks.uncertain))
        taken = 0
        largest = 0
        while taken < room:
            if pace.active and pace.delay(self._received) > 0:
                break
            method, props, body = incoming.popleft()
            taken += 1
            if len(body) > largest:
                largest = len(body)
            if self._all_read():  # beyond the snapshot or after --limit: give it back untouched
                self.ledger.untouched(method.delivery_tag, props)
                continue
            self._received += 1
            try:
                self._handle(method, props, body)
            except BaseException:
                items = self.ledger.items
                if not items or items[-1].tag != method.delivery_tag:
                    # Undecided (decide() raised): it is ours, unacked, and goes back with the rest. Lost
                    # from the count, it would also leave _receive_in_flight waiting for a slot that is
                    # not free.
                    incoming.appendleft((method, props, body))
                    self._received -= 1
                raise
        if self.window is not None and taken:
            self._learn(largest, taken)
        return taken > 0

    # -- the prefetch the byte budget allows -----------------------------------------------------------

    def _learn(self, largest: int, taken: int) -> None:
        """After `taken` deliveries whose largest body was `largest`: a new prefetch, when the window says so and there
        is more to read than what is on its way."""
        assert self.window is not None
        wanted = self.window.learn(largest, taken)
        if wanted is None or wanted == self.prefetch or self._retarget == wanted:
            return
        if self.consumer_tag is None and self._retarget is None:
            return  # not consuming (cancelled: everything arrived, or a stop): nothing more comes
        if self.ledger.held and not self.hooks.hold_stays:
            return  # held deliveries go back at the end: on a quorum queue, those of two consumers maybe not in order
        if self._received + len(self._incoming) + (self.prefetch if wanted > self.prefetch else 0) \
                >= self.result.snapshot:
            return  # what is still to come is on its way already, or a wider window would not be filled
        self._retarget = wanted

    def _change_prefetch(self) -> None:
        """Move to the prefetch in `_retarget`. RabbitMQ applies a basic.qos to the consumers started after it, not to
        one that runs (tests/ops/test_engine_budget.py): so the consumer is cancelled, once nothing can be on its way
        to it (the quorum-queue rule of _cancel_consumer), its deliveries are settled and acked as usual, and
        a new consumer starts with the new prefetch once none of them is left but those held to be given back.

        Held deliveries of the old consumer stay unacked: the channel's close gives them back at the end. A classic
        queue takes back a channel's deliveries in order, whatever consumer they went to; a quorum queue returns
        each consumer's own: so a change waits until nothing is held, except where the caller said that a
        give-back is in place (hooks.hold_stays, a classic queue)."""
        if self.consumer_tag is not None:
            if self.ledger.held and not self.hooks.hold_stays:
                self._retarget = None
                return
            self._cancel_consumer(keep=True)
            return
        if self._stop_reading or self._all_read() or self._all_arrived():
            self._retarget = None
            return
        if self._incoming or len(self.ledger.items) != self.ledger.held:
            return  # deliveries of the old consumer still to settle: their slots count against its window only
        assert self._retarget is not None and self.window is not None
        self.prefetch = self.window.prefetch = self._retarget
        self._retarget = None
        held = self.ledger.held
        if held > self._old_held and not self.hooks.hold_stays:  # held while the old consumer settled
            self.result.notes.append(f"{held} message(s) held to be given back were delivered to an earlier "
                                     f"consumer than the rest (the byte budget changed the prefetch): on a quorum "
                                     f"queue their order among those given back may have changed")
        self._old_held = self.ledger.held
        self._channel.qos(self.prefetch)  # handled before the consume that follows: the new consumer's prefetch
        self._consume()
        self.prefetches.append(self.prefetch)
        self._say_window()

    def _say_window(self) -> None:
        """The first time the byte budget narrows the window below --prefetch, and each time it narrows it further:
        why a run of big bodies goes one message (or a few) at a time. With -v only (Reporter.detail): the window
        starts small and widens as bodies come, so the first of these lines describes a moment, not the run."""
        window = self.window
        if window is None or window.size is None or self.hooks.report is None or self.prefetch >= window.ceiling \
                or self.prefetch >= self._said_window:
            return

        self._said_window = self.prefetch
        self.hooks.report.detail(f"bodies of up to about {human(window.size)}: {self.prefetch} message(s) held at once "
                                f"(prefetch), within the byte budget of {human(window.max_bytes)} (--max-bytes)")

    def _handle(self, method: Basic.Deliver, props: BasicProperties | bytes, body: bytes) -> None:
        record = None
        decision: Decision | None
        if self.opts.limit is not None and self._selected >= self.opts.limit:
            decision = Decision.keep(BEYOND_LIMIT)
        else:
            # props are the encoded bytes on the fast delivery path: decide on them when the decider can
            raw = type(props) is bytes
            decision = self._decide_raw(method.routing_key, props, body) if raw and self._decide_raw else None
            if decision is None:
                if raw:
                    props = decode_properties(props)
                record = MessageRecord.from_delivery(self.source, method, props, body, position=self._received - 1)
                decision = self.decide(record)
            if decision.action is not Action.KEEP:
                self._selected += 1
            if decision.action is Action.MOVE and self.refusals.any:
                why = self.refusals.of_move(decision.exchange)
                if why is not None:
                    decision = Decision.leave(why)
            if decision.action is Action.MOVE and self.hooks.admit is not None:
                why = self.hooks.admit(decision.group, len(decision.body if decision.body is not None else body),
                                      self._mover.outstanding)
                if why is not None:
                    decision = Decision.leave(why)
        item = Item(method.delivery_tag, props, body, record, decision, WAIT, False, None, method.routing_key)
        self.ledger.decided(item)
        if decision.action is Action.MOVE:
            try:
                self._mover.publish(decision.exchange, decision.routing_key,
                                   decision.body if decision.body is not None else body,
                                   decision.properties if decision.properties is not None else props, item)
                item.copy = True
            except EncodeError as exc:  # nothing sent: it stays in the source, with the reason
                self._keep(item, Why(f"cannot publish: {exc}", Stay.NOT_SENT))
        elif decision.action is Action.REMOVE:
            self._changed_any = True
            if self.sink is not None:  # no sink: the caller discards on purpose (purge without --backup)
                self.sink.write(_sink_record(decision, record))
                item.copy = True
            self.ledger.done(item, "removed")
        else:
            self._keep(item, decision.why)
        if self.opts.limit is not None and self._selected >= self.opts.limit and not self._kept_any:
            # Nothing kept so far: the unread rest can stay where it is, in order.
            self._stop_reading = True

    def _keep(self, item: Item, group: Why) -> None:
        """Stay in the source: republish unchanged to its tail, ack the original after the confirm.

        With its own routing key, through an exchange bound only to the source (_keep_route): on the default
        exchange its key would become the queue's name, and where the source's dead-letter exchange routes
        on the key (direct/topic) its next failure would be dropped; consumers that dispatch on the key would
        misread it."""
        item.outcome_group = group
        if item.decision is not None and item.decision.hold:  # the broker would refuse it on the tail too
            item.copy = False
            self.ledger.hold(item, group)
            return
        if self.refusals.keep_refused is not None or (not self._changed_any and self._held_stays < self._hold_limit):
            # nothing moved yet (a run that moves nothing must change nothing), or the tail cannot take it
            self._held_stays += self.refusals.keep_refused is None
            item.copy = False
            self.ledger.hold(item, group)
            return
        self._kept_any = True
        exchange = self.keep_route.exchange()
        try:
            self._keeper.publish(exchange, item.routing_key if exchange else self.source, item.body, item.props,
                                 ("keep", item))
            item.copy = True
        except EncodeError:  # cannot be copied to the tail as it is: hold it, give it back in place at the end
            item.copy = False
            self.ledger.hold(item, group)

    # -- outcomes ----------------------------------------------------------------------------------

    def _settle_outcomes(self) -> None:
        sink_dirty = False
        sink = self.sink
        moved, confirmed, record_id = self.result.moved, PublishAnswer.CONFIRMED, self.result.ids.add
        ledger = self.ledger
        for token, outcome, detail in self._mover.take_settled() + (
                self._keeper.take_settled() if self.keeper is not self.mover else []):
            if type(token) is tuple:  # a keep-republish to the source's tail
                # cast: the Publisher hands tokens back as given (Any); a tuple one is ("keep", item) (_keep)
                self._settle_keep(cast("Item", token[1]), outcome, detail)
                continue
            item: Item = token
            decision = item.decision
            assert decision is not None  # only decided items are published
            if outcome is confirmed:
                if sink is not None:
                    sink.write(_sink_record(decision, item.record))
                    sink_dirty = True
                # ledger.done(item, "moved"), inlined: every moved message's path
                self._changed_any = True
                ledger.waiting -= item.state == WAIT
                item.state = DONE
                moved[decision.group] += 1
                record_id(message_id(item))
            else:
                item.copy = outcome is PublishAnswer.LOST  # a LOST publish may exist at the target
                if outcome is PublishAnswer.LOST:  # its source stays: a copy may exist too (possible duplicate)
                    self.ledger.hold(item, Why(f"not confirmed, so still in {self.source} (a copy may have reached "
                                         f"{decision.group}): {detail}", Stay.UNCONFIRMED))
                    continue
                if outcome is PublishAnswer.BROKER_REFUSED:  # it stays where it was, with the broker's words
                    refused = self.refusals.of_exchange(decision.exchange)  # where it went
                    self.ledger.hold(item, refused or Why(f"refused by the broker: {detail}", Stay.MESSAGE_REFUSED))
                    continue
                if outcome is PublishAnswer.UNSENT:  # never delivered: publish it again, where that may go on
                    self._publish_again(item)
                    continue
                why = answered(outcome, detail)
                cause = self.hooks.nack_cause
                if outcome is PublishAnswer.NACKED and cause is not None:
                    why = cause(decision.group) or why
                copies = self.hooks.nack_copies
                copy = copies(decision.group) if outcome is PublishAnswer.NACKED and copies is not None else None
                if copy is not None:
                    self._nacked_copies += 1
                    why = Why(f"{why} ({copy})", why.kind)
                self._keep(item, why)
        if sink_dirty and self.sink is not None:
            self.sink.flush()

    def _publish_again(self, item: Item) -> None:
        """A MOVE the broker never looked at (after a refused publish on the same channel), on the new channel;
        it stays (republished to the tail like any that stays) where its exchange is the refused one."""
        decision = item.decision
        assert decision is not None
        why = self.refusals.of_move(decision.exchange)
        if why is not None:
            self._keep(item, why)
            return
        try:
            self._mover.publish(decision.exchange, decision.routing_key,
                                decision.body if decision.body is not None else item.body,
                                decision.properties if decision.properties is not None else item.props, item)
            # published: a copy may exist from now on, as for a first publish (_handle) — its ack is counted among
            # the unproven (a lost connection then reports it as a possible duplicate), and the ack bound holds it
            item.copy = True
        except EncodeError as exc:  # not possible for bytes that went once; said all the same
            self._keep(item, Why(f"cannot publish: {exc}", Stay.NOT_SENT))

    def _settle_keep(self, item: Item, outcome: PublishAnswer, detail: str | None) -> None:
        if outcome is PublishAnswer.CONFIRMED:
            self.result.republished += 1
            self.ledger.done(item, "kept")
        elif outcome is PublishAnswer.UNSENT and self.refusals.keep_refused is None:
            self._keep(item, item.outcome_group or KEPT)
        else:
            item.copy = outcome is PublishAnswer.LOST
            self.ledger.hold(item, item.outcome_group or answered(outcome, detail))

    def _ack_ready(self) -> int:
        """Ack settled messages: the settled run at the front with one multiple-ack, those behind a held one
        one by one (never past the held tag). Few frames matter on a quorum queue: past 32 settles in
        flight its client stashes them, and a stash is dropped when the channel closes (the give-back).

        The sink is flushed (and fsynced) first: a REMOVE'd message's record must be on disk before its
        ack leaves, so a crash or a cut between the two leaves the message in the queue, never nowhere."""
        if self.sink is not None:
            self.sink.flush()  # a no-op when nothing was written since the last flush
        taken, singles = self.ledger.ackable(self._ack_budget())
        # Counted before the acks go: an ack that fails on a closed channel leaves its messages in the source while
        # their copies exist (possible duplicates); popped and not yet counted, they fell out of the bookkeeping
        # (seen: dump --remove after a stall reported 0 where 408 were in both the file and the DLQ).
        counting = self.result.removed > 0  # removals to prove (a replay has none: off its per-message path)
        for item in (*taken, *singles):
            self.acks.sent(copy=item.copy, removal=counting and removes(item))
        if taken:  # every earlier tag is acked already: multiple covers exactly this run
            self._channel.ack(taken[-1].tag, multiple=True)
        for item in singles:
            self._channel.ack(item.tag)
        self.acks.ask(self._channel, self.prefetch)
        return len(taken) + len(singles)

    def _ack_budget(self) -> int:
        """How many deliveries may be acked now without letting the broker send us more than we will read.

        Every ack frees a prefetch slot, and the next message in the queue may be one we republished
        (KEEP) or one that arrived after the snapshot: delivered to us, it would have to be given back,
        which on a quorum queue is a delivery attempt (and, on 3.x without a limit, a move to the back).
        So while consuming, keep at least `prefetch - still_to_read` deliveries unacked; once everything
        wanted is read the consumer is cancelled first, and then all may be acked.

        A classic queue (hooks.hold_stays) takes such a delivery back in place and counts no attempt: there every
        settled message is acked at once, so a kill -9 leaves at most the window's copies twice, not the messages
        confirmed since the read began (tests/chaos: 110 twice with --prefetch 2000 on 531 messages)."""
        if self.consumer_tag is None or self.hooks.hold_stays:
            return len(self.ledger.items)
        hold = self.prefetch - self._still_to_read()
        # held deliveries of an earlier consumer (_change_prefetch) take no slot of this one
        held = len(self.ledger.items)
        return held if hold <= 0 else max(0, held - self._old_held - hold)

    def _still_to_read(self) -> int:
        left = self.result.snapshot - self._received
        if self.opts.limit is not None and not self._kept_any:
            left = min(left, self.opts.limit - self._selected)  # nothing kept yet: the limit may end the read
        return max(0, left)

    # -- ending --------------------------------------------------------------------------------------

    def _finish(self) -> None:
        """Stop reading, settle what is in flight, ack it, give back the rest, prove the acks."""
        self._cancel_consumer()
        deadline = time.monotonic() + self.opts.settle_timeout
        while self._busy_publishing() and time.monotonic() < deadline:
            self._pump(IDLE_WAIT)
            self._settle_outcomes()
            self._ack_ready()
        for pub in self._publishers():
            pub.abandon("no confirm within the settle timeout")
        self._settle_outcomes()
        self._ack_ready()
        self._requeue_rest()
        self.acks.wait(self._channel, self.prefetch, self.timeout)
        self.result.possible_duplicates = self._duplicates_now()
        if self.acks.removals or self.acks.uncertain:
            if self._channel.is_open and self.source_conn.is_open:
                # No proof within the timeout on a connection that looks open: it went silent (a stall, a half-open
                # path near the end). Dropped, so that nothing after waits on it, and said as a lost connection
                # (the fault campaign, seed 100032: dump --remove exit 5 "N left … ack not proven" after 30 s more
                # of waits on it, while the broker held all of them until its heartbeat).
                raise self._channel.went_silent("the proof of the last acks", self.timeout)
            # The channel went before the broker proved the last acks (a reset, a stall near the end): the run
            # stopped on its connection — said as such (exit 3), not as messages "left" (issue 35's fault campaign:
            # exit 5 "N left … ack not proven" where none were).
            raise ConnectError("the connection was lost before the broker confirmed the last acks")

    def _busy_publishing(self) -> bool:
        return bool(self._mover.outstanding or self._keeper.outstanding)

    def _cancel_consumer(self, keep: bool = False) -> None:
        """Stop consuming. The deliveries not decided yet go back untouched, or with `keep` (the whole
        snapshot has arrived) those of the snapshot stay to be decided and only any past it go back."""
        tag = self.consumer_tag
        if tag and self._channel.is_open and not self._cancelled_by_broker:
            self._receive_in_flight()
            self._channel.cancel_consumer(tag)  # what arrives before the cancel-ok is held, not rejected
        self.consumer_tag = None
        if keep:
            past_snapshot = self._received + len(self._incoming) - self.result.snapshot
            beyond = [self._incoming.pop() for _ in range(max(0, past_snapshot))][::-1]
            for method, props, _body in beyond:
                self.ledger.untouched(method.delivery_tag, props)
            return
        self._stop_reading = True
        # Deliveries that arrived before the cancel-ok and were never decided go back untouched.
        while self._incoming:
            method, props, _body = self._incoming.popleft()
            self.ledger.untouched(method.delivery_tag, props)

    def _receive_in_flight(self) -> None:
        """Before a cancel: wait until no delivery can be on its way to us (every prefetch slot is taken
        by one we hold), acking nothing meanwhile.

        Acks free slots and the broker fills them, so at a stop (Ctrl-C, an error) or at --limit some
        deliveries may be under way. A quorum queue's channel returns by itself those that reach it
        after our basic.cancel — one return each, in map order past 32 with a delivery limit, at the back
        without one — ahead of the in-order give-back of the channel close (seen: the refills of 200
        acks scrambled at the head; tests/ops/test_giveback.py). Received, they are held and go back
        with the rest, in order, counted in `requeued`. Slots that stay free mean the queue has nothing
        ready for us (others took the rest): checked as the main loop does.

        A classic queue (hooks.hold_stays) takes back in place whatever reaches us after the cancel, with no
        attempt counted: there is nothing to wait for, and filling the free slots (every settled message is
        acked at once there, _ack_budget) would only pull up to --prefetch messages past the run to give back
        (marked redelivered, counted in `requeued`) and wait at least half a second for them."""
        if self.hooks.hold_stays:
            return
        deadline = time.monotonic() + self.timeout
        idle_since = time.monotonic()
        ledger = self.ledger
        while self.prefetch - (len(ledger.items) - self._old_held) - len(self._incoming) > 0 and self._channel.is_open:
            held = len(self._incoming)
            self._channel.pump(IDLE_WAIT)  # the source only: a target that died must not stop the give-back
            now = time.monotonic()
            if len(self._incoming) != held:
                idle_since = now
            elif now > deadline or (now - idle_since > 0.5 and self._source_empty()):
                return
            elif now - idle_since > 0.5:
                idle_since = now  # ready messages, still coming: probe again later

    def _requeue_rest(self) -> None:
        """Every still-unacked delivery (held, undecided) goes back: cancel, then close the channel.

        A multi-nack would do it with one command, but a quorum queue applies that in map order
        (scrambled past 32 with a delivery limit, sent to the back without one); closing the channel
        returns what the consumer held in order, at the head, on classic and quorum queues alike
        (dlxtool/broker/giveback.py). The close-ok also proves every ack sent before it."""
        ledger = self.ledger
        for item in ledger.items:
            if item.state == WAIT and item.decision is not None:
                ledger.hold(item, NO_CONFIRM)  # its publish is unsettled: it stays, maybe twice
        if not ledger.items:
            return
        self._cancel_consumer()  # a delivery arriving meanwhile is one more to give back, not a lost one
        given_back = ledger.give_back_all(Why("given back unacked", Stay.UNPROVEN), NO_CONFIRM)
        if close_channel(self.channel):
            self.acks.all_proven()
        else:
            # No close-ok: the broker may not have seen the give-back (a half-open or stalled connection) and then
            # holds these for the connection until it notices it is gone (the fault campaign, seed 100007: purge
            # --move-to said 0 held while the broker held the one message it had kept in place).
            self._given_back_unproven += given_back

    def _salvage(self) -> None:
        """After an error, settle what we can. A local error (the sink, a decision) leaves the connections
        usable: wait (settle_timeout at most) for the confirms in flight, so that confirmed messages are
        acked and counted moved instead of staying behind as possible duplicates. If only the target died,
        the source is still usable. Then give the rest back."""
        sink = self.sink
        failed_sink = sink is not None and getattr(sink, "failed", None) is not None
        if failed_sink:  # its unflushed records are gone: from now on records go nowhere, messages stay
            self.sink = SetAside(sink)
        why = Why("the broker blocked publishing before it confirmed" if self.result.unavailable
                  else "connection lost before the confirm" if self.result.connection_lost
                  else "no confirm: stopped by an error", Stay.UNCONFIRMED)
        try:
            self._settle_in_flight()
            self._unsaved_stay()
            for pub in self._publishers():
                pub.abandon(why)
            if self.channel is not None and self.channel.is_open and self.source_conn.is_open:
                self._settle_outcomes()
                self._unsaved_stay()
                self._ack_ready()
                self._cancel_consumer()
                self._requeue_rest()
                self.acks.wait(self._channel, self.prefetch, 5)
        except Exception:  # noqa: BLE001 - the source is gone too: the broker requeues our unacked
            pass
        finally:
            self._unsaved_stay()
        if not self.source_conn.is_open:
            # Deliveries of a lost connection go back when the broker notices: at once after a close it saw, else
            # only when its heartbeat gives up on a connection that went silent (half-open). Said in the summary,
            # with those the broker may have sent that never came: the prefetch left free bounds them, and so do
            # the messages of the snapshot not received yet.
            known = len(self.ledger.items) + len(self._incoming) + self._given_back_unproven
            # (an earlier consumer's held deliveries take no slot of this one: _change_prefetch)
            free = max([self.prefetch, *self.prefetches]) + self._old_held - known
            not_come = self.result.snapshot - self._received - len(self._incoming)
            self.result.held_when_lost = known
            # and those acked whose acks the broker never proved: still its, until it notices the connection is gone
            unproven = max(self.acks.uncertain, self.acks.removals)
            self.result.held_on_the_way = max(0, min(free, not_come)) + unproven
            if known or self.result.held_on_the_way:
                self.result.given_back_by = time.time() + 2 * heartbeat_of(self.source_conn)
                self.result.node_down = node_refuses(self.source_conn)
        # Whatever we never acked is back in the source; copies elsewhere of those are duplicates.
        self.ledger.give_back_all(Why("given back unacked (the run stopped on an error)", Stay.UNPROVEN), why)
        self.result.possible_duplicates = self._duplicates_now()

    def _publishers(self) -> set[Publisher]:
        return {pub for pub in (self.mover, self.keeper) if pub is not None}

    def _settle_in_flight(self) -> None:
        """With every connection and channel still open: wait for the outstanding confirms, ack what settles.
        A Ctrl-C ends the wait (a second one gives up: KeyboardInterrupt)."""
        pubs = self._publishers()
        if self.blocks.any_blocked():
            return  # the broker reads nothing from it now: no confirm comes until the alarm clears
        if not pubs or not (self._channel.is_open and self.source_conn.is_open and self.target_conn.is_open
                            and all(p.channel.is_open for p in pubs)):
            return
        with contextlib.suppress(Exception):  # it died meanwhile: the caller abandons what is left
            self._cancel_consumer()  # first: acks must not make room for deliveries we would give back
            interrupted = self._stop.is_set()
            deadline = time.monotonic() + self.opts.settle_timeout
            while (self._busy_publishing() and time.monotonic() < deadline
                   and (interrupted or not self._stop.is_set())):
                self._pump(IDLE_WAIT)
                self._settle_outcomes()
                self._unsaved_stay()
                self._ack_ready()

    def _unsaved_stay(self) -> None:
        """Settled messages whose records the failed sink dropped stay in the source: not acked, counted as
        left; a MOVE'd one is at its target too (a possible duplicate), a REMOVE'd one nowhere else."""
        aside = self.sink
        if not isinstance(aside, SetAside):
            return
        for item in self.ledger.items:
            d = item.decision
            if item.state != DONE or d is None or not aside.holds(d.record or item.record):
                continue
            if d.action is Action.MOVE:
                self.result.moved[d.group] -= 1
                if not self.result.moved[d.group]:
                    del self.result.moved[d.group]
            else:
                self.result.removed -= 1
                item.copy = aside.may_be_written
            self.ledger.hold(item, Why(f"record not saved ({self.result.error})", Stay.NOT_SENT))

    def _unproven_removals(self) -> None:
        """Removals whose acks the broker never proved (a cut, a second signal): maybe still in the source. Not
        counted removed, but said."""
        if self.acks.removals:
            self.result.removed -= self.acks.removals
            self.result.left[REMOVAL_UNPROVEN] += self.acks.removals
            self.acks.removals = 0

    def _give_up(self) -> None:
        """Stop at once (second Ctrl-C): every unacked message goes back when the connection closes; those
        with a copy elsewhere (or maybe elsewhere: publish unsettled) and unproven acks are possible duplicates."""
        for pub in self._publishers():
            with contextlib.suppress(Exception):
                pub.abandon("interrupted before the confirm")
        for item in self.ledger.items:
            if item.state == WAIT and item.decision is not None:
                item.copy = item.copy or item.decision.action is Action.MOVE
        self.ledger.give_back_all(Why("interrupted before the ack", Stay.UNPROVEN),
                                  Why("interrupted before the confirm", Stay.UNCONFIRMED))
        self.result.possible_duplicates = self._duplicates_now()

    def _duplicates_now(self) -> int:
        """Acks not proven + copies of messages that stay + tied returns that reached the target anyway."""
        pubs = self._publishers()
        return (self.acks.uncertain + self.ledger.lost_copies + self._nacked_copies
                + sum(p.possible_duplicates for p in pubs))

    def _progress_mark(self) -> tuple[int, ...]:
        """What changes whenever the broker answers the run: deliveries in, confirms (outstanding publishes) back."""
        return (self._received, len(self._incoming), self._mover.outstanding, self._keeper.outstanding,
                len(self.ledger.items))

    def _prove_answering(self) -> None:
        """Each connection of the run answers a channel.open within the timeout, or it went silent (a stalled network,
        a half-open connection): then AsyncChannel drops it and raises, and the run stops on it within --timeout
        instead of waiting for confirms that cannot come (pika's heartbeat alone noticed only after 15 s and more)."""
        for conn in dict.fromkeys((self.source_conn, self.target_conn, self.keep_conn)):
            if blocked(conn) is None:  # a blocked one is said and stopped by _check_blocked
                AsyncChannel(conn, self.timeout).close()

    def _source_empty(self) -> bool:
        """While stopping (_receive_in_flight): whether to stop waiting for deliveries. A failed probe ends the wait
        too (the stop goes on); nothing is concluded from it about the run."""
        try:
            return not queues.ready(self.source_conn, self.source, self.timeout)  # None: deleted
        except Exception:  # noqa: BLE001 - the probe failed while stopping: stop waiting, the stop says the rest
            return True

    def _source_drained(self) -> bool:
        """In the main loop, idle: the source has nothing ready for us (others took the rest of the snapshot). The
        broker's answer decides; a probe that fails is the run's failure (raised: a lost connection, a node down),
        never "empty" — that ended runs with exit 0 and thousands of messages still to move (issue 35)."""
        ready = queues.ready(self.source_conn, self.source, self.timeout)
        if ready is None:
            self.result.source_deleted = True
            raise SourceDeleted(f"{self.source!r} was deleted during the run: the messages still in it were deleted "
                                "with it")
        if ready or self._incoming:  # deliveries came in while the broker was asked: ours to take first
            return False
        missing = self.result.snapshot - self._received
        if missing > 0 and not self._missing_seen:
            # Deliveries the broker sent before its answer may still be on their way to us (a stalled network holds
            # them; they are unacked, not ready): asked again after the next idle spell before the run ends short.
            self._missing_seen = True
            return False
        if missing > 0:
            self.result.notes.append(f"{missing} message(s) of the {self.result.snapshot} counted at the start were "
                                     f"not delivered to this run: {self.source!r} had none ready any more (another "
                                     "consumer took them, or holds them unacked: they come back to it if it lets "
                                     "them go)")
        return True

    def _report(self, started: float, final: bool = False) -> None:
        if self.opts.progress is None:
            return
        done = min(self._decided_count(), self.result.snapshot) if not final else self._decided_count()
        self.opts.progress(Progress(self.result.snapshot, done, self.result.moved_total,
                                    time.monotonic() - started))


@contextmanager
def _fewer_gc_passes(young: int = 20_000) -> Generator[None]:
    """Collect cycles less often while messages stream through.

    Every message allocates a few dozen containers (frames, properties, header tables, records)
    that reference counting frees; with the default threshold (700) the collector runs every ~20
    messages and walks the up-to-`prefetch` messages in flight each time — about a tenth of the
    CPU. It still runs (every `young` allocations), so memory stays bounded.
    """
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], young), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _is_connection_error(exc: BaseException) -> bool:
    return is_connection_failure(exc)


def _unavailable(exc: BaseException) -> UnavailableError | None:
    """What the broker said, where it says "not now" (a quorum queue's leader down, no majority: 541 {timeout, …},
    Khepri without its majority) rather than a lost connection: dlxtool.broker.connection.amqp_failure."""
    if not type(exc).__module__.startswith("pika"):
        return None
    failure = amqp_failure(exc)
    return failure if isinstance(failure, UnavailableError) else None


def describe_error(exc: BaseException) -> str:
    """One line for a transfer summary: what the broker said, or that the connection was lost (never pika's
    class names), or the local error's text."""
    return describe_failure(exc)
