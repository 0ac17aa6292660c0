"""Replay's decision: where a dead letter goes, through which exchange, with which headers — written once.

Where: its origin, read by the conventions as `history` reads it (dlxtool.conventions.explain, with the
broker's own conventions from the config and `origin_from`): x-death's (dlxtool.deaths.find_origin; a
message that only waited out TTLs is followed through its wait queue's dead-letter route,
dlxtool.ops.routes), or a framework's (Spring, NServiceBus, MassTransit, rascal, a team's headers); or
`to_queue`. An origin that is an exchange + routing key is published there (dlxtool.ops.exchange_routes).

How (the route, per target queue, from dlxtool.ops.routes.Routes):
  * default: the ORIGINAL routing key (from an earlier provenance header, else the origin's x-death
    entry), through a temporary fanout exchange bound only to that queue. Fanout ignores the key, so it
    reaches exactly that queue, and consumers that dispatch on the key, a dead-letter exchange that
    routes on it and an application's own retry ladder see what they saw the first time.
  * `default_exchange` (opt-in): the default exchange, routing key = the queue name.
  Either way the key the message arrives with is checked against the target's dead-letter exchange: where
  its next dead-lettering would be dropped, it stays in the DLQ with the reason (unless `allow_dlx_drop`).

Headers: the death history and retry counters are removed (RabbitMQ 3.x keeps a client-sent x-death
and would keep counting; the reset is the point), with the failure headers of every convention that
explained the message (Explanation.reset), and the provenance header is added
(dlxtool.ops.provenance.ProvenanceWriter: its layout and its `src`).

The provenance header (dlxtool.ops.provenance.ProvenanceWriter writes it):

    dlxtool-replay = {from, at, id, count, exchange, routing-key[, expiration], deaths[, reset][, user-id]
                      [, edited, original-sha256][, filters], src}

`exchange`, `routing-key` and `expiration` are the first origin's: a second replay reads them from the
first one's header (its x-death then names a temporary exchange, long deleted). `expiration` is the
message's per-message TTL, which RabbitMQ moves into x-death's original-expiration: restored on the
replayed message unless `drop_expiration`. `id` is unique per publish: two dead letters with the same body
and death summary replayed in the same second would otherwise be byte-identical publishes, and a
basic.return could not say which one came back. `count` also drives the loop guard `max_replays`. `src`
names the delivery the copy was made from (`source_fingerprint`: 16 hex digits of a hash of its body and
encoded properties). A kill -9 between a confirm and the source's ack leaves a copy at the origin while its
source stays in the DLQ; when the two meet again, `src` pairs them: `history` reports them as copies, and
`--max-replays` counts the pair as the one message it is (`Lineage`).

replay --edit (`edits`): only the messages shown in the editor are replayed, each found again by its fingerprint
and replayed as edited (dlxtool.editing.edits.Edited.apply: the body, properties and headers that were changed),
under the same rules; its `src` stays the delivery's fingerprint, and a message that was changed records what
(`edited`: body, properties, headers) and the SHA-256 of the body it had (`original-sha256`). A message shown
and left unchanged goes out as any replayed message does. The fast path is not taken (it decides on the bytes).

The decision has two halves:
  * `ReplayDecider.shape(record)` — what every dead letter of one *shape* shares: its delivery routing key and
    the headers the rules read (x-death, an earlier provenance, the retry counters and failure headers a reset
    removes). The origin, the address it had there, the key it keeps, the provenance's entries. A pure
    function of those: the fast path on the bytes (dlxtool.ops.replay_raw) calls it once per distinct shape
    and caches the answer; it never decides anything itself.
  * per message, in `__call__` (and the same steps in the fast path): the loop guard (--max-replays, the
    copies a kill -9 left), the route (asked once per target), the provenance's id, time and `src`.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from dlxtool.amqp_values import RawValue
from dlxtool.broker.versions import expiration_taken
from dlxtool.conventions import (
    X_DEATH,
    Explanation,
    Message,
    Route,
    carries_any,
    explain,
    fast_path_triggers,
    reset_body_retries,
    reset_failure_headers,
    used_body_retries,
)
from dlxtool.deaths import (
    HISTORY_HEADERS,
    DeathHistory,
    Origin,
    failed_in,
    find_origin,
    is_celery_task,
    parse_history,
    reset_header_names,
    reset_history,
    summarize,
    waited_only,
)
from dlxtool.json_shapes import is_object
from dlxtool.ops.actions import Action, Decision
from dlxtool.ops.exchange_routes import ExchangeTargets
from dlxtool.ops.provenance import (
    COPY_LEFT,
    PROVENANCE_HEADER,
    CopyGuard,
    CopySource,
    ProvenanceWriter,
    edit_entries,
    provenance_src,
    record_fingerprint,
)
from dlxtool.ops.replay_address import (
    Address,
    Lineage,
    WaitQueues,
    first_address,
    first_key,
    original_address,
    provenance,
    replay_count,
    trusted_count,
)
from dlxtool.ops.replay_settings import ReplaySettings as ReplaySettings
from dlxtool.ops.replay_settings import fast_path_applies
from dlxtool.ops.replay_shape import Shape as Shape
from dlxtool.ops.routes import Router, Routes, Way, temporary_exchange
from dlxtool.ops.stay import Stay, Why
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    pass

NO_ORIGIN = Why("no origin in the death history", Stay.NO_ORIGIN)
UNTRUSTED_COUNT = ("its provenance header records a replay count dlxtool never writes ({value}: forged or corrupt): "
                   "--max-replays cannot tell how often it was replayed")
EDIT_MOVED = "shown going to {shown!r}, it would now go to {now!r}: left for another look"
USER_ID_REFUSED = ("its user_id property is {user_id!r}, and RabbitMQ refuses it from {publisher!r} (406) unless that "
                   "user has the impersonator tag; --drop-user-id replays it without")


def exchange_targets_for(settings: ReplaySettings, router: Router | None,
                         exists: Callable[[str], bool] | None) -> ExchangeTargets:
    """Exchange origins, with the run's own overrides (the same as for queue origins)."""
    return ExchangeTargets(router, exists, allow_displace=settings.allow_displace, allow_fanout=settings.allow_fanout,
                           allow_dlx_drop=settings.allow_dlx_drop)


