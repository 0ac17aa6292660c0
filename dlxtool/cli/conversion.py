"""--accept-conversion-loss and how replay and move say what RabbitMQ's conversion to AMQP 0.9.1 would lose of the
messages they move (dlxtool.ops.conversion_check), before anything moves."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from dlxtool.cli.reading import make_read_options
from dlxtool.errors import RefusedError
from dlxtool.ops.conversion_check import CONVERSION_FLAG, check_conversion

if TYPE_CHECKING:
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.cli.app import App
    from dlxtool.ops.conversion_check import ConversionCheck
    from dlxtool.ops.purge import Purge
    from dlxtool.ops.session import Session
    from dlxtool.record import MessageRecord
    from dlxtool.selection import Selection

F = TypeVar("F", bound=Any)


def conversion_option(f: F) -> F:
    return click.option(
        CONVERSION_FLAG, "accept_conversion_loss", is_flag=True,
        help="Move messages published over AMQP 1.0 (RabbitMQ 4.x) even where RabbitMQ's conversion to AMQP 0.9.1, "
             "which this move publishes, loses part of them (subject, to, several data sections, milliseconds, "
             "symbol and ulong types …: the plan names them); over --protocol 1.0, messages published over 0.9.1 "
             "even where they lose their table and array headers. Without it such a move is refused (exit 6, "
             "nothing changed).")(f)


def backup_conversion_option(f: F) -> F:
    """--accept-conversion-loss of the commands that take messages into a file over 0.9.1 (purge --backup or
    --move-to, dump --remove)."""
    return click.option(
        CONVERSION_FLAG, "accept_conversion_loss", is_flag=True,
        help="Take messages published over AMQP 1.0 (RabbitMQ 4.x) even where RabbitMQ's conversion to AMQP 0.9.1, "
             "which a run over 0.9.1 reads, loses part of them (subject, to, several data sections, milliseconds, "
             "symbol and ulong types …: said before anything is taken): the backup file then holds only the "
             "conversion of a message that is removed (--move-to publishes it). Without it such a run is refused "
             "(exit 6, nothing changed); --protocol 1.0 takes them whole.")(f)


def amqp10_path() -> str | None:
    """The command's own AMQP 1.0 path, where it has one (a --protocol option): what moves such messages whole."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or not any(p.name == "protocol" for p in ctx.command.params):
        return None
    return "--protocol 1.0"


def check_wanted(accept_conversion_loss: bool, *, plan: bool, auto: bool = False) -> bool:
    """Whether to read for the check (over either protocol: each direction loses something): not without a plan to
    show when the loss is accepted already (--yes --accept-conversion-loss: the check's reads would change
    nothing) — unless --protocol auto chooses by it."""
    return plan or not accept_conversion_loss or auto


def say_conversion(app: App, check: ConversionCheck | None, *, dry_run: bool, what: str) -> None:
    """The check's words on stderr, before the question (or the dry run's end); the refusal (exit 6) where the
    default refuses and this is not a dry run."""
    if check is None:
        return
    if check.chosen:
        _say_chosen(app, check, dry_run=dry_run, what=what)
    if not check.losing:
        if check.unchecked and check.over == "1.0":
            app.warn(f"conversion not checked over AMQP 0.9.1 ({check.unchecked}): a message published over AMQP 0.9.1 "
                     f"reaches a {what} over AMQP 1.0 without its table and array headers (not x-)"
                     + ("; none of those read has one" if check.judged else ""))
        elif check.unchecked:
            app.warn(f"conversion not checked over AMQP 1.0 ({check.unchecked}): a message published over AMQP 1.0 "
                     "loses in RabbitMQ's conversion to 0.9.1 what 0.9.1 does not show (subject, to, several data "
                     "sections …)" + ("; none of those read shows a sign of AMQP 1.0" if check.judged else ""))
        return
    lines = check.lines()
    if check.accepted and not check.refuses:  # (a message 0.9.1 cannot be given at all: no flag moves it over 0.9.1)
        done = f"the {what} would {check.verb} them" if dry_run else \
            {"take": "taken", "publish": "published"}.get(check.verb, "moved")
        app.warn("\n".join(lines) + f"\n  {done} anyway ({CONVERSION_FLAG})")
        return
    app.warn("\n".join(lines))
    if dry_run:
        app.info(f"the {what} would be refused (exit 6): {check.advice()}")
        return
    raise check.refusal(what)


def _say_chosen(app: App, check: ConversionCheck, *, dry_run: bool, what: str) -> None:
    """--protocol auto chose AMQP 1.0 (dlxtool.ops.protocol_choice): why, in the 0.9.1 check's words."""
    over = f"the {what} would {check.verb} over AMQP 1.0" if dry_run else f"{what} over AMQP 1.0"
    avoided = check.other
    if avoided is None:
        app.info(f"{over} (--protocol auto): {check.chosen_because or 'chosen'}")
        return
    none_lost = ", and none of those read would lose anything over 1.0" if check.exact else ""
    app.info("\n".join([f"{over} (--protocol auto): {avoided.losing} of the {avoided.judged} message(s) "
                        f"to {avoided.verb} would lose part of what they were "
                        f"published with over AMQP 1.0 in RabbitMQ's conversion to AMQP 0.9.1; over 1.0 they go "
                        f"whole{none_lost} (--protocol 0-9-1 goes over 0.9.1):", *avoided.lines()[1:]]))


