"""Reading messages without taking them away: the reader behind `peek`, `history` and `dump`.

RabbitMQ has no "look" operation, so a peek takes messages and gives them back. What that costs
depends on the queue type and the broker's version (dlxtool/broker/versions.py); this module decides it
in one place:

- classic: basic.get without ack, then close the channel. The broker puts the messages back at
  their original positions, all in one step, order kept; only `redelivered` changes. (One
  basic.nack(multiple=True) does the same but the queue applies it one message at a time.) A requeued
  message is at the head again, so message k+1 can only be reached while messages 1..k are held
  unacked: the number held is bounded (`max_unacked`, config `dump_unacked_limit`) and a larger read
  is refused rather than done in pieces that would each see the same head.
- quorum: every basic.get is a consumer of its own and every give-back a command of its own;
  RabbitMQ 3.10's client stashes commands past 32 in flight and sends them later in map order, so
  a give-back of more than 32 at once scrambles the order. Messages go back 32 at a time, each
  chunk waited for (see dlxtool/broker/giveback.py).
- quorum with a delivery limit, RabbitMQ 3.x and 4.0-4.2: every return is a delivery attempt (x-delivery-count
  + 1) and the message is dead-lettered when the count passes the limit. Refused unless the caller accepts
  spending one attempt per message (`spend_attempts`); the read then stops at the first message it
  would leave with no attempt to spare. The count is learnt only by taking the message, so a peek
  always uses an attempt of the head: repeated peeks exhaust it; dlxtool refuses (exit 6) as soon
  as it sees that, and refuses a limit of 1 outright.
- quorum without a limit (3.x without one, 4.x with -1): returned messages go to the back of the queue,
  so a peek reorders. Refused unless the caller accepts it (`allow_reorder`). A negative limit on 3.x is
  no "off" switch: the message is dead-lettered at its first return, so such a queue is not peeked.
- RabbitMQ 4.3 and later: the nacks (32 at a time, each chunk applied) use no delivery attempt and keep the
  messages' place, with or without a limit (a channel close, a cancel and a reject still count). So a peek needs
  no flag there and leaves x-delivery-count as it was (x-acquired-count + 1). Returned messages still form a
  block at the head, each new return at its back: a read of part of that block takes the rest too, as above.
- Which give-back costs what, and where a return goes, is dlxtool.broker.versions' table (keyed by the version
  the broker gave in connection.start), each fact measured on every broker the suite runs.
- stream: basic.get is refused by the broker; read with a consumer (prefetch > 0, x-stream-offset).
  Nothing is held: acknowledging a stream delivery only grants credit.

The type and delivery limit come from the management API (arguments win over policy), once it is proven
to answer for the broker the AMQP connection reached (dlxtool.broker.identity). When it cannot be reached
or proven, the type is probed over AMQP (see `dlxtool.broker.queues.probe_type`); the delivery limit of a quorum
queue then stays unknown and the read is refused where a give-back counts (3.x, 4.0-4.2). A type the probe cannot
tell is read as a quorum queue would be, under the version's rules (refused before 4.3, where it would count).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from dlxtool.broker import queues
from dlxtool.broker.connection import take_channel
from dlxtool.broker.giveback import QUORUM_RETURN_CHUNK, HeldGets, close_channel, give_back_quorum_gets
from dlxtool.budget import human
from dlxtool.errors import (
    DlxtoolError,
    ManagementMismatch,
    NotFoundError,
    PartialError,
    QueueNotFound,
    RefusedError,
    UndeliverableError,
    UsageError,
)
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.broker.management import ManagementClient, QueueInfo
    from dlxtool.broker.pika_types import Basic, BasicProperties, BlockingChannel
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.broker.versions import Version
    from dlxtool.config import BrokerProfile
    from dlxtool.ops.session import Reporter

DEFAULT_BATCH = 500
BATCH_BYTES = 8 * 1024 * 1024  # bodies per batch yielded, at most (one message may be bigger)
STREAM_OFFSET_WORDS = ("first", "last", "next")


@dataclass
class QueueFacts:
    """What we know about a queue before reading it, and which checks could not be made."""

    name: str
    vhost: str
    type: str  # classic | quorum | stream | unknown
    type_source: str  # "management API" | "AMQP probe"
    ready: int | None = None
    unacked: int | None = None
    consumers: int | None = None
    delivery_limit: int | None = None
    dead_letter_exchange: str | None = None  # "" is the default exchange, None is no DLX at all
    dead_letter_routing_key: str | None = None
    bytes_ready: int | None = None
    # A quorum queue's returned messages waiting at its head, as a block (the API's messages_ready_returned, 4.x): a
    # sample, refreshed every statistics interval (5 s by default). None where the API does not say it.
    returned_at_head: int | None = None
    missing_checks: list[str] = field(default_factory=list[str])
    version: Version | None = None  # the broker's, from connection.start: which give-back costs what
    unacked_unknown: str = "the management API is not reachable"  # why, where `unacked` is None
    sampled: str = "API sample"  # where `unacked` (and returned_at_head) come from, with the sample's age

    @property
    def reads_as_quorum(self) -> bool:
        """Read (checked, given back) as a quorum queue: one, or a queue whose type could not be told."""
        return self.type in ("quorum", "unknown")

    @property
    def limit_known(self) -> bool:
        return self.type_source == "management API"

    def describe(self) -> str:
        """One stderr line: counts a peek cannot see (messages held by consumers)."""
        parts = [f"{self.name} ({self.type}"]
        if self.type == "quorum" and self.limit_known:
            parts[0] += f", delivery limit {self.delivery_limit}" if self.delivery_limit else ", no delivery limit"
        parts[0] += ")"
        if self.type == "stream":
            # Streams keep no ready count: AMQP says 0 and the management API's figure lags.
            counts = ["length: not known (streams keep no ready count; read from --offset)"]
        else:
            counts = [f"{self.ready} ready" if self.ready is not None else "ready: ?"]
        if self.unacked is not None:
            # ready and consumers are the broker's count now (a passive declare); unacked only the API's sample
            counts.append(f"{self.unacked} unacked by consumers ({self.sampled}; invisible to a peek)")
        else:
            counts.append(f"unacked by consumers: unknown ({self.unacked_unknown})")
        counts.append(f"{self.consumers} consumers" if self.consumers is not None else "consumers: ?")
        return parts[0] + ": " + ", ".join(counts)

    def nothing_read(self) -> str:
        """What a read that found no message says: a queue whose messages are all held by consumers is
        not empty. The unacked count comes from the management API (AMQP counts ready messages only)."""
        if self.type == "stream":
            return "(no message)"
        ready = f"{self.ready} ready" if self.ready is not None else "ready: ?"
        if self.unacked is None:
            return f"({ready}; unacked by consumers: unknown, {self.unacked_unknown})"
        if self.unacked:
            return f"({ready}, {self.unacked} unacked ({self.sampled}): held by consumers, which a peek cannot see)"
        return "(queue is empty)"


@dataclass
class ReadOptions:
    """How a peek-style read goes: how many messages, its bounds, what it may spend, its selection and protocol."""

    count: int | None = 10  # None: everything there is (dump --all), still bounded by max_unacked
    max_unacked: int = 10_000
    allow_reorder: bool = False
    spend_attempts: bool = False
    offset: Any = None  # streams: "first" | "last" | "next" | int | datetime
    stream_wait: float = 1.0  # streams: stop after this long without a delivery
    batch_size: int = DEFAULT_BATCH
    max_bytes: int | None = None  # the byte budget: the read stops before the body that would pass it
    # Which messages to show (dlxtool.selection): `count` counts the matches; the others are read (a classic
    # queue's later messages can only be reached while the earlier ones are held) but not shown. None: all.
    select: Callable[[MessageRecord], bool] | None = None
    select_decodes: bool = False  # the selection reads the decoded body (--type): decode before selecting
    # "0-9-1" (basic.get, given back by nack or a channel close) or "1.0" (an AMQP 1.0 receiver, given back by the
    # outcome the version's table names: dlxtool.ops.peek_amqp10)
    protocol: WireProtocol = "0-9-1"
    # --protocol auto (peek, history, dump): a 0.9.1 read that stops at a message 0.9.1 cannot be given goes on over
    # AMQP 1.0 from there (dlxtool.ops.peek_past_poison)
    past_poison: bool = False
    # the selection reads headers (dlxtool.selection.Selection.sees_headers): a read past such a message does not go
    # straight over 1.0 by this machine's memo (its 0.9.1 messages would lack their table headers there)
    select_sees_headers: bool = False


class Reader(Protocol):
    """What the commands that read a queue use of a read: a QueueReader, or dlxtool.ops.peek_past_poison.PastPoison
    (two reads, one past a message the first protocol cannot be given)."""

    @property
    def facts(self) -> QueueFacts: ...

    @property
    def opts(self) -> ReadOptions: ...

    @property
    def read(self) -> int: ...

    @property
    def hidden(self) -> int: ...

    @property
    def shown(self) -> int: ...

    def batches(self) -> Iterator[list[MessageRecord]]: ...

    def records(self) -> Iterator[MessageRecord]: ...

    def coverage(self) -> Coverage: ...

    def tell(self, report: Reporter) -> None: ...


def give_back_counts(facts: QueueFacts, opts: ReadOptions) -> bool:
    """Whether a peek's give-back of a quorum queue's messages uses a delivery attempt, on this protocol and the
    broker's version (dlxtool.broker.versions: 0.9.1's nack; 1.0's uncounted outcome, where there is one)."""
    from dlxtool.broker import versions

    if opts.protocol == "1.0":
        return versions.amqp10_peek_give_back(facts.version) is None
    return versions.quorum_give_back_counts(facts.version, "nack")


