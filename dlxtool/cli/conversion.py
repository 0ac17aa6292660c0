"""--accept-conversion-loss and how replay and move say what RabbitMQ's conversion to AMQP 0.9.1 would lose of the
messages they move (dlxtool.ops.conversion_check), before anything moves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import click

from dlxtool.ops.conversion_check import CONVERSION_FLAG

if TYPE_CHECKING:
    from dlxtool.cli.app import App
    from dlxtool.ops.conversion_check import ConversionCheck

F = TypeVar("F", bound=Any)


def conversion_option(f: F) -> F:
    return click.option(
        CONVERSION_FLAG, "accept_conversion_loss", is_flag=True,
        help="Move messages published over AMQP 1.0 (RabbitMQ 4.x) even where RabbitMQ's conversion to AMQP 0.9.1, "
             "which this move publishes, loses part of them (subject, to, several data sections, milliseconds, "
             "symbol and ulong types …: the plan names them); over --protocol 1.0, messages published over 0.9.1 "
             "even where they lose their table and array headers. Without it such a move is refused (exit 6, "
             "nothing changed).")(f)


def amqp10_path() -> str | None:
    """The command's own AMQP 1.0 path, where it has one (a --protocol option): what moves such messages whole."""
    ctx = click.get_current_context(silent=True)
    if ctx is None or not any(p.name == "protocol" for p in ctx.command.params):
        return None
    return "--protocol 1.0"


def check_wanted(accept_conversion_loss: bool, *, plan: bool) -> bool:
    """Whether to read for the check (over either protocol: each direction loses something): not without a plan to
    show when the loss is accepted already (--yes --accept-conversion-loss: the check's reads would change
    nothing)."""
    return plan or not accept_conversion_loss


def say_conversion(app: App, check: ConversionCheck | None, *, dry_run: bool, what: str) -> None:
    """The check's words on stderr, before the question (or the dry run's end); the refusal (exit 6) where the
    default refuses and this is not a dry run."""
    if check is None:
        return
    if not check.losing:
        if check.unchecked and check.over == "1.0":
            app.warn(f"conversion not checked over AMQP 0.9.1 ({check.unchecked}): a message published over AMQP 0.9.1 "
                     "reaches a move over AMQP 1.0 without its table and array headers (not x-)"
                     + ("; none of those read has one" if check.judged else ""))
        elif check.unchecked:
            app.warn(f"conversion not checked over AMQP 1.0 ({check.unchecked}): a message published over AMQP 1.0 "
                     "loses in RabbitMQ's conversion to 0.9.1 what 0.9.1 does not show (subject, to, several data "
                     "sections …)" + ("; none of those read shows a sign of AMQP 1.0" if check.judged else ""))
        return
    lines = check.lines()
    if check.accepted:
        app.warn("\n".join(lines) + f"\n  {'the ' + what + ' would move them' if dry_run else 'moved'} anyway "
                 f"({CONVERSION_FLAG})")
        return
    app.warn("\n".join(lines))
    if dry_run:
        app.info(f"the {what} would be refused (exit 6): {check.advice()}")
        return
    raise check.refusal(what)
