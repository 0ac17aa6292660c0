"""Options and glue shared by the commands that read a queue with peek semantics: peek, history, dump.

The safety rules live in dlxtool/ops/peek.py; this module only turns options into ReadOptions and
reports on stderr what the read could not check, what it costs and what it did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from dlxtool.broker.protocols import PROTOCOLS, WireProtocol, wire_protocol
from dlxtool.cli.app import App
from dlxtool.cli.options import max_bytes_option, record_decoder
from dlxtool.errors import UsageError

if TYPE_CHECKING:
    from dlxtool.amqp10_conversions import ConversionTally
    from dlxtool.broker.amqp10.connection import Amqp10Connection
    from dlxtool.config import BrokerProfile
    from dlxtool.ops.peek import Coverage, QueueReader, Reader, ReadOptions
    from dlxtool.ops.peek_amqp10 import Amqp10QueueReader
    from dlxtool.ops.peek_past_poison import PastPoison
    from dlxtool.record import MessageRecord
    from dlxtool.selection import Selection

F = Callable[..., Any]

AUTO = "auto"  # --protocol auto: the command chooses (reads: 0.9.1, on over 1.0 past a poison message)

SAFETY_HELP = """\b
What a peek does to the queue (it takes messages and gives them back):
  classic  basic.get without ack, then all are given back at once (the
           channel closes): same messages, same order; only their
           `redelivered` flag is set. Message k can only be reached while
           1..k-1 are held unacked, so more than --max-unacked (config
           dump_unacked_limit, default 10000) is refused (exit 6).
  quorum   given back 32 at a time (basic.nack) so the order holds.
           RabbitMQ 4.3+: that uses no delivery attempt and keeps every
           message's place, with or without a limit: no flag needed.
           3.x and 4.0-4.2: with a delivery limit (4.x: 20 unless set)
           every give-back uses one attempt: refused unless
           --spend-attempts; the read then stops before any message would
           be left without a spare attempt (a limit of 1 or less is always
           refused; a negative one acts as 0 on 3.x). Without a limit (3.x
           without one, 4.0-4.2 with -1) given-back messages go to the
           back: refused unless --allow-reorder. If the management API is
           down the limit is unknown: refused (on 4.3+ read anyway).
  stream   read with a consumer from --offset; nothing is held or changed.