def give_back_words(opts: ReadOptions) -> str:
    if opts.protocol == "1.0":
        return "the AMQP 1.0 outcome `released` or an uncounted `modified`"
    return f"basic.nack, {QUORUM_RETURN_CHUNK} at a time"


# -- what the queue is -------------------------------------------------------------------------------


def unconvertible_close(exc: BaseException) -> bool:
    """The broker closed the connection with 541 while handing over a message it cannot convert for 0.9.1 — not a
    541 {timeout, …}: a quorum queue without a majority of its members online, whose read waited inside the broker
    (said as a node down by dlxtool.broker.connection.amqp_failure: exit 7, not as an undeliverable message)."""
    return getattr(exc, "reply_code", None) == 541 and "{timeout," not in str(getattr(exc, "reply_text", ""))


def queue_facts(profile: BrokerProfile, name: str, *, management: Callable[[], ManagementClient],
                channel: BlockingChannel, conn: AmqpConnection | None = None) -> QueueFacts:
    """Type, limit and counts: management API first, AMQP for what it cannot tell or when it is down. `conn`:
    the connection (its version keys the give-back rules; the AMQP type probe runs on a channel of it)."""
    from dlxtool.broker.versions import server_version

    counted = queues.counts(channel, name, profile.vhost, management)
    ready, consumers = counted.ready, counted.consumers
    try:
        info = management().queue(profile.vhost, name)
    except NotFoundError:
        raise QueueNotFound(name, profile.vhost,
                            hint="list queues with `dlxtool queues`") from None
    except ManagementMismatch:
        raise  # another broker's API: no decision on its data, and no fallback either
    except DlxtoolError as exc:
        facts = _facts_without_management(profile, name, ready, consumers, exc.message, conn)
    else:
        if (unreachable := queues.without_majority(info)) is not None:
            raise unreachable
        facts = _facts_from_info(info, ready, consumers)
    facts.version = server_version(conn) if conn is not None else None
    return facts


def _facts_from_info(info: QueueInfo, ready: int, consumers: int) -> QueueFacts:
    from dlxtool.broker.management import sampled_text

    return QueueFacts(
        name=info.name, vhost=info.vhost, type=info.type, type_source="management API",
        # passive declare is exact now; the API's counts lag by its statistics interval
        ready=ready if info.type != "stream" else None,
        # an API without figures (metrics collection denied; a queue before its first sample) says nothing of them
        unacked=info.messages_unacked if info.figures_known else None,
        unacked_unknown="the management API has no figures for the queue (metrics collection is off, or the "
                        "queue is moments old)",
        consumers=consumers, delivery_limit=info.delivery_limit,
        dead_letter_exchange=info.dead_letter_exchange, dead_letter_routing_key=info.dead_letter_routing_key,
        bytes_ready=_int_or_none(info.raw.get("message_bytes_ready")),
        returned_at_head=_int_or_none(info.raw.get("messages_ready_returned")) if info.type == "quorum" else None,
        sampled=sampled_text(info),
    )


