"""`dlxtool load FILE`: publish message records back (dump, purge --backup, replay --save files)."""

from __future__ import annotations

import io
from dataclasses import dataclass, replace
from typing import IO, TYPE_CHECKING, Any

import click

from dlxtool.broker.protocols import PROTOCOLS, WireProtocol
from dlxtool.cli.app import App
from dlxtool.cli.conversion import say_conversion
from dlxtool.cli.options import common_options, dry_run_option, max_bytes_option, yes_option
from dlxtool.cli.reading import AUTO, auto_protocol
from dlxtool.errors import DlxtoolError, UsageError
from dlxtool.ops.conversion_check import CONVERSION_FLAG
from dlxtool.ops.interrupts import summary_before_ctrl_c
from dlxtool.outcome import Outcome

if TYPE_CHECKING:
    from dlxtool.ops.load import Load, LoadPlan, LoadRun, LoadSettings
    from dlxtool.ops.record_source import Opener
    from dlxtool.ops.session import Session

HELP = """Publish the message records in FILE (`-` = stdin) to a broker.

\b
Each record goes back to the queue it came from (its `queue` field), or
to --to QUEUE, mandatory and with publisher confirms. It keeps its routing
key (with --reset-history: the original one, as replay does) and reaches
only that queue, through a temporary fanout exchange bound only to it
(deleted at the end). --default-exchange publishes on the default exchange
instead (routing key = queue name). Either way the key a record is
published with is checked against its queue's dead-letter exchange
(management API): a record whose next dead-lettering there would be
dropped — routed to no queue — is not published (failed, with the reason;
exit 5, 6 when nothing was published), nor is any record when that cannot
be checked (no management API); --allow-dlx-drop publishes them anyway.
The plan names each queue's route and what it would hold back: --dry-run
shows it and stops; without --yes it is shown and a question asked (no
terminal to ask on, as with `load -`: refused, exit 6; --yes publishes
without asking). A FILE with no records: said, exit 0, nothing asked.
Body, properties and headers are published as recorded. Records are
published in file order. --broker picks the broker: a dump from prod-eu
can be loaded into staging.

\b
FILE is checked completely before anything is published: a bad line stops
the load and names FILE:LINE. A record cut short (a backup interrupted
mid-write, e.g. by a full disk) is skipped and named (FILE:LINE): its
message was never acked away, it is still in its queue. The summary counts
them (skipped_torn) and the exit status is 5 unless --allow-torn.

\b
--reencode publishes a record whose `decoded` was changed (e.g. by jq)
with the body it now says: a protobuf `decoded` is re-encoded through its
type (the schemas of peek and dump: --proto-path, proto_paths, demo
schemas) — the original message with only the changed fields applied,
unknown fields kept, fields in field-number order — and a JSON body's
`decoded` (status json) is written back as compact JSON; framing and
compression are put back as they were. A record whose `decoded` still says
what its body does keeps its bytes. A `decoded` the schema rejects stops
the load before anything is published (FILE:LINE).

\b
--reset-history applies replay's count reset (x-death, x-first/last-death-*,
x-delivery-count, retry headers, + --reset-header and the profile's
reset_headers) and adds the `dlxtool-replay` provenance header.

\b
Records that hold a whole AMQP 1.0 message (their `amqp10` field: written
by dump/peek --protocol 1.0 on RabbitMQ 4.x) lose part of it over AMQP
0.9.1 (subject, to, several data sections, milliseconds, symbol and ulong
types …): the load names what, per kind, and is refused (exit 6) unless
--accept-conversion-loss. --protocol 1.0 (or DLXTOOL_PROTOCOL=1.0)
publishes them over AMQP 1.0 as they were dumped — every section,
property, application property and its type, every message annotation
but the death history (x-opt-deaths), with dlxtool's provenance as the
x-opt-dlxtool-replay annotation — each counted as loaded only on the
broker's `accepted` outcome (`released`: routed nowhere, `rejected`:
refused — failed, with the reason). Exit 2 over 1.0 on RabbitMQ 3.x, for
a file with records that hold no amqp10 field, and with --reencode.

\b
Exit 5 if a record was cut short (without --allow-torn) or if any record
was not confirmed (queue missing → returned, queue
full → nacked): the summary says which, and --failed FILE2 collects those
records to load again. A queue with a length limit and overflow drop-head
(the default) or reject-publish-dlx takes only what fits (room = limit -
ready - unacked, counted down per record; shown by --dry-run): the rest
is not published ("full" in the summary, collected by --failed) instead
of pushing out the queue's oldest messages; exit 6 when no queue had room
at all. --allow-displace publishes anyway. Exit 3 if the connection was
lost (records that had no answer may have been published: counted as
possible duplicates); 130 on Ctrl-C (143 on SIGTERM, 129 on SIGHUP).

\b
Examples:
  dlxtool load orders-dlq.jsonl --dry-run
  dlxtool load orders-dlq.jsonl
  dlxtool --broker staging load orders-dlq.jsonl --to orders.debug --yes
  dlxtool load poison.jsonl --to orders --reset-history --failed retry.jsonl
  dlxtool dump orders.dlq | dlxtool --broker prod-us load - --to orders.dlq --yes
  dlxtool dump orders.dlq | jq -c '.decoded.message.total.currencyCode = "EUR"' \\
    | dlxtool load - --reencode --yes
"""


