"""`dlxtool purge QUEUE`: unclog a queue, after showing what is there and asking."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from dlxtool.cli.app import App
from dlxtool.cli.conversion import backup_conversion_option, check_taking, refuse_header_selection
from dlxtool.cli.options import (
    SELECTION_HELP,
    common_options,
    dry_run_option,
    queue_argument,
    selection_for,
    selection_notes,
    selection_options,
    yes_option,
)
from dlxtool.cli.reading import (
    AUTO,
    auto_protocol,
    finish_read,
    make_read_options,
    peek_safety_options,
    purge_protocol_option,
    read_queue,
)
from dlxtool.errors import RefusedError
from dlxtool.ops.interrupts import summary_before_ctrl_c
from dlxtool.outcome import OK, Outcome
from dlxtool.selection import Selection

if TYPE_CHECKING:
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.ops.purge import Purge, PurgeReport

HELP = """Remove messages from QUEUE: all of them, or only the ones that match.

\b
Shows ready, unacked and consumer counts first and asks for confirmation
(--yes skips; without a terminal and without --yes it refuses, exit 6).
Messages held unacked by consumers are NOT purged: they return to the
queue if those consumers reject them or disconnect. Streams cannot be
purged. With a selection, the question comes after a preview of what it
selects (the first messages, peeked as `peek` reads them). Nothing to
purge (an empty queue, a selection that selects none of it): said,
exit 0, nothing asked.

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
                  Each keeps its routing key (a temporary exchange bound
                  only to Q; --default-exchange: routing key = Q's name),
                  checked against Q's dead-letter exchange (management
                  API): one whose next rejection from Q would be dropped
                  — routed to no queue — stays in QUEUE with the reason;
                  without the management API nothing is moved (exit 6).
                  --allow-dlx-drop moves them anyway.
                  Q full: if Q has a length limit with overflow drop-head
                  (the default) or reject-publish-dlx, only what fits is
                  moved (room = limit - ready - unacked, counted down per
                  message); the rest stays in QUEUE, "full" in the
                  summary. --allow-displace accepts that Q pushes out (or
                  dead-letters copies of) its own messages instead.
  kept messages   QUEUE's limits unread (no management API): filters
                  and --move-to refuse (exit 6), as keeping a message
                  republishes it to QUEUE's tail, which a drop-head
                  queue at its max-length answers by pushing out its
                  head; --allow-displace runs anyway.
Quorum queues: reading uses no delivery attempt (messages are acked, not
given back). --dry-run with filters must peek (read and give back), with
the same safety rules as `dlxtool peek` (--spend-attempts, --allow-reorder).

\b
Messages published over AMQP 1.0 (RabbitMQ 4.x): read over AMQP 0.9.1
they are RabbitMQ's conversion of them (subject, to, several data
sections, milliseconds, symbol and ulong types … lost): --move-to would
publish that, --backup would keep only that of a message it removes.
Before anything is taken the head is read again over AMQP 1.0 and what
would be lost is said per kind. Without --protocol (auto) the purge then
reads over AMQP 1.0 where none of the messages it takes would lose
anything there; otherwise, and with --protocol 0-9-1, it is refused
(exit 6, nothing changed) unless --accept-conversion-loss. 1.0 takes them
whole: each --backup record holds the message as AMQP 1.0 has it
(`amqp10`), written and flushed before the message is settled; --move-to
sends it unchanged, settled after the broker's `accepted`. Over 1.0 what
stays is held and given back in place (at most 2,000, then reading
stops); refused before anything is read: a 3.x broker (exit 2), a quorum
queue on 4.0-4.2, where each give-back spends a delivery attempt (exit 6).

\b
Exit 5 when selected messages stayed (returned/refused by --move-to's
queue, or it was full); 6 when its queue had no room at all; 3 when
the connection was lost (nothing lost; the summary counts possible
duplicates); 130 on Ctrl-C (143 on SIGTERM, 129 on SIGHUP).

\b
Examples:
  dlxtool purge orders.dlq --dry-run
  dlxtool --broker staging purge orders.dlq --yes
  dlxtool purge orders.dlq --backup orders-dlq.jsonl --yes
  dlxtool purge orders --min-deaths 3 --backup poison.jsonl      # unclog: only the poison
  dlxtool purge orders --type shop.v1.Bad --move-to orders.parked --dry-run
  dlxtool purge orders.dlq --backup orders-dlq.jsonl --protocol 1.0 --yes