class ReplayDecider:
    """decide(record) for the engine. `routes(target)` says how to publish to a target (Routes: `replay` and
    `plan` pass one); without one, the default exchange, unchecked (the engine's own tests).
    `wait_queues` follows TTL-only histories (WaitQueues); without one, they stay with the reason.
    `exchange_targets` checks exchange + routing key origins (without one: unresolved, they stay unless
    allow_displace)."""

    def __init__(self, settings: ReplaySettings, *, routes: Callable[[str], Way] | None = None,
                 wait_queues: WaitQueues | None = None, now: datetime | None = None,
                 exchange_targets: ExchangeTargets | None = None,
                 reply_queue_exists: Callable[[str], bool | None] | None = None) -> None:
        self.s = settings
        # whether a request's reply queue exists now (a passive declare; None: cannot tell), asked once per queue
        ask: Callable[[str], bool | None] = reply_queue_exists or (lambda _queue: None)
        self.reply_queue_exists = functools.cache(ask)
        self.routes: Callable[[str], Way] = routes or (lambda _target: ("", False))
        # Celery tasks: see Routes.by_queue_name
        self.by_queue_name: Callable[[str], Way] = routes.by_queue_name if isinstance(routes, Routes) else self.routes
        # Messages the broker dead-lettered from their origin go back only while it still dead-letters
        self.died_there: Callable[[str], Why | None] = routes.died_there if isinstance(routes, Routes) else \
            (lambda _target: None)
        self.wait_queues = wait_queues or WaitQueues(None, settings.source)
        self.exchange_targets = exchange_targets or exchange_targets_for(settings, None, None)
        # For the plan: per target (a queue, or an exchange route's Route.key()), which conventions named the
        # origins of its messages (__call__ only: the plan's survey reads decoded messages)
        self.origins_from: dict[str, Counter[str]] = {}
        self.conflicts = 0  # messages whose conventions named different origins (Explanation.conflict)
        self.labels = {c.name: c.label for c in settings.conventions}
        # Headers that may make a convention other than x-death explain a message: without any, x-death's
        # reading is the explanation, found without reading the message with every convention
        triggers = self.triggers = fast_path_triggers(settings.conventions)
        self._triggers = (frozenset(triggers[0]), triggers[1]) if triggers and settings.origin_from is None else None
        self.now = now
        self._filters = settings.selection.describe()
        self.filters_text = "; ".join(f"{k}={v}" for k, v in self._filters.items())
        self.provenance = ProvenanceWriter(settings.source, self.filters_text)
        # What the reset removes (unless keep_history): the history, the retry counters and these names
        self.reset_names = reset_header_names(settings.reset_headers)
        self._stamp_second = -1
        self._stamp_value = datetime.now(UTC)
        self._run_id = settings.run_id or uuid.uuid4().hex[:12]
        self._published = 0
        # Selection is frozen: with no criteria every record matches, so skip building the checks each time.
        self._selects = bool(settings.selection.checks()) and settings.edits is None
        # Origins as this replay resolves them: the run's conventions, TTL-only histories through their wait queue
        self.selection = settings.selection.with_lens(replace(
            settings.selection.lens, conventions=tuple(settings.conventions), origin_from=settings.origin_from,
            through=self._through))
        from dlxtool.broker.wire.frames import basic_properties

        self._properties = basic_properties
        self.lineage = Lineage()
        from dlxtool.broker.wire import codec

        # without --max-replays: the second of a pair a kill -9 left stays
        self.copies = CopyGuard(codec.current().bloom)
        # The fast path on the bytes, where the codec has one and the settings allow it (each declares how:
        # dlxtool.ops.replay_settings): dlxtool.ops.replay_raw
        self.raw = None
        if codec.current().header_splice is not None and fast_path_applies(settings):
            from dlxtool.ops.replay_raw import raw_decider

            self.raw = raw_decider(self)
        # The plan counts Dramatiq messages replayed with their retries used up (a JSON parse per such body,
        # so only there): replayed as they are, Dramatiq gives them no retry.
        self.count_used_body_retries = False
        self.used_body_retries = 0
        self.ignored_expirations: Counter[str] = Counter()  # recorded TTLs RabbitMQ would refuse, not restored
        self.dropped_user_ids = 0
        self.celery_tasks = 0  # Celery tasks decided to go to a queue (by queue name: Routes.by_queue_name)
        self.untrusted_counts = 0  # messages whose recorded replay count was not trusted (counted as never replayed)

    def _through(self, death: Any) -> Origin:
        """The origin of a message that only waited out TTLs, as this replay sends it (for --origin)."""
        resolved, _address = self.wait_queues(death.queue or "", death.routing_keys[0] if death.routing_keys else None)
        return Origin(resolved.queue, resolved.why)

    def notes(self) -> list[str]:
        """What the operator should know of what this decider did (TransferResult.notes)."""
        out = [f"{n} message(s) were replayed without the per-message TTL recorded in their death history "
               f"({value!r}): RabbitMQ refuses it (a whole number of milliseconds up to ten years)"
               for value, n in sorted(self.ignored_expirations.items())]
        if self.untrusted_counts:
            out.append(f"{self.untrusted_counts} message(s) carry a replay count dlxtool never writes (negative, "
                       "absurd or not a number: forged or corrupt): counted as never replayed")
        if self.dropped_user_ids:
            out.append(f"{self.dropped_user_ids} message(s) were replayed without their user_id property "
                       "(--drop-user-id; the provenance header records it)")
        return out

    # -- per shape -----------------------------------------------------------------------------------

    def shape(self, record: MessageRecord) -> Shape:
        """What replay does with every dead letter with these headers (the module docstring). Reads nothing
        else of the record: not its body, properties, position or routing key (Shape.kept_key takes that)."""
        return self._shape(record)[0]

    def _shape(self, record: MessageRecord) -> tuple[Shape, dict[str, Any], DeathHistory]:
        """shape(record), the record's headers as the reset leaves them (before the provenance is added), and its
        death history."""
        s = self.s
        headers = record.headers if is_object(record.headers) else {}
        count, untrusted = trusted_count(headers)
        history = parse_history(headers)
        found = self._origin(record, history)
        if isinstance(found, Why):
            return Shape(count, stay=found, untrusted_count=untrusted), headers, history
        explained, origin, address = found
        exact = explained.origin_from == X_DEATH and failed_in(history) is not None
        if origin is not None and origin.queue is None and not s.to_queue:
            target, queue, exchange_origin = origin.key(), None, origin
        else:
            queue = s.to_queue or (origin.queue if origin is not None else None)
            assert queue is not None  # _origin gives none only with --to
            target, exchange_origin = queue, None
        died = (origin is not None and not s.to_queue and explained.origin_from == X_DEATH
                and waited_only(history) is None)
        address = first_address(provenance(headers), address)
        if s.drop_expiration and address.expiration is not None:  # dropped for good: not in the provenance either
            address = replace(address, expiration=None)
        ignored = None
        if address.expiration is not None and not expiration_taken(address.expiration):
            # forged or corrupt: the broker would close the channel over it (406 invalid expiration)
            ignored, address = address.expiration, replace(address, expiration=None)
        kept, reset = reset_headers(headers, keep_history=s.keep_history, names=s.reset_headers,
                                    failure_headers=explained.reset)
        return Shape(count, target=target, queue=queue, exchange_origin=exchange_origin, address=address,
                     died_there=died, deaths=summarize(history.deaths, limit=3), reset=reset,
                     failure_headers=tuple(explained.reset), convention=explained.origin_from or "",
                     conflict=explained.conflict is not None, exact=exact, ignored_expiration=ignored,
                     untrusted_count=untrusted), kept, history

    def _origin(self, record: MessageRecord, history: DeathHistory) -> tuple[Explanation, Route | None, Address] | Why:
        """The message's origin as the conventions explain it (as `history` does), and the address it had there
        (the routing key a queue origin keeps); or why it stays. The origin is None only with --to."""
        s = self.s
        waited = waited_only(history)
        x_origin, address, resolved = None, None, None
        if waited is not None:
            resolved, address = self.wait_queues(waited.queue or "", waited.routing_keys[0] if waited.routing_keys
                                                 else None)
            x_origin = Origin(resolved.queue, resolved.why)
        headers = record.headers if is_object(record.headers) else {}
        if self._triggers is not None and not carries_any(headers, *self._triggers):
            explained = _x_death_only(headers, history, x_origin)
        else:
            explained = explain(Message(headers, record.body, record.queue, x_death_origin=x_origin, x_death=history),
                                s.conventions, origin_from=s.origin_from)
        origin = explained.origin
        if origin is not None and origin.exchange is not None:
            origin = _through_temporary(origin)
        if origin is None:
            if s.to_queue:
                return explained, None, original_address(history, None)
            if resolved is not None and resolved.queue is None and s.origin_from in (None, X_DEATH):
                return Why(f"no origin: {resolved.why}", Stay.NO_ORIGIN)
            return Why(f"no origin: {explained.origin_why}", Stay.NO_ORIGIN) if s.origin_from else NO_ORIGIN
        if explained.origin_from == X_DEATH:
            return explained, origin, address or original_address(history, origin.queue)
        if explained.received is not None:
            return explained, origin, Address(*explained.received)
        # Not recorded (NServiceBus, MassTransit): the key a send to the queue has, as their own retry tools send
        return explained, origin, Address("", origin.queue) if origin.queue is not None else \
            Address(str(origin.exchange), origin.routing_key)

    # -- per message ---------------------------------------------------------------------------------

    def guard(self, fingerprint: str | None, src: CopySource | None, count: int) -> Why | None:
        """The loop guard: why this delivery stays (--max-replays, or the copy of one replayed in this run), or
        None (it is remembered as replayed)."""
        if self.s.max_replays is not None:
            return self.lineage.decide(fingerprint, src, count, self.s.max_replays)
        return COPY_LEFT if self.copies.stays(fingerprint, src) else None

    def way(self, shape: Shape, *, celery: bool = False) -> tuple[str, str | None] | Why:
        """(exchange, routing key) to publish a message of `shape` through — the routing key None where the route
        keeps the message's own (Shape.kept_key) — or why it stays (its route, its origin no longer
        dead-lettering). Asked after the loop guard: each answer is the run's, kept by Routes."""
        queue = shape.queue
        if queue is None:
            origin = shape.exchange_origin
            assert origin is not None
            reach = self.exchange_targets(origin)  # dlxtool.ops.exchange_routes
            return reach.stay if reach.stay is not None else (str(origin.exchange), str(origin.routing_key))
        route = self.routes(queue)
        if not isinstance(route, str) and route[0] and celery:
            route = self.by_queue_name(queue)  # its retries go where it was delivered from
        if isinstance(route, Why):
            return route
        if shape.died_there:  # it failed there: the broker dead-lettered it from its origin
            gone = self.died_there(queue)
            if gone is not None:
                return gone
        return route[0], None if route[1] else queue

    def __call__(self, record: MessageRecord) -> Decision:
        s = self.s
        edit, source = None, None
        if s.edits is not None:  # replay --edit: only the messages shown (fingerprint and origin), each as edited
            from dlxtool.editing.edits import delivery_origin

            source = record_fingerprint(record)
            edit = s.edits.take(source, delivery_origin(record, s.conventions, s.origin_from))
            if edit is None:
                return Decision.keep()
            record = edit.apply(record)
        elif self._selects and not self.selection.matches(record):
            return Decision.keep()
        shape, headers, history = self._shape(record)
        if shape.untrusted_count is not None:
            if s.max_replays is not None:
                return Decision.leave(Why(UNTRUSTED_COUNT.format(value=shape.untrusted_count), Stay.LOOP_GUARD))
            self.untrusted_counts += 1
        fingerprint = source if edit is not None else record_fingerprint(record)  # the delivery's, not the edit's
        why = self.guard(fingerprint, provenance_src(record.headers), shape.count)
        if why is not None:
            return Decision.leave(why)
        if shape.stay is not None:
            return Decision.leave(shape.stay)
        if edit is not None and edit.destination is not None and shape.target != edit.destination:
            return Decision.leave(Why(EDIT_MOVED.format(shown=edit.destination, now=shape.target),
                                      Stay.DESTINATION_CHANGED))
        self.conflicts += shape.conflict
        properties = dict(record.properties)
        user_id = properties.get("user_id")
        if user_id is not None and s.publisher is not None and user_id != s.publisher and s.impersonator is False:
            if not s.drop_user_id:
                # held, not republished to the DLQ's tail: that publish would carry the user_id too (406)
                return Decision.leave(Why(USER_ID_REFUSED.format(user_id=user_id, publisher=s.publisher),
                                          Stay.MESSAGE_REFUSED), hold=True)
            del properties["user_id"]
            self.dropped_user_ids += 1
        # A Celery task's reply_to is its result backend's, not a caller waiting for an answer: the work is what a
        # replay of it is for (its result may go nowhere; the task still runs)
        if s.check_replies and properties.get("reply_to") and not is_celery_task(record.headers):
            from dlxtool.ops.replay_replies import FLAG, dead_reply

            dead = dead_reply(properties["reply_to"], self.reply_queue_exists)
            if dead is not None:
                # the address is left out: each caller has its own, and the plan counts messages by reason
                return Decision.leave(Why(f"a request whose reply_to {dead} ({FLAG} replays it anyway)",
                                          Stay.DEAD_REPLY))
        celery = is_celery_task(record.headers)
        way = self.way(shape, celery=celery)
        if isinstance(way, Why):
            return Decision.leave(way)
        self.celery_tasks += celery and shape.queue is not None  # the plan says their route only when there are
        key = shape.kept_key(first_key(history, shape.address), record.routing_key)
        exchange, routing_key = way[0], way[1] if way[1] is not None else key
        self.origins_from.setdefault(shape.target, Counter())[shape.convention] += 1
        stamp = self.now or self._stamp()
        entries = shape.entries(key)
        if "user_id" not in properties and user_id is not None:
            entries["user-id"] = user_id  # dropped (--drop-user-id): what it was
        if edit is not None and edit.changed:
            entries.update(edit_entries(edit.changed, edit.original_sha256))
        headers[PROVENANCE_HEADER] = self.provenance.table(stamp, self.next_id(), entries, fingerprint)
        if shape.ignored_expiration is not None:
            self.ignored_expirations[shape.ignored_expiration] += 1
        if shape.expiration is not None:
            properties["expiration"] = shape.expiration  # the sender's TTL, which dead-lettering took off
        body = record.body
        if s.reset_body_retries:  # only on request: the body is the application's
            body = reset_body_retries(body) or body
        elif self.count_used_body_retries and used_body_retries(body) is not None:
            self.used_body_retries += 1
        published = MessageRecord(queue=shape.target, body=body, exchange=exchange, routing_key=routing_key,
                                  properties=properties, headers=headers)
        # published's, without copying the headers dict built just above
        pika_properties = self._properties(properties, headers)
        return Decision(Action.MOVE, shape.target, exchange, routing_key, pika_properties, body, published)

    def next_id(self) -> str:
        self._published += 1
        return f"{self._run_id}-{self._published}"

    def _stamp(self) -> datetime:
        """Now, to the second (one datetime per second, not one per message)."""
        second = int(time.time())
        if second != self._stamp_second:
            self._stamp_second = second
            self._stamp_value = datetime.fromtimestamp(second, UTC)
        return self._stamp_value


