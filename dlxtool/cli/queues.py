"""`dlxtool queues`: where is it stuck? A survey of one broker or all of them, trouble flagged."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import click

from dlxtool.broker.management import DEFAULT_DELIVERY_LIMIT_4X, ManagementClient
from dlxtool.cli.app import App
from dlxtool.cli.options import all_vhosts_option, common_options
from dlxtool.config import BrokerProfile, local_profile
from dlxtool.errors import ConnectError, DlxtoolError, PartialError
from dlxtool.ops import queue_flags as qf
from dlxtool.ops.queues import (
    SORT_KEYS,
    BrokerResult,
    IdentityCheck,
    QueueFilter,
    Snapshot,
    deltas,
    snapshots,
    survey,
    with_vhost,
)

CLEAR_SCREEN = "\x1b[H\x1b[2J"
LOCAL_SOURCE = local_profile({}).source

HELP = f"""Survey queues through the management API and flag trouble.

Shows the selected broker's vhost (--vhost, --all-vhosts). With --all-brokers: every broker of
the config file (the built-in `local` one only if the file names none), asked in parallel; one
that does not answer gets its own row and a warning, the others are still shown, and the exit
status is 5. Rates are messages/s over the broker's last statistics interval (5 s by default),
so they show up some seconds after activity starts.

\b
Roles, from the topology alone (settings from arguments, policies and operator
policies; exchanges and bindings; no message is read):
  dlq          the dead-letter target of some queue: where its dead-letter exchange
               routes its dead letters (with its dead-letter routing key, else the
               keys the queue is bound with and its name; direct, topic, fanout,
               headers, exchange-to-exchange bindings, alternate exchanges, the
               default exchange), unless that queue or this one is a retry stage.
  wait         a retry stage: no consumer, none ever took a message from it (or,
               without statistics, a message TTL), and its dead-letter route leads
               to a queue its messages go back to: one that is consumed, that
               dead-letters back here, or that dead-letters on elsewhere itself.
  A queue an application moves failed messages into itself is no queue's target:
  peek and history say when a queue holds dead letters the topology did not predict.
  JSON: "role" and "role_reason"; the table shows the role among the flags.