"""


def peek_safety_options(f: F) -> F:
    """The options that accept a peek's costs (also used by `purge --dry-run`, which peeks)."""
    opts = [
        click.option("--max-unacked", type=click.IntRange(min=1), metavar="N",
                     help="Most messages held unacked at once (default: config dump_unacked_limit, 10000)."),
        click.option("--allow-reorder", is_flag=True,
                     help="Quorum queue without delivery limit: accept that peeked messages move to the back."),
        click.option("--spend-attempts", is_flag=True,
                     help="Quorum queue with a delivery limit: accept using one delivery attempt per message."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return max_bytes_option(f)


def read_options(f: F) -> F:
    opts = [
        click.option("--offset", metavar="WHERE",
                     help="Streams: first (default), last, next, an offset, an ISO time or an age (30m, 2h)."),
        click.option("--wait", "stream_wait", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
                     metavar="SECONDS", help="Streams: stop after this long without a new message."),
        click.option("--protocol", type=click.Choice([*PROTOCOLS, AUTO]), default=None,
                     help="Read over AMQP 0.9.1, AMQP 1.0 (RabbitMQ 4.x; the amqp10 extra) or auto (the default): "
                          "1.0 reads an AMQP 1.0 message whole (every section and type), and one 0.9.1 cannot be "
                          "given; 0.9.1 reads an AMQP 0.9.1 message whole (RabbitMQ drops its table and array headers "
                          "for 1.0 readers). auto reads over 0.9.1 and, where RabbitMQ 4.x cannot give a message to "
                          "0.9.1 (a char or uuid application property), reads on over 1.0 from that message (a "
                          "second read from the head, under the 1.0 peek's rules); 0-9-1 stops there (exit 5). "
                          "[env DLXTOOL_PROTOCOL; default: auto]"),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return peek_safety_options(f)



def protocol_option(what: str) -> Callable[[F], F]:
    """--protocol of a command that moves messages (replay, move): docs/amqp10.md#moving."""
    return click.option(
        "--protocol", type=click.Choice([*PROTOCOLS, AUTO]), default=None,
        help=f"{what} over AMQP 0.9.1, AMQP 1.0 (RabbitMQ 4.x; the amqp10 extra) or auto (the default): auto moves "
             "over 0.9.1 unless messages published over AMQP 1.0 would lose data in RabbitMQ's conversion to 0.9.1 "
             "and none would lose anything over 1.0 — then over 1.0, said before the question (docs/amqp10.md). "
             "1.0 reads each message whole and "
             "sends its original sections back (every property and type; the death history and the counters the "
             "reset removes left out), settling the source only after the broker's `accepted`; what stays is held "
             "and given back in place (at most --prefetch). A message published over 0.9.1 with a table or array "
             "header (which 1.0 readers never get) is refused unless --accept-conversion-loss." + (
                 " With --edit the messages are read over 1.0 too, and an edit a 1.0 message cannot carry is named "
                 "in the document." if what == "Replay" else "")
             + " Not from a stream. [env DLXTOOL_PROTOCOL; default: auto]")


def purge_protocol_option(f: F) -> F:
    """--protocol of purge's reading modes (dlxtool.ops.purge over dlxtool.ops.pipeline_amqp10): docs/amqp10.md."""
    return click.option(
        "--protocol", type=click.Choice([*PROTOCOLS, AUTO]), default=None,
        help="Read (--backup, filters, --limit, --move-to) over AMQP 0.9.1, AMQP 1.0 (RabbitMQ 4.x; the amqp10 "
             "extra) or auto (the default): auto reads over 0.9.1 unless --backup or --move-to would take messages "
             "published over AMQP 1.0 that lose data in RabbitMQ's conversion to 0.9.1 and none that would lose "
             "anything over 1.0 — then over 1.0, said before the question. 1.0 takes each message whole — its "
             "--backup record holds every section and type (`amqp10`), written and flushed before the message is "
             "settled `accepted`; --move-to sends it unchanged, settled only after the broker's `accepted`; what "
             "stays is held and given back in place (at most 2,000); a message published over 0.9.1 with a table "
             "or array header (which 1.0 readers never get) is refused unless --accept-conversion-loss. Not with a "
             "stream. A plain purge reads nothing (one queue.purge either way). "
             "[env DLXTOOL_PROTOCOL; default: auto]")(f)


def auto_protocol(app: App, protocol: str | None) -> WireProtocol | None:
    """The protocol replay or move was asked to run over (--protocol, else $DLXTOOL_PROTOCOL), or None for auto,
    the default (dlxtool.ops.protocol_choice chooses)."""
    if protocol == AUTO or (protocol is None and app.env.get("DLXTOOL_PROTOCOL", "") in ("", AUTO)):
        return None
    wire = wire_protocol(protocol) if protocol is not None else None
    return wire or chosen_protocol(app)


def make_read_options(app: App, count: int | None, *, max_unacked: int | None, allow_reorder: bool,
                      spend_attempts: bool, offset: str | None = None, stream_wait: float = 1.0,
                      selection: Selection | None = None, protocol: str | None = None,
                      past_poison: bool = False) -> ReadOptions:
    """`selection` (dlxtool.selection, seen through the command's lens: selection_for): only the messages it selects
    are shown, and `count` counts them. `past_poison`: with --protocol auto (given, or left out and not set in the
    environment), a 0.9.1 read goes on over 1.0 past a message 0.9.1 cannot be given (peek, history, dump)."""
    from dlxtool.ops.peek import ReadOptions, parse_offset

    selects = selection is not None and selection.filters_anything
    return ReadOptions(
        count=count,
        max_unacked=max_unacked or app.config().dump_unacked_limit,
        max_bytes=app.max_bytes,
        allow_reorder=allow_reorder,
        spend_attempts=spend_attempts,
        offset=None if offset is None else parse_offset(offset),
        stream_wait=stream_wait,
        select=selection.matches if selects and selection is not None else None,
        select_decodes=selects and selection is not None and selection.needs_type,
        protocol=auto_protocol(app, protocol) or "0-9-1",
        past_poison=past_poison and auto_protocol(app, protocol) is None,
        select_sees_headers=selects and selection is not None and selection.sees_headers,
    )


def chosen_protocol(app: App) -> WireProtocol:
    """--protocol's default: $DLXTOOL_PROTOCOL (0-9-1 or 1.0), else 0-9-1 (auto, which replay and move choose by,
    is 0-9-1 for the commands that do not: auto_protocol)."""
    setting = app.env.get("DLXTOOL_PROTOCOL", "")
    setting = "0-9-1" if setting in ("", AUTO) else setting
    protocol = wire_protocol(setting)
    if protocol is None:
        raise UsageError(f"DLXTOOL_PROTOCOL={setting!r} is not a protocol dlxtool reads over",
                         hint="0-9-1, 1.0 or auto")
    return protocol


@contextmanager
def read_queue(app: App, queue: str, opts: ReadOptions,
               decode_if: Callable[[MessageRecord], bool] | None = None) -> Iterator[Reader]:
    """Open, check and report; yield the reader. Call finish_read(app, reader) after the output.
    `decode_if`: which records the output needs decoded (default: all of them)."""
    from dlxtool.ops.peek import prepare_read

    profile = app.profile()
    # a compressed body inflates within the read's byte budget (dlxtool.budget), never past it
    decoder = record_decoder(app, max_inflated=opts.max_bytes or app.max_bytes)

    def decode(record: MessageRecord) -> dict[str, Any] | None:
        if decode_if is not None and not decode_if(record):
            return None
        return decoder(record)  # type: ignore[no-any-return]
    app.begin_management(profile, queues=(queue,))  # on its way while AMQP connects
    with app.connection(profile) as conn:
        mgmt = app.management(profile, conn)  # proven to be this broker's API before any of it is used
        amqp10 = _amqp10_connection(app, profile, conn) if opts.protocol == "1.0" else None
        opened: list[Amqp10Connection] = []  # the AMQP 1.0 connection of a read that goes on past a poison message
        try:
            if amqp10 is not None:
                from dlxtool.ops.peek_amqp10 import prepare_read_amqp10

                first, notes = prepare_read_amqp10(conn, amqp10, profile, queue, opts, management=lambda: mgmt,
                                                   decode=decode)
            else:
                first, notes = prepare_read(conn, profile, queue, opts, management=lambda: mgmt, decode=decode)
            reader: Reader = first
            if amqp10 is None and opts.past_poison and _reads_on_over_amqp10(first):
                reader = _past_poison(app, profile, first, opened)
            for missing in reader.facts.missing_checks:
                app.warn(f"check not made: {missing}")
            app.info(reader.facts.describe())
            for note in notes:
                app.info(note)
            yield reader
        finally:
            for amqp10_conn in ([amqp10] if amqp10 is not None else []) + opened:
                amqp10_conn.close()


def _reads_on_over_amqp10(reader: QueueReader) -> bool:
    """Whether a 0.9.1 read that stops at a message 0.9.1 cannot be given may go on over AMQP 1.0 (--protocol auto):
    where the broker has that poison and speaks 1.0, proton is here, and the queue is not a stream."""
    from dlxtool.broker import versions
    from dlxtool.broker.amqp10 import available

    version = reader.facts.version
    return (reader.facts.type != "stream" and versions.char_uuid_poison_091(version)
            and versions.speaks_amqp10(version) and available())


def _past_poison(app: App, profile: BrokerProfile, first: QueueReader, opened: list[Amqp10Connection]) -> PastPoison:
    """`first`, going on over AMQP 1.0 past a message 0.9.1 cannot be given (dlxtool.ops.peek_past_poison); the 1.0
    connection it opens goes to `opened`, closed with the read."""
    from dlxtool.ops.peek_past_poison import PastPoison, recall_for, wait_until_back

    def connect() -> Amqp10Connection:
        from dlxtool.broker.amqp10.connection import open_connection

        app.info("reading on over AMQP 1.0 (--protocol auto)" if first.read or first.undeliverable is not None else
                 "reading over AMQP 1.0 first (--protocol auto: a read from this machine found a message AMQP 0.9.1 "
                 "cannot be given in this queue)")
        opened.append(open_connection(profile))
        return opened[-1]

    def read_on() -> tuple[Amqp10QueueReader, list[str]]:
        from dlxtool.ops.peek_amqp10 import read_on_over_amqp10  # the 1.0 path: only where a read needs it

        return read_on_over_amqp10(first, connect)

    facts = first.facts
    recall = None if first.opts.select_sees_headers else recall_for(
        profile, facts.vhost, facts.name, quorum=facts.reads_as_quorum, version=facts.version)
    return PastPoison(first, read_on, recall, until_back=lambda: wait_until_back(profile, facts))


def _amqp10_connection(app: App, profile: Any, conn: Any) -> Any:
    """The AMQP 1.0 connection of a --protocol 1.0 read: refused (exit 2) where the broker has no AMQP 1.0 facts
    (3.x) or proton is missing."""
    from dlxtool.broker import versions
    from dlxtool.broker.amqp10.connection import open_connection

    version = versions.server_version(conn)
    if not versions.speaks_amqp10(version):
        raise UsageError(f"--protocol 1.0 reads RabbitMQ 4.x; this broker is {version or 'of an unknown version'}",
                         hint="leave --protocol out (0-9-1)")
    return open_connection(profile)


def finish_read(app: App, reader: Reader | None) -> None:
    """Report what the read did to the queue; raise what it ends with (exit 5 or 6, decided in the core)."""
    if reader is None:
        return
    if reader.opts.select is not None:
        cov = reader.coverage()
        app.info(f"selected {cov.matched} of the {cov.looked_at} message(s) looked at")
    reader.tell(app)


def nothing_shown(reader: Reader) -> str:
    """What a read that shows nothing says: the queue's state (QueueFacts.nothing_read), or that none of the
    messages looked at was selected."""
    looked_at = reader.read - reader.hidden
    if reader.opts.select is not None and looked_at:
        return f"(no message selected: none of the {looked_at} looked at matched)"
    return reader.facts.nothing_read()


def sample_note(coverage: Coverage | None, more: str = "-n N or --all for more") -> str | None:
    """'looked at 100 of 3,000 messages (the first 100; ...)' when a read left messages unread, else None.
    Goes with the output it qualifies (stdout), not only to stderr: a count of a sample must say so."""
    if coverage is None or not coverage.sampled:
        return None
    n = coverage.looked_at
    if coverage.queue_depth is None:  # a stream: no count to compare with
        return f"looked at the first {n:,} messages from the offset ({more})"
    return f"looked at {n:,} of {coverage.queue_depth:,} messages (the first {n:,}; {more})"


def write_sample_note(app: App, note: str | None) -> None:
    """The sample note under a table (stdout), where the counts it qualifies are."""
    if note:
        app.stdout.write(app.style(note, fg="yellow") + "\n")
        app.stdout.flush()


def check_count(count: int | None, all_: bool) -> None:
    if all_ and count is not None:
        raise UsageError("give either -n or --all, not both")


def through_wait_queues(app: App, queue: str) -> Callable[[Any], Any]:
    """Origins of TTL-only histories, followed through the wait queue with the management API (proven to be
    this broker's on a connection of its own, opened only when such a message comes up): what `history` and
    `peek` show as origin, as replay resolves it (never the wait queue)."""
    resolver: list[Any] = []

    def consumers_now(name: str) -> int | None:
        """Whether a wait queue's way out is consumed decides an origin: the broker's count, not the API's sample."""
        from dlxtool.broker.queues import now

        profile = app.profile()
        with app.connection(profile) as conn:
            counted = now(conn, name, profile.timeout)
        return None if counted is None else counted.consumers

    def through(death: Any) -> Any:
        if not resolver:
            from dlxtool.ops.history import wait_queue_origins

            profile = app.profile()
            with app.connection(profile) as conn:
                mgmt = app.management(profile, conn)
            resolver.append(wait_queue_origins(mgmt, profile.vhost, queue, consumers_now))
        return resolver[0](death)

    return through


def conversion_tally(reader: Reader) -> ConversionTally:
    """A tally of the AMQP 1.0 messages a read shows (dlxtool.amqp10_conversions.ConversionTally: add each batch, then
    say_conversions): read over 1.0, what a move over 0.9.1 would change; over 0.9.1, that what is shown is already
    RabbitMQ's conversion."""
    from dlxtool.amqp10_conversions import ConversionTally
    from dlxtool.broker import versions

    version = reader.facts.version
    return ConversionTally(read_over_amqp10=reader.opts.protocol == "1.0",
                           speaks_amqp10=versions.speaks_amqp10(version),
                           poison_091=versions.char_uuid_poison_091(version))


def say_conversions(app: App, tally: ConversionTally) -> None:
    for note in tally.notes():
        app.info(note)


def topology_note(app: App, queue: str, records: list[MessageRecord], *, conventions: bool) -> None:
    """A note when dead letters read from `queue` are not where the topology sends them (an application moved them:
    dlxtool.ops.dead_letter_roles.unpredicted), asked of the management API the read already proved. The evidence:
    the last x-death entry (the queue that dead-lettered the message, with its routing keys), else, with
    `conventions` (loaded by the output anyway), the origin a known convention names. Nothing more is imported for
    messages that are no dead letters."""
    came_from: dict[tuple[str, tuple[str, ...] | None], int] = {}
    for record in records:
        deaths = record.deaths
        if deaths and deaths[0].queue:
            key = (deaths[0].queue, deaths[0].routing_keys or None)
        elif conventions:
            from dlxtool.conventions import Message, explain

            headers = record.headers if isinstance(record.headers, dict) else {}
            origin = explain(Message(headers, record.body, record.queue)).origin
            if origin is None or origin.queue is None:
                continue
            key = (origin.queue, None)
        else:
            continue
        came_from[key] = came_from.get(key, 0) + 1
    profile = app.profile()
    mgmt = app.proven_management(profile) if came_from else None
    if mgmt is None:
        return
    from dlxtool.ops.dead_letter_roles import unpredicted
    from dlxtool.ops.routes import Router

    note = unpredicted(Router(mgmt, profile.vhost, settled=False), queue, came_from)
    if note:
        app.info(f"note: {note}")