@click.command(help=HELP)
@click.argument("file", metavar="FILE")
@click.option("--to", "to_queue", metavar="QUEUE", help="Publish every record to QUEUE (default: its own queue).")
@click.option("--reset-history", is_flag=True, help="Remove the death history and retry counters (replay's reset).")
@click.option("--reencode", is_flag=True,
              help="Publish a record whose `decoded` was changed with the body it says (protobuf re-encoded through "
                   "its type, JSON as compact JSON); unchanged records keep their bytes.")
@click.option("--reset-header", "reset_headers", multiple=True, metavar="NAME",
              help="With --reset-history: also remove this application retry header (repeatable).")
@click.option("--failed", "failed_file", metavar="FILE2", type=click.Path(dir_okay=False),
              help="Append the records that were not confirmed to FILE2 (to load again later).")
@click.option("--window", type=click.IntRange(min=1, max=65535), default=1000, show_default=True,
              help="Publishes awaiting a confirm at once.")
@click.option("--default-exchange", is_flag=True,
              help="Publish on the default exchange with routing key = queue name (not the record's key); "
                   "queues whose dead-letter exchange would not route it get none of their records.")
@click.option("--allow-displace", is_flag=True,
              help="Publish into a full queue with overflow drop-head/reject-publish-dlx anyway (it pushes out "
                   "its oldest messages or dead-letters copies).")
@click.option("--allow-dlx-drop", is_flag=True,
              help="Publish even where the queue's dead-letter exchange would route a record's routing key to no "
                   "queue (its next dead-lettering there drops it), or where that cannot be checked (no "
                   "management API).")
@click.option("--protocol", type=click.Choice([*PROTOCOLS, AUTO]), default=None,
              help="Publish over AMQP 0.9.1, AMQP 1.0 (RabbitMQ 4.x; the amqp10 extra) or auto (the default): 1.0 "
                   "sends each record's whole AMQP 1.0 message (its amqp10 field) as dumped, the death history left "
                   "out and the provenance added; auto publishes over 1.0 where every record holds such a message "
                   "and publishing their 0.9.1 view would lose part of them, else over 0.9.1. "
                   "[env DLXTOOL_PROTOCOL; default: auto]")
@click.option(CONVERSION_FLAG, "accept_conversion_loss", is_flag=True,
              help="Publish over AMQP 0.9.1 records that hold a whole AMQP 1.0 message even though that loses part "
                   "of it (the plan names what). Without it such a load is refused (exit 6, nothing published).")
@max_bytes_option
@click.option("--allow-torn", is_flag=True,
              help="Exit 0 when records cut short (a writer stopped mid-record) were skipped.")
