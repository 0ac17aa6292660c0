"""`dlxtool move SRC DST`: parse → policy (dlxtool.ops.move) → run (dlxtool.ops.pipeline) → render."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from dlxtool.cli.app import App
from dlxtool.cli.conversion import amqp10_path, check_wanted, conversion_option, say_conversion
from dlxtool.cli.explaining import Cells
from dlxtool.cli.moving import check_record_file, duplicates_note, result_rows, run_moving
from dlxtool.cli.options import (
    SELECTION_HELP,
    common_options,
    complete_broker,
    complete_queue,
    dry_run_option,
    flow_options,
    max_bytes_option,
    selection_for,
    selection_notes,
    selection_options,
    yes_option,
)
from dlxtool.cli.reading import auto_protocol, protocol_option
from dlxtool.ops.conversion_check import check_conversion
from dlxtool.ops.interrupts import summary_before_ctrl_c
from dlxtool.outcome import Outcome
from dlxtool.selection import Selection

if TYPE_CHECKING:
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.ops.conversion_check import ConversionCheck
    from dlxtool.ops.pipeline import MoveRun
    from dlxtool.ops.record_files import Sink
    from dlxtool.ops.transfer_settings import TransferOptions
    from dlxtool.record import MessageRecord

HELP = """Move messages from queue SRC to queue DST, unchanged: all of them, or the ones that match.

\b
On one broker, or from this one to --target-broker's. Each message
keeps its body, properties, headers and routing key: it is published
through a temporary fanout exchange bound only to DST (deleted at the
end), or with --default-exchange on the default exchange (routing key =
DST's name). Publishes are mandatory, with publisher confirms; each SRC
copy is acked only after a clean confirm (nothing lost; a lost
connection may leave duplicates, which the summary counts).

\b
What stays in SRC, in order: the messages the selection does not select,
those DST's dead-letter exchange would drop at their next failure (the
routing key checked through the management API; --allow-dlx-drop moves
them anyway), those that do not fit in DST (a length limit with overflow
drop-head would push out its head; --allow-displace moves them anyway).
Until a first message moved, what stays in a classic SRC is held and
given back in place at the end: a run that moves nothing changes nothing.

\b
Messages published over AMQP 1.0 (RabbitMQ 4.x) move over AMQP 0.9.1
as RabbitMQ's conversion gives them (subject, to, several data sections,
milliseconds, symbol and ulong types … lost): the head of SRC is read
over AMQP 1.0 first (as peek --protocol 1.0 reads it) and what would be
lost is said per kind. --protocol auto (the default) then moves over
AMQP 1.0, which sends them whole, where none of the messages it takes
would lose anything over 1.0; otherwise, and with --protocol 0-9-1, the
move is refused (exit 6) unless --accept-conversion-loss.

\b
Refused before anything is read (nothing changed): SRC a stream, DST
missing (exit 4), a memory or disk alarm (exit 7), a user that may not
publish that way (exit 6). Exit 5 when messages stayed for a reason other
than the selection, 6 when nothing moved because of where it was to go,
3 when the connection was lost, 130 on Ctrl-C (143 SIGTERM, 129 SIGHUP).

\b
Examples:
  dlxtool move orders.parked orders --dry-run
  dlxtool move orders.dlq orders.parked --type PaymentFailed --yes
  dlxtool move orders.dlq orders.dlq --target-broker prod-eu-new --yes
