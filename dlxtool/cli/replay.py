"""`dlxtool replay DLQ`: dead letters back to the queues they failed in, counts reset, nothing lost."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import click

from dlxtool.cli.app import App
from dlxtool.cli.moving import (
    check_record_file,
    duplicates_note,
    exit_for,
    progress_bar,
    record_file,
    result_rows,
)
from dlxtool.cli.options import (
    common_options,
    complete_broker,
    complete_queue,
    dry_run_option,
    selection_notes,
    selection_options,
    yes_option,
)
from dlxtool.errors import RefusedError
from dlxtool.ops.interrupts import summary_before_ctrl_c
from dlxtool.selection import Selection

HELP = """Send dead letters from DLQ back to the queue each one failed in.

\b
The origin is read from the death history (the queue the message was
rejected / hit its delivery limit / overflowed in — not the wait queue of
a TTL retry loop, not the routing key). Each message is published on the
default exchange with routing key = origin, mandatory, with publisher
confirms; the DLQ copy is acked only after a clean confirm. Unroutable
(origin deleted) or refused (origin full) messages stay in the DLQ and
are reported. The run covers the messages present at the start only.

\b
Full origins: an origin with a length limit (x-max-length[-bytes],
argument or policy) and overflow drop-head (the default) or
reject-publish-dlx would push out its own oldest messages (or dead-letter
copies) to make room. Replay moves only what fits (room = limit - ready -
unacked, counted down per message, shown in the plan); the rest stays in
the DLQ: "origin full (drop-head would push out its head)". Exit 5, or 6
when nothing fit. --allow-displace replays anyway.