@dry_run_option
@yes_option
@common_options
@click.pass_obj
def load(app: App, file: str, to_queue: str | None, reset_history: bool, reencode: bool, reset_headers: tuple[str, ...],
         default_exchange: bool, failed_file: str | None, window: int, allow_displace: bool, allow_dlx_drop: bool,
         allow_torn: bool, dry_run: bool, yes: bool, protocol: str | None = None,
         accept_conversion_loss: bool = False) -> Outcome | None:
    from dlxtool.cli.moving import run_moving
    from dlxtool.ops.load import Load, LoadSettings

    if reset_headers and not reset_history:
        raise UsageError("--reset-header needs --reset-history")
    asked = auto_protocol(app, protocol)
    auto = asked is None and not reencode  # 1.0 where every record holds a whole AMQP 1.0 message: _choose
    over: WireProtocol = asked or "0-9-1"
    if over == "1.0" and reencode:
        raise UsageError("--protocol 1.0 does not load records with --reencode yet",
                         hint="leave --protocol out (0-9-1)")
    if failed_file:
        from dlxtool.cli.moving import check_record_file

        check_record_file(app, failed_file)  # before anything is published
    open_stream, name = _opener(app, file)
    profile = app.profile()
    settings = LoadSettings(name=name, to_queue=to_queue, reset_history=reset_history,
                            reset_names=tuple(dict.fromkeys((*profile.reset_headers, *reset_headers))),
                            window=window, allow_displace=allow_displace, default_exchange=default_exchange,
                            allow_dlx_drop=allow_dlx_drop, max_bytes=app.max_bytes, protocol=over)
    reencoder, changed = None, 0
    if reencode:
        from dlxtool.cli.editing import registry_loader
        from dlxtool.editing.reencode import Reencoder

        settings.reencode = reencoder = Reencoder(registry_loader(app, required=True))
    with summary_before_ctrl_c() as ctrl_c, app.connection(profile) as conn:
        session = app.session(profile, conn)
        choice = _choose(session, open_stream, settings) if auto else None
        if choice is not None and choice.over == "1.0":
            settings = replace(settings, protocol="1.0")
        if settings.protocol == "1.0":
            from dlxtool.ops.load_amqp10 import Amqp10Load

            loading: Load = Amqp10Load(session, open_stream, settings, app, dry_run=dry_run)
        else:  # the file is read once more only where auto chose 1.0
            loading = Load(session, open_stream, settings, app, dry_run=dry_run,
                           scanned=choice.scanned if choice is not None else None)
        if choice is not None:
            choice.tell(app, loading.plan, dry_run=dry_run)
        if reencoder is not None:  # counted by the check of the whole file, before anything is published
            app.info(f"--reencode: {reencoder.reencoded} of {loading.plan.records} record(s) re-encoded from "
                     "their changed `decoded`; the others keep their bytes")
            changed = reencoder.reencoded
        plan = loading.plan
        if not plan.records and not plan.torn:
            app.info(f"nothing to load: {name} has no records; nothing was published")
            return None
        if plan.losses is not None and plan.losses.losing:
            plan.losses.accepted = accept_conversion_loss
            say_conversion(app, plan.losses, dry_run=dry_run, what="load")
        if dry_run or not yes:
            _render_plan(app, plan, name)
            if dry_run:
                return None
            app.confirm(f"Publish the records of {name} as planned to {profile.name}?", yes=yes)

        def counts(run: LoadRun) -> dict[str, Any]:
            return {"published": run.published_total, "failed": run.failed_total,
                    "not_sent": run.not_sent, "possible_duplicates": run.lost,
                    **({"reencoded": changed} if reencoder is not None else {})}

        return run_moving(app, ctrl_c, command="load", profile=profile, queues=sorted(plan.targets),
                          label="loading", save_file=failed_file, files=[name, *([failed_file] if failed_file
                                                                               else [])],
                          end_files=[failed_file] if failed_file else [], counts=counts,
                          run=lambda failed, bar: loading.run(progress=bar, failed=failed, failed_file=failed_file,
                                                              allow_torn=allow_torn),
                          render=lambda run: _render_result(app, run))


