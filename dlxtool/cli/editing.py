"""CLI glue of `replay --edit` and `load --reencode` (dlxtool.editing): the schemas loaded once and only when a
body needs them, the editor, the diff and the one question."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from dlxtool.cli.app import App, _isatty
from dlxtool.cli.reading import finish_read, make_read_options, read_queue, sample_note
from dlxtool.editing.edits import Edited, Edits
from dlxtool.errors import DlxtoolError, RefusedError, UsageError
from dlxtool.ops.stay import Why
from dlxtool.outcome import Outcome, Status
from dlxtool.render import safe_text

if TYPE_CHECKING:
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.editing.document import Document, Reading
    from dlxtool.ops.replay_decision import EditTargets
    from dlxtool.record import MessageRecord
    from dlxtool.selection import Selection
    from proto_registry import Registry


def registry_loader(app: App, *, required: bool) -> Callable[[], Registry | None]:
    """The schemas every command reads (App.schemas), loaded on the first call; None when none are configured.
    A registry that fails to load raises (`required`: load --reencode) or is said once and left out (replay --edit:
    protobuf bodies are then shown as base64, still editable)."""
    loaded: list[Registry | None] = []

    def load() -> Registry | None:
        if not loaded:
            from dlxtool.decoding import load_registry

            schemas = app.schemas()
            registry = None
            if schemas.paths or schemas.demo:
                try:
                    registry = load_registry(schemas.paths, demo=schemas.demo, cache_dir=schemas.cache_dir)
                except DlxtoolError as exc:
                    if required:
                        raise
                    app.warn(f"protobuf bodies shown as base64: {exc.message}")
            loaded.append(registry)
        return loaded[0]

    return load


# -- replay --edit -------------------------------------------------------------------------------------------------

EDIT_LIMIT = 100  # messages put in one document unless --limit says otherwise
EDIT_HELP = """\b
--edit: fix the messages themselves, then replay them. The selected
messages (the selection options; the first 100 unless --limit) are read
the way `peek` reads them, under its safety rules (--max-unacked,
--allow-reorder, --spend-attempts: see `peek --help`), and given back
before $VISUAL/$EDITOR opens one document: each message's body (protobuf
as its JSON mapping through the schemas peek uses, JSON as JSON, text as
text, anything else as base64; a gzip/zlib body inflated), properties
and headers. On save every message is checked (a protobuf body is
re-encoded with its type, a JSON body parsed; problems are named with
their message and line), a short diff of each and where it goes is
shown and one question naming the destinations asked (--yes answers
it). Then the messages shown are found again in the DLQ by fingerprint
and origin (twin copies of one fanout publish, same bytes, stay apart)
and replayed as replay replays any dead letter (origin, route, count
reset), the provenance header saying what was edited and the SHA-256 of
the original body; one that is no longer there is reported (exit 5),
one whose destination changed meanwhile stays, with the reason. Unchanged messages go out byte for byte as
replay sends them; an edited protobuf is the original with only the
changed fields applied (unknown fields kept; fields in field-number
order); an edited JSON or text body is published as saved; compressed
bodies are compressed again the same way. Quitting the editor without
saving, or emptying the document, changes nothing (an editor that exits
with an error, vim's :cq, too: exit 2); deleting a message's
section leaves that message in the DLQ. With --dry-run: edit, check and
diff, replay nothing. With --protocol 1.0 (RabbitMQ 4.x) the messages are
read over AMQP 1.0 and each goes out as its original sections with only
what was edited changed, each field of the type it had where the new
value fits (a ulong header stays a ulong); an edit with no AMQP 1.0 form
(cluster_id, the death history, a table or list in an application
property, the body of several data sections or of an amqp-value) is
named as a problem in the document.
"""


@dataclass(frozen=True)
class EditRequest:
    """--edit and the peek reader's options it reads the messages with."""

    max_unacked: int | None = None
    allow_reorder: bool = False
    spend_attempts: bool = False


def edit_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--edit; passes `edit`: an EditRequest with the reader's safety options (dlxtool.cli.reading.peek_safety_options,
    which the command takes: replay reads its plan under them too), or None."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        request = EditRequest(kwargs["max_unacked"], kwargs["allow_reorder"], kwargs["spend_attempts"])
        kwargs["edit"] = request if kwargs.pop("edit_flag") else None
        return f(*args, **kwargs)

    return click.option("--edit", "edit_flag", is_flag=True,
                        help="Edit the selected messages (body, properties, headers) in $VISUAL/$EDITOR before "
                             "replaying them (see below).")(wrapper)


