"""Broker profiles: the TOML config file, where it is found, how a broker is chosen, and its secrets.

Resolution order for the file: `--config FILE`, `$DLXTOOL_CONFIG`, `$XDG_CONFIG_HOME/dlxtool/config.toml`
(`~/.config/dlxtool/config.toml`). No file at all is fine: the local broker is the default.

Resolution order for the broker: `--url` (`$DLXTOOL_URL`) overrides the node URLs of the chosen
profile; the profile is `--broker` (`$DLXTOOL_BROKER`), else the file's `default`, else the built-in
`local` profile (amqp://guest:guest@localhost:5672/).

Resolution order for the vhost: `--vhost`, `$DLXTOOL_VHOST` (dlxtool.cli.app.App.chosen_vhost), the path of
`--url`, the profile's `vhost`, else `/`.

Resolution order for the management API: `--management-url` (`$DLXTOOL_MANAGEMENT_URL`), else the profile's
`management_url`, else host:15672 (https: 15671) of the AMQP URL (`--url`'s when given). Whichever it is,
dlxtool.broker.identity proves that it answers for the broker the AMQP connection reached before using it.

Example::

    default = "staging"
    timeout = 5

    [brokers.prod-eu]
    urls = ["amqps://rabbit-1.eu.example:5671", "amqps://rabbit-2.eu.example:5671"]
    vhost = "orders"
    user = "oncall"
    password_env = "PROD_EU_RABBIT_PASSWORD"
    management_url = "https://rabbit.eu.example:15671/"
    proto_paths = ["~/src/schemas"]
    reset_headers = ["count"]

    [brokers.prod-eu.tls]
    ca = "/etc/ssl/certs/internal-ca.pem"
    cert = "~/.config/dlxtool/oncall.pem"
    key = "~/.config/dlxtool/oncall.key"

A team's own dead-letter convention (its retry library's headers; see dlxtool.conventions), global or
per broker as `[brokers.NAME.conventions.NAME]`::

    [conventions.acme-retry]
    origin_queue_header = "x-acme-failed-queue"   # or origin_exchange_header (+ origin_routing_key_header)
    error_headers = ["x-acme-error"]
    attempts_header = "x-acme-attempts"
    reset_headers = ["x-acme-trace"]

`auth = "external"` in a broker section logs in with the client certificate (SASL EXTERNAL, the
rabbitmq_auth_mechanism_ssl plugin) instead of a password; it needs amqps URLs and tls.cert. A
password given as well is then used for the management API only.
"""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from dlxtool import secrets
from dlxtool.budget import DEFAULT_MAX_BYTES, parse_size
from dlxtool.errors import ConfigError, NotFoundError, UsageError
from dlxtool.urls import AmqpUrl, derive_management_url, host_port, mask_any_url, parse_amqp_url

# dlxtool.conventions (a dozen dataclasses, and dlxtool.deaths) loads only for a config that names some.
if TYPE_CHECKING:
    from dlxtool.conventions import HeaderConvention

LOCAL_URL = "amqp://guest:guest@localhost:5672/"
DEFAULT_TIMEOUT = 5.0

_TOP_KEYS = {"default", "timeout", "brokers", "proto_paths", "dump_unacked_limit", "error_headers", "demo_schemas",
             "journal", "max_bytes",
             "conventions"}
_BROKER_KEYS = {
    "url", "urls", "vhost", "user", "password", "password_env", "password_file", "management_url", "management_urls",
    "tls", "proto_paths", "reset_headers", "timeout", "management_user", "description", "auth", "conventions",
    "max_bytes",
}
_CONVENTION_KEYS = {"origin_queue_header", "origin_exchange_header", "origin_routing_key_header", "error_headers",
                    "attempts_header", "reset_headers"}
AUTH_MECHANISMS = ("plain", "external")
_TLS_KEYS = {"ca", "cert", "key", "verify", "server_name"}