def _x_death_only(headers: dict[str, Any], history: DeathHistory, x_origin: Origin | None) -> Explanation:
    """What explain() says of a message no convention but x-death (and the retry-header and body ones, which
    name no origin and reset nothing more) can read: x-death's origin."""
    origin = x_origin or find_origin(headers, history)
    if not origin.queue:
        return Explanation(None, None, None, "no convention names an origin")
    return Explanation(Route(queue=origin.queue), X_DEATH, X_DEATH, origin.why)


def reset_headers(headers: dict[str, Any], *, keep_history: bool, names: tuple[str, ...],
                  failure_headers: Sequence[str] = ()) -> tuple[dict[str, Any], str | None]:
    """The count reset: a copy of `headers` without the death history, the retry counters (+ `names`) and the
    conventions' `failure_headers` (all kept with keep_history) nor an earlier provenance; and the provenance's
    text of the retry counters removed ("x-retry-count=4"), None where none was."""
    if keep_history:
        kept, removed = dict(headers), dict[str, Any]()
    else:
        kept, removed = reset_history(headers, names)
        removed.update(reset_failure_headers(kept, failure_headers))
    kept.pop(PROVENANCE_HEADER, None)
    retry = sorted(k for k in removed if k not in HISTORY_HEADERS)
    return kept, ", ".join(f"{k}={short_value(removed[k])}" for k in retry) if retry else None