"""


@click.command(help=HELP, epilog=SELECTION_HELP)
@queue_argument
@click.option("--backup", metavar="FILE", type=click.Path(dir_okay=False),
              help="Append each removed message's record to FILE (JSON Lines, flushed before its ack).")
@click.option("--move-to", metavar="QUEUE", help="Move the selected messages to QUEUE instead of deleting them.")
@click.option("--allow-displace", is_flag=True,
              help="--move-to a full queue with overflow drop-head/reject-publish-dlx: move anyway (it pushes "
                   "out its oldest messages or dead-letters copies). Also: keep messages in QUEUE (filters, "
                   "--move-to) when its limits cannot be read (no management API).")
@click.option("--default-exchange", is_flag=True,
              help="With --move-to: publish on the default exchange with routing key = its queue's name (not the "
                   "message's own key); refused where that queue's dead-letter exchange would not route the name.")
@click.option("--allow-dlx-drop", is_flag=True,
              help="With --move-to: move even where its queue's dead-letter exchange would route a message's "
                   "routing key to no queue (its next rejection there drops it), or where that cannot be checked "
                   "(no management API).")
@backup_conversion_option
@purge_protocol_option
@selection_options
@peek_safety_options
@yes_option
@dry_run_option
@common_options
@click.pass_obj
def purge(app: App, queue: str, backup: str | None, move_to: str | None, allow_displace: bool,
          default_exchange: bool, allow_dlx_drop: bool, accept_conversion_loss: bool, selection: Selection,
          max_unacked: int | None, allow_reorder: bool, spend_attempts: bool, yes: bool,
          dry_run: bool, protocol: str | None = None) -> Outcome:
    from dlxtool.ops.purge import Purge, PurgeSettings

    if backup == "-":
        raise click.BadParameter("the backup must be a file", param_hint="--backup")
    if backup:
        from dlxtool.cli.moving import check_record_file

        check_record_file(app, backup)  # before anything is peeked, asked or read
    if allow_displace and not (move_to or selection.filters_anything):
        raise click.BadParameter("only means something with --move-to or filters", param_hint="--allow-displace")
    for flag, given in (("--default-exchange", default_exchange), ("--allow-dlx-drop", allow_dlx_drop)):
        if given and not move_to:
            raise click.BadParameter("only means something with --move-to", param_hint=flag)
    selection = selection_for(app, selection, decode=True)
    settings = PurgeSettings(queue, selection, move_to, backup, allow_displace, default_exchange, allow_dlx_drop)
    settings.check()
    asked = auto_protocol(app, protocol)
    # auto (dlxtool.ops.protocol_choice): 0.9.1, or 1.0 where the conversion check finds that keeps them whole
    auto = asked is None and settings.reads_messages
    if settings.reads_messages:  # over AMQP 1.0 where chosen (refused, exit 2, where the 1.0 path cannot do it)
        over: WireProtocol = asked or "0-9-1"
    else:  # one queue.purge: nothing is read, nothing converted
        if asked == "1.0":
            app.info("a plain purge reads no message (one queue.purge): --protocol changes nothing")
        over = "0-9-1"
    profile = app.profile()
    # the reads of a dry run and a preview read as peek does: under auto, past a message 0.9.1 cannot be given —
    # unless the selection reads headers, which a read over 1.0 does not get of a 0.9.1 message (the preview selects
    # from what the read shows)
    safety: dict[str, Any] = dict(max_unacked=max_unacked, allow_reorder=allow_reorder,
                                  spend_attempts=spend_attempts, protocol=AUTO if auto else over,
                                  past_poison=auto and not selection.sees_headers)
    from dlxtool.cli.moving import run_moving

    with summary_before_ctrl_c() as ctrl_c, app.connection(profile) as conn:
        session = app.session(profile, conn)
        purging = Purge(session, settings, app, dry_run=dry_run, protocol=over)
        # auto, a selection that reads headers, a queue this machine remembers a poison message in: nothing is read
        unread = auto and refuse_header_selection(app, purging, session, dry_run=dry_run)
        if dry_run:
            n = 0 if unread else purging.peek_count(max_unacked or app.config().dump_unacked_limit)
            if n:  # filters decide message by message: look at the first ones, with peek's safety rules
                with _peeked(app, queue, n, safety) as records:
                    report = purging.plan(records)
            else:
                report = purging.plan()
            if report.state.ready and not unread:
                check_taking(app, purging, session, safety, accept_conversion_loss, dry_run=True, what="purge",
                             auto=auto)
            _render(app, report, selection)
            return report.outcome()  # a dry run changes nothing: not journaled
        nothing = purging.nothing_to_do
        if nothing is None and not yes and selection.filters_anything:
            nothing = _preview(app, purging, queue, safety, max_unacked or app.config().dump_unacked_limit)
        if nothing is not None:
            return _nothing_to_do(app, purging, nothing)
        check_taking(app, purging, session, safety, accept_conversion_loss, dry_run=False, what="purge", auto=auto)
        app.confirm(purging.question, yes=yes)
        return run_moving(app, ctrl_c, command="purge", profile=profile, queues=[queue, move_to or ""],
                          label="moving" if move_to else "purging", save_file=backup,
                          run=lambda sink, bar: purging.run(sink, bar, max_bytes=app.max_bytes),
                          render=lambda report: _render(app, report, selection),
                          counts=lambda report: {} if report.result is not None else {"purged": report.purged})


def _preview(app: App, purging: Purge, queue: str, safety: dict[str, Any], bound: int) -> str | None:
    """Before the question: what the selection selects of the first messages (peeked with peek's rules; where they
    refuse, no preview), and why the run would change nothing when it selects none of the whole queue."""
    try:
        with _peeked(app, queue, purging.peek_count(bound), safety) as records:
            preview, nothing = purging.preview(records)
    except RefusedError as exc:
        app.warn(f"no preview of what the selection selects: {exc.message}")
        return None
    of = f"the first {preview.looked_at}" if preview.looked_at < purging.out.state.ready else "all"
    app.info(f"preview: the selection selects {preview.looked_at - preview.actions['keep']} of {of} "
             f"{preview.looked_at} messages")
    return nothing


def _nothing_to_do(app: App, purging: Purge, why: str) -> Outcome:
    """Nothing would change: said, exit 0, nothing asked."""
    app.info(f"nothing to purge: {why}; nothing was changed")
    if app.output_format() != "table":
        app.emit_json({**purging.out.state.to_json(), "nothing_to_do": why, "dry_run": False})
    return OK


@contextmanager
def _peeked(app: App, queue: str, count: int, safety: dict[str, Any]) -> Iterator[Any]:
    """Up to `count` records of `queue`, read with peek's safety rules; what the read did is said after."""
    with read_queue(app, queue, make_read_options(app, count, **safety)) as reader:
        yield reader.records()
    finish_read(app, reader)