\b
Flags (the API has no reject counter and no per-message delivery counts: heuristics):
  clogged      consumers, messages (ready or unacked: a poison message may sit in the
               consumer's prefetch), redeliveries >= {qf.MIN_RATE}/s and acks <= {qf.CLOG_ACK_RATIO:g} x
               redeliveries: a message rejected with requeue in a loop.
  no-consumer  ready messages and no consumer; DLQs and retry stages excepted.
  no-dlx       no dead-letter exchange in effect (arguments win over policy), consumers,
               and they reject: redeliveries >= {qf.MIN_RATE}/s (rejects with requeue loop),
               or acks < {qf.REJECT_ACK_RATIO:g} x manual-ack deliveries >= {qf.MIN_RATE}/s (rejects
               without requeue drop messages).
  Peeks are not rejects: a peek (dlxtool peek/history/dump, or "Get messages" in the
  management UI) takes messages with basic.get and gives them back, which the broker
  counts as deliveries and then redeliveries. clogged and no-dlx discount one
  redelivery per basic.get and leave basic.gets out of the deliveries to be acked.
  at-limit     quorum queue with a delivery limit (arguments or policy; RabbitMQ 4.x:
               default {DEFAULT_DELIVERY_LIMIT_4X}), messages, redeliveries >= {qf.MIN_RATE}/s, and
               estimated deliveries per message, deliver / (deliver - redeliver),
               >= {qf.AT_LIMIT_FRACTION:g} x the limit (and >= 2): messages will soon be
               dead-lettered or dropped.
  Streams get only `dlq`. With -v, the reason for every flag follows the table (stderr);
  JSON output always carries them ("reasons").
  Counts and rates are the management API's statistics, up to one statistics interval
  old (the API gives no sample time per queue); a queue with no message, no consumer and
  no dead-letter exchange shows the depth it counts itself (0) and no rates. A replay's
  or purge's own closing line has the depths the broker counts at its end.
  Where the API keeps no statistics (RabbitMQ 4.3 with management_metrics_collection
  denied) or has no sample of a queue yet, its counts and rates show as "?" and each
  flag that needs them and could apply shows as "?flag" ("cannot_tell" in JSON, with
  why): it is not ruled out. --flag keeps such queues, --min-messages too.

\b
Examples:
  dlxtool queues --flag any                      # everything that looks wrong
  dlxtool queues --all-brokers --flag clogged --sort redeliver-rate
  dlxtool queues --match 'orders.*' --min-messages 1 --format json
  dlxtool queues --all-brokers --watch 5         # the incident view (Ctrl-C to stop)
"""


@click.command(help=HELP)
@click.option("--flag", "flags", multiple=True, type=click.Choice([*qf.FLAGS, "any"]),
              help="Only queues with this flag (repeat for any of several; 'any': any flag).")
@click.option("--match", metavar="PATTERN",
              help="Only queue names matching this glob (e.g. 'orders.*'); no wildcard: substring.")
@click.option("--min-messages", type=click.IntRange(min=0), default=0, metavar="N",
              help="Only queues with at least N messages (ready + unacked).")
@click.option("--sort", type=click.Choice(list(SORT_KEYS)), default="name", show_default=True,
              help="Order; numbers and rates biggest first.")
@click.option("--all-brokers", is_flag=True, help="Ask every configured broker, in parallel.")
@all_vhosts_option
@click.option("--watch", type=click.FloatRange(min=0.5), is_flag=False, flag_value=5.0, default=None,
              metavar="[SECONDS]", help="Refresh every SECONDS (default 5) with changes since the last one.")
@click.option("--watch-count", type=click.IntRange(min=1), default=None, hidden=True,
              help="Stop after N refreshes (for tests and scripts).")
@common_options
@click.pass_obj
def queues(app: App, flags: tuple[str, ...], match: str | None, min_messages: int, sort: str,
           all_brokers: bool, watch: float | None, watch_count: int | None) -> None:
    all_vhosts = app.all_vhosts
    if all_brokers and app.url:
        raise click.UsageError("--all-brokers uses the configured profiles; it cannot be combined with --url")
    profiles = configured_profiles(app) if all_brokers else [app.profile()]
    profiles = with_vhost(sorted(profiles, key=lambda p: p.name), app.chosen_vhost())
    selection = QueueFilter(flags=flags, match=match, min_messages=min_messages, sort=sort)

    identity = IdentityCheck()

    def take() -> list[BrokerResult]:
        return survey(profiles, all_vhosts=all_vhosts, verify=identity)

    fmt = app.output_format()
    snapshot: Snapshot | None = None
    if watch is None:
        [snapshot] = snapshots(take, 0, 1)
        if not all_brokers and snapshot.failures:
            assert snapshot.failures[0].error is not None  # failures are the results with an error
            raise snapshot.failures[0].error  # one broker: its own error and exit status (3, 2…)
        render(app, snapshot, None, selection, fmt, show_broker=all_brokers)
        if not all_brokers and not all_vhosts and not snapshot.rows and not snapshot.failures:
            _other_vhosts(app, profiles[0], identity)
    else:
        previous = None
        last_known: dict[Any, tuple[int, datetime]] = {}  # a queue's depth when last told, for when it is not
        for snapshot in snapshots(take, watch, watch_count):
            for row in snapshot.rows:
                if row.figures_known:
                    last_known[row.key] = (row.ready, snapshot.taken_at)
            render(app, snapshot, previous, selection, fmt, show_broker=all_brokers, watch=watch,
                   last_known=last_known)
            previous = snapshot
    if snapshot is not None:  # None: stopped before the first one
        _exit_status(snapshot)


def _other_vhosts(app: App, profile: BrokerProfile, identity: IdentityCheck) -> None:
    """No queue in the profile's vhost: say which vhosts have queues, where the API lists them (a user given no
    config reads `/`, and the queues may all be elsewhere)."""
    try:
        client = ManagementClient.for_profile(profile)
        identity(profile, client)
        rows = client.queues(None, columns=["vhost"], unsorted=True)
    except DlxtoolError:
        return
    counts = Counter(str(r["vhost"]) for r in rows
                     if isinstance(r, dict) and r.get("vhost") not in (None, profile.vhost))
    if counts:
        listed = ", ".join(f"{v!r} ({n})" for v, n in sorted(counts.items())[:10])
        more = f" and {len(counts) - 10} more" if len(counts) > 10 else ""
        app.info(f"hint: vhost {profile.vhost!r} has no queues; the management API lists queues in {listed}{more}: "
                 "--vhost NAME, or --all-vhosts")


def configured_profiles(app: App) -> list[BrokerProfile]:
    """Every profile of the config file; the built-in `local` one only when there is nothing else
    (a laptop without a local broker would otherwise turn every survey into a partial failure)."""
    profiles = list(app.config().brokers.values())
    configured = [p for p in profiles if p.source != LOCAL_SOURCE]
    return configured or profiles


def _exit_status(snapshot: Snapshot) -> None:
    failed = snapshot.failures
    if not failed:
        return
    names = ", ".join(r.broker for r in failed)
    if len(failed) == len(snapshot.results):
        raise ConnectError(f"no broker answered: {names}")
    raise PartialError(f"{len(failed)} of {len(snapshot.results)} brokers did not answer: {names}")


# -- rendering ---------------------------------------------------------------------------------------


def render(app: App, snapshot: Snapshot, previous: Snapshot | None, selection: QueueFilter, fmt: str, *,
           show_broker: bool, watch: float | None = None,
           last_known: dict[Any, tuple[int, datetime]] | None = None) -> None:
    rows = selection.apply(snapshot.rows)
    changes = deltas(previous, snapshot)
    last_known = last_known or {}
    if fmt != "table":
        app.emit_json(_json_rows(snapshot, rows, changes, watch is not None, last_known), fmt)
        _warn_failures(app, snapshot)
        return
    on_terminal = watch is not None and app.stdout_is_tty()
    out = app.stdout
    if on_terminal:
        out.write(CLEAR_SCREEN)
    if watch is not None:
        stamp = snapshot.taken_at.astimezone().strftime("%H:%M:%S")
        out.write(f"dlxtool queues · {stamp} · every {watch:g}s · changes since the last refresh"
                  f"{' · Ctrl-C to stop' if on_terminal else ''}\n")
    # A cluster: where each queue lives (a quorum queue's leader), so that a node down reads at a glance
    show_node = any(len(r.nodes or {}) > 1 for r in snapshot.results)
    headers = (["broker"] if show_broker else []) + [
        "vhost", "queue", "type", *(["node"] if show_node else []), "ready", "unacked", "cons", "pub/s", "dlv/s",
        "ack/s", "redlv/s", "dead-letter", "flags"]
    table = [_table_row(row, changes.get(row.key), show_broker, last_known.get(row.key), show_node) for row in rows]
    table += [_failure_row(r, len(headers), show_broker) for r in snapshot.failures]
    if table:
        app.write_table(table, headers, styles={len(headers) - 1: lambda cell: style_flags(app, cell)})
    elif watch is not None:
        out.write("(no queues match)\n")
    aged = bool(table) and any(r.figures_known for r in rows)
    if on_terminal:  # warnings on stderr would be wiped by the next refresh: keep them on screen
        for r in snapshot.failures:
            out.write(f"{r.broker}: {r.error.message if r.error else ''}\n")
        for line in [*_passed_over(snapshot), *_nodes_down(snapshot), *_without_figures(snapshot),
                     *([FIGURES_AGE] if aged else [])]:
            out.write(line + "\n")
        out.flush()
    else:
        _warn_failures(app, snapshot)
        if aged:
            app.info(FIGURES_AGE)
    if not table and watch is None:
        app.info("no queues match")
    if app.verbose and not on_terminal:
        for row in rows:
            for flag, reason in row.flags.items():
                app.info(f"{row.queue}: {flag}: {reason}")
            for flag, reason in row.cannot_tell.items():
                app.info(f"{row.queue}: {flag}: cannot tell: {reason}")


# Once under the table: the API keeps no time per queue sample, so the age cannot be more precise than this.
FIGURES_AGE = ("counts and rates: the management API's statistics, up to one statistics interval old (5 s by "
               "default); a replay or purge says the depths it leaves as the broker counts them")

# What needs a human now is red; what is worth a look is yellow.
FLAG_COLORS = {"unavailable": "red", "clogged": "red", "no-dlx": "red", "at-limit": "red", "error": "red",
               "dlq": "yellow", "no-consumer": "yellow", "wait": "cyan"}


def style_flags(app: App, cell: str) -> str:
    def one(flag: str) -> str:
        color = FLAG_COLORS.get(flag) if not flag.startswith("?") else "yellow"
        return app.style(flag, fg=color, bold=color == "red" or None)

    return ",".join(one(f) for f in cell.split(","))


def _warn_failures(app: App, snapshot: Snapshot) -> None:
    for r in snapshot.failures:
        app.warn(f"broker {r.broker!r} not surveyed: {r.error.message if r.error else 'unknown error'}")
    for line in [*_passed_over(snapshot), *_nodes_down(snapshot)]:
        app.warn(line)
    for line in _without_figures(snapshot):
        app.warn(line)


def _passed_over(snapshot: Snapshot) -> list[str]:
    """A cluster profile asked through another node's API than its first: which did not answer, which did."""
    return [f"broker {r.broker!r}: {'; '.join(r.passed_over)}; its queues are from the API at {r.management_url}"
            for r in snapshot.results if r.passed_over and r.error is None]