"""


@click.command(help=HELP, epilog=SELECTION_HELP)
@click.argument("source", metavar="SRC", shell_complete=complete_queue)
@click.argument("destination", metavar="DST", shell_complete=complete_queue)
@click.option("--target-broker", metavar="NAME", shell_complete=complete_broker,
              help="DST is on this broker profile (default: the same broker as SRC).")
@click.option("--default-exchange", is_flag=True,
              help="Publish on the default exchange with routing key = DST's name (consumers see DST's name, not "
                   "the message's own key).")
@click.option("--allow-dlx-drop", is_flag=True,
              help="Move even where DST's dead-letter exchange would route a message's routing key to no queue, or "
                   "where that cannot be checked (no management API).")
@click.option("--allow-displace", is_flag=True,
              help="Move into a full DST with overflow drop-head/reject-publish-dlx anyway, or into a DST whose "
                   "limits cannot be read.")
@click.option("--save", "save_file", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Append each moved message's record (JSON Lines, flushed) before its SRC ack.")
@conversion_option
@protocol_option("Move")
@flow_options("SRC")
@max_bytes_option
@selection_options
@dry_run_option
@yes_option
@common_options
@click.pass_obj
def move(app: App, source: str, destination: str, target_broker: str | None, default_exchange: bool,
         allow_dlx_drop: bool, allow_displace: bool, save_file: str | None, accept_conversion_loss: bool,
         rate: float | None, prefetch: int, window: int, selection: Selection, dry_run: bool, yes: bool,
         protocol: str | None = None) -> Outcome | None:
    from dlxtool.ops import move as ops
    from dlxtool.ops.pipeline_amqp10 import run_move_over
    from dlxtool.ops.protocol_choice import judge
    from dlxtool.ops.session import MoveSession
    from dlxtool.ops.transfer_settings import TransferOptions

    asked = auto_protocol(app, protocol)
    auto = asked is None  # dlxtool.ops.protocol_choice chooses after the conversion check
    over: WireProtocol = asked or "0-9-1"
    selection = selection_for(app, selection, decode=True)
    if save_file:
        check_record_file(app, save_file)
    settings = ops.MoveSettings(source, destination, selection, default_exchange=default_exchange,
                                allow_dlx_drop=allow_dlx_drop, allow_displace=allow_displace)
    profile = app.profile()
    target_profile = app.profile(target_broker) if target_broker else None
    with summary_before_ctrl_c() as ctrl_c, ExitStack() as stack:
        conn = stack.enter_context(app.connection(profile))
        target_conn = stack.enter_context(app.connection(target_profile)) if target_profile else None
        session = MoveSession(app.session(profile, conn),
                              app.session(target_profile, target_conn) if target_profile else None,
                              protocol=over)
        policy, prepared = ops.prepare(session, settings, app)
        if over == "1.0":  # what the 1.0 path cannot honour, refused before the question
            from dlxtool.ops.pipeline_amqp10 import check_amqp10

            check_amqp10(session, source, prepared.info)
        which = "every message" if not selection.filters_anything else \
            f"the messages that match ({selection.describe_text()})"
        where = f" on {target_profile.name}" if target_profile else ""
        question = f"Move {which} of {source!r} to {destination!r}{where}?"
        # what RabbitMQ's conversion to 0.9.1 would lose: said, refused by default (exit 6); a dry run shows it
        if check_wanted(accept_conversion_loss, plan=dry_run, auto=auto):
            from dlxtool.ops.peek import ReadOptions

            read = ReadOptions(max_unacked=app.config().dump_unacked_limit, max_bytes=app.max_bytes)

            def judged(over: WireProtocol, read_091: list[MessageRecord] | None = None,
                       read_10: list[MessageRecord] | None = None) -> ConversionCheck | None:
                return check_conversion(session.source, source, read, include=selection.matches, report=app,
                                        accepted=accept_conversion_loss, amqp10_path=amqp10_path(), over=over,
                                        limit=selection.limit, keep_read=auto, read_091=read_091, read_10=read_10)

            check = judge(session, source, prepared.info, judged, auto=auto)
            if check is not None and app.output_format() != "table" and dry_run:
                app.emit_json({"conversion_losses": check.to_json()})
            say_conversion(app, check, dry_run=dry_run, what="move")
        if dry_run:
            app.info(f"dry run: would {question[0].lower()}{question[1:-1]}; nothing was changed")
            return None
        app.confirm(question, yes=yes)
        options = TransferOptions(prefetch=prefetch, window=window, rate=rate, max_bytes=app.max_bytes)

        def render(done: MoveRun) -> None:
            _render(app, done)
            selection_notes(app, selection)

        moved: Outcome = run_moving(app, ctrl_c, command="move", profile=profile, queues=[source, destination],
                          label="moving", save_file=save_file, render=render,
                          run=lambda sink, bar: run_move_over(session, policy, _with(options, sink, bar), prepared))
        return moved


def _with(options: TransferOptions, sink: Sink | None, progress: Any) -> TransferOptions:
    return replace(options, sink=sink, progress=progress)


def _render(app: App, done: MoveRun) -> None:
    result = done.result
    fmt = app.output_format()
    if fmt != "table":
        app.emit_json({**result.to_json(), "routes": done.routes, "depths_after": done.depths}, fmt)
        return
    cells = Cells(app)
    rows = result_rows(result, moved="moved", kept="kept (not selected)", short=cells)
    app.write_table(rows, ["outcome", "queue / reason", "messages"], empty="nothing to move")
    cells.note()
    app.info(f"{result.moved_total} of {result.snapshot} moved from {result.source} in {app.elapsed():.1f}s"
             + duplicates_note(result))
    from dlxtool.ops.outcomes import depths_text

    depths = depths_text(done.depths)
    if depths:
        app.info(depths)