@dataclass(frozen=True)
class TlsOptions:
    """A broker profile's TLS settings: CA, client certificate and key, whether to verify."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    verify: bool = True
    server_name: str | None = None


@dataclass(frozen=True)
class BrokerProfile:
    """One named broker. `password()` resolves the secret only when a connection needs it."""

    name: str
    urls: tuple[str, ...] = field(repr=False)  # may hold passwords: use masked_urls()
    vhost: str = "/"
    user: str | None = None
    password_literal: str | None = field(default=None, repr=False)
    password_env: str | None = None
    password_file: str | None = None
    management_url: str | None = None
    management_url_derived: bool = True
    management_url_source: str | None = None  # where an explicit management_url came from, for messages
    # A cluster's management APIs, one per node in the order of `urls` (management_urls, else derived from each
    # URL): the one that answers for the cluster AMQP reached is used, the reached node's first. Empty: just
    # management_url (a single API, or a load balancer in front of them).
    management_urls: tuple[str, ...] = ()
    tls: TlsOptions = TlsOptions()
    proto_paths: tuple[str, ...] = ()
    reset_headers: tuple[str, ...] = ()
    conventions: tuple[HeaderConvention, ...] = ()  # this broker's teams' conventions (before the global ones)
    timeout: float = DEFAULT_TIMEOUT
    max_bytes: int = DEFAULT_MAX_BYTES  # bytes of messages a command may hold at once (dlxtool.budget)
    auth: str = "plain"  # plain: user + password; external: the TLS client certificate (SASL EXTERNAL)
    source: str = "built-in"  # where the profile came from, for messages
    env: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def nodes(self) -> list[AmqpUrl]:
        return [parse_amqp_url(u) for u in self.urls]

    def management_candidates(self, reached: AmqpUrl | None = None) -> list[str]:
        """The management APIs to try, in order: where there is one per node, the one of the node AMQP `reached`
        first, then the others in the profile's order; else management_url alone."""
        urls = list(self.management_urls) or [u for u in (self.management_url,) if u]
        if reached is not None and len(urls) == len(self.urls) > 1:
            hosts = [(n.host, n.port) for n in self.nodes]
            if (reached.host, reached.port) in hosts:
                first = hosts.index((reached.host, reached.port))
                urls = [urls[first]] + urls[:first] + urls[first + 1:]
        return list(dict.fromkeys(urls))

    @property
    def username(self) -> str:
        return self.user or self.nodes[0].user or "guest"

    @property
    def password_source(self) -> str:
        """Where the password comes from, safe to print."""
        if self.password_env:
            return f"env:{self.password_env}"
        if self.password_file:
            return f"file:{self.password_file}"
        if self.password_literal is not None:
            return "literal"
        if any(n.password is not None for n in self.nodes):
            return "url"
        return "none"

    def password(self) -> str:
        if self.password_env:
            value = self.env.get(self.password_env)
            if value is None:
                raise ConfigError(
                    f"broker {self.name!r}: password_env names {self.password_env}, which is not set",
                    hint=f"export {self.password_env}=… or change password_env in {self.source}",
                )
            value = value.rstrip("\n")
        elif self.password_file:
            path = Path(self.password_file).expanduser()
            try:
                value = path.read_text().rstrip("\r\n")
            except OSError as exc:
                raise ConfigError(
                    f"broker {self.name!r}: cannot read password_file {path}: {exc.strerror}",
                    hint=f"create the file or change password_file in {self.source}",
                ) from None
        elif self.password_literal is not None:
            value = self.password_literal
        else:
            value = next((n.password for n in self.nodes if n.password is not None), None) or (
                "guest" if self.username == "guest" else ""
            )
        secrets.register(value)
        return value

    def describe(self, node: AmqpUrl | None = None) -> str:
        """The broker as messages name it: the profile and the node (host:port), or the node alone for --url."""
        node = node or self.nodes[0]
        where = host_port(node.host, node.port)
        return where if self.source == "--url" else f"{self.name!r} ({where})"

    def masked_urls(self) -> list[str]:
        return [n.masked() for n in self.nodes]

    def with_management_url(self, url: str, where: str = "--management-url") -> BrokerProfile:
        """An explicit management API URL (`--management-url`) replaces the profile's or the derived one."""
        _check_http_url(url, where, error=UsageError)
        password = urlsplit(url).password
        secrets.register(unquote(password) if password else None)
        return replace(self, management_url=url, management_url_derived=False, management_url_source=where,
                       management_urls=())

    def with_url(self, url: str) -> BrokerProfile:
        """An ad-hoc URL (`--url`) replaces the node URLs; a vhost or user in it wins too."""
        node = parse_amqp_url(url)
        secrets.register(node.password)
        changes: dict[str, Any] = {"urls": (url,)}
        if node.vhost is not None:
            changes["vhost"] = node.vhost
        if node.user is not None:
            changes.update(user=node.user, password_env=None, password_file=None,
                           password_literal=node.password)
        # The management API of the broker the URL names, not of the profile's (queue type and limits
        # must come from the same broker the messages do).
        changes.update(management_url=derive_management_url(node), management_url_derived=True, management_urls=())
        return replace(self, **changes)


