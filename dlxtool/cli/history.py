"""`dlxtool history QUEUE`: where dead letters came from, why, and how many times."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any, cast

import click

from dlxtool.budget import human
from dlxtool.cli.app import App
from dlxtool.cli.options import (
    SELECTION_HELP,
    common_options,
    complete_queue,
    conventions_in_use,
    origin_from_option,
    selection_for,
    selection_options,
)
from dlxtool.cli.reading import (
    SAFETY_HELP,
    check_count,
    conversion_tally,
    finish_read,
    make_read_options,
    nothing_shown,
    read_options,
    read_queue,
    sample_note,
    say_conversions,
    through_wait_queues,
    topology_note,
    write_sample_note,
)
from dlxtool.errors import UsageError
from dlxtool.record import MessageRecord
from dlxtool.render import safe_text
from dlxtool.selection import Selection

if TYPE_CHECKING:
    from dlxtool.deaths import MessageHistory
    from dlxtool.ops.peek import Coverage, Reader

# Not the whole queue by default: every message read is held unacked until the read ends, and on a
# quorum queue each one read uses a delivery attempt. A count made of the first ones says so. A summary reads as
# many as a read may hold (--max-unacked, --max-bytes): a summary of a part is no summary.
DEFAULT_COUNT = 100


@click.command(epilog=SAFETY_HELP + "\n" + SELECTION_HELP)
@click.argument("queue", required=False, shell_complete=complete_queue)
@click.option("-n", "--count", "--limit", "count", type=click.IntRange(min=1), default=None,
              help=f"How many messages from the head of QUEUE (of those the selection selects, if any) "
                   f"[default: {DEFAULT_COUNT}; with --summary all, up to --max-unacked].")
@click.option("--all", "all_", is_flag=True,
              help="Every message of QUEUE (still bounded by --max-unacked: all are held until the read ends).")
@click.option("--summary", is_flag=True,
              help="One row per failure, with its messages, attempts and deaths: all of QUEUE up to --max-unacked "
                   "messages and --max-bytes of bodies (see above).")
@click.option("--ungrouped", is_flag=True,
              help="With --summary: one group per error text as it is (ids, numbers and all).")
@click.option("--from", "from_file", metavar="FILE",
              help="Read message records (dump / peek --format jsonl) from FILE, or - for stdin; no broker.")
@click.option("--allow-torn", is_flag=True,
              help="With --from: skip records cut short (a writer stopped mid-record) instead of stopping there.")
@click.option("--error-header", "error_headers", multiple=True, metavar="NAME",
              help="Header carrying the consumer's error text (adds to config error_headers and the "
                   "built-in x-exception-message, x-error, MT-Fault-Message).")
@origin_from_option
@selection_options(limit=False)
@read_options
@common_options
@click.pass_obj
def history(app: App, /, queue: str | None, count: int | None, all_: bool, summary: bool, ungrouped: bool,
            from_file: str | None, allow_torn: bool, error_headers: tuple[str, ...], origin_from: str | None,
            selection: Selection, **read: object) -> None:
    """Show the x-death history of the messages in QUEUE (or in a dump file).

    Per message: the deaths, most recent first (queue, reason, count,
    exchange, routing keys, time, original expiration), x-first-death-*,
    x-last-death-*, quorum x-delivery-count, retry headers (x-retry-count,
    x-delivery-attempts, count), the error text, and the origin replay would
    send it back to: the queue it failed in (rejected, delivery_limit,
    maxlen), not a wait queue it expired in, not its routing key.

    Dead letters a framework made (no x-death) are read by its convention:
    Spring's republish recoverer, NServiceBus, MassTransit, rascal, retry
    headers, Celery's retries, Dramatiq's traceback, and the teams' own
    [conventions.NAME] in the config file. Each message says which
    convention explained it; when conventions disagree the most recent
    failure wins, and --origin-from forces one.

    --summary groups the messages by failure: origin, convention, reason,
    type, and the error text without what varies from message to message
    (ids, numbers, UUIDs, hex, timestamps), or, where a convention records
    a stack (Spring, NServiceBus, MassTransit, Dramatiq), its exception type
    and first application frame; one example error per group, "(+N like
    it)" for the other texts (--ungrouped: one group per exact text). It
    reads all of QUEUE up to --max-unacked messages (config
    dump_unacked_limit, default 10000) and --max-bytes of bodies, as a peek
    holds all it reads unacked until it ends; when that is not all of
    QUEUE, its first line says so (-n N: the first N).

    Attempts: how many times a consumer had a message, at least — the
    largest of x-death's failures at the origin (a delivery_limit death
    counts the queue's limit + 1), an app's x-retry-count + 1 (its retries,
    then the try that gave up), x-delivery-attempts, and a framework's
    count (NServiceBus, MassTransit, Celery retries + 1; rascal).

    Reads the queue like `peek` does (same safety rules, below).

    \b
    Examples:
      dlxtool history orders.dlq --summary
      dlxtool history orders.dlq --summary --ungrouped --not-type PaymentFailed
      dlxtool history orders.dlq --message-id o-00013
      dlxtool history orders.dlq -n 5 --format json
      dlxtool dump orders.dlq --all -o dlq.jsonl && dlxtool history --from dlq.jsonl --summary
      dlxtool history orders.dlq --reason expired --older-than 1h --summary
    """
    from dlxtool.ops.history import count_notes, entries, mark_copies, summarize_failures

    check_count(count, all_)
    if ungrouped and not summary:
        raise UsageError("--ungrouped only means something with --summary", hint="dlxtool history QUEUE --summary "
                                                                                   "--ungrouped")
    names = (*app.config().error_headers, *error_headers)
    fmt = app.output_format()
    known = conventions_in_use(app, origin_from)  # a wrong --origin-from fails before the queue is read
    through = through_wait_queues(app, queue) if queue else None
    selection = selection_for(app, selection, origin_from=origin_from, error_headers=error_headers, through=through,
                              decode=from_file is not None)  # a reader decodes before it selects; a file does not
    # a summary reads all it may hold: --max-unacked messages (then it says it did not see all)
    whole = _summary_bound(app, read) if summary and count is None and not all_ else None
    records, reader = _load(app, queue, None if all_ else count or whole or DEFAULT_COUNT, from_file, read,
                            allow_torn, selection)
    items = list(entries(records, names, known, origin_from, through=through,
                         delivery_limit=_delivery_limits(app) if queue else None))
    copies = mark_copies(items)
    if copies:
        app.warn(f"{copies} message(s) here are copies of another one here (`copy_of`): left by a replay that was "
                 "killed (kill -9) between a publish and the ack of its source; drop one of each pair "
                 "(README: Stop signals)")
    coverage = _coverage(reader, len(items))
    note = sample_note(coverage, _more_text(app, read) if whole else "-n N or --all for all")
    for item in items:
        for warning in item.history.history.warnings:
            app.warn(f"{item.record.queue} #{item.record.position}: {warning} (best reading shown)")
    conflicts = sum(1 for i in items if i.explained.conflict)
    if conflicts and summary:
        app.warn(f"{conflicts} message(s): conventions name different origins; the most recent failure won "
                 "(history without --summary says which and why; --origin-from CONVENTION forces one)")
    if summary:
        groups = summarize_failures(items, ungrouped=ungrouped)
        if fmt != "table":
            if note:
                app.info(note)
            # Each group says what it was counted from (a list stays a list for existing scripts).
            app.emit_json([{**g.to_json(), **coverage.to_json()} for g in groups], fmt)
        else:
            from dlxtool.cli.explaining import Cells

            write_sample_note(app, note)  # first: the counts below are of what was read
            cells = Cells(app)
            app.write_table([[g.origin or "?", g.convention, g.reason, g.type, g.error_text(cells), g.messages,
                              g.attempts_text(), g.deaths_text(), g.waits or "",
                              *(v or "" for v in (g.to_json()["first"], g.to_json()["last"]))] for g in groups],
                            ["origin", "convention", "reason", "type", "error", "messages", "attempts", "deaths",
                             "waits", "first", "last"],
                            empty=_nothing(reader),
                            styles={0: lambda cell: app.style(cell, bold=True),
                                    2: lambda cell: app.style(cell, fg="yellow")})
            cells.note()
    elif fmt != "table":
        app.emit_json([i.to_json() for i in items], fmt)
        if note:
            app.info(note)
    else:
        _render_timelines(app, items, _nothing(reader))
        write_sample_note(app, note)
    if fmt == "table":
        from dlxtool.cli.explaining import hint_conventions

        hint_conventions(app, [i.record for i in items], [i.explained for i in items])
    for count_note in count_notes(items):
        app.info(f"note: {count_note}")
    if reader is not None:  # a file's records were read (and said) before
        tally = conversion_tally(reader)
        tally.add(records)
        say_conversions(app, tally)
    if queue:
        topology_note(app, queue, records, conventions=True)
    finish_read(app, reader)


def _summary_bound(app: App, read: dict[str, Any]) -> int:
    """How many messages a summary reads at most: all a read may hold unacked (--max-unacked, else the config's
    dump_unacked_limit)."""
    given = read.get("max_unacked")
    return given if isinstance(given, int) else app.config().dump_unacked_limit


def _more_text(app: App, read: dict[str, Any]) -> str:
    """What bounds a summary's read, for its sample note."""
    return (f"a summary reads up to --max-unacked {_summary_bound(app, read):,} messages and --max-bytes "
            f"{human(app.max_bytes)} of bodies; raise them to cover more")