@dataclass
class _Choice:
    """--protocol auto's choice for a load (_choose): `over`, and the 0.9.1 check of the file that decided it."""

    over: WireProtocol
    scanned: LoadPlan  # the file's scan over 0.9.1 (each record's losses judged)
    blocked: str | None = None

    def tell(self, app: App, plan: LoadPlan, *, dry_run: bool) -> None:
        """Said before the plan (and in its JSON): why 1.0 was chosen, or, on the 0.9.1 plan, why not."""
        plan.protocol_by = "auto"
        losses = self.scanned.losses
        if self.over == "0-9-1":
            if plan.losses is not None:
                plan.losses.auto, plan.losses.amqp10_blocked = True, self.blocked
            return
        assert losses is not None
        would = "would publish" if dry_run else "publishes"
        app.info("\n".join([f"load over AMQP 1.0 (--protocol auto): {losses.losing} of the {plan.records} "
                            "record(s) hold AMQP 1.0 messages that publishing their 0.9.1 view would lose part of; "
                            f"the load {would} each record's whole message over 1.0 (--protocol 0-9-1 publishes "
                            "over 0.9.1):", *losses.lines()[1:]]))


def _choose(session: Session, open_stream: Opener, settings: LoadSettings) -> _Choice:
    """--protocol auto: over AMQP 1.0 where every record holds a whole AMQP 1.0 message (`dump --protocol 1.0` wrote
    it), publishing their 0.9.1 view would lose part of them, and the broker speaks 1.0; else over 0.9.1, its check
    saying why not 1.0. Decided from a scan of the file before the load is prepared (the 0.9.1 load takes it)."""
    from dlxtool.ops.load import scan
    from dlxtool.ops.pipeline_amqp10 import require_amqp10

    scanned = scan(open_stream, settings)  # over 0.9.1: each record's losses judged
    if scanned.losses is None or not scanned.losses.losing:
        return _Choice("0-9-1", scanned)
    try:
        require_amqp10(session)  # RabbitMQ 4.x, python-qpid-proton (a load gives nothing back: no queue type matters)
    except DlxtoolError as refused:
        return _Choice("0-9-1", scanned, refused.message)
    if scanned.amqp10 < scanned.records:
        return _Choice("0-9-1", scanned, f"{scanned.records - scanned.amqp10} of the {scanned.records} record(s) "
                                         "hold no AMQP 1.0 message (read over AMQP 0.9.1), and a load over 1.0 "
                                         "publishes only what a read over 1.0 kept whole")
    return _Choice("1.0", scanned)


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


def _render_plan(app: App, plan: Any, name: str) -> None:
    fmt = app.output_format()
    if fmt != "table":
        app.emit_json({**plan.to_json(), "file": name, "dry_run": True}, fmt)
        return
    from dlxtool.cli.explaining import Cells
    cells = Cells(app)
    rows = [[q, n, "yes" if plan.exists[q] else "NO", plan.would_load(q) if plan.exists[q] else 0,
             cells(plan.rooms[q].describe() if q in plan.rooms else ""), cells(plan.routes.get(q, ""))]
            for q, n in sorted(plan.targets.items())]
    app.write_table(rows, ["queue", "records", "exists", "would load", "room", "route"], empty="no records")
    cells.note()
    app.info(f"dry run: would publish {sum(plan.would_load(q) for q in plan.targets if plan.exists[q])} of "
             f"{plan.records} records from {name}; nothing was published")


def _render_result(app: App, run: LoadRun) -> None:
    fmt = app.output_format()
    if fmt != "table":
        app.emit_json(run.to_json(), fmt)
        return
    from dlxtool.cli.explaining import Cells
    from dlxtool.ops.outcomes import depths_text

    result, cells = run.result, Cells(app)
    rows = [["published", q, n, cells(run.run.routes.get(q, ""))] for q, n in sorted(result.moved.items())]
    rows += [["FAILED", cells(why), n, ""] for why, n in sorted(result.left.items())]
    if run.not_sent:
        rows.append(["not sent", "", run.not_sent, ""])
    app.write_table(rows, ["outcome", "queue / reason", "records", "route"], empty="no records")
    cells.note()
    app.info(f"{run.published_total} of {result.snapshot} records published from {result.source} "
             f"in {app.elapsed():.1f}s")
    depths = depths_text(run.run.depths)
    if depths:
        app.info(depths)