def check_taking(app: App, purging: Purge, session: Session, read: dict[str, Any], accept_conversion_loss: bool, *,
                 dry_run: bool, what: str, auto: bool = False) -> None:
    """On RabbitMQ 4.x, before the question: what RabbitMQ's conversion to 0.9.1 would lose of the
    messages published over AMQP 1.0 that --move-to would publish or --backup (dump --remove) would keep as their only
    copy (dlxtool.ops.conversion_check, as replay and move judge theirs) — over AMQP 1.0, what a 1.0 reader does not
    get of messages published over 0.9.1: said, and refused (exit 6, nothing changed) unless
    --accept-conversion-loss. A purge that only deletes is not judged (deleting is what it is for). `auto` (no
    --protocol given): the run takes them over AMQP 1.0 where that keeps them whole and 0.9.1 would not
    (dlxtool.ops.protocol_choice), `purging.protocol` set to it."""
    settings = purging.settings
    if not (settings.move_to or settings.backup):
        if auto:
            _around_a_remembered_poison(app, purging, session)
        return
    if not check_wanted(accept_conversion_loss, plan=dry_run, auto=auto):
        return
    options = make_read_options(app, None, max_unacked=read.get("max_unacked"),
                                allow_reorder=bool(read.get("allow_reorder")),
                                spend_attempts=bool(read.get("spend_attempts")), protocol=purging.protocol)

    def judged(over: WireProtocol, read_091: list[MessageRecord] | None = None,
               read_10: list[MessageRecord] | None = None) -> ConversionCheck | None:
        return check_conversion(session, settings.queue, options, include=_up_to(settings.selection), report=app,
                                accepted=accept_conversion_loss, amqp10_path=amqp10_path(),
                                taking="move" if settings.move_to else "backup", over=over,
                                limit=settings.selection.limit, keep_read=auto, read_091=read_091, read_10=read_10)

    from dlxtool.ops.protocol_choice import judge
    from dlxtool.ops.session import MoveSession

    chooser = MoveSession(session, protocol=purging.protocol)
    check = judge(chooser, settings.queue, purging.out.state.info, judged, auto=auto)
    purging.protocol = chooser.protocol
    if check is not None:
        purging.out.conversion = check.to_json()
    say_conversion(app, check, dry_run=dry_run, what=what)


def remembered_poison(purging: Purge, session: Session) -> str | None:
    """Where a read from this machine met a message RabbitMQ cannot give to 0.9.1 in the purge's queue and a 0.9.1
    read's stop there costs attempts (4.3, a quorum queue: dlxtool.ops.peek_past_poison.recall_for): that, and what a
    run over 0.9.1 would cost, in words; else None."""
    from dlxtool.ops.peek_past_poison import recall_for_queue, remembered_words

    queue = purging.settings.queue
    if session.profile is None:
        return None
    recall = recall_for_queue(session.profile, session.vhost, queue, purging.out.state.info, session.conn)
    sighting = recall.seen() if recall is not None else None
    if sighting is None:
        return None
    return (f"{remembered_words(sighting, queue)}, and a read over AMQP 0.9.1 would stop there at the cost of a "
            "delivery attempt of it and of every message before it")


def refuse_header_selection(app: App, purging: Purge, session: Session, *, dry_run: bool) -> bool:
    """--protocol auto, a selection that reads headers, a queue this machine remembers such a message in: neither
    protocol reads it for free and whole (over 1.0 a 0.9.1 message has no table headers to select by; over 0.9.1 the
    read pays the attempts), so nothing is read. A run is refused (exit 6, nothing changed); a dry run says it would
    be and returns True (it shows no messages)."""
    if not purging.settings.selection.sees_headers:
        return False
    remembered = remembered_poison(purging, session)
    if remembered is None:
        return False
    refusal = (f"{remembered}; the selection reads headers, which AMQP 1.0 does not carry of a message published "
               "over 0.9.1, so it is not read over 1.0 either")
    hint = ("--protocol 0-9-1 reads and runs over 0.9.1 at that cost; or select by what 1.0 carries (--message-id, "
            "--routing-key, --body-contains …)")
    if not dry_run:
        raise RefusedError(f"purge refused: {refusal}; nothing was read, nothing was changed", hint=hint)
    app.warn(f"no message was read, and the purge would be refused (exit 6): {refusal} ({hint})")
    return True


def _around_a_remembered_poison(app: App, purging: Purge, session: Session) -> None:
    """A purge that only deletes converts nothing, so auto keeps 0.9.1 — except where this machine remembers a
    message RabbitMQ cannot give to 0.9.1 in the queue (remembered_poison): over 1.0, where that path can take the
    queue, the run deletes what is selected and gives the rest back in place without that cost. (A selection that
    reads headers is refused before this: refuse_header_selection.)"""
    from dlxtool.ops.protocol_choice import amqp10_blocker
    from dlxtool.ops.session import MoveSession

    if purging.protocol != "0-9-1" or purging.settings.selection.sees_headers:
        return
    remembered = remembered_poison(purging, session)
    info, queue = purging.out.state.info, purging.settings.queue
    if remembered is None or amqp10_blocker(MoveSession(session, protocol="1.0"), queue, info) is not None:
        return
    purging.protocol = "1.0"
    app.info(f"purging over AMQP 1.0 (--protocol auto): {remembered}; over 1.0 the selected messages are deleted "
             "and the others given back in place, untouched")

def _up_to(selection: Selection) -> Callable[[MessageRecord], bool]:
    """Whether the run would take a message of the head read in order: it matches, and the selection's --limit (-n)
    is not reached yet (a message past it stays, whatever the conversion would do to it)."""
    taken = 0

    def include(record: MessageRecord) -> bool:
        nonlocal taken
        if selection.limit is not None and taken >= selection.limit:
            return False
        if not selection.matches(record):
            return False
        taken += 1
        return True

    return include