def _facts_without_management(profile: BrokerProfile, name: str, ready: int, consumers: int,
                              why: str, conn: AmqpConnection | None = None) -> QueueFacts:
    qtype = queues.probe_type(profile, name, conn=conn)  # a throwaway channel: a refusal closes that channel only
    # why: "management API at URL not reachable: …" / "… not used: could not prove that it answers for …"
    missing = [why if why.startswith("management API") else f"management API not used ({why})",
               "queue type read from an AMQP probe instead of the API",
               "messages unacked by consumers not counted"]
    if qtype == "unknown":
        missing.append("queue type unknown (the AMQP probe could not tell it): read as a quorum queue would be")
    if qtype in ("quorum", "unknown"):
        missing.append("quorum delivery limit (queue arguments and policy) not checked")
    return QueueFacts(name=name, vhost=profile.vhost, type=qtype, type_source="AMQP probe",
                      ready=ready, consumers=consumers, missing_checks=missing)


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# -- may we read it, and what does it cost -------------------------------------------------------------


def check_read(facts: QueueFacts, opts: ReadOptions) -> list[str]:
    """Refuse (RefusedError, exit 6) what could lose, dead-letter or reorder; else the costs to report."""
    if opts.offset is not None and facts.type != "stream":
        raise UsageError(f"--offset is for streams; {facts.name!r} is a {facts.type} queue")
    if facts.type == "stream":
        return []
    notes: list[str] = []
    _check_unacked_bound(facts, opts)
    if facts.reads_as_quorum:  # a type the probe could not tell: as a quorum queue, under the version's rules
        notes += _check_quorum(facts, opts)
    wanted = facts.ready if opts.count is None else opts.count if facts.ready is None else min(opts.count, facts.ready)
    if opts.select is not None and facts.ready is not None:  # as many as it takes to find `count` matches
        wanted = min(facts.ready, opts.max_unacked)
    held = _most_held(facts, opts, wanted)
    if held and held > 1:
        how = "all at once" if facts.type == "classic" else f"in order, {QUORUM_RETURN_CHUNK} at a time"
        more = (" (more if a block of previously returned messages follows them at the head: taken too, to keep "
                "their order)" if facts.reads_as_quorum and facts.returned_at_head is None else "")
        notes.append(f"holding up to {held} messages unacked until the read ends{more}"
                     f"{_size_note(facts, opts, held)}; they are given back {how} before anything is decoded")
        notes += _budget_note(facts, opts, held)
    return notes


def _most_held(facts: QueueFacts, opts: ReadOptions, wanted: int | None) -> int | None:
    """The most messages a read holds at once: those wanted, and on a quorum queue the rest of a block of returned
    messages at the head (taken too, so that giving them back keeps their order): as many as the API counts where
    it does (4.x), else up to --max-unacked (the counters of each message tell where the block ends)."""
    if not wanted or not facts.reads_as_quorum or facts.type == "stream":
        return wanted
    if facts.returned_at_head is not None:
        return min(max(wanted, facts.returned_at_head), opts.max_unacked)
    return wanted


