"""CLI glue shared by the commands on the one-pass engine (replay, purge's reading modes, dump --remove,
load): a progress bar on a terminal, and one mapping from a run's result to the exit status."""

from __future__ import annotations

from typing import Any

import click

from dlxtool.cli.app import App, _isatty
from dlxtool.errors import ConnectError, Interrupted, PartialError


class progress_bar:  # noqa: N801 - used like a function
    """A click progress bar on stderr when it is a terminal; otherwise nothing (the context value is None).

    Called with an engine `Progress` (total, done, elapsed)."""

    def __init__(self, app: App, label: str) -> None:
        self.app = app
        self.label = label
        self.bar: Any = None
        self.shown = 0

    def __enter__(self) -> progress_bar | None:
        return self if _isatty(self.app.stderr) else None

    def __call__(self, progress: Any) -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=max(progress.total, 1), file=self.app.stderr, show_eta=True,
                                         show_pos=True, label=self.label)
            self.bar.__enter__()
        rate = progress.done / progress.elapsed if progress.elapsed > 0 else 0
        self.bar.label = f"{self.label} ({rate:,.0f}/s)"
        self.bar.update(progress.done - self.shown)
        self.shown = progress.done

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def exit_for(result: Any, what: str, *, saved: str | None = None) -> None:
    """Exit 3 when the connection was lost, 130 on Ctrl-C, 5 when messages were left for a reason other
    than the selection. `result` is a dlxtool.ops.transfer.TransferResult; `saved` names the file that
    holds the records written so far."""
    dups = f"; {result.possible_duplicates} message(s) may now exist twice" if result.possible_duplicates else ""
    kept = f"; records written so far are in {saved}" if saved else ""
    if result.error:
        raise ConnectError(f"{what} stopped: {result.error}; nothing was lost — unfinished messages are "
                           f"still in {result.source}{kept}{dups}", hint="run the same command again to continue")
    if result.interrupted:
        raise Interrupted(f"{what} interrupted; the rest is still in {result.source}{kept}{dups}")
    if result.left_total:
        raise PartialError(f"{result.left_total} message(s) left in {result.source}: "
                           + ", ".join(f"{why} ({n})" for why, n in sorted(result.left.items())))
