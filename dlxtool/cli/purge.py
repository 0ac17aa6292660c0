"""`dlxtool purge QUEUE`: unclog a queue, after showing what is there and asking."""

from __future__ import annotations

import click

from dlxtool.cli.app import App
from dlxtool.cli.options import common_options, dry_run_option, queue_argument, yes_option


@click.command()
@queue_argument
@yes_option
@dry_run_option
@common_options
@click.pass_obj
def purge(app: App, queue: str, yes: bool, dry_run: bool) -> None:
    """Remove every ready message from QUEUE (queue.purge).

    Shows ready, unacked and consumer counts first and asks for confirmation
    (--yes skips; without a terminal and without --yes it refuses, exit 6).
    Messages held unacked by consumers are NOT purged: they return to the
    queue if those consumers reject them or disconnect. Streams cannot be
    purged.

    \b
    Examples:
      dlxtool purge orders.dlq --dry-run
      dlxtool --broker staging purge orders.dlq --yes
    """
    from dlxtool.broker.management import ManagementClient
    from dlxtool.ops.purge import check_purgeable, queue_state
    from dlxtool.ops.purge import purge as purge_queue

    profile = app.profile()
    with app.connection(profile) as conn:
        channel = conn.channel()
        state = queue_state(channel, ManagementClient.for_profile(profile), profile.vhost, queue)
        if state.note:
            app.warn(state.note)
        check_purgeable(state)
        unacked = "unknown" if state.unacked is None else state.unacked
        app.info(f"{queue}: {state.ready} ready, {unacked} unacked, {state.consumers} consumers "
                 f"(broker {profile.name}, vhost {profile.vhost})")
        app.info(f"note: messages held unacked by consumers ({unacked}) are not purged; they come back "
                 "if those consumers reject them or disconnect")
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
