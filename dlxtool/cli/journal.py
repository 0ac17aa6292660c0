"""`dlxtool journal`: who replayed, purged, loaded or drained what, when, where, and where the backup is."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import click

from dlxtool.cli.app import App
from dlxtool.cli.options import format_option
from dlxtool.errors import UsageError


@click.command()
@click.option("--since", metavar="AGE|DATE", help="Runs started within AGE (30m, 2h, 7d) or since DATE (ISO 8601).")
@click.option("--broker", "broker_filter", metavar="NAME", help="Runs on this broker profile only.")
@click.option("--queue", "queue_filter", metavar="QUEUE",
              help="Runs that touched this queue only: read it, or put messages in it (a replay's origins).")
@click.option("--command", "command_filter", metavar="COMMAND",
              help="replay (with replay --edit), purge, load, dump (dump --remove) only; or 'replay --edit' alone.")
@format_option
@click.pass_obj
def journal(app: App, since: str | None, broker_filter: str | None, queue_filter: str | None,
            command_filter: str | None) -> None:
    """List the journal of runs that changed messages: replay, purge, load, dump --remove.

    Each run is recorded as it starts (before anything changes) and as it ends,
    in $XDG_STATE_HOME/dlxtool/journal.jsonl (~/.local/state/dlxtool; 0600,
    rotated at 10 MB): when, the OS user and the broker user, broker, vhost and
    queues, the command line (secrets masked), counts by outcome, the files it
    wrote (backups, --save, --failed) and the message ids. A run with a start
    and no end was killed (or still runs). --no-journal, or `journal = false`
    in the config file, turns it off.

    \b
    Examples:
      dlxtool journal --since 2h
      dlxtool journal --queue orders.dlq --format json
    """
    from dlxtool.journal import journal_path, read_runs

    cutoff = _since(since) if since else None
    runs = []
    for run in read_runs(journal_path(app.env)):
        start = run.start
        if cutoff is not None and _parsed(run.at) < cutoff:
            continue
        if broker_filter and start.get("broker") != broker_filter:
            continue
        if queue_filter and queue_filter not in run.queues:
            continue
        if command_filter and not _is_command(str(start.get("command", "")), command_filter):
            continue
        runs.append(run)
    fmt = app.output_format()
    if fmt != "table":
        app.emit_json([r.to_json() for r in runs], fmt)
        return
    rows = []
    for run in runs:
        out = run.to_json()
        counts = ", ".join(f"{k} {v}" for k, v in (out.get("counts") or {}).items() if v) if run.end else ""
        rows.append([run.at, out.get("command", ""), out.get("os_user", ""), out.get("broker", ""),
                     ", ".join(run.queues), out.get("status", ""), counts, ", ".join(out.get("files", []))])
    app.write_table(rows, ["started", "command", "who", "broker", "queues", "status", "counts", "files"],
                    empty="no run recorded")


def _is_command(recorded: str, wanted: str) -> bool:
    """`wanted` names the recorded command, or the command its recorded variant ("replay --edit") is of."""
    wanted = " ".join(wanted.split())
    return recorded == wanted or recorded.split(" ")[0] == wanted


def _since(text: str) -> datetime:
    from dlxtool.selection import parse_age

    age = parse_age(text)
    if age is not None:
        return datetime.fromtimestamp(time.time() - age, UTC)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r}: neither an age (30m, 2h, 7d) nor a date (2026-11-26T03:00)") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _parsed(at: str) -> datetime:
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return when if when.tzinfo else when.replace(tzinfo=UTC)
