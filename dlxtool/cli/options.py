"""Option decorators shared by commands, so every command spells them the same way.

Connection, output, -v and --debug options are accepted both before the command (`dlxtool --broker prod peek q`)
and after it (`dlxtool peek q --broker prod`); the callbacks store them on the App.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any, overload

import click

from dlxtool.budget import parse_size
from dlxtool.cli.app import App
from dlxtool.errors import UsageError
from dlxtool.render import FORMATS

F = Callable[..., Any]


def _store(attr: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is None:
            return
        app = ctx.ensure_object(App)
        from_env = ctx.get_parameter_source(param.name or "") == click.core.ParameterSource.ENVIRONMENT
        if from_env and getattr(app, attr) is not None:
            return  # the env var is read by every command level; what a user typed wins
        setattr(app, attr, value)
        if attr in ("url", "broker_name", "management_url"):
            setattr(app, f"{attr}_from_env" if attr != "broker_name" else "broker_from_env", from_env)

    return callback


def complete_broker(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    try:
        app = ctx.find_object(App) or App()
        return [n for n in app.config().brokers if n.startswith(incomplete)]
    except Exception:  # noqa: BLE001 - completion must stay silent
        return []


def complete_queue(ctx: click.Context, _param: click.Parameter, incomplete: str) -> list[str]:
    """Queue names from the selected broker's management API: fast (1 s timeout) and silent on failure."""
    try:
        from dataclasses import replace

        from dlxtool.broker.management import ManagementClient

        app = ctx.find_object(App) or App()
        profile = replace(app.profile(), timeout=1.0)
        rows = ManagementClient.for_profile(profile).queues(profile.vhost, columns=["name"], unsorted=True)
        return sorted(r["name"] for r in rows if r.get("name", "").startswith(incomplete))
    except Exception:  # noqa: BLE001 - completion must never print an error into the shell
        return []


def queue_argument(f: F) -> F:
    """The QUEUE argument, with queue-name completion from the broker."""
    return click.argument("queue", shell_complete=complete_queue)(f)


def _more_verbose(ctx: click.Context, _param: click.Parameter, value: int) -> None:
    if value:  # -v counts wherever it is given: `dlxtool -v peek q -v` is -vv
        app = ctx.ensure_object(App)
        app.verbose += value


def _debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(App).debug = True


