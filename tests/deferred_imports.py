"""Why each module that dlxtool imports inside a function is not imported at the top (issue 36): the reason table.

One entry per deferred module — the module a function-local import names (tests/test_local_imports.py `_targets`:
`from dlxtool.broker import versions` names dlxtool.broker.versions, `from dlxtool.render import dumps`
dlxtool.render) — whichever function, in whichever module, imports it. A new function-local import of a module not
listed here fails tests/test_local_imports.py, and so does an entry no function-local import names any more.

A reason about start-up names the cheap command lines (no broker) that must not load the module: `START_UP` is
`dlxtool --help` and `dlxtool peek --help` (the CLI's entry, its options and the most used command's module), and a
few reasons name `dlxtool journal` too, or only `--help`. tests/test_local_imports.py runs those command lines in
fresh interpreters and fails where a module said to be deferred for them is loaded by them anyway: then the deferral
buys nothing, and the import belongs at the top (tests/test_import_cycles.py proves that this can make no cycle).
The few reasons that are not about start-up say so (`not_loaded_by=()`).
"""

from __future__ import annotations

from dataclasses import dataclass

TOP_HELP = "--help"
PEEK_HELP = "peek --help"
JOURNAL = "journal"  # reads the local journal only: a command that never reads a message
START_UP = (TOP_HELP, PEEK_HELP)
PROBES = (TOP_HELP, PEEK_HELP, JOURNAL)  # every command line a reason may name


@dataclass(frozen=True)
class Reason:
    why: str
    not_loaded_by: tuple[str, ...] = START_UP  # the command lines that must not load the module; () not start-up


# Optional or heavy third-party code.
PROTON = Reason("optional dependency (the amqp10 extra): python-qpid-proton, only on the AMQP 1.0 path "
                "(--protocol 1.0, a replay or move over 1.0)")
PROTOBUF = Reason("protobuf's runtime and the schema registry (the descriptor pool): only when a body is decoded "
                  "or re-encoded (decode, a peek or dump that decodes, replay --edit, load --reencode)")
PIKA = Reason("pika (the 0.9.1 client, with its adapters; logging only to quiet pika's loggers): only once a command "
              "opens an AMQP 0.9.1 connection; dlxtool.broker.connection's failure helpers are used without one")
COMPLETION = Reason("click.shell_completion: only `dlxtool completion` and a TAB press (click loads it itself for "
                    "those), never a command's own run")

# dlxtool's own layers, loaded by the commands that need them.
AMQP10 = Reason("the AMQP 1.0 path (dlxtool's 1.0 client, message codec, conversions and engine): only --protocol "
                "1.0, a replay or move over 1.0, or a record that came over 1.0")
AMQP091 = Reason("dlxtool's AMQP 0.9.1 client (connection, channels, queue operations, the wire codec, publish "
                 "rights, the identity proof over AMQP): only once a command talks to a broker over AMQP")
MANAGEMENT = Reason("the management API client (HTTP) and RabbitMQ's version rules: only once a command asks the API "
                    "or knows the broker's version")
ENGINE = Reason("the moving engine and its checks (pipeline, policies, capacity, publish rights, conversion check, "
                "outcomes): only the commands that move or remove messages (replay, purge, move, load, dump --remove)")
RUN = Reason("a command's work, not its options: loaded once the command runs, so `--help`, the command's own --help "
             "and the other commands do not pay for it (peek's queue reader, history's grouping, routes and queue "
             "roles, the journal and its ids, provenance, the brokers' health check)")
TABLE = Reason("table rendering (a table's cells in a few words, tabulate): only -f table output, not JSON or --help")
EDITING = Reason("replay --edit and load --reencode (the editor's document, what an edit changed, re-encoding): only "
                 "with those options")
DECODING = Reason("body decoding (schemas' paths, line extraction, JSON and compressed bodies): only commands that "
                  "decode or show a body, not --help")
CONVENTIONS = Reason("the framework conventions (a dozen dataclasses): only to explain a history or a table's "
                     "origin column, or a config that names some")