def _delivery_limits(app: App) -> Callable[[str], int | None]:
    """Each queue's delivery limit (management API, proven to be this broker's on a connection of its own, opened
    only when a delivery_limit death comes up): a dead letter does not say how often it was delivered."""
    from dlxtool.ops.history import delivery_limits

    resolver: list[Callable[[str], int | None]] = []

    def limit(queue: str) -> int | None:
        if not resolver:
            profile = app.profile()
            with app.connection(profile) as conn:
                mgmt = app.management(profile, conn)
            resolver.append(delivery_limits(mgmt, profile.vhost))
        return resolver[0](queue)

    return limit


def _coverage(reader: Reader | None, n: int) -> Coverage:
    from dlxtool.ops.peek import Coverage

    return reader.coverage() if reader is not None else Coverage(n, None, sampled=False)  # --from: all of it


def _nothing(reader: Reader | None) -> str:
    """What an empty read shows: not '(no messages)' when consumers hold them all (see peek)."""
    return "(no messages)" if reader is None else nothing_shown(reader)


def _load(app: App, queue: str | None, count: int | None, from_file: str | None, read: dict[str, Any],
          allow_torn: bool = False, selection: Selection | None = None,
          ) -> tuple[list[MessageRecord], Reader | None]:
    if (queue is None) == (from_file is None):
        raise UsageError("give a QUEUE or --from FILE (one of them)")
    if from_file is not None:
        records = _from_file(app, from_file, allow_torn)
        if selection is None or not selection.filters_anything:
            return list(records), None
        looked_at, selected = 0, []
        for record in records:
            looked_at += 1
            if selection.matches(record):
                selected.append(record)
        app.info(f"selected {len(selected)} of the {looked_at} record(s) in {from_file}")
        return selected, None
    from dlxtool.ops.history import needs_decoded_type

    opts = make_read_options(app, count, selection=selection, past_poison=True, **read)
    # --type may need a typed message's protobuf type too: then every body is decoded
    decode_if = None if selection is not None and selection.needs_type else needs_decoded_type
    with read_queue(app, queue or "", opts, decode_if=decode_if) as reader:
        return list(reader.records()), reader


