"""The application object every command receives with `click.pass_obj`.

It holds the global choices (broker, format, verbosity), the streams (injectable for tests), and
opens connections lazily: a command that never talks to a broker never resolves a password.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from dlxtool import render
from dlxtool.config import BrokerProfile, Config, load_config, select_profile, top_level_proto_paths
from dlxtool.errors import AccessRefused, DlxtoolError, RefusedError, VhostNotFound

if TYPE_CHECKING:
    from pika.adapters.blocking_connection import BlockingConnection

    from dlxtool.broker.management import ManagementClient
    from dlxtool.ops.session import Session


@dataclass(frozen=True)
class Schemas:
    """Where a command's protobuf schemas come from (App.schemas): proto paths, in order, and the demo's."""

    paths: tuple[str, ...]
    demo: bool
    cache_dir: Path | None = None  # compiled schemas' cache (proto_registry.cache.cache_dir of the command's env)


@dataclass
class App:
    """The command's state and services (module docstring): what the root group's options chose, streams, lazy
    connections."""

    # Streams default to whatever sys.* is when used (so click's test runner can capture them).
    out: IO[str] | None = None
    err: IO[str] | None = None
    inp: IO[str] | None = None
    env: Mapping[str, str] = field(default_factory=lambda: os.environ)
    config_file: str | None = None
    broker_name: str | None = None
    url: str | None = field(default=None, repr=False)  # may hold a password
    url_from_env: bool = False
    management_url: str | None = field(default=None, repr=False)  # may hold a password
    management_url_from_env: bool = False
    broker_from_env: bool = False
    vhost: str | None = None
    timeout: float | None = None
    fmt: str | None = None
    wide: bool = False  # --wide: tables as wide as their cells, not cut to the terminal's width
    verbose: int = 0
    debug: bool = False
    color: bool | None = None
    _config: Config | None = field(default=None, repr=False)
    # (connection id, management URL) -> (the connection, kept so its id is not reused; its verified client)
    _management: dict[tuple[int, str | None], tuple[Any, ManagementClient]] = field(default_factory=dict, repr=False)
    # management URL -> a client whose first questions are on their way (begin_management)
    _begun: dict[str | None, ManagementClient] = field(default_factory=dict, repr=False)
    started: float = field(default_factory=time.monotonic, repr=False)  # the command's start: summaries' time
    argv: list[str] = field(default_factory=list, repr=False)  # the command line, for the journal (may hold secrets)
    no_journal: bool = False  # --no-journal
    all_vhosts: bool = False  # --all-vhosts (queues), before or after the command name
    max_bytes_flag: int | None = None  # --max-bytes (see max_bytes)
    _said_cut: bool = field(default=False, repr=False)  # write_table said that cells were cut
    unended_run: Any = field(default=None, repr=False)  # a journaled run started and not ended (cli.moving.Journaled)

    def elapsed(self) -> float:
        """Seconds since the command started (a summary's "in 9.1s" is the command's, waits included)."""
        return time.monotonic() - self.started

    @property
    def stdout(self) -> IO[str]:
        return self.out or sys.stdout

    @property
    def stderr(self) -> IO[str]:
        return self.err or sys.stderr

    @property
    def stdin(self) -> IO[str]:
        return self.inp or sys.stdin

    # -- configuration ----------------------------------------------------------------------------

    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(self.config_file, self.env)
        return self._config

    def profile(self, name: str | None = None) -> BrokerProfile:
        """The selected broker, or the named one (e.g. `--target-broker`) with the same overrides."""
        if name is not None:
            return select_profile(self.config(), broker=name, timeout=self.timeout, env=self.env)
        url, management_url = self.url, self.management_url
        if self.broker_name and not self.broker_from_env:
            # `--broker NAME` typed now beats a DLXTOOL_URL / DLXTOOL_MANAGEMENT_URL left in the environment
            url = None if self.url_from_env else url
            management_url = None if self.management_url_from_env else management_url
        profile = select_profile(self.config(), broker=self.broker_name, url=url, vhost=self.chosen_vhost(),
                                 timeout=self.timeout, env=self.env)
        if management_url:
            where = "DLXTOOL_MANAGEMENT_URL" if self.management_url_from_env else "--management-url"
            profile = profile.with_management_url(management_url, where)
        return profile

    def chosen_vhost(self) -> str | None:
        """--vhost (before or after the command name), else $DLXTOOL_VHOST, else None (the profile's, the URL's)."""
        return self.vhost or self.env.get("DLXTOOL_VHOST") or None

    def schemas(self, cli_paths: Iterable[str] = (), *, demo: bool = False, offline: bool = False) -> Schemas:
        """The one place every command (peek, history, dump, decode) takes its schemas from: `--proto-path`
        (`cli_paths`), then $DLXTOOL_PROTO_PATH, then the config file's proto_paths, then the selected broker
        profile's — the default profile's when none is named, as a peek would read from it; the demo's shop.*
        schemas with `demo` (--demo-schemas) or `demo_schemas = true`.

        `offline` (decode needs no broker): a config file, or a profile, that cannot be read does not stop
        it — a warning says what is left out — unless a broker was typed on the command line (its
        proto_paths are wanted)."""
        from dlxtool.decoding import proto_paths

        try:
            config = self.config()
        except DlxtoolError as exc:
            if not offline or self._broker_typed():
                raise
            return Schemas(tuple(proto_paths(cli_paths, self._despite_config_error(exc), env=self.env)), demo,
                           self._schema_cache())
        try:
            profile_paths: tuple[str, ...] = self.profile().proto_paths
        except DlxtoolError as exc:
            if not offline or self._broker_typed():
                raise
            self.warn(f"{exc.message}; decoding without that broker profile's proto_paths")
            profile_paths = ()
        return Schemas(tuple(proto_paths(cli_paths, [*config.proto_paths, *profile_paths], env=self.env)),
                       demo or config.demo_schemas, self._schema_cache())

    def _schema_cache(self) -> Path:
        from proto_registry.cache import cache_dir

        return cache_dir(self.env)

    def _broker_typed(self) -> bool:
        """A broker profile or URL typed on this command line (not left in the environment)."""
        return bool((self.broker_name and not self.broker_from_env) or (self.url and not self.url_from_env))

    def _despite_config_error(self, exc: DlxtoolError) -> list[str]:
        """The config file's top-level proto_paths when the rest of it cannot be read (an offline decode)."""
        found = top_level_proto_paths(self.config_file, self.env)  # raises when its proto_paths are wrong
        if found is None:
            self.warn(f"{exc.message}; decoding without it (proto_paths it may name are not loaded)")
            return []
        used = f"with its proto_paths ({len(found)})" if found else "without it (it names no proto_paths)"
        self.warn(f"{exc.message}; decoding {used}, which is all decode needs from it")
        return list(found)

    @contextmanager
    def connection(self, profile: BrokerProfile | None = None) -> Iterator[BlockingConnection]:
        from dlxtool.broker.connection import close_quietly, connect

        conn = connect(profile or self.profile())
        try:
            yield conn
        finally:
            close_quietly(conn)

    def begin_management(self, profile: BrokerProfile, *, queues: tuple[str, ...] = ()) -> None:
        """Before opening the AMQP connection: send the management API the identity proof's first question,
        and ask for `queues` (of the profile's vhost), so that the answers travel while AMQP connects. None
        of them is used before `management()` has proven the API (dlxtool.broker.identity)."""
        from dlxtool.broker.identity import begin
        from dlxtool.broker.management import ManagementClient

        client = begin(ManagementClient.for_profile(profile))
        for name in queues:
            client.prefetch_queue(profile.vhost, name)
        self._begun[profile.management_url] = client

    def management(self, profile: BrokerProfile, conn: Any) -> ManagementClient:
        """The management API of `profile`, proven to answer for the broker `conn` reached (exit 3 when it
        answers for another one); when unreachable or unproven, a client whose every request raises
        ConnectError, so the AMQP-only paths apply. Proven once per connection."""
        from dlxtool.broker.identity import verified_management

        key = (id(conn), profile.management_url)
        if key not in self._management:
            from dlxtool.broker.identity import describe_session

            client = verified_management(conn, profile, self._begun.pop(profile.management_url, None))
            self._management[key] = (conn, client)
            if client.identity is not None:
                self.debug_log(f"management API {client.masked_url} answers for the broker AMQP reached: "
                               f"{client.identity.describe()}")
            where = describe_session(conn, profile, client)
            if where is not None:  # a cluster: which node this command is on, and where it failed over from
                self.info(where)
        return self._management[key][1]

    def proven_management(self, profile: BrokerProfile) -> ManagementClient | None:
        """The management API this command already proved for `profile` (its AMQP connection may be closed since),
        or None: not asked yet, or not usable (unreachable, unproven)."""
        from dlxtool.broker.identity import UnusableManagement

        for (_conn_id, url), (_conn, client) in reversed(self._management.items()):
            if url == profile.management_url and not isinstance(client, UnusableManagement):
                return client
        return None

    def did_you_mean(self, queue: str, vhost: str) -> str | None:
        """"did you mean 'invoices.dlq'?" for a queue not found in `vhost`, from the management API this command
        proved for the selected broker; None where nothing is close or no such API answers."""
        from dlxtool.broker.queues import did_you_mean, names_in

        try:
            client = self.proven_management(self.profile())
        except DlxtoolError:
            return None
        return did_you_mean(queue, names_in(client, vhost))

    def vhost_did_you_mean(self, profile: Any, vhost: str) -> str | None:
        """"did you mean 'shop'?" for a vhost `profile`'s broker does not have; None where nothing is close. The names
        come from the profile's management API, which no AMQP connection can prove to be this broker's (none opens
        on a vhost that is not there): a name is said only once an AMQP connection to it opens, or is refused for
        want of permission (RabbitMQ says "not found" for a vhost that is not there), on the broker AMQP reaches."""
        from dlxtool.broker.management import ManagementClient
        from dlxtool.broker.queues import close_names

        quick = replace(profile, timeout=min(profile.timeout, 3.0))
        try:
            rows = ManagementClient.for_profile(quick).get("vhosts", columns="name")
        except DlxtoolError:
            return None
        names = [str(r["name"]) for r in rows or [] if isinstance(r, dict) and isinstance(r.get("name"), str)]
        close = [name for name in close_names(vhost, names) if _vhost_answers(replace(quick, vhost=name))]
        return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else None

    def queue_owner(self, queue: str, vhost: str) -> str | None:
        """The connection an exclusive queue belongs to, from the management API this command proved; None where
        no such API answers or it does not say."""
        from dlxtool.ops.busy import exclusive_owner

        try:
            client = self.proven_management(self.profile())
        except DlxtoolError:
            return None
        return exclusive_owner(client, vhost, queue) if client is not None else None

    def session(self, profile: BrokerProfile, conn: Any) -> Session:
        """What an operation runs on (dlxtool.ops.session): `conn`, and the profile's management API proven to
        answer for the broker it reached."""
        from dlxtool.ops.session import Session

        return Session(conn, profile.vhost, profile.name, profile.timeout, self.management(profile, conn),
                       profile=profile)

    @property
    def max_bytes(self) -> int:
        """The byte budget of this command (dlxtool.budget): the most bytes of messages it holds at once. --max-bytes,
        else the broker profile's max_bytes, else the config file's, else 256 MiB. Whatever else holds message bytes
        for the command (decompressed previews) takes its share of this one budget."""
        if self.max_bytes_flag is not None:
            return self.max_bytes_flag
        return self.profile().max_bytes

    # -- output -----------------------------------------------------------------------------------

    def output_format(self) -> str:
        """The format asked for, else a table on a terminal and JSON Lines otherwise — for every command, so that one
        way of reading piped output fits them all (`jq .name`): a row, a message record or a run's summary per line.
        `-f json` is one document: an array of the rows or records (a run's summary: one object)."""
        if self.fmt:
            return self.fmt
        return "table" if self.stdout_is_tty() else "jsonl"

    def table_width(self) -> int | None:
        """The columns a table must fit: the terminal's ($COLUMNS of the command's environment, else the terminal's
        size, else 80); None with --wide, and when stdout is no terminal (piped `-f table` is whole: the reader
        decides)."""
        if self.wide or not self.stdout_is_tty():
            return None
        columns = self.env.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            return int(columns)
        try:
            return os.get_terminal_size(self.stdout.fileno()).columns or 80
        except (AttributeError, OSError, ValueError):
            return 80

    def write_table(self, rows: Iterable[Any], headers: list[str], *, empty: str | None = None,
                    styles: Mapping[int, Any] | None = None, optional: Sequence[int] = ()) -> None:
        """A table on stdout (dlxtool.render.write_table), cut to the terminal's width (table_width), the `optional`
        columns left out first where even cut it would not fit; the first time a cell is cut, stderr says how to see
        it whole."""
        width = self.table_width()
        if render.write_table(rows, headers, self.stdout, empty=empty, styles=styles, width=width, optional=optional):
            self.say_cut(width)

    def say_cut(self, width: int | None) -> None:
        """Once per command: output was cut to fit the terminal, and how to see it whole."""
        if not self._said_cut:
            self._said_cut = True
            self.info(f"(cut to fit {width} columns: cells that end in … are cut, and columns may be left out; --wide "
                      "shows it whole)")

    def emit_json(self, obj: Any, fmt: str | None = None) -> None:
        render.write_json(obj, self.stdout, fmt=fmt or self.output_format())

    def info(self, message: str, *, prefix: str = "") -> None:
        """A line on stderr; `prefix` may carry colour (it is not sanitised, the message is)."""
        self.stderr.write(prefix + render.safe_text(message, keep_newlines=True) + "\n")
        self.stderr.flush()

    def warn(self, message: str) -> None:
        self.info(message, prefix=self.style("warning:", err=True, fg="yellow", bold=True) + " ")

    # -- colour -----------------------------------------------------------------------------------

    def colors(self, stream: IO[str]) -> bool:
        """Colour only on a terminal, and never with --no-color or NO_COLOR (any non-empty value)."""
        if self.color is False or self.env.get("NO_COLOR"):
            return False
        return _isatty(stream)

    def style(self, text: str, *, err: bool = False, **styles: Any) -> str:
        """click.style for stdout (or stderr with err=True) when that stream gets colour; else text as is.
        Style text that is already terminal-safe: the escape codes added here must not be escaped."""
        if not text or not self.colors(self.stderr if err else self.stdout):
            return text

        return click.style(text, **styles)

    def detail(self, message: str) -> None:
        """How a run works inside (dlxtool.ops.session.Reporter.detail): on stderr with -v only."""
        if self.verbose:
            self.info(message)

    def debug_log(self, message: str) -> None:
        if self.verbose or self.debug:
            self.info(f"debug: {message}")

    def stdout_is_tty(self) -> bool:
        return _isatty(self.stdout)

    def stdin_is_tty(self) -> bool:
        return _isatty(self.stdin)

    def confirm(self, question: str, *, yes: bool) -> None:
        """Ask before a destructive step; without a terminal, refuse unless --yes was given."""
        if yes:
            return
        if not (self.stdin_is_tty() and _isatty(self.stderr)):
            raise RefusedError(f"{question} — not confirmed: no terminal to ask on",
                               hint="pass --yes to confirm, or --dry-run to see what would happen")

        if not click.confirm(question, default=False, err=True):
            raise RefusedError("not confirmed; nothing was changed")


def _vhost_answers(profile: BrokerProfile) -> bool:
    """Whether the vhost of `profile` exists on its broker: an AMQP connection to it opens, or is refused for want of
    permission (not for a vhost not found)."""
    from dlxtool.broker.connection import close_quietly, connect

    try:
        conn = connect(profile)
    except VhostNotFound:
        return False
    except AccessRefused:  # no permissions there: the vhost exists
        return True
    except DlxtoolError:
        return False
    close_quietly(conn)
    return True


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