@dataclass(frozen=True)
class Config:
    """The config file, read: its broker profiles and the settings that apply to all of them."""

    path: Path | None
    brokers: dict[str, BrokerProfile]
    default: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    proto_paths: tuple[str, ...] = ()
    dump_unacked_limit: int = 10_000
    error_headers: tuple[str, ...] = ()
    # Also decode with the demo shop's schemas bundled with dlxtool (shop.*; scripts/demo sets it).
    # Off by default: loaded everywhere, they would put demo names on a user's own bytes.
    demo_schemas: bool = False
    conventions: tuple[HeaderConvention, ...] = ()  # global [conventions.NAME] tables
    journal: bool = True  # record runs that change messages (dlxtool.journal); `journal = false` turns it off
    max_bytes: int = DEFAULT_MAX_BYTES  # the byte budget of brokers that set none (dlxtool.budget)

    def conventions_for(self, profile: BrokerProfile | None) -> tuple[HeaderConvention, ...]:
        """A broker's own conventions first, then the global ones (a broker's may reuse a global name)."""
        own = profile.conventions if profile is not None else ()
        names = {c.name for c in own}
        return (*own, *(c for c in self.conventions if c.name not in names))

    def profile(self, name: str) -> BrokerProfile:
        try:
            return self.brokers[name]
        except KeyError:
            known = ", ".join(sorted(self.brokers)) or "none"
            where = f"in {self.path}" if self.path else "(no config file found)"
            raise NotFoundError(
                f"no broker profile named {name!r} {where}; known: {known}",
                hint="see `dlxtool brokers list`",
            ) from None


def config_path(explicit: str | None, env: Mapping[str, str]) -> tuple[Path | None, bool]:
    """The config file to read, and whether the user named it (then it must exist)."""
    if explicit:
        return Path(explicit).expanduser(), True
    if env.get("DLXTOOL_CONFIG"):
        return Path(env["DLXTOOL_CONFIG"]).expanduser(), True
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "dlxtool" / "config.toml", False


def load_config(explicit: str | None, env: Mapping[str, str]) -> Config:
    path, named = config_path(explicit, env)
    if path is None or not path.exists():
        if named:
            raise NotFoundError(f"config file {path} does not exist",
                                hint="check --config / DLXTOOL_CONFIG")
        return Config(path=None, brokers={"local": local_profile(env)}, default="local")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line N, column M)": that is the where.
        raise ConfigError(f"config {path}: invalid TOML: {exc}", hint="fix the file and try again") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config {path}: cannot read: {exc}") from None
    return parse_config(data, path, env)


def top_level_proto_paths(explicit: str | None, env: Mapping[str, str]) -> tuple[str, ...] | None:
    """Only the config file's top-level proto_paths, for a command that needs nothing else from it (the
    offline `decode`) when the rest of the file is wrong: None when the file cannot be read or parsed at
    all, ConfigError when its proto_paths are wrong."""
    path, named = config_path(explicit, env)
    if path is None or not path.exists():
        return None if named else ()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
        return None
    return tuple(_strings(data.get("proto_paths", []), f"config {path}: proto_paths"))


