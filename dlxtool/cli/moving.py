"""CLI glue shared by the commands on the one-pass engine (replay, purge's reading modes, dump --remove,
load): a progress bar on a terminal, a run's notes and summary rows, and the record FILE options mapped
onto dlxtool.ops.record_files (Ctrl-C: dlxtool.ops.interrupts). How a run ended is its Outcome
(dlxtool.ops.outcomes), turned into an exit code by dlxtool.cli.output."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, Protocol, TextIO, TypeVar, cast

import click

from dlxtool.cli.app import App, _isatty
from dlxtool.render import safe_text

if TYPE_CHECKING:
    from dlxtool.message_ids import MessageIds
    from dlxtool.ops.transfer_result import TransferResult
    from dlxtool.outcome import Outcome

PROGRESS_INTERVAL = 5.0  # seconds between progress lines without a terminal ($DLXTOOL_PROGRESS_INTERVAL)


class progress_bar:  # used like a function
    """A click progress bar on stderr when it is a terminal; otherwise a line on stderr every PROGRESS_INTERVAL
    seconds (progress_lines), so that a run in a pipe, a cron job or CI says how it goes.

    Called with an engine `Progress` (total, done, moved, elapsed)."""

    def __init__(self, app: App, label: str) -> None:
        self.app = app
        self.label = label
        self.bar: Any = None
        self.shown = 0

    def __enter__(self) -> Callable[[Any], None] | None:
        if _isatty(self.app.stderr):
            return self
        return progress_lines(self.app, self.label)

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


def progress_lines(app: App, label: str) -> Callable[[Any], None] | None:
    """Without a terminal: `label: 12,000 of 30,000 handled (11,990 moved) in 5s, 2,400/s; 18,000 left (about 8s)`,
    on stderr every $DLXTOOL_PROGRESS_INTERVAL seconds of the command's environment (default 5; 0: none). A run that
    ends sooner prints none: its summary says it all."""
    setting = app.env.get("DLXTOOL_PROGRESS_INTERVAL", "")
    try:
        interval = float(setting) if setting else PROGRESS_INTERVAL
    except ValueError:
        interval = PROGRESS_INTERVAL
    if interval <= 0:
        return None
    next_at = [interval]

    def line(progress: Any) -> None:
        if progress.elapsed < next_at[0]:
            return
        while next_at[0] <= progress.elapsed:  # at a fixed interval from the start, however late the report came
            next_at[0] += interval
        rate = progress.done / progress.elapsed if progress.elapsed > 0 else 0.0
        left = max(progress.total - progress.done, 0)
        moved = f" ({progress.moved:,} moved)" if progress.moved and progress.moved != progress.done else ""
        eta = f" (about {left / rate:,.0f}s)" if rate > 0 and left else ""
        app.info(f"{label}: {progress.done:,} of {progress.total:,} handled{moved} in {progress.elapsed:.0f}s, "
                 f"{rate:,.0f}/s; {left:,} left{eta}")

    return line


class Journaled:
    """One run's journal lines (dlxtool.journal): `started` writes the start, just before the run changes anything;
    `ended(outcome, ...)` the end. A journal that cannot be written is a warning; with --no-journal or `journal =
    false` nothing is written."""

    def __init__(self, app: App, command: str) -> None:
        self.app, self.command = app, command
        self.run: str | None = None
        self.journal: Any = None
        if not app.no_journal and app.config().journal:
            from dlxtool.journal import Journal, journal_path

            self.journal = Journal(journal_path(app.env))

    def started(self, profile: Any, queues: list[str], files: list[str] | None = None) -> None:
        if self.journal is None:
            return
        self.run = self.journal.start(self.command, self.app.argv, broker=profile.name,
                                      broker_user=profile.username if profile.auth != "external" else None,
                                      vhost=profile.vhost, queues=[q for q in queues if q], files=files or [])
        self.app.unended_run = self  # a command that fails from here on ends it (dlxtool.cli: finish)
        self._said()

    def ended(self, outcome: Any, *, counts: dict[str, Any] | None = None, files: list[str] | None = None,
              message_ids: Any = None, queues: Iterable[str] = ()) -> None:
        """`message_ids`: dlxtool.message_ids.MessageIds of what the run changed (a TransferResult's `ids`);
        `queues`: where it put messages that its start did not name (a replay's origins)."""
        if self.journal is None or self.run is None:
            return
        self.journal.end(self.run, status=outcome.status.value, message=outcome.message, counts=counts or {},
                         files=files or [], message_ids=message_ids, queues=queues)
        self.run = None
        self.app.unended_run = None
        self._said()

    def decision(self, kind: str, facts: dict[str, Any]) -> None:
        """A decision the run took on its own (replay's canary verdict, its brake), between its start and end."""
        if self.journal is None or self.run is None:
            return
        self.journal.decision(self.run, kind, facts)
        self._said()

    def _said(self) -> None:
        if self.journal.problem is not None:
            self.app.warn(self.journal.problem)
            self.journal.problem = None


def transfer_counts(result: Any) -> dict[str, Any]:
    """A TransferResult's counts by outcome, for the journal."""
    return {"moved": result.moved_total, "removed": result.removed, "left": result.left_total,
            "kept": sum(result.kept.values()), "republished_to_tail": result.republished,
            "possible_duplicates": result.possible_duplicates, "not_reached": result.unprocessed}


def notes(app: App, result: Any) -> None:
    """What the operator should know of how a run went (TransferResult.notes), as warnings on stderr."""
    for note in getattr(result, "notes", ()):
        app.warn(note)


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


def result_rows(result: Any, *, moved: str, kept: str, removed: tuple[str, str] | None = None,
                short: Callable[[str], str] = str) -> list[list[Any]]:
    """Table rows of a TransferResult: moved per target, removed, kept per reason, LEFT, not reached. `short`:
    how a reason shows (dlxtool.cli.explaining.Cells: its first words, whole with -v)."""
    rows: list[list[Any]] = [[moved, q, n] for q, n in sorted(result.moved.items())]
    if removed is not None and result.removed:
        rows.append([removed[0], removed[1], result.removed])
    rows += [[kept, short(why), n] for why, n in sorted(result.kept.items())]
    rows += [["LEFT", short(why), n] for why, n in sorted(result.left.items())]
    if result.unprocessed:
        rows.append(["not reached", "", result.unprocessed])
    return rows


def duplicates_note(result: Any) -> str:
    return f"; {result.possible_duplicates} possible duplicate(s)" if result.possible_duplicates else ""


ID_LIST_FIRST = 10  # names a table lists of a dry run's messages; --format json lists them all


def write_id_list(app: App, verb: str, rows: list[tuple[str, str]], total: int | None = None,
                  sampled: bool = False) -> None:
    """Under a dry run's table (stdout): the names of the messages it would move — `rows` of (where, name) in queue
    order, the first ID_LIST_FIRST of them and how many there are (`total`: of the rows, unless the plan knows
    more are selected than it names)."""
    count = len(rows) if total is None else total
    if not count:
        return

    shown = rows[:ID_LIST_FIRST]
    looked = " of those looked at" if sampled else ""
    which = f"the first {len(shown)} of {count:,}; --format json lists all" if len(shown) < count else f"{count:,}"
    app.stdout.write(f"message ids it would {verb}{looked} ({which}):\n")
    width = max(len(safe_text(where)) for where, _name in shown)
    for where, name in shown:
        app.stdout.write(f"  {safe_text(where):<{width}}  {safe_text(name)}\n" if width else f"  {safe_text(name)}\n")
    if len(shown) < count:
        app.stdout.write(f"  … and {count - len(shown):,} more\n")
    app.stdout.flush()


class Finished(Protocol):
    """A finished run as run_moving handles it: the pipeline's MoveRun (dlxtool.ops.pipeline), a purge's
    PurgeReport (dlxtool.ops.purge), whose plain queue.purge has no engine result, or a load's LoadRun
    (dlxtool.ops.load), which publishes from a file, not from a queue."""

    @property
    def result(self) -> TransferResult | None: ...

    @property
    def ids(self) -> MessageIds | None: ...  # what the run changed, for the journal

    @property
    def filled(self) -> list[str]: ...

    def clean_up(self) -> None: ...

    def outcome(self) -> Outcome: ...


F = TypeVar("F", bound=Finished)


def run_moving(app: App, ctrl_c: Any, *, command: str, profile: Any, queues: list[str], label: str,
               save_file: str | None, run: Callable[[Any, Any], F], render: Callable[[F], None],
               counts: Callable[[F], dict[str, Any]] | None = None,
               outcome: Callable[[F, Outcome], Outcome] | None = None, journaled: Journaled | None = None,
               records: bool | None = None, files: list[str] | None = None,
               end_files: list[str] | None = None) -> Outcome:
    """The part every command that moves messages shares once it was confirmed (dlxtool.ops.pipeline runs the move
    itself): the record file (--save), the progress bar, Ctrl-C armed (a stop signal from here on ends with a
    summary), the journal's start and end, the summary (`render`), the notes, the temporary exchanges deleted once
    the summary is out, the outcome. `run(sink, progress)` runs the move (a Finished run); `counts` adds to the
    journal's counts, `outcome(run, outcome)` may turn the run's outcome into another (replay --edit: the messages
    shown never met again; a guarded replay's stop); `journaled`: the run's journal where it was made before
    (decisions go to it during the run). `records`: whether records are written (default: where `save_file` is
    given; `dump --remove` writes them to stdout redirected to a file, save_file None); `files`: the journal's
    files (default: save_file), `end_files` those of its end (default: the same)."""
    writes = bool(save_file) if records is None else records
    files = files if files is not None else [save_file] if save_file else []
    journaled = journaled or Journaled(app, command)
    with record_file(app, save_file) if writes else nullcontext() as sink, progress_bar(app, label) as bar:
        ctrl_c.arm()
        journaled.started(profile, queues, files=files)
        done = run(sink, bar)
    render(done)
    done.clean_up()  # the temporary exchanges, once the summary is out
    result = done.result
    if result is not None:
        notes(app, result)
    ended = done.outcome()
    if outcome is not None:
        ended = outcome(done, ended)
    journaled.ended(ended, counts={**(transfer_counts(result) if result is not None else {}),
                                   **(counts(done) if counts else {})},
                    files=files if end_files is None else end_files, message_ids=done.ids, queues=done.filled)
    return ended