def _from_file(app: App, name: str, allow_torn: bool) -> Iterator[MessageRecord]:
    from dlxtool.ops.record_files import open_records

    def torn(where: str, skipped: int) -> None:
        app.warn(f"{where}: a record cut short ({skipped} bytes; a writer stopped mid-record): skipped")

    yield from open_records(name, cast(IO[bytes], getattr(app.stdin, "buffer", app.stdin)),
                            torn if allow_torn else None)


def _render_timelines(app: App, items: list[Any], empty: str = "(no messages)") -> None:
    from dlxtool.message_ids import message_name
    from dlxtool.ops.history import shown_exchange

    out = app.stdout
    if not items:
        out.write(empty + "\n")
    for item in items:
        h, r, x = item.history, item.record, item.explained
        where = "?" if x.origin is None else x.origin.queue if x.origin.queue is not None else x.origin.describe()
        by = f"{x.origin_label}: {x.origin_why}" if x.origin_label else x.origin_why
        if x.origin is None and item.own_headers:
            by += f"; its headers: {', '.join(item.own_headers)}"
        line = f"#{r.position} {message_name(r)}: origin {where} ({by}), {_deaths_text(h)}"
        if item.type:
            line += f", type {item.type}"
        if item.copy_of is not None:
            line += f", a copy of #{item.copy_of} (interrupted replay)"
        out.write(app.style(safe_text(line), bold=True) + "\n")
        extras = [("conventions", ", ".join(x.recognised)), ("origin conflict", x.conflict),
                  ("replayed", _replayed_text(r.headers)),
                  ("first death", _companions(h.history.first, r.headers)),
                  ("last death", _companions(h.history.last, r.headers)),
                  ("x-delivery-count", h.delivery_count),
                  *((f"{k}", v) for k, v in h.to_json()["retry_headers"].items()),
                  ("attempts", f"{x.attempts} ({x.attempts_from})" if x.attempts is not None else None),
                  ("error", f"{x.error} (from {x.error_from})" if x.error else None)]
        for key, value in extras:
            if value not in (None, ""):
                out.write(f"  {key}: {safe_text(value)}\n")
        if h.history.deaths:
            app.write_table([[d.queue, d.reason, d.count, shown_exchange(d.exchange, r.headers),
                              ",".join(d.routing_keys), d.to_json()["time"], d.original_expiration]
                             for d in h.history.deaths],
                            ["  queue", "reason", "count", "exchange", "routing keys", "time", "orig. expiration"])
        out.write("\n")
    out.flush()


