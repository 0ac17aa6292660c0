"""`dlxtool replay DLQ`: dead letters back to the queues they failed in, counts reset, nothing lost."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from dlxtool.cli.app import App
from dlxtool.cli.conversion import amqp10_path, check_wanted, conversion_option, say_conversion
from dlxtool.cli.editing import EDIT_HELP, EditRequest, edit_counts, edit_dead_letters, edit_options, edit_outcome
from dlxtool.cli.explaining import Cells
from dlxtool.cli.guarding import GUARD_HELP, Guarding, guard_options
from dlxtool.cli.moving import Journaled, check_record_file, duplicates_note, result_rows, run_moving, write_id_list
from dlxtool.cli.options import (
    SELECTION_HELP,
    common_options,
    complete_broker,
    complete_queue,
    conventions_in_use,
    dry_run_option,
    flow_options,
    max_bytes_option,
    origin_from_option,
    selection_for,
    selection_notes,
    selection_options,
    yes_option,
)
from dlxtool.cli.reading import (
    auto_protocol,
    make_read_options,
    peek_safety_options,
    protocol_option,
    sample_note,
    write_sample_note,
)
from dlxtool.errors import UsageError
from dlxtool.ops.guard_settings import GuardSettings
from dlxtool.ops.interrupts import summary_before_ctrl_c
from dlxtool.ops.transfer_settings import TransferOptions
from dlxtool.outcome import Outcome
from dlxtool.selection import Selection

if TYPE_CHECKING:
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.ops.pipeline import MoveRun
    from dlxtool.ops.record_files import Sink

HELP = """Send dead letters from DLQ back to the queue each one failed in.

