"""`dlxtool purge QUEUE`: unclog a queue, after showing what is there and asking."""

from __future__ import annotations

from typing import Any

import click

from dlxtool.cli.app import App
from dlxtool.cli.options import common_options, dry_run_option, queue_argument, selection_options, yes_option
from dlxtool.cli.reading import peek_safety_options
from dlxtool.selection import Selection

HELP = """Remove messages from QUEUE: all of them, or only the ones that match.

\b
Shows ready, unacked and consumer counts first and asks for confirmation
(--yes skips; without a terminal and without --yes it refuses, exit 6).
Messages held unacked by consumers are NOT purged: they return to the
queue if those consumers reject them or disconnect. Streams cannot be
purged.

\b
Plain `purge QUEUE` is one queue.purge (every ready message, at once).
With --backup, a filter, --limit or --move-to, the messages present at
the start are read one by one instead:
  --backup FILE   each removed message's record is appended to FILE and
                  flushed to disk BEFORE the message is acked away; a
                  crash or a dropped connection loses nothing (what is
                  not in the file is still in the queue). Undo with
                  `dlxtool load FILE`.
  filters         only matching messages are removed; the others stay,
                  in their original order (they are republished to the
                  tail unchanged, then acked: memory stays bounded and no
                  quorum delivery attempt is used; they end up behind
                  messages that arrive during the run).
  --move-to Q     matching messages are parked in queue Q unchanged
                  (mandatory, publisher confirms) instead of deleted; one
                  that Q returns or refuses stays in QUEUE (re-kept when
                  the refusal arrives: behind messages kept meanwhile).
Quorum queues: reading uses no delivery attempt (messages are acked, not
given back). --dry-run with filters must peek (read and give back), with
the same safety rules as `dlxtool peek` (--spend-attempts, --allow-reorder).

\b
Exit 5 when selected messages stayed (returned/refused by --move-to's
queue); 3 when the connection was lost (nothing lost; the summary counts
possible duplicates); 130 on Ctrl-C.

\b
Examples:
  dlxtool purge orders.dlq --dry-run
  dlxtool --broker staging purge orders.dlq --yes
  dlxtool purge orders.dlq --backup orders-dlq.jsonl --yes
  dlxtool purge orders --min-deaths 3 --backup poison.jsonl      # unclog: only the poison
  dlxtool purge orders --type shop.v1.Bad --move-to orders.parked --dry-run
"""


@click.command(help=HELP)
@queue_argument
@click.option("--backup", metavar="FILE", type=click.Path(dir_okay=False),
              help="Append each removed message's record to FILE (JSON Lines, flushed before its ack).")
@click.option("--move-to", metavar="QUEUE", help="Move the selected messages to QUEUE instead of deleting them.")
@selection_options
@peek_safety_options
@yes_option
@dry_run_option
@common_options
@click.pass_obj
def purge(app: App, queue: str, backup: str | None, move_to: str | None, selection: Selection,
          max_unacked: int | None, allow_reorder: bool, spend_attempts: bool, yes: bool, dry_run: bool) -> None:
    from dlxtool.ops.purge import PurgeSettings, check_purgeable, queue_state
    from dlxtool.ops.purge import purge as purge_queue

    if backup == "-":
        raise click.BadParameter("the backup must be a file", param_hint="--backup")
    if backup:
        from dlxtool.cli.moving import check_record_file

        check_record_file(app, backup)  # before anything is peeked, asked or read
    settings = PurgeSettings(queue, selection, move_to, backup)
    settings.check()
    profile = app.profile()
    with app.connection(profile) as conn:
        channel = conn.channel()
        state = queue_state(channel, app.management(profile), profile.vhost, queue)
        if state.note:
            app.warn(state.note)
        check_purgeable(state)
        unacked = "unknown" if state.unacked is None else state.unacked
        app.info(f"{queue}: {state.ready} ready, {unacked} unacked, {state.consumers} consumers "
                 f"(broker {profile.name}, vhost {profile.vhost}"
                 + (f", {state.type} queue)" if state.type else ")"))
        app.info(f"note: messages held unacked by consumers ({unacked}) are not purged; they come back "
                 "if those consumers reject them or disconnect")
        if settings.reads_messages:
            _reading_purge(app, conn, settings, state, dry_run, yes,
                           dict(max_unacked=max_unacked, allow_reorder=allow_reorder, spend_attempts=spend_attempts))
            return
        if dry_run:
            _report(app, {**state.to_json(), "purged": 0, "would_purge": state.ready, "dry_run": True})
            return
        app.confirm(f"Purge {state.ready} ready messages from {queue!r} on {profile.name}?", yes=yes)
        purged = purge_queue(channel, queue)
    _report(app, {**state.to_json(), "purged": purged, "dry_run": False})


def _report(app: App, summary: dict) -> None:
    fmt = app.output_format("json")
    if fmt != "table":
        app.emit_json(summary, fmt)
    elif summary["dry_run"]:
        app.info(f"dry run: would purge {summary['would_purge']} messages from {summary['queue']}")
    else:
        app.info(f"purged {summary['purged']} messages from {summary['queue']}")


# -- reading modes ------------------------------------------------------------------------------------