READING = Reason("the message model and the reading side (records, x-death parsing, AMQP values and their "
                 "decimals, --where selection): every command that reads messages loads it; `dlxtool --help` and "
                 "`dlxtool journal` do not", (TOP_HELP, JOURNAL))
EVERY_COMMAND = Reason("the connection label (dlxtool.cli's group callback sets it before any command runs): "
                       "`dlxtool --help` and `--version` go without it", (TOP_HELP,))

# The standard library, where only a rare path needs a module that start-up does not load.
MISTAKE = Reason("only after a mistake or a failure: a 'did you mean', a traceback, a failure's explanation, a "
                 "stopped run's resume command")
TLS = Reason("TLS (ssl and OpenSSL's libssl): only an amqps:// or https:// profile")
PROXY = Reason("urllib's HTTP stack (http.client, email…): only through an HTTP proxy; dlxtool.broker.http speaks "
               "HTTP itself")
SCHEMA_CACHE = Reason("the .proto compiler's tools and the schema cache's writer (subprocess, tempfile, hashlib): only "
                      "when a schema is looked up in or written to the cache, or compiled; tempfile also when the "
                      "methods cache (dlxtool.method_cache) is written, after a run that compiled a new method")
VERSION = Reason("importlib.metadata (and its email and zipfile): only `dlxtool --version`")
THREADS = Reason("a thread pool: only a queue survey of several brokers")
WIDE_TEXT = Reason("unicodedata: only for text that is not ASCII (its width on a terminal)")

# Not about start-up.
ENTRY = Reason("dlxtool.entry puts the stop-signal handlers in place before anything else is imported (issue 35)",
               ())
LEFT_IN_RECORD = Reason("loaded by every command anyway (dlxtool.cli.app imports it), so this deferral buys nothing: "
                        "left in dlxtool/record.py (to_jsonl) only because that file was being edited in parallel "
                        "(the AMQP 1.0 work); move it to the top there", ())


