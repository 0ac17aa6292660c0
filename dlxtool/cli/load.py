"""`dlxtool load FILE`: publish message records back (dump, purge --backup, replay --save files)."""

from __future__ import annotations

import io
from contextlib import ExitStack
from typing import IO, Any

import click

from dlxtool.cli.app import App
from dlxtool.cli.options import common_options, dry_run_option
from dlxtool.errors import ConnectError, Interrupted, PartialError, UsageError

HELP = """Publish the message records in FILE (`-` = stdin) to a broker.

\b
Each record goes back to the queue it came from (its `queue` field), or
to --to QUEUE, mandatory and with publisher confirms. It keeps its routing
key (with --reset-history: the original one, as replay does) and reaches
only that queue, through a temporary fanout exchange bound only to it
(deleted at the end). --default-exchange publishes on the default exchange
instead (routing key = queue name): a queue whose dead-letter exchange
would not route that key gets none of its records (failed, with the
reason). Body, properties and headers are published as recorded. Records
are published in file order. --broker picks the broker: a dump from
prod-eu can be loaded into staging.

\b
FILE is checked completely before anything is published: a bad line stops
the load and names FILE:LINE. A record cut short (a backup interrupted
mid-write, e.g. by a full disk) is skipped and named (FILE:LINE): its
message was never acked away, it is still in its queue. The summary counts
them (skipped_torn) and the exit status is 5 unless --allow-torn.

\b
--reset-history applies replay's count reset (x-death, x-first/last-death-*,
x-delivery-count, retry headers, + --reset-header and the profile's
reset_headers) and adds the `dlxtool-replay` provenance header.

\b
Exit 5 if a record was cut short (without --allow-torn) or if any record
was not confirmed (queue missing → returned, queue
full → nacked): the summary says which, and --failed FILE2 collects those
records to load again. Exit 3 if the connection was lost (records that
had no answer may have been published: counted as possible duplicates);
130 on Ctrl-C.

\b
Examples:
  dlxtool load orders-dlq.jsonl --dry-run
  dlxtool load orders-dlq.jsonl
  dlxtool --broker staging load orders-dlq.jsonl --to orders.debug
  dlxtool load poison.jsonl --to orders --reset-history --failed retry.jsonl
  dlxtool dump orders.dlq | dlxtool --broker prod-us load - --to orders.dlq
"""


@click.command(help=HELP)
@click.argument("file", metavar="FILE")
@click.option("--to", "to_queue", metavar="QUEUE", help="Publish every record to QUEUE (default: its own queue).")
@click.option("--reset-history", is_flag=True, help="Remove the death history and retry counters (replay's reset).")
@click.option("--reset-header", "reset_headers", multiple=True, metavar="NAME",
              help="With --reset-history: also remove this application retry header (repeatable).")
@click.option("--default-exchange", is_flag=True,
              help="Publish on the default exchange with routing key = queue name (not the record's key); "
                   "queues whose dead-letter exchange would not route it get none of their records.")
@click.option("--failed", "failed_file", metavar="FILE2", type=click.Path(dir_okay=False),
              help="Append the records that were not confirmed to FILE2 (to load again later).")
@click.option("--window", type=click.IntRange(min=1, max=65535), default=1000, show_default=True,
              help="Publishes awaiting a confirm at once.")
@click.option("--allow-torn", is_flag=True,
              help="Exit 0 when records cut short (a writer stopped mid-record) were skipped.")
@dry_run_option
@common_options
@click.pass_obj
def load(app: App, file: str, to_queue: str | None, reset_history: bool, reset_headers: tuple[str, ...],
         default_exchange: bool, failed_file: str | None, window: int, allow_torn: bool, dry_run: bool) -> None:
    from dlxtool.ops.load import LoadSettings, scan

    if reset_headers and not reset_history:
        raise UsageError("--reset-header needs --reset-history")
    if failed_file:
        from dlxtool.cli.moving import check_record_file

        check_record_file(app, failed_file)  # before anything is published
    open_stream, name = _opener(app, file)
    profile = app.profile()
    settings = LoadSettings(name=name, to_queue=to_queue, reset_history=reset_history,
                            reset_names=tuple(dict.fromkeys((*profile.reset_headers, *reset_headers))),
                            window=window, default_exchange=default_exchange)
    plan = scan(open_stream, settings)
    for where in plan.torn:
        app.warn(f"{where}: a record cut short (a writer stopped mid-record): skipped; its message was not "
                 "acked away by the writer, it is still in its queue")
    from dlxtool.ops.interrupts import summary_before_ctrl_c

    with summary_before_ctrl_c() as ctrl_c:
        with app.connection(profile) as conn:
            exists = _check_targets(app, conn, plan, profile)
            if dry_run:
                _render_plan(app, plan, exists, name)
                return
            ctrl_c.arm()
            result = _run(app, conn, open_stream, settings, plan.records, failed_file, profile)
        _render_result(app, result)
        _exit_for(result, failed_file, allow_torn)


