"""CLI glue shared by the commands on the one-pass engine (replay, purge's reading modes, dump --remove,
load): a progress bar on a terminal, one mapping from a run's result to the exit status, and the record
FILE options mapped onto dlxtool.ops.record_files (Ctrl-C: dlxtool.ops.interrupts)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast

import click

from dlxtool.cli.app import App, _isatty
from dlxtool.errors import ConnectError, Interrupted, PartialError


class progress_bar:  # used like a function
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
            self.bar = click.progressbar(length=max(progress.total, 1), file=cast(TextIO, self.app.stderr),
                                         show_eta=True, show_pos=True, label=self.label)
            self.bar.__enter__()
        rate = progress.done / progress.elapsed if progress.elapsed > 0 else 0
        self.bar.label = f"{self.label} ({rate:,.0f}/s)"
        self.bar.update(progress.done - self.shown)
        self.shown = progress.done

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def exit_for(result: Any, what: str, *, saved: str | None = None, warn: Any = None) -> None:
    """Exit 3 when the connection was lost, 130/143/129 on a stop signal, 5 when messages were left for a reason other
    than the selection. `result` is a dlxtool.ops.engine.TransferResult; `saved` names the file that
    holds the records written so far; `warn` (App.warn) says the run's notes on stderr first."""
    for note in getattr(result, "notes", ()) if warn is not None else ():
        warn(note)
    dups = f"; {result.possible_duplicates} message(s) may now exist twice" if result.possible_duplicates else ""
    kept = f"; records written so far are in {saved}" if saved else ""
    if result.error and not getattr(result, "connection_lost", True):
        raise PartialError(f"{what} stopped by an error: {result.error}; messages not yet settled are still in "
                           f"{result.source}{kept}{dups}", hint="fix the cause (disk space, file permissions …) "
                           "and run the same command again")
    if result.error:
        raise ConnectError(f"{what} stopped: {result.error}; nothing was lost — unfinished messages are "
                           f"still in {result.source}{kept}{dups}", hint="run the same command again to continue")
    if result.interrupted:
        raise Interrupted(f"{what} interrupted; the rest is still in {result.source}{kept}{dups}")
    from dlxtool.ops.capacity import refusal

    refused = refusal(result.moved_total, result.left)
    if refused is not None:
        raise refused
    if result.left_total:
        raise PartialError(f"{result.left_total} message(s) left in {result.source}: "
                           + ", ".join(f"{why} ({n})" for why, n in sorted(result.left.items())))


def check_record_file(app: App, path: str | None) -> None:
    """Refuse a record FILE that cannot be written, before anything is read (dlxtool.ops.record_files)."""
    from dlxtool.ops.record_files import check_record_file as check

    check(path, app.stdout)


@contextmanager
def record_file(app: App, path: str | None) -> Iterator[Any]:
    """A RecordSink appending to FILE (or to stdout redirected to a file); notes go to stderr."""
    from dlxtool.ops.record_files import open_record_sink

    with open_record_sink(path, app.stdout, warn=app.warn, info=app.info) as sink:
        yield sink


def result_rows(result: Any, *, moved: str, kept: str, removed: tuple[str, str] | None = None) -> list[list[Any]]:
    """Table rows of a TransferResult: moved per target, removed, kept per reason, LEFT, not reached."""
    rows: list[list[Any]] = [[moved, q, n] for q, n in sorted(result.moved.items())]
    if removed is not None and result.removed:
        rows.append([removed[0], removed[1], result.removed])
    rows += [[kept, why, n] for why, n in sorted(result.kept.items())]
    rows += [["LEFT", why, n] for why, n in sorted(result.left.items())]
    if result.unprocessed:
        rows.append(["not reached", "", result.unprocessed])
    return rows


def duplicates_note(result: Any) -> str:
    return f"; {result.possible_duplicates} possible duplicate(s)" if result.possible_duplicates else ""