DEFERRED: dict[str, Reason] = {
    # third party
    "proton": PROTON,
    "proton.reactor": PROTON,
    "proton.utils": PROTON,
    "proton._reactor": PROTON,
    "google.protobuf": PROTOBUF,
    "google.protobuf.message": PROTOBUF,
    "proto_registry": PROTOBUF,
    "proto_registry.hints": PROTOBUF,
    "proto_registry.result": PROTOBUF,
    "dlxtool.editing.reencode": EDITING,
    "pika": PIKA,
    "pika.credentials": PIKA,
    "pika.exceptions": PIKA,
    "dlxtool.broker.pika_import": PIKA,
    "logging": PIKA,
    "tabulate": TABLE,
    "click.shell_completion": COMPLETION,
    # AMQP 1.0
    "dlxtool.amqp10_conversions": AMQP10,
    "dlxtool.amqp10_message": AMQP10,
    "dlxtool.amqp10_view": AMQP10,
    "dlxtool.broker.amqp10": AMQP10,
    "dlxtool.broker.amqp10.addresses": AMQP10,
    "dlxtool.broker.amqp10.connection": AMQP10,
    "dlxtool.broker.amqp10.links": AMQP10,
    "dlxtool.broker.amqp10.outcomes": AMQP10,
    "dlxtool.ops.amqp10_outgoing": AMQP10,
    "dlxtool.ops.engine_amqp10": AMQP10,
    "dlxtool.ops.load_amqp10": AMQP10,
    "dlxtool.ops.file_pass_amqp10": AMQP10,
    "dlxtool.ops.peek_amqp10": AMQP10,
    "dlxtool.ops.peek_past_poison": AMQP10,  # a 0.9.1 read going on over 1.0: only on 4.x, once a read starts
    "dlxtool.poison_memo": AMQP10,  # the memo of such reads: only on 4.3, a quorum queue read under --protocol auto
    "dlxtool.ops.pipeline_amqp10": AMQP10,
    "dlxtool.ops.protocol_choice": ENGINE,  # --protocol auto: only once a moving command has judged its messages
    "dlxtool.ops.canary": ENGINE,  # the guard (tap, engine, pika): `replay --help` needs only its settings
    # AMQP 0.9.1
    "dlxtool.broker.channel": AMQP091,
    "dlxtool.broker.connection": AMQP091,
    "dlxtool.broker.identity": AMQP091,
    "dlxtool.broker.permissions": AMQP091,
    "dlxtool.broker.publisher": AMQP091,
    "dlxtool.broker.queues": AMQP091,
    "dlxtool.broker.wire.codec": AMQP091,
    "dlxtool.broker.wire.frames": AMQP091,
    # management API
    "dlxtool.broker.management": MANAGEMENT,
    "dlxtool.broker.policies": MANAGEMENT,
    "dlxtool.broker.versions": MANAGEMENT,
    # moving
    "dlxtool.cli.moving": ENGINE,
    "dlxtool.ops.actions": ENGINE,
    "dlxtool.ops.alarms": ENGINE,
    "dlxtool.ops.busy": ENGINE,
    "dlxtool.ops.capacity": ENGINE,
    "dlxtool.ops.held": ENGINE,
    "dlxtool.ops.load": ENGINE,
    "dlxtool.ops.move": ENGINE,
    "dlxtool.ops.outcomes": ENGINE,
    "dlxtool.ops.pipeline": ENGINE,
    "dlxtool.ops.publish_rights": ENGINE,
    "dlxtool.ops.purge": ENGINE,
    "dlxtool.ops.record_files": ENGINE,
    "dlxtool.ops.replay": ENGINE,
    "dlxtool.ops.replay_address": ENGINE,
    "dlxtool.ops.replay_decision": ENGINE,
    "dlxtool.ops.replay_raw": ENGINE,
    "dlxtool.ops.replay_replies": ENGINE,
    "dlxtool.ops.session": ENGINE,
    "dlxtool.ops.transfer_settings": ENGINE,
    # a command's work, its editing, its tables
    "dlxtool.cli.editing": EDITING,
    "dlxtool.editing.document": EDITING,
    "dlxtool.editing.edits": EDITING,
    "dlxtool.cli.explaining": TABLE,
    "dlxtool.failures": RUN,
    "dlxtool.journal": RUN,
    "dlxtool.message_ids": RUN,
    "dlxtool.ops.check": RUN,
    "dlxtool.ops.dead_letter_roles": RUN,
    "dlxtool.ops.history": RUN,
    "dlxtool.ops.peek": RUN,
    "dlxtool.ops.provenance": RUN,
    "dlxtool.ops.routes": RUN,
    # decoding
    "dlxtool.compression": DECODING,
    "dlxtool.decode_lines": DECODING,
    "dlxtool.decoding": DECODING,
    "dlxtool.extract": DECODING,
    "dlxtool.jsonbody": DECODING,
    "proto_registry.cache": DECODING,
    "dlxtool.convention_hints": CONVENTIONS,
    "dlxtool.conventions": CONVENTIONS,
    # loaded by most commands, not by --help
    "dlxtool.amqp_values": READING,
    "dlxtool.deaths": READING,
    "dlxtool.record": READING,
    "dlxtool.selection": READING,
    "decimal": READING,
    "dlxtool.broker.naming": EVERY_COMMAND,
    # standard library, rare paths
    "difflib": MISTAKE,
    "traceback": MISTAKE,
    "shlex": MISTAKE,
    "dlxtool.broker.majority": MISTAKE,
    "ssl": TLS,
    "dlxtool.broker.tls": TLS,
    "urllib.error": PROXY,
    "urllib.request": PROXY,
    "hashlib": SCHEMA_CACHE,
    "subprocess": SCHEMA_CACHE,
    "tempfile": SCHEMA_CACHE,
    "importlib.metadata": VERSION,
    "concurrent.futures": THREADS,
    "unicodedata": WIDE_TEXT,
    # not about start-up
    "dlxtool.cli": ENTRY,
    "dlxtool.method_cache": ENTRY,
    "dlxtool.render": LEFT_IN_RECORD,
}
