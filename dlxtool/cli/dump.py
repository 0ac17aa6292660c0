"""`dlxtool dump QUEUE`: message records (JSON Lines) of a queue's messages; nothing removed, or
drained with --remove (record written and fsynced, then acked: no unacked bound)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import replace
from typing import IO, Any

import click

from dlxtool.cli.app import App
from dlxtool.cli.conversion import backup_conversion_option, check_taking
from dlxtool.cli.moving import check_record_file, duplicates_note, run_moving
from dlxtool.cli.options import (
    SELECTION_HELP,
    connection_options,
    format_option,
    queue_argument,
    record_decoder,
    selection_for,
    selection_options,
    yes_option,
)
from dlxtool.cli.reading import (
    SAFETY_HELP,
    auto_protocol,
    check_count,
    finish_read,
    make_read_options,
    read_options,
    read_queue,
)
from dlxtool.errors import UsageError
from dlxtool.ops.interrupts import summary_before_ctrl_c
from dlxtool.outcome import OK, Outcome
from dlxtool.record import MessageRecord
from dlxtool.selection import Selection


def _summary_format(f: Any) -> Any:
    return format_option(f, help="Format of the --remove -o FILE summary on stdout: jsonl (one line; the default "
                                 "when piped), json (indented), or table for none (the default on a terminal). The "
                                 "records are always JSON Lines.")


@click.command(epilog=SAFETY_HELP + "\n" + SELECTION_HELP)
@queue_argument
@click.option("-n", "--count", "--limit", "count", type=click.IntRange(min=1), default=None,
              help="How many messages from the head (of those the selection selects, if any).")
@click.option("--all", "all_", is_flag=True, help="Every message there is (the default).")
@click.option("-o", "--output", metavar="FILE",
              help="Write to FILE (complete when it appears: written as FILE.partial, then renamed; "
                   "anything but a regular file, e.g. a symlink or a device, is written in place); "
                   "default stdout. An existing non-empty FILE is refused without --force.")
@click.option("--force", is_flag=True, help="Replace an existing non-empty FILE (without --remove).")
@click.option("--remove", is_flag=True,
              help="Drain: take the messages away, each written and flushed to the file before its ack "
                   "(no unacked bound; FILE is appended to). Asks first unless --yes.")
@yes_option
@backup_conversion_option
@selection_options(limit=False)
@read_options
@_summary_format
@connection_options
@click.pass_obj
def dump(app: App, /, queue: str, count: int | None, all_: bool, output: str | None, remove: bool, force: bool,
         yes: bool, accept_conversion_loss: bool, selection: Selection, **read: object) -> Outcome | None:
    """Write QUEUE's messages as message records (JSON Lines), without removing them.

    Same reading as `peek`, with the same safety rules (below): the messages
    are held unacked until the dump ends and then given back in place,
    so a dump bigger than --max-unacked (config dump_unacked_limit) is
    refused; stderr says how much the dump holds. `load` publishes a dump
    back; `history --from` explains it.

    --remove drains instead (like `purge --backup`): the messages present at
    the start (or the first -n) are consumed, each record is appended to
    FILE and flushed to disk before the message is acked, so a crash or a
    cut loses nothing and nothing big is held unacked. It needs a file
    (-o FILE, or stdout redirected to one), never a pipe. With -o FILE it
    prints a JSON summary on stdout (removed, possible_duplicates, error…)
    for scripts, as purge and replay do. With a selection only the messages
    it selects are taken (-n counts them); the others stay, in order, as
    with `purge --backup` and filters. Over AMQP 0.9.1 on RabbitMQ 4.x,
    messages published over AMQP 1.0 that RabbitMQ's conversion changes
    (a subject dropped, data sections merged …) are named before anything
    is taken; --remove without --protocol then takes them over AMQP 1.0,
    whole (each record's `amqp10`), where none of the messages it takes
    would lose anything there, as purge does; otherwise, and with
    --protocol 0-9-1, it is refused (exit 6) unless
    --accept-conversion-loss: the file would hold only the conversion.

    \b
    Examples:
      dlxtool dump orders.dlq -o orders-dlq.jsonl
      dlxtool dump orders.dlq -n 100 | jq -r .routing_key
      dlxtool --broker prod-eu dump audit.stream --offset 2h -o audit.jsonl
      dlxtool dump orders.dlq --remove -o orders-dlq.jsonl --yes
      dlxtool dump orders.dlq --remove -o orders-dlq.jsonl --protocol 1.0
      dlxtool dump orders.dlq --origin orders --reason rejected -o rejected.jsonl
    """
    check_count(count, all_)
    if remove:
        return _drain(app, queue, count, output, yes, read, selection_for(app, selection, decode=True),
                      accept_conversion_loss)
    if accept_conversion_loss:
        raise click.BadParameter("only means something with --remove (a dump without it takes nothing)",
                                 param_hint="--accept-conversion-loss")
    opts = make_read_options(app, count, selection=selection_for(app, selection), past_poison=True, **read)  # type: ignore[arg-type]
    path = output if output not in (None, "-") else None
    in_place = path is not None and _check_target(path, force)
    with read_queue(app, queue, opts) as reader, _open(app, path, in_place) as stream:
        for batch in reader.batches():
            for record in batch:
                stream.write(record.to_jsonl())
            stream.flush()
    if path and not in_place:
        os.replace(path + ".partial", path)
    cov = reader.coverage()
    of = f" of {cov.queue_depth:,}" if cov.sampled and cov.queue_depth is not None else ""
    part = f" (the first {cov.looked_at:,}; -n N or --all for more)" if cov.sampled else ""
    app.info(f"dumped {reader.shown:,}{of} messages of {queue!r}{part} to {path or 'stdout'}; nothing was removed")
    finish_read(app, reader)
    return None


def _drain(app: App, queue: str, count: int | None, output: str | None, yes: bool, read: dict[str, Any],
           selection: Selection, accept_conversion_loss: bool) -> Outcome:
    """--remove: a purge --backup (dlxtool.ops.purge.Purge, its checks and its run over the move pipeline, over
    --protocol) whose records are dump's (DecodingSink) and whose summary is dump's."""
    from dlxtool.ops.purge import DRAIN_WORDS, Purge, PurgeReport, PurgeSettings

    if read.get("offset") is not None:
        raise UsageError("--offset is for reading streams; streams cannot be drained (--remove)")
    # over AMQP 1.0 where chosen: each record then holds the message whole (refused, exit 2, where it cannot be)
    asked = auto_protocol(app, read.get("protocol"))
    protocol = asked or "0-9-1"
    # --protocol auto (or none given, and none or auto in $DLXTOOL_PROTOCOL): the check chooses
    # (dlxtool.ops.protocol_choice), as purge's
    auto = asked is None
    check_record_file(app, output)  # before the question and before anything is read
    profile = app.profile()
    where = output if output not in (None, "-") else "stdout"
    settings = PurgeSettings(queue, replace(selection, limit=count), backup=where)

    def render(report: PurgeReport) -> None:
        result = report.result
        assert result is not None  # --remove always reads
        app.info(f"removed {result.removed} of {result.snapshot} messages of {queue!r} into {where} (each "
                 f"flushed to disk before its ack) in {app.elapsed():.1f}s" + duplicates_note(result))
        if where != "stdout" and app.output_format() != "table":
            # Scripts rely on the summary (possible_duplicates above all), like purge's and replay's. Not when
            # the records themselves go to stdout: they would end up in the record file.
            losses = {"conversion_losses": report.conversion} if report.conversion is not None else {}
            app.emit_json({**report.state.to_json(), **result.to_json(), **losses, "file": where})

    with summary_before_ctrl_c() as ctrl_c, app.connection(profile) as conn:
        session = app.session(profile, conn)
        draining = Purge(session, settings, app, dry_run=False, words=DRAIN_WORDS, protocol=protocol)
        if draining.nothing_to_do is not None:
            app.info(f"nothing to take: {draining.nothing_to_do}; nothing was changed")
            return OK
        safety = {k: read.get(k) for k in ("max_unacked", "allow_reorder", "spend_attempts")}
        check_taking(app, draining, session, safety, accept_conversion_loss,
                     dry_run=False, what="dump --remove", auto=auto)
        n = draining.out.state.ready if count is None else min(count, draining.out.state.ready)
        which = f"{n} messages"
        if selection.filters_anything:
            which = (f"the messages that match ({selection.describe_text()})"
                     + (f", the first {count}," if count is not None else ""))
        app.confirm(f"Take {which} out of {queue!r} on {profile.name} into {where}?", yes=yes)
        decoder = record_decoder(app)  # `decoded` as `dump` writes it
        return run_moving(app, ctrl_c, command="dump --remove", profile=profile, queues=[queue], label="draining",
                          save_file=output, records=True, files=[where], render=render,
                          run=lambda sink, bar: draining.run(DecodingSink(sink, decoder), bar,
                                                             max_bytes=app.max_bytes))


class DecodingSink:
    """A record sink (dlxtool.ops.record_files) that fills each record's `decoded` before it is written, as `dump`
    (and peek) do: `dump --remove | jq '.decoded…' | load --reencode` works on what --remove wrote. Everything else
    (flush, failed, unsaved…) is the wrapped sink's; the record is the engine's own object (it tells records apart
    by identity), given its `decoded` in place."""

    def __init__(self, sink: Any, decode: Callable[[MessageRecord], dict[str, Any] | None]) -> None:
        self.sink, self.decode = sink, decode

    def write(self, record: MessageRecord) -> None:
        if record.decoded is None:
            record.decoded = self.decode(record)
        self.sink.write(record)

    def flush(self) -> None:
        self.sink.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sink, name)


def _check_target(path: str, force: bool) -> bool:
    """Whether to write FILE in place (it exists and is not a regular file: a symlink, a device, a fifo —
    never renamed over); refuses to replace a non-empty regular file (a purge backup?) without --force."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        return True
    if st.st_size and not force:
        raise UsageError(f"{path} already exists and holds {st.st_size} bytes (a backup of removed messages "
                         "may be the only copy): refusing to replace it",
                         hint="--force replaces it; or give another -o FILE")
    return False


class _open:
    """stdout's byte stream, FILE.partial (removed again if the dump fails), or FILE itself (in place)."""

    def __init__(self, app: App, path: str | None, in_place: bool = False) -> None:
        self.app, self.path, self.in_place = app, path, in_place
        self.stream: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        if self.path is None:
            out = self.app.stdout
            return out.buffer if hasattr(out, "buffer") else out  # type: ignore[return-value]
        from dlxtool.ops.record_files import PRIVATE_MODE, create_private, open_to_others, open_to_others_note

        try:
            target = self.path if self.in_place else self.path + ".partial"
            # Bodies: a file made here is its owner's only (0600, whatever the umask). FILE.partial becomes FILE:
            # one an earlier run left behind is made 0600 too (never followed if it is a link); FILE in place (a
            # link, a device, a fifo) is written as it is.
            flags = os.O_WRONLY | os.O_TRUNC | (0 if self.in_place else os.O_NOFOLLOW)
            fd = create_private(target, flags)
            if not self.in_place:
                os.fchmod(fd, PRIVATE_MODE)
            self.stream = open(fd, "wb")  # closed in __exit__
        except OSError as exc:
            raise UsageError(f"cannot write {self.path}: {exc.strerror}") from None
        mode = open_to_others(fd)
        if mode is not None:
            self.app.warn(open_to_others_note(self.path, mode))
        return self.stream

    def __exit__(self, exc_type: object, *_: object) -> None:
        if self.stream is None:
            return
        self.stream.close()
        if exc_type is not None and self.path and not self.in_place:
            os.unlink(self.path + ".partial")