def _budget_note(facts: QueueFacts, opts: ReadOptions, wanted: int) -> list[str]:
    """Where the queue's average body (management API) says the read will not fit in the byte budget: about where
    it will stop."""
    if not (opts.max_bytes and facts.bytes_ready and facts.ready):
        return []
    average = facts.bytes_ready / facts.ready
    fit = max(1, int(opts.max_bytes // average)) if average else wanted
    if fit >= wanted:
        return []
    return [f"the byte budget ({_human_bytes(opts.max_bytes)}, --max-bytes) holds about {fit} of them at "
            f"{_human_bytes(average)} each on average: the read stops before the message that would pass it"]


def _check_unacked_bound(facts: QueueFacts, opts: ReadOptions) -> None:
    wanted = facts.ready if opts.count is None else opts.count
    if wanted is None or wanted <= opts.max_unacked:
        return
    raise RefusedError(
        f"reading {wanted} messages of {facts.name!r} without removing them means holding all of them "
        f"unacked on the broker at once (a requeued message goes back to the head, so later ones "
        f"cannot be reached otherwise); the bound is {opts.max_unacked}{_size_note(facts, opts, wanted)}",
        hint="read fewer (-n), raise the bound with --max-unacked or dump_unacked_limit in the config "
             "if the broker has the memory, or drain the queue into a file instead (dump --remove)")


def _size_note(facts: QueueFacts, opts: ReadOptions, wanted: int | None = None) -> str:
    wanted = wanted or opts.count or facts.ready
    if not (facts.bytes_ready and facts.ready and wanted):
        return ""
    held = facts.bytes_ready / facts.ready * min(wanted, facts.ready)
    return f" (about {_human_bytes(held)} of message bodies)"


def _check_quorum(facts: QueueFacts, opts: ReadOptions) -> list[str]:

    if not give_back_counts(facts, opts):
        return _check_quorum_uncounted(facts, opts)
    if facts.type == "unknown":
        raise RefusedError(
            f"cannot tell the type of queue {facts.name!r}: " + "; ".join(facts.missing_checks)
            + f". Read as a quorum queue, a peek's give-back would use a delivery attempt on RabbitMQ "
              f"{facts.version or '(version unknown)'}, against a limit that could not be checked",
            hint="make the management API reachable (management_url in the broker profile)")
    if not facts.limit_known:
        raise RefusedError(
            f"{facts.name!r} is a quorum queue and its delivery limit could not be checked: "
            + "; ".join(facts.missing_checks)
            + ". A peek returns messages, which uses a delivery attempt (and can dead-letter a "
              "message) with a limit, or moves them to the back of the queue without one",
            hint="make the management API reachable (management_url in the broker profile) and try again")
    if facts.delivery_limit is None:
        if not opts.allow_reorder:
            raise RefusedError(
                f"{facts.name!r} is a quorum queue without a delivery limit (RabbitMQ 3.x without one, 4.x "
                "with -1): every message a peek gives back goes to the BACK of the queue, so peeking reorders it",
                hint="pass --allow-reorder to accept that (the peeked messages then sit behind the others)")
        return ["--allow-reorder: the peeked messages go to the back of the queue"]
    if facts.delivery_limit <= 0:
        raise RefusedError(
            f"{facts.name!r} is a quorum queue with delivery limit {facts.delivery_limit} (a negative limit "
            "in the arguments or policy acts as 0 on RabbitMQ 3.x): the broker dead-letters a message at its "
            f"first return ({dead_letter_target(facts)}), so a peek would take every message it reads. "
            "It cannot be peeked, even with --spend-attempts or --allow-reorder",
            hint="drain it into a file instead (dump --remove); on RabbitMQ 4.x a limit of -1 means none")
    if facts.delivery_limit <= 1:
        raise RefusedError(
            f"{facts.name!r} is a quorum queue with delivery limit {facts.delivery_limit}: a peek gives each "
            "message back, which uses its only spare delivery attempt; the next read of it (by a consumer "
            f"or another peek) would be its last, and one more return dead-letters it "
            f"({dead_letter_target(facts)}). It cannot be peeked safely, even with --spend-attempts",
            hint="drain it into a file instead (dump --remove), or read it from its dead-letter queue")
    if not opts.spend_attempts:
        raise RefusedError(
            f"{facts.name!r} is a quorum queue with delivery limit {facts.delivery_limit}: a peek gives "
            "each message back, which uses one of its delivery attempts (x-delivery-count + 1); a message "
            f"past the limit is dead-lettered ({dead_letter_target(facts)})",
            hint="pass --spend-attempts to use one attempt per peeked message; dlxtool then stops (exit 6) at "
                 "the first message that would be left with no attempt to spare")
    return [f"--spend-attempts: each message read uses one of its {facts.delivery_limit} delivery attempts"]


def _check_quorum_uncounted(facts: QueueFacts, opts: ReadOptions) -> list[str]:
    """RabbitMQ 4.3+: the nacks of a peek's give-back use no delivery attempt, whatever the limit (or none, or not
    known); the version's table says whether they keep the messages' place."""
    from dlxtool.broker import versions

    what = "a quorum queue" if facts.type == "quorum" else "of a type that could not be told (read as a quorum queue)"
    limit = facts.delivery_limit if facts.limit_known else 0  # unknown: a limit of some kind, not "none"
    if facts.limit_known and versions.quorum_nack_to_back(facts.version, limit):
        if not opts.allow_reorder:
            raise RefusedError(
                f"{facts.name!r} is {what} without a delivery limit: on RabbitMQ {facts.version} every message a "
                "peek gives back goes to the BACK of the queue, so peeking reorders it",
                hint="pass --allow-reorder to accept that (the peeked messages then sit behind the others)")
        return ["--allow-reorder: the peeked messages go to the back of the queue"]
    return [f"{facts.name!r} is {what}: on RabbitMQ {facts.version} the messages a peek gives back "
            f"({give_back_words(opts)}) keep their place and use no delivery attempt (x-delivery-count "
            "unchanged; x-acquired-count + 1)"]


def _human_bytes(n: float) -> str:
    return human(n)


# -- reading -----------------------------------------------------------------------------------------


def no_decode(record: MessageRecord) -> dict[str, Any] | None:
    """The default: leave `decoded` empty (the CLI passes dlxtool.decoding.record_decoder)."""
    return None


@dataclass(frozen=True)
class Coverage:
    """How much of the queue a read looked at: whatever counts a sample must say it is one."""

    looked_at: int
    queue_depth: int | None  # ready when the read began; None for a stream (it keeps no count)
    sampled: bool  # messages were left unread: counts made from this read are of a sample
    matched: int | None = None  # with a selection: how many of those looked at it selected

    def to_json(self) -> dict[str, Any]:
        out = {"sampled": self.sampled, "looked_at": self.looked_at, "queue_depth": self.queue_depth}
        if self.matched is not None:
            out["matched"] = self.matched
        return out


@dataclass
class ReadReport:
    """What a finished read means for the caller: notes (stderr), warnings, and the error to raise
    after the output is written (PartialError 5: dead-lettered or left unread; RefusedError 6)."""

    notes: list[str]
    warnings: list[str]
    error: DlxtoolError | None = None

    def say(self, report: Reporter) -> None:
        """The notes and warnings on `report` (the caller decides what to do with the error)."""
        for note in self.notes:
            report.info(note)
        for warning in self.warnings:
            report.warn(warning)


class QueueReader:
    """Reads messages with peek semantics and yields them in batches of at most `batch_size`.

    Usage: `for batch in reader.batches(): ...`, then `reader.outcome()`. Classic and quorum queues
    are read whole first (every message held unacked, bounded by `max_unacked`), given back, and
    only then decoded and yielded: decoding time does not add to how long messages are held. The
    give-back runs in a finally, so an exception or Ctrl-C during the read still returns them.
    """

    def __init__(self, channel: BlockingChannel | None, facts: QueueFacts, opts: ReadOptions,
                 decode: Callable[[MessageRecord], dict[str, Any] | None] = no_decode) -> None:
        self.channel = channel  # None: a reader of another protocol (dlxtool.ops.peek_amqp10), which reads without it
        self.facts = facts
        self.opts = opts
        self.decode = decode
        self.read: int = 0
        self.notes: list[str] = []
        self.stopped_early: str | None = None  # why the read stopped before `count`
        self.dead_lettered: list[int] = []
        self.no_spare: list[int] = []  # positions given back with no delivery attempt to spare
        self.reached_end = False
        self.left_unread = 0  # --all stopped by max_unacked: what the last get-ok said was left
        self.hidden = 0  # messages read only to keep the order (quorum with a limit), not yielded
        self.skipped = 0  # messages read that the selection did not select (not yielded)
        self._decoded: set[int] = set()  # positions decoded to be selected (not decoded again)
        self.bytes_shown = 0  # the bodies of the messages yielded
        self.over_budget: tuple[int, int] | None = None  # (position, body size) of the one the budget stopped at
        self._held = HeldGets()
        self._unconfirmed_noted = False
        self.order_changed: str | None = None  # why the order of the head may have changed (one sentence), or None
        # Where a block of returned messages at the head ended when the counters could not tell: by the API's sampled
        # count ("sample"), not known at all ("unknown"); None: the counters told (or there was none)
        self._block_end_by: str | None = None
        self.undeliverable: int | None = None  # the position of a message 0.9.1 cannot be given (_undeliverable)
        self.connection_lost = False  # the broker closed the connection: what was held went back with it

    @property
    def _channel(self) -> BlockingChannel:
        """The 0.9.1 channel the read uses (the 1.0 reader overrides every method that would ask for it)."""
        assert self.channel is not None, "a 0.9.1 read"
        return self.channel

    @property
    def shown(self) -> int:
        return self.read - self.hidden - self.skipped

    def batches(self) -> Generator[list[MessageRecord], None, None]:
        if self.facts.type == "stream":
            yield from self._stream_batches()
            return
        records = deque(self._read_and_give_back())
        size = max(1, self.opts.batch_size)
        while records:
            # Batches of at most BATCH_BYTES of bodies too: what the caller makes of one batch (JSON, base64 …) is
            # held with it. Yielded records are let go of here; what the caller keeps is its own.
            batch = [records.popleft()]
            held = len(batch[0].body)
            while records and len(batch) < size and held + len(records[0].body) <= BATCH_BYTES:
                held += len(records[0].body)
                batch.append(records.popleft())
            for record in batch:
                if record.position not in self._decoded:
                    record.decoded = self.decode(record)
            yield batch

    def records(self) -> Iterator[MessageRecord]:
        for batch in self.batches():
            yield from batch

    def coverage(self) -> Coverage:
        """After the read: how many messages it yielded, of how many, and whether it left some unread."""
        depth = self.facts.ready
        looked_at = self.read - self.hidden
        if self.facts.type == "stream":
            sampled = not self.reached_end  # stopped at -n with the stream still delivering
        else:
            sampled = not self.reached_end and (depth is None or looked_at < depth)
        return Coverage(looked_at, depth, sampled, self.shown if self.opts.select is not None else None)

    # classic and quorum: basic.get everything wanted, holding it, then give it all back in order
    def _read_and_give_back(self) -> list[MessageRecord]:
        records: list[MessageRecord] = []
        last: MessageRecord | None = None  # the last message read, shown or not
        try:
            while self._want_more():
                record = self._get()
                if record is None:
                    break
                last = record
                selected = self._selects(record)
                over = selected and self._passes_budget(len(record.body), record.position, len(records))
                if over:
                    self.hidden += 1  # taken (whole, as basic.get hands it over), given back with the rest, not shown
                elif selected:
                    records.append(record)
                    self.bytes_shown += len(record.body)
                unshown = ("taken, and not shown: it would have passed the byte budget" if over
                           else "read to be looked at, not selected")
                if self._counts_attempts() and not self._safe_to_return(record, shown=selected and not over,
                                                                        unshown=unshown):
                    break
                if over:
                    break
            if self._returns_to_a_block() and last is not None and not self.stopped_early:
                self._take_rest_of_returned_block(last)
        finally:
            self._give_back()
            self._after_return(records)
        return records

    def _passes_budget(self, size: int, position: int, shown: int) -> bool:
        """Would showing this message (its body `size` bytes, after `shown` others) take the bodies held past the
        byte budget? The first one is always shown (a message cannot be read in part); the one that passes it
        stops the read."""
        budget = self.opts.max_bytes
        if budget is None or not shown or self.bytes_shown + size <= budget:
            return False
        self.over_budget = (position, size)
        return True

    def _get(self) -> MessageRecord | None:
        try:
            method, props, body = self._channel.basic_get(self.facts.name, auto_ack=False)
        except Exception as exc:
            if not self._undeliverable(exc):
                raise
            return None
        if method is None:
            self.reached_end = True
            return None
        assert props is not None and body is not None  # a get-ok carries both
        self._held.tags.append(method.delivery_tag)
        if (self.opts.count is None or self.opts.select is not None) and self.read + 1 >= self.opts.max_unacked:
            self.left_unread = int(getattr(method, "message_count", 0) or 0)
        record = MessageRecord.from_delivery(self.facts.name, method, props, body, position=self.read)
        self.read += 1
        return record

    def _undeliverable(self, exc: BaseException) -> bool:
        """The broker closed the connection while handing over the next message: on a version where an AMQP 1.0
        message can be unconvertible for 0.9.1 (4.3.6: a char or uuid application property; 541 INTERNAL_ERROR),
        that message cannot be delivered to this protocol. Recorded (its position), not raised: the messages read
        before it are shown, and the outcome says what the lost connection cost."""
        from dlxtool.broker import versions

        if not versions.char_uuid_poison_091(self.facts.version) or not unconvertible_close(exc):
            return False
        self.undeliverable = self.read
        self.connection_lost = True
        self.stopped_early = (f"stopped at position {self.read}: the broker closed the connection while handing it "
                              f"over (541 INTERNAL_ERROR): RabbitMQ {self.facts.version} cannot convert that message "
                              "for AMQP 0.9.1 (an AMQP 1.0 message whose application properties hold a char or a "
                              "uuid)")
        return True

    def _selects(self, record: MessageRecord) -> bool:
        """Whether the selection (if any) selects `record`; a record it does not select is counted as skipped.
        With --type, the body is decoded first (while the messages are held: only then)."""
        if self.opts.select is None:
            return True
        if self.opts.select_decodes and record.position not in self._decoded:
            record.decoded = self.decode(record)
            self._decoded.add(record.position)
        if self.opts.select(record):
            return True
        self.skipped += 1
        return False

    def _want_more(self) -> bool:
        if self.opts.count is not None and self.opts.select is not None:
            # count the matches; what is held stays bounded (a stream holds nothing)
            return self.shown < self.opts.count and (self.facts.type == "stream" or self.read < self.opts.max_unacked)
        if self.opts.count is not None:
            return self.read < self.opts.count
        if self.facts.type == "stream":
            return True  # nothing is held: read until the stream goes quiet
        # Until basic.get comes back empty: a ready count taken before the read can be stale (a
        # give-back still being applied). Still bounded: every message read is held.
        return self.read < self.opts.max_unacked

    def _counts_attempts(self) -> bool:
        """Quorum with a delivery limit, on a version where a peek's give-back (nacks) counts an attempt."""

        return (self.facts.reads_as_quorum and self.facts.delivery_limit is not None
                and give_back_counts(self.facts, self.opts))

    def _returns_to_a_block(self) -> bool:
        """Quorum, where given-back messages keep their place: served first, as a block at the head (3.x and 4.0 with
        a limit; 4.3 always). Without a limit on 3.x and 4.0 they go to the back instead."""
        from dlxtool.broker import versions

        limit = self.facts.delivery_limit if self.facts.limit_known else 0
        return self.facts.reads_as_quorum and not versions.quorum_nack_to_back(self.facts.version, limit)

    def _safe_to_return(self, record: MessageRecord, *, shown: bool,
                        unshown: str = "read only to keep the order, not shown") -> bool:
        """Quorum with a limit: does giving this message back leave it an attempt to spare?

        The count is only learnt on delivery, so the message is taken already; when the answer is
        no, the read takes nothing more. The broker dead-letters a return past the limit."""
        limit = self.facts.delivery_limit or 0
        attempts = delivery_count(record.headers)
        if attempts + 2 <= limit:
            return True
        where = f"position {record.position}" + ("" if shown else f" ({unshown})")
        if attempts >= limit:
            self.dead_lettered.append(record.position)
            self.stopped_early = (f"stopped at {where}: it had used all {limit} of its delivery attempts, so "
                                  "giving it back dead-lettered it")
        else:
            self.no_spare.append(record.position)
            self.stopped_early = (f"stopped at {where}: it has used {attempts} of its {limit} delivery "
                                  "attempts; giving it back leaves it no attempt to spare (the next read of "
                                  "it, by a peek or a consumer, is its last)")
        return False

    def _take_rest_of_returned_block(self, last: MessageRecord) -> None:
        """A quorum queue serves returned messages first, from a queue of their own, and puts each new return at
        ITS back. Giving back only part of that block would move the part we took behind the rest; so keep taking
        (not showing) to the block's end, unless a message taken so has no attempt to spare: then stop there.

        Where the block ends: at the first message the queue never delivered before (its counters say so); where
        the counters cannot tell (a dead letter carrying its origin's counts: versions.returned_here), after the
        API's count of returned messages at the head (`QueueFacts.returned_at_head`, a sample) — never further."""
        record = last
        before = self.hidden  # a message the byte budget left unshown is not one of these
        bound = self.facts.returned_at_head
        past_end = 0  # the message after the block, taken to learn that it was not returned (its counters said)
        while True:  # ends at a break (the last where _get() gives nothing)
            here = self._returned_here(record)
            if here is False:
                past_end = int(record is not last)
                break
            if here is None and (bound is None or self.read >= bound):
                self._block_end_by = "unknown" if bound is None else "sample"
                break
            if self.read >= self.opts.max_unacked:
                self.order_changed = ("the block of previously returned messages at the head was longer than "
                                      f"--max-unacked ({self.opts.max_unacked}): the {self.read} messages read now sit "
                                      "behind the rest of it")
                return
            taken = self._get()
            if taken is None:
                break
            record = taken
            self.hidden += 1
            if self._counts_attempts() and not self._safe_to_return(record, shown=False):
                break
        if self.hidden - past_end > before:
            cost = "; each used one delivery attempt too" if self._counts_attempts() else ""
            counted = (f" (the API counted {bound} returned at the head: a sample, refreshed every few seconds)"
                       if bound is not None and self.facts.version is not None and self._counters_ambiguous() else "")
            after = " and the one after them, to see where they ended," if past_end else ""
            self.notes.append(f"also took {self.hidden - past_end - before} more previously returned messages{after} "
                              f"(not shown) so that giving them back keeps their order{counted}{cost}")

    def _returned_here(self, record: MessageRecord) -> bool | None:
        from dlxtool.broker import versions

        return versions.returned_here(self.facts.version, record.headers)

    def _counters_ambiguous(self) -> bool:
        from dlxtool.broker import versions

        return versions.behaviour(self.facts.version).dead_letters_carry_delivery_counts

    def _give_back(self) -> None:
        """Return every held message in order; finish even if Ctrl-C arrives meanwhile (a give-back
        cut short is completed by the broker when the connection closes, in no particular order)."""
        if self.connection_lost:  # the broker took them back when it closed the connection
            self._held.returned = len(self._held.tags)
            return
        interrupted: BaseException | None = None
        while True:
            try:
                if self.facts.reads_as_quorum:
                    self._give_back_quorum()
                else:
                    self._give_back_classic()
                break
            except KeyboardInterrupt as exc:
                interrupted = exc
        if interrupted is not None:
            raise interrupted

    def _give_back_classic(self) -> None:
        """Close the channel: the queue takes back everything it held in one step, in place.

        A nack would not do: the channel turns it into one requeue per basic.get, which the queue
        applies one by one (10,000 take seconds), and a passive declare jumps that line (`stat` is
        served first), so a read right after saw part of the queue and stopped early. On close the
        queue requeues the channel's messages at once, before anything sent to it later (a basic.get
        included) is served."""
        if self._held.all_returned:
            return
        self._held.returned = len(self._held.tags)
        close_channel(self._channel)

    def _give_back_quorum(self) -> None:
        give_back_quorum_gets(self._channel, self.facts.name, self._held)
        if not self._held.confirmed and not self._unconfirmed_noted:
            self._unconfirmed_noted = True
            self.order_changed = self.order_changed or ("the queue did not confirm the give-back in time, so the "
                                                         "order of the messages read may have changed")

    def _after_return(self, records: list[MessageRecord]) -> None:
        """One sentence on where the messages read are now and whether their order held (never two that disagree).
        Where the broker took them back by closing the connection (a message 0.9.1 cannot be given) no give-back of
        ours ran: the read's end says what that close cost (_undeliverable_error); here only where they went."""
        if not self.facts.reads_as_quorum or self.read == 0:
            return
        if self.connection_lost:
            if self._returns_to_a_block():  # seen on 4.3.6: a block [a, poison, b] became [b, a, poison]
                self.notes.append(f"the broker took the {self.read} message(s) read back when it closed the "
                                  "connection; each went to the back of the block of previously returned messages at "
                                  "the head, if there was one (a peek's or a consumer's give-back leaves one): then "
                                  "the order of that block changed")
            return
        if self.facts.delivery_limit is None and not self._returns_to_a_block():
            if self.reached_end:
                self.notes.append(f"read the whole queue ({self.read} messages) and gave them back in order; "
                                  "messages published during the peek are now ahead of them")
            else:
                self.notes.append(f"the {self.read} peeked messages are now at the back of the queue, "
                                  "in their order")
            return
        returned = self.read - len(self.dead_lettered)
        if self._counts_attempts():
            where = f"used one delivery attempt of each of the {returned} messages given back"
        else:  # RabbitMQ 4.3+: nacks count nothing
            how = "released" if self.opts.protocol == "1.0" else "basic.nack"
            where = (f"gave the {returned} messages read back at the head, using no delivery attempt (RabbitMQ "
                     f"{self.facts.version}: {how} leaves x-delivery-count as it was)"
                     + ("" if self._held.confirmed else "; unconfirmed: a return the broker had not applied when the "
                        "channel closed counts as an attempt"))
        if self.order_changed:
            self.notes.append(f"{where}; the order of the head changed: {self.order_changed}")
        elif self.stopped_early and records and self._returned_here(records[0]) is not False:
            self.notes.append(f"{where}; they now sit behind the rest of the block of previously returned messages "
                              "that was at the head (if it had more): RabbitMQ puts each return at the back of that "
                              "block")
        elif self._block_end_by == "unknown":
            self.notes.append(f"{where}, in order; if earlier returns formed a longer block at the head, these now sit "
                              "behind the rest of it: a dead letter's counters cannot tell on RabbitMQ "
                              f"{self.facts.version} and the management API's count of returned messages was not "
                              "available")
        elif self._block_end_by == "sample":
            self.notes.append(f"{where}, in order as far as the management API's count of returned messages at "
                              f"the head ({self.facts.returned_at_head}; {self.facts.sampled}) tells: a dead "
                              f"letter's counters cannot on RabbitMQ {self.facts.version}")
        else:
            self.notes.append(f"{where}, in order")

    def tell(self, report: Reporter) -> None:
        """Say the outcome's notes and warnings on `report`; raise its error (exit 5 or 6, decided here)."""
        outcome = self.outcome()
        outcome.say(report)
        if outcome.error is not None:
            raise outcome.error

    def outcome(self) -> ReadReport:
        """Notes, warnings and the error (exit 5 or 6) this read ends with."""
        warnings: list[str] = []
        error: DlxtoolError | None = None
        if self.facts.type == "stream":
            if self.over_budget is not None:
                return ReadReport(list(self.notes), warnings, self._budget_error())
            return ReadReport(self.notes + self._stream_notes(), warnings)
        wanted = self.opts.count
        if self.undeliverable is not None:
            return ReadReport(list(self.notes), warnings, self._undeliverable_error())
        if self.dead_lettered:
            error = PartialError(
                f"the message(s) at position {', '.join(map(str, self.dead_lettered))} had no delivery attempt "
                f"left; giving them back made the broker dead-letter them ({dead_letter_target(self.facts)})"
                + (f"; {self.stopped_early}" if self.stopped_early else ""),
                hint="dlxtool only sees x-delivery-count once a message is delivered, so a peek must take the "
                     "head to learn it; drain the queue (dump --remove) instead of peeking it again")
        elif self.stopped_early and (wanted is None or self.shown < wanted):
            # Not a refusal: the read changed the queue before it could know (a count is learnt by taking the
            # message), so it says what changed (exit 5), never "refused" (a refusal changes nothing).
            spent = ", ".join(map(str, range(self.read))) if self.read <= 12 else f"0-{self.read - 1}"
            error = PartialError(
                f"peek {self.stopped_early} (showed {self.shown}); the message(s) at position {spent} were read and "
                "given back: each used one of its delivery attempts, and went back behind the other returned "
                "messages at the head",
                hint="wait until consumers settle the head of the queue, or drain it (dump --remove); every "
                     "further peek uses another attempt of the head")
        elif self.stopped_early:
            warnings.append(self.stopped_early)
        elif self.over_budget is not None:
            error = self._budget_error()
        elif self.left_unread and wanted is not None:  # a selection looked as far as it may hold
            if self.shown < wanted:
                warnings.append(f"looked at {self.read} messages, the most held at once (--max-unacked "
                                f"{self.opts.max_unacked}), and {self.shown} of them matched; {self.left_unread} more "
                                "were not looked at (raise --max-unacked, config dump_unacked_limit, to look further)")
        elif self.left_unread:
            error = PartialError(
                f"read {self.read} messages, the most held at once (--max-unacked {self.opts.max_unacked}); "
                f"{self.left_unread} more were left unread",
                hint="raise --max-unacked (config dump_unacked_limit) if the broker has the memory, "
                     "or drain the queue into a file (dump --remove)")
        return ReadReport(list(self.notes), warnings, error)

    def _undeliverable_error(self) -> UndeliverableError:
        """Exit 5: what was shown is right; the message at `undeliverable` cannot be read over 0.9.1, and the lost
        connection gave back what was held — which on some versions counts an attempt (never advised again)."""
        from dlxtool.broker import versions

        position = self.undeliverable
        held = self.read
        counted = self.facts.reads_as_quorum and versions.quorum_give_back_counts(self.facts.version, "lost")
        if counted and held:
            limit = (f" (delivery limit {self.facts.delivery_limit})" if self.facts.delivery_limit
                     else " (with a delivery limit)")
            cost = (f"; the broker took back the {held} message(s) held before it (positions 0-{held - 1}) and the "
                    f"message itself when it closed the connection, and on RabbitMQ {self.facts.version} a lost "
                    f"connection counts a delivery attempt of each on a quorum queue{limit}: running this again over "
                    "0.9.1 spends one more attempt each time, and past the limit the broker dead-letters or drops "
                    "them (the healthy ones ahead of it too)")
        elif counted:
            cost = (f"; the lost connection counted a delivery attempt of that message (RabbitMQ {self.facts.version}"
                    "): running this again over 0.9.1 spends another each time")
        else:
            cost = "; the messages held went back in place when the connection closed"
        from dlxtool.broker.amqp10 import available

        how = ("read it (and the rest of the queue) with --protocol 1.0, which gives no delivery attempt away and "
               "reads every section of it")
        if not available():
            how = "read it over AMQP 1.0: --protocol 1.0 (install the amqp10 extra: pip install 'dlxtool[amqp10]')"
        assert position is not None
        return UndeliverableError(
            f"the message at position {position} of {self.facts.name!r} cannot be delivered over AMQP 0.9.1: "
            f"{self.stopped_early}{cost}. Showed the {self.shown} message(s) before it",
            position=position, hint=f"do not run this again over 0.9.1; {how}")

    def _budget_error(self) -> PartialError:
        """The read stopped at the byte budget: partial (exit 5), as a read cut short by --max-unacked is: what was
        shown is right, there is more than was shown."""
        assert self.over_budget is not None and self.opts.max_bytes is not None
        position, size = self.over_budget
        asked = f" of the {self.opts.count} asked for" if self.opts.count is not None else ""
        if self.facts.type == "stream":
            next_one, more = "was not shown", "the stream goes on from there"
        else:
            left = self.facts.ready - self.shown if self.facts.ready else 0
            next_one = "was given back unshown"
            more = f"{left} more remain in the queue" if left > 1 else "more remain in the queue"
        return PartialError(
            f"stopped at the byte budget of {human(self.opts.max_bytes)} (--max-bytes): showed {self.shown} "
            f"message(s){asked}, {human(self.bytes_shown)} of bodies; the next one (position {position}, "
            f"{human(size)}) would have passed it and {next_one}; {more}",
            hint="raise --max-bytes (config max_bytes) if this machine has the memory, or read fewer (-n)")

    def _stream_notes(self) -> list[str]:
        wanted = self.opts.count
        if self.read == 0:
            where = "the start" if self.opts.offset is None else f"offset {_offset_text(self.opts.offset)}"
            return [f"no message at or after {where} of the stream (none arrived within "
                    f"{self.opts.stream_wait:g}s)"]
        if wanted is not None and self.read < wanted:
            return [f"the stream ended after {self.read} of the {wanted} messages asked for (none arrived "
                    f"within {self.opts.stream_wait:g}s)"]
        return []

    # streams: consume from an offset; acks only grant credit
    def _stream_batches(self) -> Iterator[list[MessageRecord]]:
        wanted = self.opts.count if self.opts.select is None else None  # a selection: how many to read is unknown
        prefetch = max(1, min(wanted or self.opts.batch_size, self.opts.batch_size))
        self._channel.basic_qos(prefetch_count=prefetch)
        offset = "first" if self.opts.offset is None else self.opts.offset
        batch: list[MessageRecord] = []
        unacked = 0
        try:
            for method, props, body in self._channel.consume(
                    self.facts.name, auto_ack=False, arguments={"x-stream-offset": offset},
                    inactivity_timeout=self.opts.stream_wait):
                if method is None:
                    self.reached_end = True
                    break
                assert props is not None and body is not None  # a delivery carries both
                if self.opts.select is None and self._passes_budget(len(body), self.read, self.shown):
                    self.read += 1
                    self.hidden += 1  # delivered, not shown: nothing is held on a stream, the read just ends here
                    break
                record = self._stream_record(method, props, body)
                unacked += 1
                if self._selects(record):
                    if self.opts.select is not None and self._passes_budget(len(body), record.position, self.shown):
                        self.hidden += 1  # selected, but past the budget: the read ends here
                        break
                    self.bytes_shown += len(body)
                    batch.append(record)
                more = self._want_more()
                if unacked >= prefetch or not more:
                    # Ack (= grant credit) only when reading on: credit granted at the end would let the
                    # broker push messages that cancel() then rejects, and streams refuse rejects (540).
                    if more:
                        self._channel.basic_ack(method.delivery_tag, multiple=True)
                    unacked = 0
                    if batch:
                        yield batch
                    batch = []
                if not more:
                    break
            if batch:
                yield batch
        finally:
            self._cancel_stream_consumer()

    def _cancel_stream_consumer(self) -> None:
        from dlxtool.broker.channel import cancel_quietly

        # Interrupted mid-chunk, pika rejects what it still buffers and the stream closes the channel
        # for it. Nothing is lost: reading a stream never removes anything.
        cancel_quietly(self._channel)

    def _stream_record(self, method: Basic.Deliver, props: BasicProperties, body: bytes) -> MessageRecord:
        # Nothing is held on a stream, so decoding here costs the broker nothing.
        record = MessageRecord.from_delivery(self.facts.name, method, props, body, position=self.read)
        record.decoded = self.decode(record)
        self._decoded.add(record.position)
        self.read += 1
        return record


def dead_letter_target(facts: QueueFacts) -> str:
    """Where the broker sends what this queue dead-letters: `""` is the default exchange, not none."""
    if facts.dead_letter_exchange is None:
        return "the queue has no dead-letter exchange: dropped"
    if facts.dead_letter_exchange == "":
        key = f" with routing key {facts.dead_letter_routing_key!r}" if facts.dead_letter_routing_key else ""
        return f"to the default exchange{key}"
    return f"to exchange {facts.dead_letter_exchange!r}"


def _offset_text(offset: Any) -> str:
    return offset.isoformat() if isinstance(offset, datetime) else str(offset)


def prepare_read(conn: AmqpConnection, profile: BrokerProfile, name: str, opts: ReadOptions, *,
                 management: Callable[[], ManagementClient],
                 decode: Callable[[MessageRecord], dict[str, Any] | None] = no_decode,
                 ) -> tuple[QueueReader, list[str]]:
    """Facts, safety check (raises RefusedError) and a reader on a channel of `conn` with nothing on it (the identity
    proof's, connection.take_channel)."""
    channel = take_channel(conn)
    facts = queue_facts(profile, name, management=management, channel=channel, conn=conn)
    notes = check_read(facts, opts)
    return QueueReader(channel, facts, opts, decode), notes


def delivery_count(headers: dict[str, Any] | None) -> int:
    value = (headers or {}).get("x-delivery-count")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# -- --offset ------------------------------------------------------------------------------------------

def parse_offset(text: str, now: datetime | None = None) -> Any:
    """first | last | next | N (offset) | ISO timestamp | an age (30m, 2h, 1d: parse_age) ago -> x-stream-offset."""
    value = text.strip().lower()
    if value in STREAM_OFFSET_WORDS:
        return value
    if value.isdigit():
        return int(value)
    from dlxtool.selection import parse_age  # the --where/--older-than module: only for an age here

    age = parse_age(value)  # after the offset number: a bare "42" is an offset, "42s" an age
    if age is not None:
        return (now or datetime.now(UTC)) - timedelta(seconds=age)
    try:
        stamp = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"bad --offset {text!r}",
                         hint="first, last, next, an offset number, an ISO time (2026-01-31T10:00Z) "
                              "or an age like 30m, 2h, 1d") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