def _reading_purge(app: App, conn: Any, settings: Any, state: Any, dry_run: bool, yes: bool,
                   safety: dict[str, Any]) -> None:
    from dlxtool.errors import NotFoundError
    from dlxtool.ops.replay import queue_exists

    profile = app.profile()
    if settings.move_to and not queue_exists(conn, settings.move_to, profile.timeout):
        raise NotFoundError(f"--move-to queue {settings.move_to!r} not found in vhost {profile.vhost!r}",
                            hint="declare it first (with the arguments your parking queues use)")
    what = _describe(settings)
    app.info(f"mode: {what}")
    if not dry_run and (settings.move_to or settings.selection.filters_anything):
        from dlxtool.ops.purge import check_tail_republish

        # Non-matching (or returned) messages are kept by republishing them to the tail.
        check_tail_republish(state.tail_republish_risk)
    if dry_run:
        _dry_run(app, settings, state, safety)
        return
    app.confirm(f"{what[0].upper()}{what[1:]} — queue {settings.queue!r} on {profile.name}?", yes=yes)
    from dlxtool.cli.moving import exit_for
    from dlxtool.ops.interrupts import summary_before_ctrl_c

    with summary_before_ctrl_c() as ctrl_c:
        ctrl_c.arm()
        result = _run(app, conn, settings)
        summary = {**state.to_json(), **settings.describe(), **result.to_json(), "dry_run": False}
        _render_result(app, settings, result, summary)
        if result.requeued and state.type == "quorum":
            app.warn(f"{result.requeued} message(s) delivered beyond the start snapshot were given back: on a "
                     "quorum queue that used one delivery attempt each")
        exit_for(result, "purge", saved=settings.backup)


def _describe(settings: Any) -> str:
    sel = settings.selection
    which = "every message present now" if not sel.filters_anything else \
        "messages matching " + "; ".join(f"{k}={v}" for k, v in sel.describe().items())
    if sel.limit is not None:
        which += f" (the first {sel.limit})"
    action = f"move {which} to {settings.move_to!r}" if settings.move_to else f"remove {which}"
    if settings.backup:
        action += f", records appended to {settings.backup} before each ack"
    if sel.filters_anything:
        action += "; the others stay in order"
    return action


def _dry_run(app: App, settings: Any, state: Any, safety: dict[str, Any]) -> None:
    summary: dict[str, Any] = {**state.to_json(), **settings.describe(), "dry_run": True}
    if not settings.selection.filters_anything:
        # No per-message decision: the counts say it all, and nothing needs to be peeked.
        n = state.ready if settings.selection.limit is None else min(state.ready, settings.selection.limit)
        summary.update(looked_at=0, would_remove=0 if settings.move_to else n,
                       would_move=n if settings.move_to else 0, would_keep=state.ready - n)
    else:
        summary.update(_peek_plan(app, settings, state, safety))
    fmt = app.output_format("json")
    if fmt != "table":
        app.emit_json(summary, fmt)
        return
    sampled = f" (from the first {summary['looked_at']})" if summary.get("sampled") else ""
    verb, n = ("move", summary["would_move"]) if settings.move_to else ("remove", summary["would_remove"])
    app.info(f"dry run: would {verb} {n} and keep {summary['would_keep']} of {state.ready} messages in "
             f"{settings.queue}{sampled}; nothing was changed")


def _peek_plan(app: App, settings: Any, state: Any, safety: dict[str, Any]) -> dict[str, Any]:
    """Peek (read and give back, with peek's safety rules) and apply the selection to each message."""
    from dlxtool.cli.reading import finish_read, make_read_options, read_queue
    from dlxtool.ops.purge import plan

    bound = safety["max_unacked"] or app.config().dump_unacked_limit
    opts = make_read_options(app, max(1, min(state.ready, bound)), **safety)
    with read_queue(app, settings.queue, opts) as reader:
        result = plan(reader.records(), settings)
    finish_read(app, reader)
    sampled = result.looked_at < state.ready
    if sampled:
        app.warn(f"looked at the first {result.looked_at} of {state.ready} messages only (a peek holds what it "
                 "reads unacked; raise --max-unacked to look further)")
    return {**result.to_json(), "sampled": sampled}


def _run(app: App, conn: Any, settings: Any) -> Any:
    from contextlib import ExitStack

    from dlxtool.cli.moving import progress_bar, record_file
    from dlxtool.ops.engine import TransferOptions
    from dlxtool.ops.purge import run_reading_purge

    with ExitStack() as stack:
        sink = stack.enter_context(record_file(app, settings.backup)) if settings.backup else None
        bar = stack.enter_context(progress_bar(app, "moving" if settings.move_to else "purging"))
        return run_reading_purge(conn, settings, TransferOptions(sink=sink, progress=bar),
                                 timeout=app.profile().timeout)


def _render_result(app: App, settings: Any, result: Any, summary: dict[str, Any]) -> None:
    fmt = app.output_format("json")
    if fmt != "table":
        app.emit_json(summary, fmt)
        return
    from dlxtool.cli.moving import duplicates_note, result_rows
    from dlxtool.render import write_table

    rows = result_rows(result, moved="moved", kept="kept (not selected)",
                       removed=("removed", settings.backup or "(no backup)"))
    write_table(rows, ["outcome", "where / reason", "messages"], app.stdout, empty="nothing matched")
    app.info(f"{result.removed + result.moved_total} of {result.snapshot} messages taken from {result.source} "
             f"in {result.elapsed:.1f}s" + duplicates_note(result))