def parse_config(data: Mapping[str, Any], path: Path, env: Mapping[str, str]) -> Config:
    _check_keys(data, _TOP_KEYS, f"config {path}")
    timeout = _number(data.get("timeout", DEFAULT_TIMEOUT), f"config {path}: timeout")
    max_bytes = _size(data.get("max_bytes", DEFAULT_MAX_BYTES), f"config {path}: max_bytes")
    raw_brokers = data.get("brokers", {})
    if not isinstance(raw_brokers, dict):
        raise ConfigError(f"config {path}: 'brokers' must be a table of [brokers.NAME] sections")
    brokers = {
        name: _parse_broker(name, raw, path, env, timeout, max_bytes) for name, raw in raw_brokers.items()
    }
    brokers.setdefault("local", replace(local_profile(env), timeout=timeout, max_bytes=max_bytes))
    default = data.get("default")
    if default is not None and default not in brokers:
        raise ConfigError(
            f"config {path}: default = {default!r} names no [brokers.{default}] section",
            hint=f"known brokers: {', '.join(sorted(brokers))}",
        )
    return Config(
        path=path,
        brokers=brokers,
        default=default or "local",
        timeout=timeout,
        proto_paths=tuple(_strings(data.get("proto_paths", []), f"config {path}: proto_paths")),
        dump_unacked_limit=_whole(data.get("dump_unacked_limit", 10_000), f"config {path}: dump_unacked_limit"),
        error_headers=tuple(_strings(data.get("error_headers", []), f"config {path}: error_headers")),
        demo_schemas=_bool(data.get("demo_schemas", False), f"config {path}: demo_schemas"),
        conventions=parse_conventions(data.get("conventions", {}), f"config {path}: [conventions"),
        journal=_bool(data.get("journal", True), f"config {path}: journal"),
        max_bytes=max_bytes,
    )


def local_profile(env: Mapping[str, str]) -> BrokerProfile:
    return BrokerProfile(name="local", urls=(LOCAL_URL,), source="built-in default", env=env,
                         management_url=derive_management_url(parse_amqp_url(LOCAL_URL)))