def _nodes_down(snapshot: Snapshot) -> list[str]:
    """One line per broker with nodes down: which, and that their queues' messages are not lost but out of reach."""
    lines = []
    for result in snapshot.results:
        down = result.down_nodes
        if down:
            running = len(result.nodes or {}) - len(down)
            lines.append(f"broker {result.broker!r}: node(s) {', '.join(down)} down ({running} of "
                         f"{len(result.nodes or {})} running): the queues that live there are flagged unavailable "
                         "(their messages are not lost; their depth is unknown until the node is back)"
                         + (f"; {result.unlisted_unknown}" if result.unlisted_unknown else ""))
    return lines


def _without_figures(snapshot: Snapshot) -> list[str]:
    """One line per broker with queues the API has no counts or rates for: what the table cannot tell there."""
    lines = []
    for result in snapshot.results:
        blind = [row for row in result.rows if not row.figures_known and "unavailable" not in row.flags]
        if blind:
            lines.append(f"broker {result.broker!r}: the management API has no counts or rates for {len(blind)} of "
                         f"{len(result.rows)} queues ({qf.NO_FIGURES_WHY}): their counts show as ?, and the flags "
                         "that need them as ?flag (cannot tell, not ruled out)")
    return lines


def _json_rows(snapshot: Snapshot, rows: list[qf.QueueRow], changes: dict[Any, dict[str, int | None]],
               watch: bool, last_known: dict[Any, tuple[int, datetime]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        item = row.to_json()
        if watch:
            item["time"] = snapshot.taken_at.isoformat()
            item["delta"] = changes.get(row.key)
            seen = last_known.get(row.key)
            if not row.figures_known and seen is not None:
                item["last_known"] = {"ready": seen[0], "at": seen[1].isoformat()}
        out.append(item)
    for r in snapshot.failures:
        item = r.error_json()
        if watch:
            item["time"] = snapshot.taken_at.isoformat()
        out.append(item)
    return out


def _table_row(row: qf.QueueRow, change: dict[str, int | None] | None, show_broker: bool,
               seen: tuple[int, datetime] | None = None, show_node: bool = False) -> list[str]:
    change = change or {}
    r = row.rates
    flags = ",".join([*row.flags, *(f"?{f}" for f in row.cannot_tell)])
    if not row.figures_known:  # no sample: "?" where a 0 would claim to know
        counts = ["?"] * 7
        if seen is not None:  # --watch: the depth when it was last told, dated
            counts[0] = f"? (was {seen[0]} at {seen[1].astimezone().strftime('%H:%M:%S')})"
    else:
        counts = [_with_delta(row.ready, change.get("ready")), _with_delta(row.unacked, change.get("unacked")),
                  _with_delta(row.consumers, change.get("consumers")),
                  *(qf.format_rate(v) for v in (r.publish, r.deliver, r.ack, r.redeliver))]
    cells = [row.vhost, row.queue, row.type, *([row.node or "?"] if show_node else []), *counts, _dead_letter(row),
             flags]
    return ([row.broker] if show_broker else []) + cells


def _failure_row(result: BrokerResult, width: int, show_broker: bool) -> list[str]:
    cells = [""] * width
    if show_broker:
        cells[0] = result.broker
    cells[2 if show_broker else 1] = "(not surveyed: see warning)"
    cells[-1] = "error"
    return cells


def _with_delta(value: int, delta: int | None) -> str:
    return f"{value} ({delta:+d})" if delta else str(value)


def _dead_letter(row: qf.QueueRow) -> str:
    if row.dead_letter_exchange is None:
        return ""
    text = row.dead_letter_exchange or "(default)"
    if row.dead_letter_routing_key:
        text += f" → {row.dead_letter_routing_key}"
    if "policy" in row.dead_letter_source.values():
        text += " (policy)"
    return text
