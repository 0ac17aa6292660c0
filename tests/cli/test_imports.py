"""What each incident command imports: only what it needs (issue 17). Structural, not timed.

Every command runs in a fresh interpreter, as a user's would; afterwards the test reads `sys.modules`.
A heavy import that creeps back (the .proto compiler on a warm cache, importlib.metadata, another
command's module, pika's asyncio adapter, protobuf where no body is decoded) fails here, whatever
the machine's load. scripts/bench/startup.py measures what the imports cost.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pika
import pytest

from dlxtool.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]

# Run dlxtool as the console script does, then report the modules loaded.
PROBE = """\
import json, sys
from dlxtool.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as fh:
    json.dump({"code": code, "modules": sorted(sys.modules)}, fh)
"""

# Never at start-up: the version is known at build time; the compiler only when a .proto must be compiled;
# urllib's HTTP stack (http.client, email…) only through a proxy (dlxtool.broker.http speaks HTTP itself);
# the secrets module's hmac and hashlib for a random connection name (os.urandom does).
NEVER = ("importlib.metadata", "grpc_tools", "asyncio", "pika.adapters.asyncio_connection", "urllib.request",
         "http.client", "email", "secrets")
PROTOBUF = ("google.protobuf", "proto_registry.registry", "proto_registry.compile", "proto_registry.score")
# The framework conventions (a dozen dataclasses) explain a history or a table's origin column: not needed
# for --help, for message records (peek --format json) or for the queue survey.
CONVENTIONS = ("dlxtool.conventions",)


OPS = sorted(p.stem for p in (ROOT / "dlxtool" / "ops").glob("*.py") if p.stem != "__init__")
# Shared by every command that reads or runs (what is neither a workflow of its own nor heavy). stay: the kinds of
# reason a message stays for (an enum and a str subclass), which routes and actions type their answers with.
SHARED_OPS = ("interrupts", "provenance", "stay")
# What a read (peek, history, dump) uses of ops: peek's rules and, on RabbitMQ 4.x, the wrapper that reads on over 1.0
# past a message 0.9.1 cannot be given (its 1.0 reader, peek_amqp10, only once it must)
READ_OPS = ("peek", "peek_past_poison")


def foreign_ops(*own: str) -> list[str]:
    """The workflow modules (dlxtool/ops/*) that are not `own`: another command's, not to be imported."""
    return [f"dlxtool.ops.{m}" for m in OPS if m not in (*own, *SHARED_OPS)]


def other_commands(command: str | None) -> list[str]:
    """The modules of every command but `command` (COMMANDS maps names to "module:attribute")."""
    return [target.split(":")[0] for name, target in COMMANDS.items() if name != command]


def loaded(tmp_path: Path, env: dict[str, str], *args: str, stdin: str | None = None) -> set[str]:
    out = tmp_path / f"modules-{len(list(tmp_path.glob('modules-*')))}.json"
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], input=stdin, capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    report = json.loads(out.read_text())
    assert report["code"] == 0, proc.stderr
    return set(report["modules"])


def assert_none(modules: set[str], forbidden: list[str] | tuple[str, ...], what: str) -> None:
    found = sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden))
    assert not found, f"{what} imported {found}"


def test_top_level_help_imports_no_command(tmp_path: Path, cli_env: dict[str, str]) -> None:
    modules = loaded(tmp_path, cli_env, "--help")
    assert_none(modules, [*NEVER, *PROTOBUF, *CONVENTIONS, "pika", "dlxtool.broker", *foreign_ops(),
                          "dlxtool.decoding", "dlxtool.deaths", *other_commands(None)], "dlxtool --help")


@pytest.mark.parametrize("command", ["peek", "history", "queues", "decode", "replay", "move", "purge", "load", "dump"])
def test_command_help_imports_only_its_own_module(tmp_path: Path, cli_env: dict[str, str], command: str) -> None:
    modules = loaded(tmp_path, cli_env, command, "--help")
    assert COMMANDS[command].split(":")[0] in modules
    # the moving commands' options need no engine, no guard and no 0.9.1 client (issue 40: replay --help loaded
    # pika through the canary's settings)
    assert_none(modules, [*NEVER, *PROTOBUF, "pika", "dlxtool.ops.engine", "dlxtool.ops.canary",
                          *other_commands(command)], f"dlxtool {command} --help")


@pytest.fixture
def schemas(tmp_path: Path) -> Path:
    """A user's schema directory, and a config that loads it and the demo's schemas."""
    d = tmp_path / "schemas" / "acme"
    d.mkdir(parents=True)
    (d / "ping.proto").write_text('syntax = "proto3";\npackage acme;\nmessage Ping { string id = 1; int64 n = 2; }\n')
    return d.parent


def config_env(tmp_path: Path, cli_env: dict[str, str], broker, schemas: Path | None) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text("demo_schemas = true\n" + (f"proto_paths = [{str(schemas)!r}]\n" if schemas else ""))
    return {**cli_env, "DLXTOOL_CONFIG": str(config), "DLXTOOL_URL": broker.url}


def test_peek_with_a_warm_schema_cache_does_not_compile(tmp_path: Path, cli_env, broker, qname, schemas) -> None:
    """A peek that decodes loads the schemas from the cache: no protoc, no grpc_tools, no subprocess."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, b"\x0a\x02p1\x10\x07", pika.BasicProperties(type="acme.Ping"), mandatory=True)
    env = config_env(tmp_path, cli_env, broker, schemas)
    first = loaded(tmp_path, env, "peek", qname, "-f", "json")
    assert "grpc_tools" in first or "subprocess" in first  # a cold cache compiles: the test sees a difference
    modules = loaded(tmp_path, env, "peek", qname, "-f", "json")
    assert "proto_registry.registry" in modules  # the body was decoded
    assert_none(modules, [*NEVER, *CONVENTIONS, "subprocess", "concurrent.futures", *other_commands("peek"),
                          *foreign_ops(*READ_OPS)], "dlxtool peek (warm cache)")


def test_history_of_typed_messages_does_not_load_protobuf(tmp_path: Path, cli_env, broker, qname,
                                                          schemas) -> None:
    """History uses a decoded body only for its type, and the AMQP `type` property gives it: no body is
    decoded (with a schema configured that would match it)."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, b"\x0a\x02p1\x10\x07", pika.BasicProperties(type="acme.Ping"), mandatory=True)
    modules = loaded(tmp_path, config_env(tmp_path, cli_env, broker, schemas), "history", qname, "-f", "json")
    assert_none(modules, [*NEVER, *PROTOBUF, "dlxtool.decoding", *other_commands("history"),
                          *foreign_ops(*READ_OPS, "history")], "dlxtool history of typed messages")


@pytest.mark.parametrize("command", ["peek", "history"])
def test_reading_json_bodies_does_not_load_protobuf(tmp_path: Path, cli_env, broker, qname, schemas,
                                                    command: str) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, b'{"id": 1}', pika.BasicProperties(content_type="application/json"),
                         mandatory=True)
    modules = loaded(tmp_path, config_env(tmp_path, cli_env, broker, schemas), command, qname, "-f", "json")
    # peek: no hashlib (OpenSSL's libcrypto), which only hashes schemas for the cache (issue 40's start-up)
    assert_none(modules, [*NEVER, *PROTOBUF, *(["hashlib"] if command == "peek" else []), *other_commands(command),
                          *foreign_ops(*READ_OPS, command)], f"dlxtool {command} of JSON bodies")


# The queue survey and its flags, and the roles it tells from the topology (dead_letter_roles follows dead-letter
# routes with the routes' Router; actions is the engine's two small types routes names).
QUEUES_OPS = ("queues", "queue_flags", "dead_letter_roles", "routes", "actions")


def test_queues_talks_http_only(tmp_path: Path, cli_env, broker) -> None:
    """With a management_url in the profile. (A derived or ad-hoc one is first proven to answer for the
    AMQP broker over an AMQP connection, dlxtool.broker.identity: that run imports pika, on purpose.)"""
    config = tmp_path / "config.toml"
    config.write_text(broker.config_toml())
    env = {**cli_env, "DLXTOOL_CONFIG": str(config), "DLXTOOL_BROKER": "test", "DLXTOOL_TEST_PASSWORD": "guest"}
    env.pop("DLXTOOL_MANAGEMENT_URL", None)  # the harness's ad-hoc URL would be proven over AMQP (see above)
    modules = loaded(tmp_path, env, "queues", "-f", "json")
    assert_none(modules, [*NEVER, *PROTOBUF, *CONVENTIONS, "pika", "dlxtool.decoding", "dlxtool.broker.connection",
                          "dlxtool.record", "concurrent.futures", *other_commands("queues"),
                          *foreign_ops(*QUEUES_OPS)], "dlxtool queues")


def test_queues_proving_an_ad_hoc_api_imports_no_more(tmp_path: Path, cli_env, broker) -> None:
    """--url: the API is proven over an AMQP connection first (pika, dlxtool.broker.identity), and still
    nothing else: no thread pool (the GETs are pipelined), no urllib."""
    env = {**cli_env, "DLXTOOL_URL": broker.url}
    modules = loaded(tmp_path, env, "queues", "-f", "json")
    assert "dlxtool.broker.identity" in modules  # the proof ran
    assert_none(modules, [*NEVER, *PROTOBUF, *CONVENTIONS, "dlxtool.decoding", "dlxtool.record",
                          "concurrent.futures", *other_commands("queues"), *foreign_ops(*QUEUES_OPS)],
                "dlxtool --url … queues")


def test_decode_with_a_warm_cache(tmp_path: Path, cli_env, schemas) -> None:
    env = {**cli_env, "DLXTOOL_PROTO_PATH": str(schemas)}
    line = "payload=CgJwMRAH\n"  # acme.Ping{id: "p1", n: 7}
    loaded(tmp_path, env, "decode", "--demo-schemas", stdin=line)
    modules = loaded(tmp_path, env, "decode", "--demo-schemas", stdin=line)
    assert_none(modules, [*NEVER, "subprocess", "pika", "dlxtool.broker.connection", "dlxtool.broker.management",
                          *other_commands("decode")],
                "dlxtool decode (warm cache)")


@pytest.mark.parametrize("command", ["replay", "purge", "load", "dump"])
def test_moving_commands_import_pika_without_its_asyncio_adapter(tmp_path: Path, cli_env, broker, qname,
                                                                  command: str) -> None:
    """The engine's I/O layer imported pika before dlxtool.broker.pika_import could take the asyncio adapter
    out: every replay paid for asyncio (about a fifth of pika's import time, more without .pyc files)."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        if command in ("purge", "dump"):  # a message to take: with none they end before the engine is needed
            ch.basic_publish("", qname, b"x")
    records = tmp_path / "in.jsonl"
    records.write_text("")
    args = {"replay": ["replay", qname, "--yes"], "purge": ["purge", qname, "--body-contains", "x", "--yes"],
            "load": ["load", str(records), "--yes"],
            "dump": ["dump", qname, "--remove", "--yes", "-o", str(tmp_path / "o")]}
    modules = loaded(tmp_path, cli_env, *args[command], "--url", broker.url, "-f", "json")
    assert "dlxtool.ops.engine" in modules or command == "load"
    assert_none(modules, NEVER, f"dlxtool {command}")