def _parse_broker(name: str, raw: Any, path: Path, env: Mapping[str, str], timeout: float,
                  max_bytes: int = DEFAULT_MAX_BYTES) -> BrokerProfile:
    where = f"config {path}: [brokers.{name}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table")
    _check_keys(raw, _BROKER_KEYS, where)
    if "url" in raw and "urls" in raw:
        raise ConfigError(f"{where}: give either url or urls, not both")
    # Errors name the key the user wrote: url (one string) or urls (a string or a list of them).
    urls = [raw["url"]] if "url" in raw else raw.get("urls")
    if "url" in raw:
        _str(raw, "url", where)
    if not urls:
        raise ConfigError(f"{where}: no url", hint='add url = "amqp://user@host:5672/"')
    urls = _strings(urls, f"{where}: urls")
    try:
        nodes = [parse_amqp_url(u) for u in urls]
    except UsageError as exc:
        raise ConfigError(f"{where}: {exc.message}", hint=exc.hint) from None
    for node in nodes:
        secrets.register(node.password)
    if len({(n.user, n.password) for n in nodes}) > 1:
        # One set of credentials is sent to whichever node answers; differing ones would be ignored.
        raise ConfigError(f"{where}: the urls carry different users or passwords",
                          hint="put the credentials in user and password_env/password_file instead")
    sources = [k for k in ("password", "password_env", "password_file") if k in raw]
    if len(sources) > 1:
        raise ConfigError(f"{where}: give only one of password, password_env, password_file")
    if "password" in raw:
        secrets.register(_str(raw, "password", where))
    tls_raw = raw.get("tls", {})
    if not isinstance(tls_raw, dict):
        raise ConfigError(f"{where}: tls must be a table")
    _check_keys(tls_raw, _TLS_KEYS, f"{where}.tls")
    verify = tls_raw.get("verify", True)
    if not isinstance(verify, bool):
        raise ConfigError(f"{where}.tls: verify must be true or false (unquoted), got {verify!r}")
    tls = TlsOptions(
        ca=_opt_path(_str(tls_raw, "ca", f"{where}.tls")), cert=_opt_path(_str(tls_raw, "cert", f"{where}.tls")),
        key=_opt_path(_str(tls_raw, "key", f"{where}.tls")), verify=verify,
        server_name=_str(tls_raw, "server_name", f"{where}.tls"),
    )
    auth = _auth(raw.get("auth", "plain"), nodes, tls, where)
    management_url = _str(raw, "management_url", where)
    if management_url is not None:
        _check_http_url(management_url, f"{where}: management_url")
    listed = _strings(raw["management_urls"], f"{where}: management_urls") if "management_urls" in raw else []
    if listed and management_url is not None:
        raise ConfigError(f"{where}: give either management_url or management_urls, not both")
    if listed and len(listed) != len(urls):
        raise ConfigError(f"{where}: management_urls lists {len(listed)} URL(s) for {len(urls)} node URL(s)",
                          hint="one management API URL per AMQP URL, in the same order")
    for listed_url in listed:
        _check_http_url(listed_url, f"{where}: management_urls")
    per_node: tuple[str, ...] = ()
    if listed:
        per_node = tuple(listed)
    elif management_url is None and len(nodes) > 1:  # a cluster: each node's own API, derived from its URL
        per_node = tuple(derive_management_url(n) for n in nodes)
    return BrokerProfile(
        name=name,
        urls=tuple(urls),
        vhost=_str(raw, "vhost", where) or nodes[0].vhost or "/",
        user=_str(raw, "user", where),
        password_literal=_str(raw, "password", where),
        password_env=_str(raw, "password_env", where),
        password_file=_opt_path(_str(raw, "password_file", where)),
        management_url=management_url or (per_node[0] if per_node else derive_management_url(nodes[0])),
        management_url_derived=management_url is None and not listed,
        management_url_source=(f"management_url in {where}" if management_url else
                               f"management_urls in {where}" if listed else None),
        management_urls=per_node,
        tls=tls,
        proto_paths=tuple(_opt_path(p) or p for p in _strings(raw.get("proto_paths", []), f"{where}: proto_paths")),
        reset_headers=tuple(_strings(raw.get("reset_headers", []), f"{where}: reset_headers")),
        conventions=parse_conventions(raw.get("conventions", {}), f"config {path}: [brokers.{name}.conventions"),
        timeout=_number(raw.get("timeout", timeout), f"{where}: timeout"),
        max_bytes=_size(raw.get("max_bytes", max_bytes), f"{where}: max_bytes"),
        auth=auth,
        source=str(path),
        env=env,
    )


