"""`dlxtool peek QUEUE`: the messages at the head of a queue, left where they are."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from dlxtool import render
from dlxtool.cli.app import App
from dlxtool.cli.options import (
    SELECTION_HELP,
    common_options,
    conventions_in_use,
    origin_from_option,
    queue_argument,
    selection_for,
    selection_options,
)
from dlxtool.cli.reading import (
    SAFETY_HELP,
    conversion_tally,
    finish_read,
    make_read_options,
    nothing_shown,
    read_options,
    read_queue,
    say_conversions,
    through_wait_queues,
    topology_note,
)
from dlxtool.deaths import message_history, summarize
from dlxtool.record import MessageRecord
from dlxtool.selection import Selection

if TYPE_CHECKING:
    from dlxtool.conventions import Convention, Explanation


@click.command(epilog=SAFETY_HELP + "\n" + SELECTION_HELP)
@queue_argument
@click.option("-n", "--count", "--limit", "count", type=click.IntRange(min=1), default=10, show_default=True,
              help="How many messages from the head (of those the selection selects, if any).")
@click.option("--body", "whole_body", is_flag=True,
              help="Print whole bodies instead of a one-line preview: decoded where the preview decodes them "
                   "(protobuf as its JSON mapping; a body cut short says where, then the fields before the cut).")
@click.option("--raw", is_flag=True, help="With --body (implied): the bytes as they are (text, else hex), not decoded.")
@origin_from_option
@selection_options(limit=False)
@read_options
@common_options
@click.pass_obj
def peek(app: App, /, queue: str, count: int, whole_body: bool, raw: bool, origin_from: str | None,
         selection: Selection, **read: object) -> None:
    """Show the first messages of QUEUE without taking them away.

    The table shows position, message id (the message_id property, else
    fp:HEX, a fingerprint of body and properties; see Selecting messages
    below), routing key, exchange, redelivered, type (or
    content type), the death history in one line, the origin and the
    convention that explained it (x-death, spring, nservicebus, …; see
    `history`), the error text where a convention gives one (shortened; -v:
    whole) and a body preview. A dead letter no convention explains shows
    its own headers, and stderr an example [conventions.NAME] entry for them.
    --format json|jsonl prints message records (see README) that `history
    --from` and `load` read. Counts of messages held unacked by consumers
    (which no peek can see) go to stderr.

    \b
    Examples:
      dlxtool peek orders.dlq
      dlxtool --broker prod-eu peek orders.dlq -n 50 --format jsonl > head.jsonl
      dlxtool peek orders.q --spend-attempts      # quorum queue with a delivery limit
      dlxtool peek audit.stream --offset 30m
      dlxtool peek orders.dlq --type PaymentFailed --error '(?i)timeout' -n 5
    """
    fmt = app.output_format()
    # The conventions explain the table's origin column; message records (json, jsonl) carry no explanation,
    # so they are loaded for a table, or to check --origin-from.
    known = conventions_in_use(app, origin_from) if fmt == "table" or origin_from else ()
    through = through_wait_queues(app, queue)
    selection = selection_for(app, selection, origin_from=origin_from, through=through)
    opts = make_read_options(app, count, selection=selection, past_poison=True, **read)  # type: ignore[arg-type]
    with read_queue(app, queue, opts) as reader:
        records: list[MessageRecord] = []
        tally = conversion_tally(reader)
        for batch in reader.batches():
            tally.add(batch)
            if fmt == "jsonl":
                app.emit_json([r.to_json() for r in batch], "jsonl")
            else:
                records += batch
    if fmt == "json":
        app.emit_json([r.to_json() for r in records], "json")
    elif fmt == "table":
        render_table(app, records, whole_body or raw, empty=nothing_shown(reader), known=known,
                     origin_from=origin_from, through=through, raw=raw)
    # jsonl streams its records (none kept to look at); the table explains them by conventions anyway
    say_conversions(app, tally)
    topology_note(app, queue, records, conventions=fmt == "table")
    finish_read(app, reader)


def render_table(app: App, records: list[MessageRecord], whole_body: bool, empty: str = "(queue is empty)",
                 known: tuple[Convention, ...] = (), origin_from: str | None = None, through: Any = None,
                 raw: bool = False) -> None:
    """The table, or with `whole_body` each body whole: decoded as the table decodes it (`raw`: the bytes)."""
    from dlxtool.conventions import BUILT_IN

    if whole_body:
        if not records:
            app.stdout.write(empty + "\n")
        for r in records:
            what, text = whole_body_of(r, raw)
            what = f": {render.safe_text(what)}" if what else ""
            app.stdout.write(f"--- #{r.position} {render.safe_text(r.routing_key)} ({len(r.body)} bytes){what}\n")
            app.stdout.write(text + "\n")
        app.stdout.flush()
        return
    from dlxtool.cli.explaining import ERROR_WIDTH, Cells, dead_letters, hint_conventions

    errors = tuple(app.config().error_headers)
    explained = [explained_row(r, known or BUILT_IN, origin_from, through, errors) for r in records]
    dead = dead_letters(records, explained)
    rows = [table_row(r, x, dead_letter=dead) for r, x in zip(records, explained, strict=True)]
    headers = ["#", "message id", "routing key", "exchange", "redeliv", "type", "deaths", "origin", "body"]
    cells = Cells(app)
    if any(x.error for x in explained):  # where a convention gives one: the error, shortened (whole with -v)
        headers.insert(8, "error")
        for row, x in zip(rows, explained, strict=True):
            row.insert(8, cells(x.error, ERROR_WIDTH))
    # On a narrow terminal, what says least about a dead letter goes first: its exchange, the redelivered flag, the
    # routing key (the deaths and origin columns say where it came from)
    app.write_table(rows, headers, empty=empty, styles={6: lambda cell: app.style(cell, fg="yellow")},
                    optional=(3, 4, 2))
    cells.note()
    hint_conventions(app, records, explained)


def explained_row(record: MessageRecord, known: tuple[Convention, ...], origin_from: str | None = None,
                  through: Any = None, error_headers: tuple[str, ...] = ()) -> Explanation:
    """The conventions' reading of one message. `through`: the origin of a message that only waited out TTLs,
    followed through its wait queue (as `history` and replay resolve it; without it the wait queue itself
    would show as the origin)."""
    from dlxtool.conventions import Message, explain

    headers = record.headers if isinstance(record.headers, dict) else {}
    history = message_history(headers, through=through)
    return explain(Message(headers, record.body, record.queue, x_death_origin=history.origin,
                           x_death=history.history), known, origin_from=origin_from, error_headers=error_headers)


def table_row(record: MessageRecord, x: Explanation, *, dead_letter: bool = True) -> list[object]:
    from dlxtool.cli.explaining import origin_cell
    from dlxtool.message_ids import message_name

    props = record.properties
    from dlxtool.ops.history import shown_exchange

    return [record.position, message_name(record), record.routing_key, shown_exchange(record.exchange, record.headers),
            "yes" if record.redelivered else "", props.get("type") or props.get("content_type") or "",
            summarize(record.deaths), origin_cell(x, record.headers, dead_letter=dead_letter), body_preview(record)]


def body_preview(record: MessageRecord, width: int = 60) -> str:
    """The decoded protobuf message when the registry identified it (a JSON body shows as its text), else text if
    printable, else hex; a compressed body inflated first (bounded, dlxtool.compression) and marked as such, e.g.
    `[gzip 1.2 KiB→8 KiB]`.

    A guess (defective, ambiguous or of low confidence) is marked as one, with its confidence: the
    same bytes read as a clean, sure match would be a lie (see decoding.match_label)."""
    from dlxtool import compression

    stop = stop_label(record)
    if record.decoded and record.decoded.get("message") is not None and record.decoded.get("type"):
        from dlxtool.decoding import is_weak, match_label

        label = match_label(record.decoded)
        if stop is not None:  # a body cut short: what its bytes before the cut read as, said as such
            label = f"{stop}: {label}"
        if record.decoded.get("decompressed"):
            label = f"{compression.short_label(record.decoded['decompressed'])} {label}"
        text = f"{label} " + render.dumps(record.decoded["message"]).decode()
        # A guess keeps its mark in view: the label is not cut for the message's sake.
        return render.truncate(render.safe_text(text), max(width, len(label) + 12) if is_weak(record.decoded)
                               else width)
    if stop is not None:  # no type explains the bytes before the stop: where it stops, then the bytes
        return f"{stop}: " + render.preview(record.body, max(width - len(stop) - 2, 12))
    shown = compression.view(record.body, record.properties, record.headers, keep=width * 4 + 1)
    if shown.short is None:
        return render.preview(shown.data, width)
    return f"{shown.short} " + render.preview(shown.data, max(width - len(shown.short) - 1, 12))


def stop_label(record: MessageRecord) -> str | None:
    """Where a body that stops being protobuf before its end stops (`cut short at byte 48 of 73`), as `dlxtool decode`
    says it; None for any other body."""
    if not record.decoded:
        return None
    from dlxtool.decoding import stop_label as label

    return label(record.decoded)


def whole_body_of(record: MessageRecord, raw: bool = False) -> tuple[str, str]:
    """`peek --body`: (what the body is, the body) — the decoded message where the table's preview decodes it
    (protobuf: its JSON mapping, indented; a body cut short: where it stops, and the fields before the stop), else
    (and with `raw`) the bytes as body_text shows them."""
    decoded = record.decoded
    if raw or not decoded or decoded.get("message") is None or not decoded.get("type"):
        stop = None if raw else stop_label(record)
        if stop is not None:
            return f"{stop}: {decoded.get('error') if decoded else ''}", body_text(record)
        return "", body_text(record)
    from dlxtool import compression
    from dlxtool.decoding import match_label

    label = match_label(decoded)
    if decoded.get("status") not in (None, "match"):  # cut short or malformed: decode's words, then the fields
        label = f"{decoded.get('error')}; the bytes before it read as {label}"
    if decoded.get("decompressed"):
        label = f"{compression.label(decoded['decompressed'])}; {label}"
    return label, render.safe_text(render.dumps(decoded["message"], pretty=True).decode(), keep_newlines=True)


def body_text(record: MessageRecord) -> str:
    """The whole body (inflated when compressed, a first line saying so), as text, else hex."""
    from dlxtool import compression

    shown = compression.view(record.body, record.properties, record.headers)
    note = f"{shown.note}\n" if shown.note else ""
    try:
        return note + render.safe_text(shown.data.decode("utf-8"), keep_newlines=True)
    except UnicodeDecodeError:
        return note + "hex:" + shown.data.hex()