def _opener(app: App, file: str) -> tuple[Any, str]:
    """A function that opens the records (called twice: check, then publish) and the name to report."""
    if file == "-":
        stdin = app.stdin
        data = getattr(stdin, "buffer", stdin).read()  # stdin can be read once: keep it for both passes
        if isinstance(data, str):
            data = data.encode()
        return (lambda: io.BytesIO(data)), "<stdin>"
    from dlxtool.ops.record_files import open_record_file

    open_record_file(file).close()  # a missing file or a directory: a clear error before anything else

    def open_file() -> IO[bytes]:
        return open_record_file(file)

    return open_file, file


def _check_targets(app: App, conn: Any, plan: Any, profile: Any) -> dict[str, bool]:
    from dlxtool.ops.replay import queue_exists

    exists = {q: queue_exists(conn, q, profile.timeout) for q in sorted(plan.targets)}
    for queue, ok in exists.items():
        if not ok:
            app.warn(f"queue {queue!r} does not exist in vhost {profile.vhost!r} on {profile.name}: its "
                     f"{plan.targets[queue]} record(s) will not be published and count as failed")
    return exists


def _render_plan(app: App, plan: Any, exists: dict[str, bool], name: str) -> None:
    fmt = app.output_format("json")
    if fmt != "table":
        app.emit_json({**plan.to_json(), "file": name, "exists": exists, "dry_run": True}, fmt)
        return
    from dlxtool.render import write_table

    rows = [[q, n, "yes" if exists[q] else "NO"] for q, n in sorted(plan.targets.items())]
    write_table(rows, ["queue", "records", "exists"], app.stdout, empty="no records")
    app.info(f"dry run: would publish {plan.records} records from {name}; nothing was published")


def _run(app: App, conn: Any, open_stream: Any, settings: Any, total: int, failed_file: str | None,
         profile: Any) -> Any:
    from dlxtool.cli.moving import progress_bar, record_file
    from dlxtool.ops.load import load as run_load

    with ExitStack() as stack:
        failed = stack.enter_context(record_file(app, failed_file)) if failed_file else None
        bar = stack.enter_context(progress_bar(app, "loading"))
        return run_load(conn, open_stream, settings, total=total, progress=bar, failed=failed,
                        timeout=profile.timeout, management=_management(app, profile) if settings.default_exchange
                        else None, vhost=profile.vhost)


def _management(app: App, profile: Any) -> Any:
    """The management API client when it answers (it checks the default-exchange route), else None."""
    from dlxtool.errors import DlxtoolError

    try:
        mgmt = app.management(profile)
        mgmt.overview(columns=["rabbitmq_version"])
    except DlxtoolError as exc:
        app.warn(f"cannot reach the management API ({exc.message}): --default-exchange routes cannot be checked, "
                 "so no record is published that way")
        return None
    return mgmt


def _render_result(app: App, result: Any) -> None:
    fmt = app.output_format("json")
    if fmt != "table":
        app.emit_json(result.to_json(), fmt)
        return
    from dlxtool.render import write_table

    rows = [["published", q, n] for q, n in sorted(result.published.items())]
    rows += [["FAILED", why, n] for why, n in sorted(result.failed.items())]
    if result.not_sent:
        rows.append(["not sent", "", result.not_sent])
    write_table(rows, ["outcome", "queue / reason", "records"], app.stdout, empty="no records")
    app.info(f"{result.published_total} of {result.records} records published from {result.file} "
             f"in {result.elapsed:.1f}s")


def _exit_for(result: Any, failed_file: str | None, allow_torn: bool) -> None:
    again = (f"; they are in {failed_file}: `dlxtool load {failed_file}` loads them again" if failed_file
             else "; --failed FILE2 would collect them to load again")
    dups = (f"; {result.lost} record(s) had no answer and may have been published (loading them again may "
            "duplicate them)" if result.lost else "")
    if result.error:
        raise ConnectError(f"load stopped: {result.error}; {result.published_total} of {result.records} records "
                           f"published, {result.not_sent} not sent" + again + dups)
    if result.interrupted:
        raise Interrupted(f"load interrupted: {result.published_total} of {result.records} records published, "
                          f"{result.not_sent} not sent" + again + dups)
    if result.failed_total:
        raise PartialError(f"{result.failed_total} of {result.records} record(s) not loaded: "
                           + ", ".join(f"{why} ({n})" for why, n in sorted(result.failed.items())) + again + dups)
    if result.skipped_torn and not allow_torn:
        raise PartialError(f"{result.skipped_torn} record(s) in {result.file} were cut short and skipped (named "
                           "above); their messages were never acked away by the writer",
                           hint="--allow-torn accepts that (exit 0)")