\b
Count reset (default): x-death, x-first-death-*, x-last-death-*, CC, BCC,
x-delivery-count and the retry headers x-retry-count, x-delivery-attempts
(+ --reset-header, + the profile's reset_headers) are removed; a header
`dlxtool-replay` records from, at, count, original exchange/routing key
and the removed deaths. --keep-history keeps the history headers.

\b
Messages that stay (not selected, no origin, --max-replays, returned)
are republished unchanged to the tail of the DLQ and then acked: memory
stays bounded and their relative order is kept, unlike holding them all
unacked (unbounded, and a delivery attempt per message on quorum
queues). They end up behind dead letters that arrive during the run.

\b
Without --yes, replay first shows the plan (from the first messages,
given back in place and in order, also on quorum queues, where each
read counts a delivery attempt: refused with a delivery limit) and asks. Exit 5 when messages were left for a
reason other than the selection; 3 when the connection was lost (nothing
is lost; the summary counts possible duplicates); 130 on Ctrl-C (143 on SIGTERM, 129 on SIGHUP).

\b
Examples:
  dlxtool replay orders.dlq --dry-run
  dlxtool replay orders.dlq --origin orders --older-than 10m --yes
  dlxtool --broker prod-eu replay orders.dlq --target-broker prod-eu-new --save replayed.jsonl
"""


@click.command(help=HELP)
@click.argument("dlq", shell_complete=complete_queue)
@click.option("--to", "to_queue", metavar="QUEUE", shell_complete=complete_queue,
              help="Send everything to QUEUE instead of each origin.")
@click.option("--keep-history", is_flag=True, help="Keep x-death and retry headers (no count reset).")
@click.option("--reset-header", "reset_headers", multiple=True, metavar="NAME",
              help="Also remove this application retry header (repeatable), e.g. count.")
@click.option("--max-replays", type=click.IntRange(min=1), metavar="N",
              help="Leave messages already replayed N times in the DLQ (loop guard). A copy a kill -9 left "
                   "and its source count as one message: one of them is replayed (README: Stop signals).")
@click.option("--keep-routing-key", is_flag=True,
              help="Publish through a temporary fanout exchange bound only to the origin, so the message "
                   "keeps its original routing key without reaching other queues.")
@click.option("--allow-displace", is_flag=True,
              help="Replay into a full origin with overflow drop-head/reject-publish-dlx anyway (it pushes out its "
                   "oldest messages or dead-letters copies).")
@click.option("--target-broker", metavar="NAME", shell_complete=complete_broker,
              help="Publish to the origin queues on this broker profile.")
@click.option("--save", "save_file", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Append each replayed message's record (JSON Lines, flushed) before its DLQ ack.")
@click.option("--rate", type=click.FloatRange(min=0.1), metavar="N", help="At most N messages per second.")
@click.option("--prefetch", type=click.IntRange(min=1, max=65535), default=2000, show_default=True,
              help="Unacked DLQ messages held at once (bounds memory).")
@click.option("--window", type=click.IntRange(min=1, max=65535), default=1000, show_default=True,
              help="Publishes awaiting a confirm at once.")
@selection_options
@dry_run_option
@yes_option
@common_options
@click.pass_obj
def replay(app: App, dlq: str, to_queue: str | None, keep_history: bool, reset_headers: tuple[str, ...],
           max_replays: int | None, keep_routing_key: bool, allow_displace: bool, target_broker: str | None,
           save_file: str | None,
           rate: float | None, prefetch: int, window: int, selection: Selection, dry_run: bool,
           yes: bool) -> None:
    from dlxtool.ops.replay import ReplaySettings

    if save_file:
        check_record_file(app, save_file)  # before the plan reads (and gives back) any message
    profile = app.profile()
    target_profile = app.profile(target_broker) if target_broker else None
    settings = ReplaySettings(
        source=dlq, selection=selection, to_queue=to_queue, keep_history=keep_history,
        reset_headers=tuple(dict.fromkeys((*profile.reset_headers, *reset_headers))),
        max_replays=max_replays, keep_routing_key=keep_routing_key, allow_displace=allow_displace,
    )
    with summary_before_ctrl_c() as ctrl_c:
        with ExitStack() as stack:
            conn = stack.enter_context(app.connection(profile))
            target_conn = stack.enter_context(app.connection(target_profile)) if target_profile else None
            # Each API proven to answer for the broker its connection reached, before any of its data is used.
            mgmt = app.management(profile, conn)
            target_mgmt = app.management(target_profile, target_conn) if target_profile else mgmt
            info = _queue_info(app, conn, mgmt, profile, dlq)
            rooms = _rooms(target_conn or conn, target_mgmt, target_profile or profile, allow_displace,
                           "--to queue" if to_queue else "origin")
            if dry_run or not yes:
                plan = _plan(app, conn, target_conn, settings, info, target_profile or profile, target_mgmt, rooms)
                _render_plan(app, plan)
                selection_notes(app, selection)
                if dry_run:
                    return
                app.confirm(f"Replay the messages of {dlq!r} as planned?", yes=yes)
            ctrl_c.arm()
            result = _run(app, conn, target_conn, settings, save_file, rate, prefetch, window, profile.timeout,
                          rooms)
        _render_result(app, result)
        selection_notes(app, selection)
        _warn_dead_letter_routing(app, target_mgmt, target_profile or profile, result, settings)
        exit_for(result, "replay")


def _queue_info(app: App, conn: Any, mgmt: Any, profile: Any, dlq: str) -> Any:
    """Queue type and delivery limit from the management API (None if it cannot be reached)."""
    from dlxtool.errors import ConnectError as _Connect
    from dlxtool.ops.purge import passive_declare

    channel = conn.channel()
    passive_declare(channel, dlq, profile.vhost)  # a missing DLQ is "not found" (4), API or no API
    channel.close()
    try:
        info = mgmt.queue(profile.vhost, dlq)
    except _Connect as exc:
        app.warn(f"check not made: {exc.message}: type and limits of {dlq!r} unknown")
        return None
    if info.type == "stream":
        raise RefusedError(f"{dlq!r} is a stream: messages cannot be removed from it, so it cannot be replayed",
                           hint="consume it with a stream consumer and publish with `dlxtool load`")
    from dlxtool.ops.purge import check_tail_republish

    check_tail_republish(info.tail_republish_risk)
    return info


def _rooms(conn: Any, mgmt: Any, profile: Any, allow_displace: bool, role: str) -> Any:
    """The origins' rooms (limits from the target broker's management API, depth by passive declare)."""
    from dlxtool.ops.capacity import rooms

    return rooms(conn, mgmt, profile.vhost, profile.timeout, role=role, allow_displace=allow_displace)


def _plan(app: App, conn: Any, target_conn: Any, settings: Any, info: Any, target_profile: Any, mgmt: Any,
          rooms: Any) -> Any:
    from dlxtool.ops.replay import dlx_warning, plan

    qtype = info.type if info is not None else _probe_type(app, settings.source)
    if qtype == "quorum" and (info is None or info.delivery_limit is not None):
        limit = "an unknown delivery-limit (management API not reachable)" if info is None else \
            f"delivery-limit {info.delivery_limit}"
        raise RefusedError(
            f"{settings.source!r} is a quorum queue with {limit}: showing a plan "
            "means reading and returning messages, which counts as a delivery attempt and can dead-letter them",
            hint="pass --yes to replay without a plan (replay itself never returns messages it has read)")
    result = plan(conn, settings, max_messages=app.config().dump_unacked_limit, target_conn=target_conn,
                  timeout=app.profile().timeout, rooms=rooms)
    if qtype == "quorum" and result.looked_at:
        app.info(f"the plan read {result.looked_at} messages and gave them back in place, in order; on a quorum "
                 "queue each of them now counts one more delivery attempt (x-delivery-count; no limit is set)")
    if not settings.keep_routing_key:
        try:
            for origin in result.origins:
                if origin.exists:
                    origin.warning = dlx_warning(mgmt, target_profile.vhost, origin.queue)
        except Exception:  # noqa: BLE001 - the warning is advice; no management API, no advice
            pass
    return result


def _probe_type(app: App, queue: str) -> str:
    from dlxtool.ops.peek import probe_queue_type

    return probe_queue_type(app.profile(), queue)


def _render_plan(app: App, plan: Any) -> None:
    fmt = app.output_format("json")
    if fmt != "table":
        app.emit_json({"plan": plan.to_json()}, fmt)
        return
    from dlxtool.render import write_table

    sampled = f" (from the first {plan.looked_at})" if plan.looked_at < plan.snapshot else ""
    app.info(f"plan for {plan.source}: {plan.snapshot} messages{sampled}")
    rows = [["replay to", o.queue, o.messages - o.would_stay_full, {True: "yes", False: "NO", None: "?"}[o.exists],
             o.room or "", o.warning or ""] for o in plan.origins]
    rows += [["stay", o.full_reason, o.would_stay_full, "", "", ""] for o in plan.origins if o.would_stay_full]
    rows += [["stay", why, n, "", "", ""] for why, n in sorted(plan.stay.items())]
    write_table(rows, ["action", "queue / reason", "messages", "exists", "room", "warning"], app.stdout,
                empty="nothing to replay")
    _plan_footer(app, plan)
    for o in plan.origins:
        if o.exists is False:
            app.warn(f"queue {o.queue!r} does not exist: its {o.messages} message(s) would stay in the DLQ")
        if o.would_stay_full:
            app.warn(f"{o.full_reason}: {o.would_stay_full} of its {o.messages} message(s) would stay in the "
                     f"DLQ ({o.room}); --allow-displace replays them anyway")


def _plan_footer(app: App, plan: Any) -> None:
    """Under the table, not only on stderr: the counts above are of a sample when the DLQ was bigger."""
    from dlxtool.cli.reading import sample_note, write_sample_note
    from dlxtool.ops.peek import Coverage

    write_sample_note(app, sample_note(Coverage(plan.looked_at, plan.snapshot, plan.sampled),
                                       "a plan reads at most config dump_unacked_limit; the replay goes "
                                       f"through all {plan.snapshot:,}"))


def _run(app: App, conn: Any, target_conn: Any, settings: Any, save_file: str | None, rate: float | None,
         prefetch: int, window: int, timeout: float, rooms: Any) -> Any:
    from dlxtool.ops.engine import TransferOptions
    from dlxtool.ops.replay import replay as run_replay

    with ExitStack() as stack:
        sink = stack.enter_context(record_file(app, save_file)) if save_file else None
        bar = stack.enter_context(progress_bar(app, "replaying"))
        options = TransferOptions(prefetch=prefetch, window=window, rate=rate, sink=sink, progress=bar)
        return run_replay(conn, settings, options, target_conn=target_conn, timeout=timeout, rooms=rooms)


def _render_result(app: App, result: Any) -> None:
    fmt = app.output_format("json")
    if fmt != "table":
        app.emit_json(result.to_json(), fmt)
        return
    from dlxtool.render import write_table

    rows = result_rows(result, moved="replayed", kept="left (not selected)")
    write_table(rows, ["outcome", "queue / reason", "messages"], app.stdout, empty="nothing to replay")
    app.info(f"{result.moved_total} of {result.snapshot} replayed from {result.source} in {result.elapsed:.1f}s"
             + duplicates_note(result))


def _warn_dead_letter_routing(app: App, mgmt: Any, profile: Any, result: Any, settings: Any) -> None:
    if settings.keep_routing_key or not result.moved:
        return
    from dlxtool.ops.replay import dlx_warning

    try:
        for queue in sorted(result.moved):
            warning = dlx_warning(mgmt, profile.vhost, queue)
            if warning:
                app.warn(f"{queue}: {warning}")
    except Exception:  # noqa: BLE001 - advice only
        pass