def _render(app: App, outcome: PurgeReport, selection: Selection) -> None:
    _summary(app, outcome)
    selection_notes(app, selection)


def _summary(app: App, outcome: PurgeReport) -> None:
    summary = outcome.to_json()
    fmt = app.output_format()
    if fmt != "table":
        app.emit_json(summary, fmt)
        if outcome.dry_run and summary.get("message_ids") is None:
            _no_ids(app, summary)
        return
    settings, state = outcome.settings, outcome.state
    if not outcome.reads_messages:
        if outcome.dry_run:
            app.info(f"dry run: would purge {summary['would_purge']} messages from {state.name}")
            _dry_run_ids(app, {**summary, "message_ids": None}, "purge", state.name)
        else:
            app.info(f"purged {summary['purged']} messages from {state.name}")
            _depths(app, outcome)
        return
    if outcome.dry_run:
        sampled = f" (from the first {summary['looked_at']})" if summary.get("sampled") else ""
        verb, n = ("move", summary["would_move"]) if settings.move_to else ("remove", summary["would_remove"])
        full = (f"; {summary['would_stay_full']} would stay: {settings.move_to} is full"
                if summary.get("would_stay_full") else "")
        stay = "".join(f"; {n} would stay: {why}" for why, n in sorted(summary.get("stay", {}).items()))
        route = f" (route: {outcome.route})" if outcome.route and not stay else ""
        app.info(f"dry run: would {verb} {n}{route} and keep {summary['would_keep']} of {state.ready} messages in "
                 f"{settings.queue}{sampled}{full}{stay}; nothing was changed")
        _dry_run_ids(app, summary, verb, settings.move_to or settings.queue)
        return
    from dlxtool.cli.explaining import Cells
    from dlxtool.cli.moving import duplicates_note, result_rows
    result = outcome.result
    assert result is not None  # a reading purge that ran
    cells = Cells(app)
    rows = result_rows(result, moved="moved", kept="kept (not selected)",
                       removed=("removed", settings.backup or "(no backup)"), short=cells)
    headers = ["outcome", "where / reason", "messages"]
    if settings.move_to:
        headers.append("route")
        for row in rows:
            row.append((outcome.route or "") if row[0] == "moved" else "")
    app.write_table(rows, headers, empty="nothing matched")
    cells.note()
    app.info(f"{result.removed + result.moved_total} of {result.snapshot} messages taken from {result.source} "
             f"in {app.elapsed():.1f}s" + duplicates_note(result))
    _depths(app, outcome)


def _dry_run_ids(app: App, summary: dict[str, Any], verb: str, where: str) -> None:
    """The names of the messages the dry run would remove or move (the first ones; JSON: all), or why there are
    none: without a selection nothing is read (every message there is goes)."""
    from dlxtool.cli.moving import write_id_list

    names = summary.get("message_ids")
    if names is None:
        _no_ids(app, summary)
        return
    write_id_list(app, verb, [(where if verb == "move" else "", name) for name in names],
                  sampled=bool(summary.get("sampled")))


def _no_ids(app: App, summary: dict[str, Any]) -> None:
    """Why a dry run names no message: nothing was read."""
    if any(summary.get(f"would_{verb}") for verb in ("purge", "remove", "move")):
        app.info(f"(no message ids: without a selection nothing is read before the run, which takes the messages "
                 f"from the head as they come; `dlxtool peek {summary['queue']}` shows them)")


def _depths(app: App, outcome: Any) -> None:
    """The touched queues' depths after the run, as the broker counts them now (the line above is the run's)."""
    from dlxtool.ops.outcomes import depths_text

    line = depths_text(outcome.depths or {})
    if line:
        app.info(line)