def replay_headers(record: MessageRecord, *, source: str, reset_names: tuple[str, ...] = (),
                   keep_history: bool = False, filters: str | None = None, now: datetime | None = None,
                   publish_id: str | None = None, src: str | None = None) -> dict[str, Any]:
    """The headers of a message from a file that `load --reset-history` publishes as a replay from `source`
    would: the reset and the provenance of reset_and_entries, its origin x-death's (dlxtool.deaths.find_origin:
    no management API is asked for a wait queue's route, no convention read)."""
    headers = record.headers if is_object(record.headers) else {}
    history = parse_history(headers)
    address = first_address(provenance(headers), original_address(history, find_origin(headers, history).queue))
    kept, reset = reset_headers(headers, keep_history=keep_history, names=reset_names)
    shape = Shape(replay_count(headers), address=address, deaths=summarize(history.deaths, limit=3), reset=reset)
    key = shape.kept_key(first_key(history, address), record.routing_key)
    kept[PROVENANCE_HEADER] = ProvenanceWriter(source, filters).table(
        now or datetime.now(UTC).replace(microsecond=0), publish_id or uuid.uuid4().hex, shape.entries(key), src)
    return kept


def short_value(value: Any) -> str:
    """A removed retry counter's value as the provenance's "reset" shows it."""
    if isinstance(value, RawValue):  # an L, a float …: what it means
        value = value.value
    text = value.decode("utf-8", "replace") if isinstance(value, bytes | bytearray) else str(value)
    return text[:40]