def _all_vhosts(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:  # given before the command name or after it; the other place's default (False) must not undo it
        ctx.ensure_object(App).all_vhosts = True


def all_vhosts_option(f: F) -> F:
    """`queues --all-vhosts`, also before the command name (`dlxtool --all-vhosts queues`), as --vhost is."""
    return click.option("--all-vhosts", is_flag=True, expose_value=False, callback=_all_vhosts,
                        help="queues: every vhost the user can see, not only the profile's (before or after "
                             "the command name).")(f)


def diagnostic_options(f: F) -> F:
    """-v and --debug, before the command name or after it."""
    opts = [
        click.option("-v", "--verbose", count=True, expose_value=False, callback=_more_verbose,
                     help="More detail on stderr."),
        click.option("--debug", is_flag=True, envvar="DLXTOOL_DEBUG", expose_value=False, callback=_debug,
                     help="Tracebacks on errors [env DLXTOOL_DEBUG=1]."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def connection_options(f: F) -> F:
    """The broker to talk to (and -v/--debug, which every command takes too)."""
    f = diagnostic_options(f)
    opts = [
        click.option("--broker", "-b", metavar="NAME", envvar="DLXTOOL_BROKER", expose_value=False,
                     callback=_store("broker_name"), shell_complete=complete_broker,
                     help="Broker profile from the config file [env DLXTOOL_BROKER]."),
        click.option("--url", metavar="URL", envvar="DLXTOOL_URL", expose_value=False,
                     callback=_store("url"),
                     help="Ad-hoc amqp(s):// URL; overrides the profile's nodes [env DLXTOOL_URL]."),
        click.option("--management-url", metavar="URL", envvar="DLXTOOL_MANAGEMENT_URL", expose_value=False,
                     callback=_store("management_url"),
                     help="The broker's management API, e.g. http://localhost:15674/ (default: the profile's, "
                          "else the AMQP host:15672); checked to answer for the broker AMQP reached "
                          "[env DLXTOOL_MANAGEMENT_URL]."),
        click.option("--vhost", metavar="VHOST", expose_value=False, callback=_store("vhost"),
                     help="Virtual host [env DLXTOOL_VHOST] (default: the --url's path, else the profile's, else /)."),
        click.option("--config", "config_file", metavar="FILE", envvar="DLXTOOL_CONFIG", expose_value=False,
                     callback=_store("config_file"),
                     help="Config file [env DLXTOOL_CONFIG; default ~/.config/dlxtool/config.toml]."),
        click.option("--timeout", type=click.FloatRange(min=0.1), metavar="SECONDS", envvar="DLXTOOL_TIMEOUT",
                     expose_value=False, callback=_store("timeout"),
                     help="Seconds to wait for the broker and its management API (default: the config's "
                          "timeout, else 5) [env DLXTOOL_TIMEOUT]."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def _store_size(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """A size in bytes: 268435456, 256MiB, 1G, 500MB (dlxtool.budget.parse_size), stored as App.max_bytes_flag."""
    if value is None:
        return

    try:
        size = parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    _store("max_bytes_flag")(ctx, param, size)


def max_bytes_option(f: F) -> F:
    """--max-bytes SIZE: the byte budget of a command that holds messages (App.max_bytes). Once per command, whichever
    of its option groups brings it (replay's --edit peeks with peek's options, which have it too)."""
    if any("--max-bytes" in p.opts for p in getattr(f, "__click_params__", ())):
        return f
    return click.option(
        "--max-bytes", metavar="SIZE", expose_value=False, callback=_store_size,
        help="Most bytes of messages held at once, e.g. 64MiB, 1G (default: config max_bytes, else 256MiB).")(f)


def flow_options(source: str) -> Callable[[F], F]:
    """--rate, --prefetch and --window of a command that moves messages out of `source` (its name in the help)."""
    def decorate(f: F) -> F:
        for opt in reversed([
            click.option("--rate", type=click.FloatRange(min=0.1), metavar="N", help="At most N messages per second."),
            click.option("--prefetch", type=click.IntRange(min=1, max=65535), default=2000, show_default=True,
                         help=f"Most unacked {source} messages held at once; fewer where bodies are big "
                              "(--max-bytes)."),
            click.option("--window", type=click.IntRange(min=1, max=65535), default=1000, show_default=True,
                         help="Publishes awaiting a confirm at once."),
        ]):
            f = opt(f)
        return f

    return decorate


FORMAT_HELP = ("Output format: table; json: one JSON document (an array of rows or records; a run's summary: one "
               "object); jsonl: one JSON object per line. Default: table on a terminal, jsonl when piped.")


def _wide(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:  # before the command name or after it; the other place's default (False) must not undo it
        ctx.ensure_object(App).wide = True


def format_option(f: F, formats: tuple[str, ...] = FORMATS, help: str = FORMAT_HELP) -> F:
    """--format (and --wide, for its tables), before or after the command name."""
    f = click.option("--wide", is_flag=True, expose_value=False, callback=_wide,
                     help="Tables: every cell whole, however wide (default: the widest columns are cut to fit the "
                          "terminal).")(f)
    return click.option(
        "--format", "-f", "fmt", type=click.Choice(formats), expose_value=False, callback=_store("fmt"), help=help,
    )(f)


def common_options(f: F) -> F:
    """Connection + output options: what every broker-facing command takes."""
    return connection_options(format_option(f))


def yes_option(f: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(f)


def dry_run_option(f: F) -> F:
    return click.option("--dry-run", is_flag=True, help="Show what would happen; change nothing.")(f)


SELECTION_HELP = """\b
Selecting messages (peek, history, dump, replay and purge alike):
  every criterion given must hold; one given twice matches either value
  (--type A --type B). Each criterion that names values has an excluding
  form, --not-NAME, which leaves out what --NAME would select:
  --not-type, --not-origin, --not-reason, --not-error, --not-header,
  --not-routing-key, --not-body-contains, --not-body-matches,
  --not-message-id, --not-message-ids. The bounds are each other's
  opposite: --older-than/--newer-than, --min-deaths/--max-deaths, as
  --redelivered/--not-redelivered.
  A message is named by its message_id property, else by fp: and 16 hex
  digits: a hash of its body and properties without the headers, the
  same however often it is dead-lettered or read (peek and history show
  it; its first 8 or more digits are enough).
  e.g.  --type OrderCreated --not-error '(?i)timeout'
        --message-id o-00013 --message-id fp:3f9a1c2b8d7e6f50
        --message-ids ids.txt    (one a line; - reads stdin)
"""

# (option, dest, metavar, help) of the selectors that name values; each has its excluding form, --not-NAME.
_VALUE_SELECTORS: tuple[tuple[str, str, str, str], ...] = (
    ("--origin", "origins", "QUEUE", "whose origin is QUEUE (the queue they failed in, as `history` shows it)."),
    ("--reason", "reasons", "REASON", "with an x-death of this reason."),
    ("--type", "types", "TYPE", "of this type: the AMQP type property or the decoded protobuf type, in full or its "
                                "last part (PaymentFailed)."),
    ("--header", "headers", "NAME=VALUE|NAME~REGEX", "whose header NAME equals VALUE, or contains a match of REGEX."),
    ("--error", "errors", "REGEX", "whose error text matches: the conventions' (Spring's x-exception-message, "
                                   "NServiceBus, MassTransit, rascal, Dramatiq, [conventions.NAME]) and x-error-style "
                                   "headers."),
    ("--routing-key", "routing_keys", "GLOB", "whose routing key (or original one in x-death) matches GLOB (* and ?)."),
    ("--body-contains", "body_contains", "TEXT", "whose body contains TEXT (bytes, UTF-8)."),
    ("--body-matches", "body_matches", "REGEX", "whose body (as UTF-8 text) matches REGEX."),
    ("--message-id", "message_ids", "ID", "named ID: their message_id property, or fp:HEX, their fingerprint (below)."),
)


def _value_options() -> list[Callable[[F], F]]:
    from dlxtool.selection import REASONS

    opts: list[Callable[[F], F]] = []
    for flag, dest, metavar, text in _VALUE_SELECTORS:
        kind: Any = click.Choice(REASONS) if dest == "reasons" else None
        complete = complete_queue if dest == "origins" else None
        shown = None if kind is not None else metavar
        opts.append(click.option(flag, f"sel_{dest}", multiple=True, metavar=shown, type=kind,
                                 shell_complete=complete, help=f"Only messages {text}"))
        if dest == "message_ids":
            opts.append(click.option("--message-ids", "sel_id_files", multiple=True, metavar="FILE",
                                     help="Only messages named in FILE: one message_id (or fp:HEX) a line; - reads "
                                          "stdin."))
        opts.append(click.option(f"--not-{flag[2:]}", f"sel_not_{dest}", multiple=True, metavar=shown, type=kind,
                                 shell_complete=complete,
                                 help=f"Leave out the messages {flag} {metavar} would select."))
        if dest == "message_ids":
            opts.append(click.option("--not-message-ids", "sel_not_id_files", multiple=True, metavar="FILE",
                                     help="Leave out messages named in FILE (as --message-ids)."))
    return opts


def _one_reads_stdin(kwargs: dict[str, Any]) -> None:
    """stdin is read once: by --message-ids -, --not-message-ids - or `history --from -`, not two of them."""
    readers = [option for option, given in (("--message-ids -", "-" in kwargs.get("sel_id_files", ())),
                                            ("--not-message-ids -", "-" in kwargs.get("sel_not_id_files", ())),
                                            ("--from -", kwargs.get("from_file") == "-")) if given]
    if len(readers) > 1:
        raise UsageError(f"{' and '.join(readers)}: both would read stdin", hint="give one of them a file")


def _selection_option_list(limit: bool) -> list[Callable[[F], F]]:
    opts: list[Callable[[F], F]] = [
        *_value_options(),
        click.option("--min-deaths", "sel_min_deaths", type=click.IntRange(min=1), metavar="N",
                     help="Only messages that died at least N times (sum of x-death counts; where the "
                          "broker restarts x-death at an app's republish, RabbitMQ 4.x, the app's "
                          "x-retry-count/x-delivery-attempts when higher)."),
        click.option("--max-deaths", "sel_max_deaths", type=click.IntRange(min=0), metavar="N",
                     help="Only messages that died at most N times (counted as for --min-deaths)."),
        click.option("--older-than", "sel_older_than", metavar="AGE",
                     help="Only messages older than AGE (30s, 15m, 2h, 3d; timestamp property, else x-death time)."),
        click.option("--newer-than", "sel_newer_than", metavar="AGE", help="Only messages newer than AGE."),
        click.option("--redelivered/--not-redelivered", "sel_redelivered", default=None,
                     help="Only messages with (or without) the redelivered flag."),
    ]
    if limit:
        opts.append(click.option("-n", "--limit", "sel_limit", type=click.IntRange(min=0), metavar="N",
                                 help="At most N messages: the first N that match."))
    return opts


def _names_from_files(app: App, files: tuple[str, ...], option: str) -> list[str]:
    """The message names in --message-ids / --not-message-ids FILEs (- is stdin; the caller lets one option read it)."""
    if not files:  # the common case: no file, and message_ids (hashlib) stays unloaded
        return []
    from dlxtool.message_ids import read_id_lines

    names: list[str] = []
    for name in files:
        if name == "-":
            names += read_id_lines(app.stdin, f"{option} - (stdin)")
            continue
        try:
            with open(name, "rb") as f:
                names += read_id_lines(f, f"{option} {name}")
        except OSError as exc:
            raise UsageError(f"{option} {name}: cannot read it: {exc.strerror or exc}",
                             hint="a file of message ids, one a line") from None
    if files and not names:
        raise UsageError(f"{option} {', '.join(files)}: no message id in it",
                         hint="one message_id (or fp:HEX) a line; an empty list would select nothing")
    return names


@overload
def selection_options(f: F) -> F: ...


@overload
def selection_options(*, limit: bool) -> Callable[[F], F]: ...


def selection_options(f: F | None = None, *, limit: bool = True) -> F | Callable[[F], F]:
    """The one message selection of peek, history, dump, replay and purge; passes `selection` (a
    dlxtool.selection.Selection with the built-in conventions: commands give it theirs with `selection_for`).
    `limit`: with -n/--limit (replay, purge); the readers count with their own -n, after selecting."""

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            from dlxtool.selection import build_selection

            app = click.get_current_context().ensure_object(App)
            _one_reads_stdin(kwargs)
            given = {dest: kwargs.pop(f"sel_{dest}") for _f, dest, _m, _h in _VALUE_SELECTORS}
            excluded = {dest: kwargs.pop(f"sel_not_{dest}") for _f, dest, _m, _h in _VALUE_SELECTORS}
            given["message_ids"] = (*given["message_ids"],
                                    *_names_from_files(app, kwargs.pop("sel_id_files"), "--message-ids"))
            excluded["message_ids"] = (*excluded["message_ids"],
                                       *_names_from_files(app, kwargs.pop("sel_not_id_files"), "--not-message-ids"))
            kwargs["selection"] = build_selection(
                **given, min_deaths=kwargs.pop("sel_min_deaths"), max_deaths=kwargs.pop("sel_max_deaths"),
                older_than=kwargs.pop("sel_older_than"), newer_than=kwargs.pop("sel_newer_than"),
                redelivered=kwargs.pop("sel_redelivered"), limit=kwargs.pop("sel_limit", None), exclude=excluded,
            )
            return func(*args, **kwargs)

        out: F = wrapper
        for opt in reversed(_selection_option_list(limit)):
            out = opt(out)
        return out

    return decorate(f) if f is not None else decorate


def selection_for(app: App, selection: Any, *, origin_from: str | None = None, error_headers: tuple[str, ...] = (),
                  through: Callable[[Any], Any] | None = None, decode: bool = False) -> Any:
    """`selection` seeing messages as this command shows them: the config file's conventions and error headers,
    --origin-from, `through` (a TTL-only history's origin through its wait queue), and with `decode` the
    protobuf decoder for --type (where no reader decodes before selecting: replay, purge)."""
    if not selection.filters_anything:
        return selection

    lens = selection.lens
    if selection.explains:
        lens = replace(lens, conventions=conventions_in_use(app, origin_from), origin_from=origin_from,
                       error_headers=(*app.config().error_headers, *error_headers), through=through)
    if decode and selection.needs_type:
        lens = replace(lens, decode=record_decoder(app))
    return selection.with_lens(lens)


def record_decoder(app: App, max_inflated: int | None = None) -> Callable[[Any], Any]:
    """The protobuf decoder of this broker's schemas (App.schemas), built at its first use; a compressed body
    inflates up to `max_inflated` bytes (default: the command's byte budget, App.max_bytes)."""
    made: list[Callable[[Any], Any]] = []

    def decode(record: Any) -> Any:
        if not made:  # dlxtool.decoding (and proto_registry's light modules) only once a body is decoded
            from dlxtool import decoding

            schemas = app.schemas()
            made.append(decoding.record_decoder(schemas.paths, demo=schemas.demo, on_error=app.warn,
                                                cache_dir=schemas.cache_dir,
                                                max_inflated=max_inflated or app.max_bytes))
        return made[0](record)

    return decode


def selection_notes(app: App, selection: Any) -> None:
    """What the output must add about a selection once it has run (e.g. death counts that may be low)."""
    note = selection.tally.note(selection.min_deaths, selection.max_deaths)
    selection.tally.maybe_low = selection.tally.maybe_more = 0  # said once per pass (a plan, then the run)
    if note:
        app.info(f"note: {note}")


def origin_from_option(f: F) -> F:
    return click.option(
        "--origin-from", "origin_from", metavar="CONVENTION",
        help="Take each message's origin from this convention only (x-death, spring, nservicebus, masstransit, "
             "rascal, celery, or a [conventions.NAME] of the config file); messages it does not explain have none. "
             "Default: the most recent failure among the conventions that name one.")(f)


def conventions_in_use(app: App, origin_from: str | None) -> tuple[Any, ...]:
    """The built-in conventions and the config file's (the selected broker's first, then global ones)."""
    from dlxtool.conventions import check_origin_from, conventions

    config = app.config()
    known = conventions(config.conventions_for(app.profile()))
    check_origin_from(origin_from, known)
    return known