\b
The origin is read from the death history (the queue the message was
rejected / hit its delivery limit / overflowed in — not the routing key).
A message that only waited out TTLs (an application's retry ladder) goes
to the queue its wait queue sends it back to (followed through the
management API), never to the wait queue; if that cannot be told it
stays, with the reason.

\b
Dead letters a framework made are read by its convention, as `history`
reads them (same origin): Spring's republish recoverer, NServiceBus,
MassTransit, rascal, and [conventions.NAME] of the config file. When
conventions disagree the most recent failure wins; --origin-from forces
one. An origin that is an exchange + routing key (Spring's
x-original-exchange/x-original-routingKey) is published there; the
queues it reaches (management API) get the capacity and dead-letter
checks, it must reach one queue (--allow-fanout: several, each a copy).

\b
Route (default): each message keeps its ORIGINAL routing key (from an
earlier replay's provenance, else the death history) and reaches only its
origin, through a temporary fanout exchange bound only to it (deleted at
the end): consumers that dispatch on the key, a dead-letter exchange that
routes on it and retry ladders see what they saw the first time. Its name,
dlxtool.replay.RUN.N.QUEUE, is what the consumer sees as the exchange and
what a later x-death records; peek and history show the exchange it stood
for, which the provenance header keeps.
--default-exchange publishes on the default exchange instead (routing key
= queue name). Either way the key a message arrives with is checked
against its origin's (or --to queue's) dead-letter exchange (management
API: bindings, dead-letter routing key, alternate exchanges): a message
whose next dead-lettering there would be dropped — routed to no queue —
stays in the DLQ with the reason, as do all messages when that cannot be
checked (no management API); exit 5, or 6 when nothing moved.
--allow-dlx-drop replays them anyway. Publishes are
mandatory, with publisher confirms; the DLQ copy is acked only after a
clean confirm. Unroutable (origin deleted) or refused (origin full)
messages stay in the DLQ and are reported. The run covers the messages
present at the start only.

\b
Full origins: an origin with a length limit (x-max-length[-bytes],
argument or policy) and overflow drop-head (the default) or
reject-publish-dlx would push out its own oldest messages (or dead-letter
copies) to make room. Replay moves only what fits (room = limit - ready -
unacked, counted down per message, shown in the plan); the rest stays in
the DLQ: "origin full (drop-head would push out its head)". Exit 5, or 6
when nothing fit. Without the management API no limit can be read: an
origin takes nothing, and a non-empty DLQ (what stays is republished to its
tail) is refused before anything is read (exit 6). --allow-displace
replays anyway.

\b
Count reset (default): x-death, x-first-death-*, x-last-death-*, CC, BCC,
x-delivery-count and the retry headers x-retry-count, x-delivery-attempts
(+ --reset-header, + the profile's reset_headers) are removed; a header
`dlxtool-replay` records from, at, count, the first origin's exchange,
routing key and per-message TTL, and the removed deaths. The failure
headers of the conventions that explained a message go too
(x-exception-*, NServiceBus.ExceptionInfo.*, MT-Fault-*, rascal's
recovery and error, a team's headers). The TTL
(`expiration`, which dead-lettering moves into x-death) is restored unless
--drop-expiration. --keep-history keeps the history headers. Celery's
`retries` header (its attempt count) is set back to 0, and Celery tasks
go through the default exchange (Celery retries to the exchange a task
came from). Dramatiq keeps its count in the body (options.retries):
--reset-body-retries sets it to 0; without it the body is never touched.

\b
Messages that stay (not selected, no origin, --max-replays, returned)
are republished unchanged to the tail of the DLQ and then acked: memory
stays bounded and their relative order is kept, unlike holding them all
unacked (unbounded, and a delivery attempt per message on quorum
queues). They end up behind dead letters that arrive during the run.
Until a first message is confirmed moved, a classic DLQ's messages that
stay are held instead and given back in place at the end: a run that
moves nothing changes nothing. The summary counts what was republished.

\b
When the broker says no: before anything is read, replay asks the broker
whether this user may publish the way it will (a throwaway dlxtool.probe.*
exchange declared, published to unroutable, deleted; an unroutable
publish to the default exchange) and refuses at once (exit 6) naming the
permission; a memory or disk alarm on any node is refused too (exit 7,
publishing is blocked cluster-wide). During the run, a publish the broker
refuses (an expiration or user_id it will not take, a body over its max
size) closes the channel: that message stays with the broker's words, the
rest goes on on a new channel; an exchange it refuses takes nothing more.
A recorded TTL the broker would refuse is not restored (said); a user_id
of another user stays unless --drop-user-id. Publishing runs on its own
connection: a connection.blocked (alarm) is said at once and the run stops
within --timeout, giving the rest back at once (exit 7).

\b
Messages published over AMQP 1.0 (RabbitMQ 4.x): over AMQP 0.9.1 replay
gets RabbitMQ's conversion of them (subject, to, several data sections,
milliseconds, symbol and ulong types … lost), and would write that into
the origin for good. Before anything moves (with or without the plan),
the head of the DLQ is read again over AMQP 1.0 (as peek --protocol 1.0
reads it, no attempt spent where the version allows) and what the
conversion would lose is said per kind (how many messages, which
positions). --protocol auto (the default) then replays over AMQP 1.0,
which sends them whole, where none of the messages it takes would lose
anything over 1.0 (a 0.9.1 message's table headers); otherwise, and with
--protocol 0-9-1, the replay is refused (exit 6, nothing changed) unless
--accept-conversion-loss (docs/amqp10.md).

\b
Without --yes, replay first shows the plan (route per origin, from the
first messages, read and given back as `peek` reads them, under the same
rules and flags: see `peek --help`; --yes replays without a plan) and
asks; when there is nothing to replay (an empty DLQ, or a selection that
selects none of it) it says so and exits 0 without asking. Exit 5 when messages were left for a reason other than the
selection; 3 when the connection was lost (nothing is lost; the summary
counts possible duplicates); 130 on Ctrl-C (143 on SIGTERM, 129 on SIGHUP).

""" + GUARD_HELP + """
""" + EDIT_HELP + """
\b
Examples:
  dlxtool replay orders.dlq --dry-run
  dlxtool replay orders.dlq --origin orders --older-than 10m --yes
  dlxtool replay orders.dlq --type PaymentFailed --error '(?i)timed? ?out' -n 100
  dlxtool --broker prod-eu replay orders.dlq --target-broker prod-eu-new --save replayed.jsonl
  dlxtool replay orders.dlq --edit --origin orders --limit 5
  dlxtool replay orders.dlq --canary 20 --batch 500 --pause 10 --yes
"""


@click.command(help=HELP, epilog=SELECTION_HELP)
@click.argument("dlq", shell_complete=complete_queue)
@click.option("--to", "to_queue", metavar="QUEUE", shell_complete=complete_queue,
              help="Send everything to QUEUE instead of each origin.")
@click.option("--keep-history", is_flag=True, help="Keep x-death and retry headers (no count reset).")
@click.option("--reset-header", "reset_headers", multiple=True, metavar="NAME",
              help="Also remove this application retry header (repeatable), e.g. count.")
@click.option("--max-replays", type=click.IntRange(min=1), metavar="N",
              help="Leave messages already replayed N times in the DLQ (loop guard). A copy a kill -9 left "
                   "and its source count as one message: one of them is replayed (README: Stop signals).")
@click.option("--default-exchange", is_flag=True,
              help="Publish on the default exchange with routing key = queue name (consumers see the queue "
                   "name, not the original key); origins whose dead-letter exchange would not route it stay.")
@click.option("--allow-dlx-drop", is_flag=True,
              help="Replay even where the origin's dead-letter exchange would route a message's routing key to no "
                   "queue (its next dead-lettering there drops it), or where that cannot be checked (no "
                   "management API).")
@click.option("--keep-routing-key", is_flag=True, hidden=True,
              help="The default now (kept so that existing scripts run).")
@click.option("--drop-expiration", is_flag=True,
              help="Do not restore a message's per-message TTL (expiration), which RabbitMQ moved into its death "
                   "history (or an earlier replay recorded); dropped for good, later replays do not restore it.")
@click.option("--drop-user-id", is_flag=True,
              help="Replay a message whose user_id property names another user without that property (RabbitMQ "
                   "refuses it unless the replaying user has the impersonator tag; the provenance records it). "
                   "Without it such a message stays in the DLQ, with the reason.")
@click.option("--allow-dead-replies", is_flag=True,
              help="Replay requests whose reply cannot arrive: a reply_to that is a direct reply-to address "
                   "(amq.rabbitmq.reply-to.*, gone with its caller's channel) or a reply queue that no longer "
                   "exists. Without it such a request stays in the DLQ, with the reason (the service would do the "
                   "work and answer into the void).")
@click.option("--reset-body-retries", is_flag=True,
              help="Also rewrite a Dramatiq JSON body's options.retries to 0 (its attempt count, kept in the body: "
                   "without this a replayed message gets no retry). Other bodies stay byte for byte.")
@conversion_option
@click.option("--allow-fanout", is_flag=True,
              help="Replay to an exchange origin whose routing key reaches several queues anyway (each gets a copy).")
@origin_from_option
@click.option("--allow-displace", is_flag=True,
              help="Replay into a full origin with overflow drop-head/reject-publish-dlx anyway (it pushes out its "
                   "oldest messages or dead-letters copies), or into queues whose limits cannot be read.")
@click.option("--target-broker", metavar="NAME", shell_complete=complete_broker,
              help="Publish to the origin queues on this broker profile.")
@click.option("--save", "save_file", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Append each replayed message's record (JSON Lines, flushed) before its DLQ ack.")
@protocol_option("Replay")
@flow_options("DLQ")
@guard_options
@max_bytes_option
@selection_options
@edit_options
@peek_safety_options
@dry_run_option
@yes_option
@common_options
@click.pass_obj
def replay(app: App, dlq: str, to_queue: str | None, keep_history: bool, reset_headers: tuple[str, ...],
           max_replays: int | None, default_exchange: bool, allow_dlx_drop: bool, keep_routing_key: bool,
           drop_expiration: bool, drop_user_id: bool, allow_dead_replies: bool, reset_body_retries: bool,
           accept_conversion_loss: bool, allow_fanout: bool,
           origin_from: str | None,
           allow_displace: bool, target_broker: str | None, save_file: str | None,
           rate: float | None, prefetch: int, window: int, guard: GuardSettings, selection: Selection,
           edit: EditRequest | None,
           max_unacked: int | None, allow_reorder: bool, spend_attempts: bool, dry_run: bool,
           yes: bool, protocol: str | None = None) -> Outcome | None:
    from dlxtool.ops import replay as ops
    from dlxtool.ops.replay_decision import EditTargets, ReplaySettings
    from dlxtool.ops.session import MoveSession

    if default_exchange and keep_routing_key:
        raise UsageError("--default-exchange and --keep-routing-key contradict each other",
                         hint="keeping the original routing key is the default: drop --keep-routing-key")
    asked = auto_protocol(app, protocol)
    # auto (dlxtool.ops.protocol_choice) chooses after the plan; --edit reads before it, over what it was asked
    auto = asked is None and edit is None
    over: WireProtocol = asked or "0-9-1"
    known = conventions_in_use(app, origin_from)  # a wrong --origin-from fails before anything is read
    selection = selection_for(app, selection, origin_from=origin_from, decode=True)
    if save_file:
        check_record_file(app, save_file)  # before the plan reads (and gives back) any message
    profile = app.profile()
    target_profile = app.profile(target_broker) if target_broker else None
    settings = ReplaySettings(
        source=dlq, selection=selection, to_queue=to_queue, keep_history=keep_history,
        reset_headers=tuple(dict.fromkeys((*profile.reset_headers, *reset_headers))),
        max_replays=max_replays, default_exchange=default_exchange, drop_expiration=drop_expiration,
        allow_displace=allow_displace, reset_body_retries=reset_body_retries, allow_dlx_drop=allow_dlx_drop,
        conventions=known, origin_from=origin_from, allow_fanout=allow_fanout, drop_user_id=drop_user_id,
        check_replies=not allow_dead_replies,
    )
    edits = None
    if edit is not None:  # before any connection: the editor may stay open for long (dlxtool.cli.editing)
        edits = edit_dead_letters(app, dlq, selection, edit, EditTargets(settings), yes=yes, dry_run=dry_run,
                                  protocol=over)
        if edits is None:
            return None
        settings = replace(settings, edits=edits)
    journaled = Journaled(app, "replay --edit" if edits is not None else "replay")  # the guard journals decisions
    with summary_before_ctrl_c() as ctrl_c, ExitStack() as stack:
        conn = stack.enter_context(app.connection(profile))
        target_conn = stack.enter_context(app.connection(target_profile)) if target_profile else None
        # Each API proven to answer for the broker its connection reached, before any of its data is used.
        session = MoveSession(app.session(profile, conn),
                                    app.session(target_profile, target_conn) if target_profile else None,
                                    plan_limit=app.config().dump_unacked_limit, protocol=over)
        replay = ops.Replay(session, settings, app, dry_run=dry_run)
        guarding = Guarding(app, guard, journaled, yes=yes) if guard.watches or guard.batch else None
        if guarding and not dry_run:
            guarding.check(replay)  # --canary without a way to watch: refused before anything is read
        # --yes: no plan (read as peek reads: some quorum queues need a flag for it); --edit showed its diff instead
        read = make_read_options(app, None, max_unacked=max_unacked, allow_reorder=allow_reorder,
                                 spend_attempts=spend_attempts, protocol=over)
        # what RabbitMQ's conversion to 0.9.1 would lose of messages published over AMQP 1.0: said (and refused by
        # default, exit 6) before anything moves, with or without a plan (dlxtool.ops.conversion_check)
        if edits is None and (dry_run or not yes):
            plan = replay.plan(read, accept_conversion_loss=accept_conversion_loss, amqp10_path=amqp10_path(),
                               judge_conversion=check_wanted(accept_conversion_loss, plan=True), over=over, auto=auto)
            if auto:
                plan.conversion = replay.choose_protocol(plan.conversion, read, plan=plan,
                                                         accept_conversion_loss=accept_conversion_loss,
                                                         amqp10_path=amqp10_path())
            _render_plan(app, plan, None if target_broker else profile.vhost)
            selection_notes(app, selection)
            say_conversion(app, plan.conversion, dry_run=dry_run, what="replay")
            if dry_run:
                return None
            if plan.nothing_to_do:
                app.info(f"nothing to replay: {plan.nothing_to_do}; nothing was changed")
                return None
            app.confirm(f"Replay the messages of {dlq!r} as planned?", yes=yes)
        elif check_wanted(accept_conversion_loss, plan=False, auto=auto):
            check = replay.check_conversion(read, accept_conversion_loss=accept_conversion_loss,
                                            amqp10_path=amqp10_path(), over=over, auto=auto)
            if auto:
                check = replay.choose_protocol(check, read, accept_conversion_loss=accept_conversion_loss,
                                               amqp10_path=amqp10_path())
            say_conversion(app, check, dry_run=dry_run, what="replay")

        def render(run: MoveRun) -> None:
            if guarding:  # --canary, the brake, --batch: dlxtool.cli.guarding
                guarding.render(app, run, _render_result)
            else:
                _render_result(app, run)
            selection_notes(app, selection)

        def run(sink: Sink | None, bar: Any) -> MoveRun:
            options = TransferOptions(prefetch=prefetch, window=window, rate=rate, sink=sink, progress=bar,
                                      max_bytes=app.max_bytes)
            return guarding.run(replay, options) if guarding else replay.run(options)

        def counts(run: MoveRun) -> dict[str, Any]:
            return {**(guarding.counts() if guarding else {}), **(edit_counts(edits) if edits is not None else {})}

        def outcome(run: MoveRun, ended: Outcome) -> Outcome:
            if guarding:
                ended = guarding.outcome(run)
            if edits is not None:  # --edit: the messages shown and never found again
                ended = edit_outcome(app, edits, dlq, ended)
            return ended

        ended: Outcome = run_moving(app, ctrl_c, command=journaled.command, profile=profile,
                                    queues=[dlq, to_queue or ""], label="replaying", save_file=save_file, run=run,
                                    render=render, counts=counts, outcome=outcome, journaled=journaled)
        return ended


def _render_plan(app: App, plan: Any, vhost: str | None = None) -> None:
    """`vhost`: the origins' (None: on another broker, --target-broker), for a did-you-mean of an origin not found."""
    fmt = app.output_format()
    if fmt != "table":
        app.emit_json({"plan": plan.to_json()}, fmt)
        return
    sampled = f" (from the first {plan.looked_at})" if plan.looked_at < plan.snapshot else ""
    app.info(f"plan for {plan.source}: {plan.snapshot} messages{sampled}")
    cells = Cells(app)
    rows = [["replay to", o.queue, o.messages - o.would_stay_full, {True: "yes", False: "NO", None: "?"}[o.exists],
             cells(o.room), cells(o.route_text())] for o in plan.origins]
    rows += [["stay", cells(o.full_reason), o.would_stay_full, "", "", ""] for o in plan.origins if o.would_stay_full]
    rows += [["stay", cells(why), n, "", "", ""] for why, n in sorted(plan.stay.items())]
    app.write_table(rows, ["action", "queue / reason", "messages", "exists", "room", "route"],
                    empty="nothing to replay")
    cells.note()
    write_id_list(app, "replay", [(o.queue, name) for o in plan.origins if o.exists is not False
                                  for name in o.message_ids], sampled=plan.sampled)
    _plan_footer(app, plan)
    for note in plan.route_notes:
        app.info(f"route: {note}")
    if plan.used_body_retries:
        app.warn(f"{plan.used_body_retries} Dramatiq message(s) have used up retries (options.retries in the body): "
                 "replayed as they are, Dramatiq retries them no more; --reset-body-retries sets it to 0")
    if plan.origin_conflicts:
        app.warn(f"{plan.origin_conflicts} message(s): conventions name different origins; the most recent failure "
                 "won (`history` says which and why; --origin-from CONVENTION forces one)")
    for o in plan.origins:
        if o.exists is False:
            said = app.did_you_mean(o.queue, vhost) if vhost is not None else None
            app.warn(f"queue {o.queue!r} does not exist: its {o.messages} message(s) would stay in the DLQ"
                     + (f" ({said})" if said else ""))
        if o.would_stay_full:
            app.warn(f"{o.full_reason}: {o.would_stay_full} of its {o.messages} message(s) would stay in the "
                     f"DLQ ({o.room}); --allow-displace replays them anyway")


def _plan_footer(app: App, plan: Any) -> None:
    """Under the table, not only on stderr: the counts above are of a sample when the DLQ was bigger."""
    from dlxtool.ops.peek import Coverage

    write_sample_note(app, sample_note(Coverage(plan.looked_at, plan.snapshot, plan.sampled),
                                       "a plan reads at most --max-unacked (config dump_unacked_limit); the "
                                       f"replay goes through all {plan.snapshot:,}"))


def _render_result(app: App, run: Any) -> None:
    result = run.result
    fmt = app.output_format()
    if fmt != "table":
        app.emit_json({**result.to_json(), "routes": run.routes, "depths_after": run.depths}, fmt)
        return
    cells = Cells(app)
    rows = result_rows(result, moved="replayed", kept="left (not selected)", short=cells)
    for row in rows:
        row.append(cells(run.routes.get(row[1], "")) if row[0] == "replayed" else "")
    app.write_table(rows, ["outcome", "queue / reason", "messages", "route"], empty="nothing to replay")
    cells.note()
    app.info(f"{result.moved_total} of {result.snapshot} replayed from {result.source} in {app.elapsed():.1f}s"
             + duplicates_note(result))
    from dlxtool.ops.outcomes import depths_text

    depths = depths_text(run.depths)
    if depths:
        app.info(depths)