def edit_dead_letters(app: App, dlq: str, selection: Selection, request: EditRequest, targets: EditTargets, *,
                      yes: bool, dry_run: bool, protocol: WireProtocol = "0-9-1") -> Edits | None:
    """Read the selected messages over `protocol` (and give them back), open them in the editor, check what was
    saved, show the diffs and where each goes (`targets`: the replay's own decision) and ask: the Edits to replay, or
    None when there is nothing to replay (nothing changed)."""
    from dlxtool.editing.document import build

    records = _read(app, dlq, selection, request, protocol)
    if not records:
        app.info(f"no message of {dlq!r} selected: nothing to edit, nothing changed")
        return None
    registry = registry_loader(app, required=False)
    profile = app.profile()
    document = build(records, f"dlxtool replay {dlq} --edit: {len(records)} message(s) of {dlq!r} on {profile.name} "
                              f"(vhost {profile.vhost!r})", registry)
    shown = {record.position: record for record, _fingerprint in records}
    reading = _edit(app, document.text(), document, registry, lambda e: _uncarried(e, shown[e.position]))
    if reading is None:
        return None
    for e in reading.edited:  # which delivery each one is, and where it goes as edited
        e.origin = targets.origin(shown[e.position])
        e.destination, e.destination_text = targets.destination(e.apply(shown[e.position]))
    _show(app, reading, dlq)
    edits = Edits(reading.edited)
    if dry_run:
        app.info("dry run: nothing was replayed")
        return None
    changed = sum(1 for e in edits.all if e.changed)
    where = Counter(e.destination_text for e in edits.all)
    to = ", ".join(f"{n} to {text}" for text, n in where.items())
    app.confirm(f"Replay these {len(edits)} message(s) of {dlq!r} ({changed} edited): {to}?", yes=yes)
    return edits


def _uncarried(e: Edited, record: MessageRecord) -> str | None:
    """Where `record` was read over AMQP 1.0: why its edit cannot go out as an AMQP 1.0 message (None: it can, or
    it was read over 0.9.1)."""
    if record.amqp10 is None or not e.changed:
        return None
    from dlxtool.ops.amqp10_outgoing import outgoing

    sent = outgoing(record, e.apply(record))
    return f"{e.label()}: {sent}" if isinstance(sent, Why) else None


def _read(app: App, dlq: str, selection: Selection, request: EditRequest,
          protocol: WireProtocol) -> list[tuple[MessageRecord, str]]:
    """The selected messages with their fingerprints, read as `peek` reads (given back before anything else)."""
    from dlxtool.ops.provenance import record_fingerprint

    limit = selection.limit if selection.limit is not None else EDIT_LIMIT
    opts = make_read_options(app, limit, max_unacked=request.max_unacked, allow_reorder=request.allow_reorder,
                             spend_attempts=request.spend_attempts, protocol=protocol)
    if selection.filters_anything:  # the matches may be anywhere: read as far as a peek may
        opts.count = opts.max_unacked
    with read_queue(app, dlq, opts, decode_if=lambda _record: False) as reader:
        if reader.facts.type == "stream":
            raise RefusedError(f"{dlq!r} is a stream: messages cannot be removed from it, so it cannot be replayed",
                               hint="consume it with a stream consumer and publish with `dlxtool load`")
        if protocol == "1.0":  # what the run over 1.0 would refuse, refused before the editor opens
            from dlxtool.ops.pipeline_amqp10 import give_back_refusal

            refusal = give_back_refusal(dlq, reader.facts.version, reader.facts.type)
            if refusal is not None:
                raise refusal
        read = list(reader.records())
    finish_read(app, reader)
    note = sample_note(reader.coverage(), "--limit N, or --max-unacked N with a selection, for more")
    if note:
        app.info(note)
    out: list[tuple[MessageRecord, str]] = []
    for record in read:
        if len(out) >= limit or not selection.matches(record):
            continue
        fingerprint = record_fingerprint(record)
        if fingerprint is None:  # pragma: no cover - properties that do not encode again: never met again either
            app.warn(f"the message at position {record.position} cannot be found again (its properties do not encode):"
                     " left out")
            continue
        out.append((record, fingerprint))
    if len(out) == limit and selection.limit is None and len(read) > limit:
        app.info(f"editing the first {limit} selected messages; --limit N for another number")
    return out


