"""The `dlxtool` command: root group, lazy command loading, and the one place errors become exit codes."""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import os
import sys
from typing import IO, Any, cast

import click

from dlxtool import __version__, secrets, waits
from dlxtool.cli.app import App
from dlxtool.cli.options import all_vhosts_option, connection_options, format_option
from dlxtool.cli.output import exit_code_of
from dlxtool.cli.streams import FallbackStream, summary_file
from dlxtool.errors import DlxtoolError, QueueLocked, QueueNotFound, VhostNotFound
from dlxtool.ops import interrupts
from dlxtool.ops.interrupts import (
    describe,
    hold_stop_signals_until_exit,
    ignore_ctrl_c_from_now_on,
    take_startup_signal,
)
from dlxtool.outcome import Outcome, Status

# name -> "module:attribute"; modules load only when their command runs, so --help stays fast.
# A command's module imports what that command needs; tests/cli/test_imports.py keeps it so.
COMMANDS: dict[str, str] = {
    "brokers": "dlxtool.cli.brokers:brokers",
    "completion": "dlxtool.cli.completion:completion",
    "decode": "dlxtool.cli.decode:decode",
    "dump": "dlxtool.cli.dump:dump",
    "history": "dlxtool.cli.history:history",
    "journal": "dlxtool.cli.journal:journal",
    "load": "dlxtool.cli.load:load",
    "move": "dlxtool.cli.move:move",
    "peek": "dlxtool.cli.peek:peek",
    "purge": "dlxtool.cli.purge:purge",
    "queues": "dlxtool.cli.queues:queues",
    "replay": "dlxtool.cli.replay:replay",
}

# The first paragraph of each command's help, for `dlxtool --help`: listing the commands from here
# instead of from the commands themselves spares importing all ten modules (and pika, the management
# client…) to print one line each. tests/cli/test_help.py checks that they say the same.
SUMMARIES: dict[str, str] = {
    "brokers": "Configured broker profiles: list them, check that they answer.",
    "completion": "Print the shell completion script for SHELL (command, option, broker and queue names).",
    "decode": "Decode protobuf payloads found in FILEs (or stdin) — base64 in logs, hex, b'..', <<..>>.",
    "dump": "Write QUEUE's messages as message records (JSON Lines), without removing them.",
    "history": "Show the x-death history of the messages in QUEUE (or in a dump file).",
    "journal": "List the journal of runs that changed messages: replay, purge, load, dump --remove.",
    "load": "Publish the message records in FILE (`-` = stdin) to a broker.",
    "move": "Move messages from queue SRC to queue DST, unchanged: all of them, or the ones that match.",
    "peek": "Show the first messages of QUEUE without taking them away.",
    "purge": "Remove messages from QUEUE: all of them, or only the ones that match.",
    "queues": "Survey queues through the management API and flag trouble.",
    "replay": "Send dead letters from DLQ back to the queue each one failed in.",
}

EPILOG = """\b
Exit status: 0 ok · 1 error · 2 usage · 3 cannot connect or authenticate · 4 not found
             5 partial (some messages left or failed) · 6 refused for safety
             7 unavailable now (a node down, a resource alarm): try again later
             8 stopped by replay's canary or brake: nothing more moved
             130 interrupted (Ctrl-C) · 143 terminated (SIGTERM) · 129 hung up (SIGHUP)
\b
A stop signal (Ctrl-C, SIGTERM, SIGHUP) ends a move cleanly: in-flight copies are settled, the
rest is given back, and the summary is printed. Output the terminal could no longer take (SIGHUP)
is saved to $XDG_STATE_HOME/dlxtool/summary-*.log (~/.local/state/dlxtool; else the working dir).
"""


class DlxtoolGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        """click's, with the commands closest to a mistyped one ("did you mean 'peek'?"): click suggests from
        the commands it holds, and these load only when run (COMMANDS)."""
        name = click.utils.make_str(args[0]) if args else ""
        if name and name not in COMMANDS and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, COMMANDS, n=3, cutoff=0.6)
            if close:
                said = " or ".join(repr(c) for c in close)
                raise click.UsageError(f"No such command {name!r}: did you mean {said}?", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click.Group.format_commands, from SUMMARIES instead of from every command's module."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        # A bare Command per summary shortens it exactly as the real command's help would be shortened.
        rows = [(name, click.Command(name, help=SUMMARIES[name]).get_short_help_str(limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        argv = list(args)  # before parsing consumes them: the journal records the command line
        ctx = super().make_context(info_name, args, parent, **extra)
        ctx.ensure_object(App).argv = argv
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; what it returns (an Outcome) or raises (a DlxtoolError, pika's failure, a stop
        signal) becomes one line on stderr and the exit code (dlxtool.cli.output), here only."""
        interrupts.forget_signals()
        returned: Any = None  # every except below ends the command (ctx.exit raises)
        try:
            with interrupts.catch_stop_signals():  # SIGTERM, SIGHUP: a clean stop, as Ctrl-C
                returned = super().invoke(ctx)
        except DlxtoolError as exc:  # Interrupted too: a run stopped by a signal, its summary printed
            if isinstance(exc, QueueNotFound):
                _did_you_mean(ctx, exc)
            elif isinstance(exc, VhostNotFound):
                _vhost_did_you_mean(ctx, exc)
            elif isinstance(exc, QueueLocked):
                _owner(ctx, exc)
            finish(ctx, exc.outcome(), exc)
        except KeyboardInterrupt:  # Ctrl-C, or a StopSignal (SIGTERM, SIGHUP), outside a run
            _interrupted(ctx)
        except BrokenPipeError:
            _quiet_broken_pipe()
            ctx.exit(0)
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                _quiet_broken_pipe()
                ctx.exit(0)
            report(ctx, exc)
            _end_journaled_run(ctx, Outcome(Status.ERROR, str(exc)))
            ctx.exit(exit_code_of(Outcome(Status.ERROR)))
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:  # noqa: BLE001 - last line of defence: one line, no traceback
            if _stopped_inside(exc):
                _interrupted(ctx)
            from dlxtool.broker.connection import torn_down

            if type(exc).__module__.startswith("pika.") or torn_down(exc):
                # A lost connection or a broker's refusal mid-command: say what the broker said, not pika.
                from dlxtool.broker.connection import amqp_failure

                error = amqp_failure(exc)
                error.__cause__ = exc  # --debug shows where it came from
                finish(ctx, error.outcome(), error)
            report(ctx, exc)
            _end_journaled_run(ctx, Outcome(Status.ERROR, f"{type(exc).__name__}: {exc}"))
            ctx.exit(exit_code_of(Outcome(Status.ERROR)))
        if isinstance(returned, Outcome):
            finish(ctx, returned)
        return returned


def _interrupted(ctx: click.Context) -> None:
    """A stop signal outside a run: said in one line, the exit code the signal's."""
    _err(ctx, f"dlxtool: {interrupts.describe()}")
    _end_journaled_run(ctx, Outcome(Status.INTERRUPTED, interrupts.describe()))
    ctx.exit(exit_code_of(Outcome(Status.INTERRUPTED), interrupts.received()))


def _stopped_inside(exc: BaseException) -> bool:
    """Whether a stop signal caused `exc`: Python wraps a KeyboardInterrupt raised while it builds a class (a Ctrl-C
    landing in a module being imported: `Error calling __set_name__ …`, a RuntimeError) — an interrupt, not an
    internal error (the fault campaign: seed 50071, a SIGINT as `load` started, said "internal error", exit 1)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _did_you_mean(ctx: click.Context, exc: QueueNotFound) -> None:
    """Add the vhost's queue names closest to the one not found to its message, from the management API this
    command proved (none: nothing added; a name from another broker's API would mislead)."""
    app = ctx.find_object(App)
    if app is None or not exc.suggest:
        return
    said = app.did_you_mean(exc.queue, exc.vhost)
    if said:
        exc.message = f"{exc.message}; {said}"


def _vhost_did_you_mean(ctx: click.Context, exc: VhostNotFound) -> None:
    """Add the broker's vhosts closest to the one not found, each proven to exist on the broker AMQP reaches."""
    app = ctx.find_object(App)
    said = app.vhost_did_you_mean(exc.profile, exc.vhost) if app is not None and exc.profile is not None else None
    if said:
        exc.message = f"{exc.message}; {said}"


def _owner(ctx: click.Context, exc: QueueLocked) -> None:
    """Name the connection that owns an exclusive queue, from the management API this command proved."""
    app = ctx.find_object(App)
    owner = app.queue_owner(exc.queue, exc.vhost) if app is not None else None
    if owner:
        exc.message = exc.message.replace("exclusive to another connection", f"exclusive to connection {owner}")


def finish(ctx: click.Context, outcome: Outcome, exc: BaseException | None = None) -> None:
    """Say how the command ended (unless it ended well: its output said that) and exit with its code."""
    if outcome.ok:
        return
    _end_journaled_run(ctx, outcome)
    message = outcome.message
    if outcome.status is Status.INTERRUPTED:
        message += f" [{interrupts.describe()}]"
    if message or exc is not None:
        shown: BaseException | None = exc
        if shown is None or not isinstance(exc, DlxtoolError) or exc.message != message:
            shown = DlxtoolError(message, hint=outcome.hint)
            shown.__cause__ = exc  # --debug shows where it came from
        report(ctx, shown)
    ctx.exit(exit_code_of(outcome, interrupts.received()))


def _end_journaled_run(ctx: click.Context, outcome: Outcome) -> None:
    """A run the journal saw start and the command failed before it said how it ended (a connection cut in a
    plain purge, a refusal after the start): its end line says so, not "no end (killed)"."""
    app = ctx.find_object(App)
    if app is not None and app.unended_run is not None:
        app.unended_run.ended(outcome)


def report(ctx: click.Context, exc: BaseException) -> None:
    app = ctx.find_object(App)
    debug = bool(app and app.debug) or (app or App()).env.get("DLXTOOL_DEBUG") in ("1", "true", "yes")
    if debug:
        import traceback

        _err(ctx, secrets.scrub("".join(traceback.format_exception(exc))).rstrip())
    if isinstance(exc, DlxtoolError):
        prefix, message = "dlxtool: error:", exc.message
        if exc.hint:
            message += f"\n  hint: {exc.hint}"
    else:
        prefix, message = "dlxtool: internal error:", f"{type(exc).__name__}: {exc}"
        if not debug:
            message += "\n  hint: run again with --debug for a traceback, and report it"
    _err(ctx, _red(ctx, prefix) + " " + secrets.scrub(message))


def _red(ctx: click.Context, text: str) -> str:
    app = ctx.find_object(App) or App()
    return app.style(text, err=True, fg="red", bold=True)


def _err(ctx: click.Context, text: str) -> None:
    app = ctx.find_object(App)
    stream = app.stderr if app else sys.stderr
    try:
        stream.write(text + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass


def _quiet_broken_pipe() -> None:
    # Python flushes stdout at exit and would complain again; point it at /dev/null instead.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """dlxtool's version and those of the libraries whose behaviour shows through (pika, protobuf…)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import PackageNotFoundError, version

    lines = [f"dlxtool {__version__}", f"python {sys.version.split()[0]}"]
    for dist in ("pika", "protobuf", "grpcio-tools", "click", "orjson", "tabulate"):
        try:
            lines.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            lines.append(f"{dist} (not installed)")
    click.echo("\n".join(lines))
    ctx.exit()


@click.group(cls=DlxtoolGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@connection_options
@format_option
@all_vhosts_option
@click.option("--no-color", is_flag=True, help="No colour (also when NO_COLOR is set).")
@click.option("--no-journal", is_flag=True,
              help="Do not record this run in the journal (dlxtool journal; config: journal = false).")
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the versions of dlxtool and its key libraries.")
@click.pass_context
def cli(ctx: click.Context, no_color: bool, no_journal: bool) -> None:
    """Peek at, decode, explain, replay and purge RabbitMQ dead letters — across named brokers.

    \b
    Examples:
      dlxtool brokers check --all          # which brokers answer?
      dlxtool --broker prod-eu peek orders.dlq -n 5
    """
    app = ctx.ensure_object(App)  # -v and --debug are stored by their callbacks (dlxtool/cli/options.py)
    if app.all_vhosts and ctx.invoked_subcommand not in (None, "queues"):
        raise click.UsageError(f"--all-vhosts is an option of `queues`, not of `{ctx.invoked_subcommand}`")
    _guard_streams(app)
    app.color = False if no_color or app.env.get("NO_COLOR") else None
    app.no_journal = no_journal
    from dlxtool.broker.naming import set_connection_label

    set_connection_label(f"{_os_user()} {ctx.invoked_subcommand or ''}")


def _os_user() -> str:
    """getpass.getuser()'s answer without importing getpass (and termios with it) on every command."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if user := os.environ.get(name):
            return user
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError, OSError):
        return str(os.getuid())


def _guard_streams(app: App) -> None:
    """Output a gone terminal (SIGHUP: EIO; through ssh: EPIPE) cannot take goes to a file instead of
    failing the command half-way through its summary (dlxtool.cli.streams.FallbackStream)."""
    summary_file.env = app.env  # where the file goes: $XDG_STATE_HOME of the command's environment

    # A text stream by delegation (FallbackStream.__getattr__), not by class: typed as the IO it wraps.
    if not isinstance(app.err, FallbackStream):
        app.err = cast(IO[str], FallbackStream(app.stderr, always=True))
    if not isinstance(app.out, FallbackStream):
        app.out = cast(IO[str], FallbackStream(app.stdout, always=False))


def _after_startup_signal(code: int) -> int:
    """A stop signal noted during start-up that no command acted on (`--help`, a usage error): its exit code and one
    line, as a command stopped by it (dlxtool.entry)."""
    came = take_startup_signal()
    if came is None:
        return code
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"dlxtool: {describe()}\n")
    return 128 + int(came)


def main(argv: list[str] | None = None) -> int:
    hold_stop_signals_until_exit()  # from the command's end to ignore_ctrl_c_from_now_on() below
    app = App()
    try:
        cli.main(args=argv, prog_name="dlxtool", obj=app, standalone_mode=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    else:
        code = 0
    _say_waits(app)
    ignore_ctrl_c_from_now_on()
    code = _after_startup_signal(code)
    if summary_file.path is not None:  # say where, in case the other stream still reaches someone
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"dlxtool: output the terminal could not take is in {summary_file.path}\n")
            sys.stderr.flush()
    _leave_objects_to_the_os()
    return code


def _say_waits(app: App) -> None:
    """With -v: what the command waited for that was not its messages (dlxtool.waits: the one place that names
    them), each with how long it took and its bound."""
    if not app.verbose or not waits.taken():
        return
    with contextlib.suppress(OSError, ValueError):
        for waited in waits.taken():
            app.info(waited.describe())


def _leave_objects_to_the_os() -> None:
    """The command is over: spare the interpreter's exit its garbage collections over every object still
    alive (the loaded modules, protobuf's descriptors): 30-40 ms of a short command's wall time, measured
    with strace between its last write and exit_group. Nothing is lost by it: the commands close (and sync)
    their files themselves, standard streams are flushed at exit as always, atexit handlers still run, and
    objects not in a reference cycle are still freed one by one; only cyclic garbage is left to the OS."""
    gc.freeze()
