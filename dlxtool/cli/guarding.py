"""replay's guard options (--canary, --canary-wait, --brake/--no-brake, --batch/--pause) and their summary: parse,
call dlxtool.ops.canary, render. The replay command calls `Guarding.run` in place of its plain run."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import click

from dlxtool import secrets
from dlxtool.cli.app import App
from dlxtool.cli.explaining import Cells
from dlxtool.ops.guard_settings import BRAKE_DEFAULT, BRAKE_WINDOW, GuardSettings

F = TypeVar("F", bound=Callable[..., Any])

GUARD_HELP = """\b
Canary and brake (docs/canary.md):
--canary N (or P%) replays N messages first — the first of each origin
and failure group met, and some of the head — and watches them: one that
dies again (it carries this run's provenance) fails; one whose origin
then holds no ready message for 2 s passes. It waits at most
--canary-wait. A failed canary, or one undecided by then, stops the run:
nothing more moves, the failures are named, exit 8. Else the run goes on
(asking again without --yes).
The brake (on by default, --no-brake) watches the whole run: when more
than --brake (default 10%) of the last 50 messages replayed died again
(3 at least), it stops publishing, gives back what it holds and says
what died again, by failure, with an example (exit 8).
Watching is a tap: a temporary queue of its own (exclusive; over
--protocol 1.0 durable and auto-delete) bound to the exchanges the DLQ
is bound to, with its binding keys: it sees copies of new dead letters,
never touches the DLQ or the origins. It cannot see dead letters
that reach the DLQ through the default exchange (then the brake is off,
and --canary is refused), nor a route changed during the run.
--batch N --pause D: a pause of D after every N messages read (with
--rate, both apply).
"""


def _canary(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int | None, float | None]:
    if value is None:
        return None, None
    text = value.strip()
    try:
        if text.endswith("%"):
            share = float(text[:-1])
            if not 0 < share <= 100:
                raise ValueError
            return None, share
        n = int(text)
        if n < 1:
            raise ValueError
        return n, None
    except ValueError:
        raise click.BadParameter("a number of messages (e.g. 20) or a share of the DLQ (e.g. 5%)") from None


def _fraction(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip()
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise click.BadParameter("a fraction (0.1) or a percentage (10%)") from None
    if not 0 <= share < 1:
        raise click.BadParameter("between 0 and 1 (0.1), or 0% to 99%")
    return share


def guard_options(func: F) -> F:
    """Adds the guard's options and passes `guard` (a GuardSettings) to the command."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        canary, percent = kwargs.pop("g_canary")
        brake = kwargs.pop("g_brake")
        no_brake = kwargs.pop("g_no_brake")
        batch, pause = kwargs.pop("g_batch"), kwargs.pop("g_pause")
        if pause and not batch:
            raise click.UsageError("--pause goes with --batch N (a pause after every N messages)")
        if no_brake and brake is not None:
            raise click.UsageError("--brake and --no-brake contradict each other")
        kwargs["guard"] = GuardSettings(
            canary=canary, canary_percent=percent, canary_wait=kwargs.pop("g_canary_wait"),
            brake=None if no_brake else (BRAKE_DEFAULT if brake is None else brake),
            brake_window=kwargs.pop("g_brake_window"), batch=batch, pause=pause or 0.0, rate=kwargs.get("rate"))
        return func(*args, **kwargs)

    options = [
        click.option("--canary", "g_canary", metavar="N|P%", callback=_canary,
                     help="Replay N messages (or P% of the DLQ) first, across origins and failure groups, and watch "
                          "them; stop there (exit 8) if one dies again."),
        click.option("--canary-wait", "g_canary_wait", type=click.FloatRange(min=1), default=60.0, show_default=True,
                     metavar="SECONDS", help="Longest wait for the canaries' verdict."),
        click.option("--brake", "g_brake", metavar="FRACTION", callback=_fraction,
                     help="Stop when more than this share of the last --brake-window messages replayed died again "
                          "(default 0.1 = 10%)."),
        click.option("--no-brake", "g_no_brake", is_flag=True, help="Do not watch the run (no tap, no brake)."),
        click.option("--brake-window", "g_brake_window", type=click.IntRange(min=10), default=BRAKE_WINDOW,
                     show_default=True, metavar="N", help="The brake's sliding window, in messages replayed."),
        click.option("--batch", "g_batch", type=click.IntRange(min=1), metavar="N",
                     help="Replay in batches of N messages read, with --pause between them."),
        click.option("--pause", "g_pause", type=click.FloatRange(min=0), metavar="SECONDS",
                     help="The pause after each --batch."),
    ]
    out: Any = wrapper
    for opt in reversed(options):
        out = opt(out)
    result: F = out
    return result


class Guarding:
    """One guarded replay for the CLI: runs it (dlxtool.ops.canary.Guard), renders its part of the summary, gives
    its outcome and its journal counts."""

    def __init__(self, app: App, settings: GuardSettings, journaled: Any, *, yes: bool) -> None:
        from dlxtool.ops.canary import Guard

        self.app = app
        self.guard = Guard(settings, report=app, decided=journaled.decision,
                           confirm=None if yes else lambda q: app.confirm(q, yes=False))

    def run(self, replay: Any, options: Any) -> Any:
        return self.guard.run(replay, options)

    def check(self, replay: Any) -> None:
        """Before the plan is read: --canary where no tap can be made is refused (exit 6, nothing changed)."""
        self.guard.check(replay)

    def outcome(self, run: Any) -> Any:
        """The guard's outcome; a stop's hint names the command that resumes (secrets masked)."""
        outcome = self.guard.outcome(run)
        if self.guard.guard.stopped and outcome.status.value == "stopped" and self.app.argv:
            import shlex

            command = shlex.join(["dlxtool", *(secrets.scrub(a) for a in self.app.argv)])
            outcome = replace(outcome, hint=f"{outcome.hint}: {command}")
        return outcome

    def counts(self) -> dict[str, Any]:
        g = self.guard.guard
        out: dict[str, Any] = {}
        if g.watched:
            out.update(moved_and_stayed_out=g.stayed_out, moved_and_died_again=g.died_again)
        if g.stopped:
            out["stopped_by"] = g.stopped
        return out

    def render(self, app: App, run: Any, render_result: Callable[[App, Any], None]) -> None:
        g = self.guard.guard
        fmt = app.output_format()
        if fmt != "table":
            result = run.result
            app.emit_json({**result.to_json(), "routes": run.routes, "depths_after": run.depths,
                           "guard": g.to_json()}, fmt)
            return
        render_result(app, run)
        c = g.canary
        if c is not None:
            said = {"passed": f"all {c.moved} passed", "failed": f"{len(c.failed)} of {c.moved} died again",
                    "undecided": f"{c.moved} undecided after {c.waited:.0f}s"}.get(c.decided, c.decided)
            app.info(f"canary: {said} (waited {c.waited:.1f}s; origins {', '.join(c.origins) or '-'})")
        if g.watched and (g.died_again or c is not None):  # else: the replay's line says it all
            app.info(f"moved and stayed out: {g.stayed_out}; moved and died again: {g.died_again} (as the tap saw "
                     "them by the end of the run)")
        groups = g.groups()
        if groups:
            cells = Cells(app)
            app.write_table([[x["messages"], cells(x["failure"]), x["example_message"], cells(x["example_error"])]
                             for x in groups], ["died again", "failure", "example", "error"])
            cells.note()