def _edit(app: App, text: str, document: Document, registry: Callable[[], Registry | None],
          uncarried: Callable[[Edited], str | None]) -> Reading | None:
    """The editor until the document is saved without problems (on a terminal the user may edit again; elsewhere a
    problem is exit 2); None when nothing is to be done (not saved, emptied). `uncarried`: a problem of an edit
    the move cannot carry (over AMQP 1.0)."""
    from dlxtool.editing.document import with_problems

    while True:
        try:
            saved = click.edit(text, extension=".txt", require_save=True)
        except click.ClickException as exc:  # it could not start, or exited with an error (vim's :cq)
            raise UsageError(f"the editor did not finish ({exc.format_message()}): nothing was replayed",
                             hint="quit it normally to go on; $VISUAL or $EDITOR names it, and must wait until you "
                                  "quit (e.g. 'code --wait')") from None
        if saved is None:
            app.info("the editor was closed without saving: nothing changed")
            return None
        reading = document.read(saved, registry)
        reading.errors += [problem for e in reading.edited if (problem := uncarried(e)) is not None]
        if reading.nothing:
            app.info("the document holds no message any more: nothing changed")
            return None
        if not reading.errors:
            return reading
        for problem in reading.errors:
            app.warn(problem)
        n = len(reading.errors)
        if not (app.stdin_is_tty() and _isatty(app.stderr)) or not click.confirm(
                f"{n} problem(s): edit again?", default=True, err=True):
            raise UsageError(f"{n} problem(s) in the edited messages (above): nothing was replayed",
                             hint="fix them and run the command again")
        text = with_problems(saved, reading.errors)


def _show(app: App, reading: Reading, dlq: str) -> None:
    """What the edit changed, message by message (stderr): a short diff each, then what goes and what stays."""
    unchanged: dict[str, list[str]] = {}
    for e in reading.edited:
        if not e.changed:
            unchanged.setdefault(e.destination_text, []).append(f"{e.number}")
            continue
        _say(app, f"{e.label()}: {', '.join(e.changed)} edited; goes to {e.destination_text}", bold=True)
        if e.how:
            app.info(f"  body {e.how}")
        for line in e.diff[2:]:  # the ---/+++ lines say nothing here
            color = "green" if line.startswith("+") else "red" if line.startswith("-") else None
            _say(app, "  " + line, **({"fg": color} if color else {}))
    for where, numbers in unchanged.items():
        app.info(f"unchanged, replayed as they are: message {', '.join(numbers)} to {where}")
    edited = sum(1 for e in reading.edited if e.changed)
    app.info(f"{len(reading.edited)} message(s) to replay from {dlq!r}: {edited} edited, "
             f"{len(reading.edited) - edited} unchanged"
             + (f"; {len(reading.left_out)} left out" if reading.left_out else ""))
    for shown in reading.left_out:
        app.info(f"left out (its section was deleted), stays in {dlq!r}: message {shown.number} (position "
                 f"{shown.record.position})")


def _say(app: App, text: str, **style: Any) -> None:
    """A line on stderr, made safe for the terminal (it holds message contents), then styled."""
    app.info("", prefix=app.style(safe_text(text), err=True, **style) if style else safe_text(text))


def edit_outcome(app: App, edits: Edits, source: str, outcome: Outcome) -> Outcome:
    """The run's outcome with the messages shown that it never met again: each said; exit 5 when they vanished
    from the DLQ (consumed, purged or replayed by someone else meanwhile)."""
    missing = edits.remaining()
    if not missing or not outcome.ok:
        return outcome
    for e in missing:
        app.warn(f"{e.label()} was not found in {source!r} any more (taken by a consumer, purged or replayed "
                 "meanwhile): nothing was published for it")
    return Outcome(Status.PARTIAL, f"{len(missing)} of the {len(edits)} message(s) shown were not found in "
                   f"{source!r} any more: nothing was published for them")


def edit_counts(edits: Edits) -> dict[str, Any]:
    """For the journal: what was edited, and what was never found again."""
    return {**edits.counts(), "vanished": len(edits.remaining())}