def _replayed_text(headers: Any) -> str | None:
    """What the provenance header of an earlier replay says: "2 times, last from orders.dlq at …; first origin
    exchange orders, routing key order.created"."""
    from dlxtool.ops.provenance import replayed

    prov = replayed(headers)
    if prov is None:
        return None
    at = prov["at"]
    exchange = prov["exchange"] or "(default)" if isinstance(prov["exchange"], str) else "?"
    edited = f"; edited ({prov['edited']}) by that replay" if prov.get("edited") else ""
    return (f"{prov['count']} time(s) by dlxtool, last from {prov['from']} at {at}{edited}; its first origin's "
            f"exchange {exchange}, routing key {prov['routing_key']}")


def _deaths_text(history: MessageHistory) -> str:
    """The deaths that are failures; TTL expiries in a wait queue are waits, said apart."""
    count, waits = history.deaths, history.waits
    waited = f", {waits} waits (expired in a wait queue)" if waits else ""
    if count.evidence:
        return f"at least {history.failures} deaths ({count.evidence}, x-death {count.recorded}){waited}"
    return f"{history.failures}{'+' if count.may_be_low else ''} deaths{waited}"


def _companions(values: dict[str, str], headers: Any) -> str:
    """x-first-death-* / x-last-death-*: "queue=orders reason=rejected exchange=orders.ex (dlxtool replay)"."""
    from dlxtool.ops.history import shown_exchange

    return " ".join(f"{k}={shown_exchange(v, headers) if k == 'exchange' and v else v}" for k, v in values.items())