def _through_temporary(origin: Route) -> Route:
    """An exchange origin that is one of our temporary exchanges (a framework recorded the exchange a replay
    delivered through: Spring's x-original-exchange) is deleted by now; it was bound only to the queue its
    name ends with (dlxtool.ops.routes.temporary_exchange), which is the origin. A name cut at 255 bytes may have
    lost the end of the queue's name: left as it is (the exchange does not exist: the message stays, with the
    reason)."""
    named = temporary_exchange(str(origin.exchange))
    return Route(queue=named.queue) if named is not None and named.queue else origin


class EditTargets:
    """Where each message `replay --edit` shows goes, told before its question is asked: the queue (or exchange
    route) the replay's own decision picks for the message as edited. No connection is open while the editor is:
    a message that only waited out TTLs goes where its wait queue sends it back to, which the run reads
    (destination None, said as such)."""

    def __init__(self, settings: ReplaySettings) -> None:
        from dlxtool.editing.edits import Edits

        self.settings = settings
        self.decider = ReplayDecider(replace(settings, edits=Edits(())))  # never the fast path

    def origin(self, record: MessageRecord) -> str | None:
        from dlxtool.editing.edits import delivery_origin

        return delivery_origin(record, self.settings.conventions, self.settings.origin_from)

    def destination(self, record: MessageRecord) -> tuple[str | None, str]:
        """(the target the run must find again, None where the run decides it; the words for it)."""
        waited = waited_only(parse_history(record.headers if is_object(record.headers) else {}))
        if waited is not None and not self.settings.to_queue:
            return None, f"where its wait queue {waited.queue!r} sends it back to"
        shape = self.decider.shape(record)
        if shape.stay is not None:
            return None, f"nowhere: it stays in {self.settings.source!r} ({shape.stay})"
        return shape.target, repr(shape.target)