def parse_conventions(raw: Any, where: str) -> tuple[HeaderConvention, ...]:
    """[conventions.NAME] tables (global, or [brokers.X.conventions.NAME]): a team's retry headers.

    `where` is the section prefix without its closing bracket ("config FILE: [conventions").
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}] must be a table of [….conventions.NAME] sections")
    if not raw:
        return ()
    from dlxtool.conventions import BUILT_IN_NAMES, HeaderConvention

    found = []
    for name, table in raw.items():
        here = f"{where}.{name}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{here} must be a table", hint='e.g. origin_queue_header = "x-failed-queue"')
        if name in BUILT_IN_NAMES:
            raise ConfigError(f"{here}: {name!r} is a built-in convention",
                              hint=f"pick another name; built in: {', '.join(BUILT_IN_NAMES)}")
        _check_keys(table, _CONVENTION_KEYS, here)
        queue, exchange, key = (_str(table, k, here) for k in ("origin_queue_header", "origin_exchange_header",
                                                                 "origin_routing_key_header"))
        if key is not None and exchange is None:
            # A routing key alone would mean the default exchange, where the key is a queue's name
            raise ConfigError(f"{here}: origin_exchange_header is missing",
                              hint="an exchange origin needs origin_exchange_header (origin_routing_key_header is "
                                   "optional: without it the exchange is published to with an empty routing key, "
                                   "as a fanout exchange routes); a queue origin is origin_queue_header")
        if queue is not None and exchange is not None:
            raise ConfigError(f"{here}: give origin_queue_header, or origin_exchange_header (+ "
                              "origin_routing_key_header), not both")
        errors = tuple(_strings(table.get("error_headers", []), f"{here}: error_headers"))
        attempts = _str(table, "attempts_header", here)
        if queue is None and exchange is None and not errors and attempts is None:
            raise ConfigError(f"{here}: names no header to read",
                              hint="set origin_queue_header (or origin_exchange_header, + origin_routing_key_header), "
                                   "error_headers or attempts_header")
        found.append(HeaderConvention(
            name=name, origin_queue_header=queue, origin_exchange_header=exchange, origin_routing_key_header=key,
            error_headers=errors, attempts_header=attempts,
            reset_headers=tuple(_strings(table.get("reset_headers", []), f"{here}: reset_headers")), source=here))
    return tuple(found)


def _auth(value: Any, nodes: list[AmqpUrl], tls: TlsOptions, where: str) -> str:
    if value not in AUTH_MECHANISMS:
        raise ConfigError(f"{where}: auth must be one of {', '.join(AUTH_MECHANISMS)}, got {value!r}")
    if value == "external":
        if not all(n.tls for n in nodes):
            raise ConfigError(f"{where}: auth = \"external\" logs in with a TLS client certificate; "
                              "every url must be amqps://")
        if not tls.cert:
            raise ConfigError(f"{where}: auth = \"external\" needs a client certificate",
                              hint="set cert (and key) in the profile's tls table")
    return str(value)


def _str(table: Mapping[str, Any], key: str, where: str) -> str | None:
    value = table.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{where}: {key} must be a string (in quotes), got {type(value).__name__}")


def _check_http_url(url: str, where: str, error: type[UsageError] = ConfigError) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise error(f"{where} {mask_any_url(url)!r} has a bad host or port",
                          hint="percent-encode / # ? @ : in a password (e.g. / as %2F)") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise error(f"{where} must be an http:// or https:// URL with a host, got {mask_any_url(url)!r}")


def literal_password_warnings(config: Config) -> list[str]:
    """Warnings about passwords written into the config file itself."""
    warnings = []
    for profile in config.brokers.values():
        if profile.source == str(config.path) and profile.password_source in ("literal", "url"):
            warnings.append(
                f"broker {profile.name!r} has a literal password in {config.path}; "
                "prefer password_env or password_file"
            )
    if warnings and config.path is not None:
        mode = config.path.stat().st_mode
        if mode & (stat.S_IRGRP | stat.S_IROTH):
            warnings.append(f"{config.path} holds a password and is readable by others: chmod 600 {config.path}")
    return warnings


def _check_keys(table: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}", hint=f"known keys: {', '.join(sorted(known))}")


def _strings(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a string or a list of strings")
    return list(value)


def _number(value: Any, where: str, *, most: float = 3600) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= most:
        raise ConfigError(f"{where} must be a number above 0 and at most {most:g}, got {value!r}")
    return float(value)


def _whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where} must be a whole number of at least 1, got {value!r}")
    return value


def _size(value: Any, where: str) -> int:
    """A byte size: a whole number of bytes, or a string with a unit ("256MiB", "1G"; dlxtool.budget)."""
    try:
        return parse_size(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}", hint='e.g. max_bytes = "512MiB" (a string) or a number of bytes') from None


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false (unquoted), got {value!r}")
    return value


def _opt_path(value: Any) -> str | None:
    return os.path.expanduser(value) if isinstance(value, str) else None


def select_profile(
    config: Config,
    *,
    broker: str | None = None,
    url: str | None = None,
    vhost: str | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
) -> BrokerProfile:
    """The broker a command talks to: see the module docstring for the order."""
    if broker:
        profile = config.profile(broker)
    elif url:
        # An ad-hoc URL alone must not inherit the default profile's secrets or TLS settings.
        profile = BrokerProfile(name="(--url)", urls=(url,), source="--url", env=env or {}, timeout=config.timeout,
                                max_bytes=config.max_bytes)
    else:
        profile = config.profile(config.default or "local")
    if url:
        profile = profile.with_url(url)
    if vhost:
        profile = replace(profile, vhost=vhost)
    if timeout:
        profile = replace(profile, timeout=timeout)
    return profile
