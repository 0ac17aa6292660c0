"""`dlxtool decode [FILE ...]`: find protobuf payloads in log lines and decode them, type found automatically."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import click

from dlxtool import render
from dlxtool.cli.app import App
from dlxtool.cli.options import connection_options, format_option
from dlxtool.errors import NotFoundError
from dlxtool.outcome import Outcome

DECODE_FORMATS = (*render.FORMATS, "text")


def _format_option(f: Any) -> Any:
    return format_option(f, DECODE_FORMATS, help="Output format: table (a line per payload); text (protobuf text "
                         "format); json: one JSON array; jsonl: one JSON object per payload, a line each (streams: "
                         "`tail -f` works). Default: table on a terminal, jsonl when piped.")


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True, path_type=str))
@click.option(
    "--proto-path",
    "-I",
    "proto_paths",
    multiple=True,
    metavar="PATH",
    help="Directory of .proto files and/or descriptor sets (.desc/.binpb/.pb), or one such file; "
    "repeatable; a path yielding no message type is an error. "
    "Also $DLXTOOL_PROTO_PATH (os.pathsep-separated) and proto_paths in the config.",
)
@click.option("--type", "-t", "type_name", metavar="TYPE", help="Decode as this message type (no guessing).")
@click.option("--raw", is_flag=True, help="Schema-less decoding (field numbers and wire types) only.")
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=0,
    metavar="K",
    help="Also show the K best-ranked types with their scores.",
)
@click.option(
    "--input",
    "input_kind",
    type=click.Choice(["lines", "base64", "hex", "binary"]),
    default="lines",
    show_default=True,
    help="Log lines with payloads inside, or each input is one whole payload.",
)
@click.option("--passthrough", is_flag=True, help="Also output lines that hold no payload.")
@click.option("--demo-schemas", is_flag=True,
              help="Also load the demo shop's schemas bundled with dlxtool (shop.*); config: demo_schemas = true.")
@click.option("--no-bundled", is_flag=True, hidden=True,
              help="Kept for old scripts: the demo schemas are no longer loaded unless asked for.")
@_format_option
@connection_options
@click.pass_obj
def decode(
    app: App,
    files: tuple[str, ...],
    proto_paths: tuple[str, ...],
    type_name: str | None,
    raw: bool,
    top: int,
    input_kind: str,
    passthrough: bool,
    demo_schemas: bool,
    no_bundled: bool,
) -> Outcome:
    """Decode protobuf payloads found in FILEs (or stdin) — base64 in logs, hex, b'..', <<..>>.

    Each line is searched for a payload (bare or URL-safe base64, JSON and
    logfmt values, quoted strings, Python b'\\x0a..' literals, Elixir
    <<10, 3, ..>> binaries, hex); the candidate that decodes best wins and
    the message type is identified among every registered type. Results
    stream one per payload (flushed per line, so `tail -f` works).

    JSON output (default when piped): source, line, span, encoding, status,
    type, confidence, ambiguous + alternatives, message (protobuf JSON
    mapping), raw (schema-less) when no type fits, or error.

    A payload that does not parse whole is never hidden: status truncated
    (cut short: the bytes end inside a field) or malformed, offset (the byte
    where reading stopped) and size, raw (the fields up to there, then what
    arrived of the cut one, "cut": true), and message + type when a
    registered type explains the bytes before the stop. A bare token counts
    when such a type explains 8+ bytes before the cut; the value of a
    payload key (payload=, body=, data=, ...) or a bytes literal always.
    Such a value that is not base64 or hex to its end (payload=CgdvLT!!)
    is status invalid, error naming the first character that is not; it
    is not decoded in part.
    gzip/zlib payloads are decoded inflated (decompressed: from, sizes), up
    to 256 MiB. Exit 2 when payloads were found and none decoded; 0 when
    at least one did, or when the input held none.

    Confidence (0..1) is how likely the type is the right one. It is high
    only when exactly one registered type could have written these bytes
    the way protobuf's serializer does (fields in number order, no default
    value of an implicit-presence field, packed as the schema says, ...)
    and the payload holds enough to tell it from types nobody registered: a
    flat field adds little (any schema with a field there reads it), a
    sub-message more; 0.9 takes about seven flat fields or two filled
    sub-messages. Measured on schemas never tuned on, at least 99% of
    answers at >= 0.9 are right. When several types fit equally, ambiguous
    is true, confidence is split among them and the true type (if
    registered) is among type + alternatives, or among the ones not listed:
    alternatives lists the 9 that declare the fewest fields, and when more
    fit, alternatives_count says how many (the table says "+N more") and
    --top N ranks them all. Bytes no type could have written canonically
    (a non-standard producer) still decode, at half the confidence at most.

    \b
    Examples:
      tail -f app.log | dlxtool decode
      dlxtool decode app.log -I ./protos --format table
      dlxtool decode --input base64 body.b64 --format text --top 3
      echo 'payload=CgNvLTE=' | dlxtool decode --type shop.orders.v1.OrderCancelled
    """
    from dlxtool import decode_lines, decoding

    fmt = app.output_format()
    schemas = app.schemas(proto_paths, demo=demo_schemas, offline=True)
    paths, demo = schemas.paths, schemas.demo and not no_bundled
    registry = decoding.load_registry(paths, demo=demo, cache_dir=schemas.cache_dir)
    app.debug_log(f"decode: {len(registry)} message types from {len(paths)} proto path(s)"
                  + (" and the demo schemas" if demo else ""))
    if not paths and not demo and not raw:
        app.warn("no schemas loaded: payloads are decoded without types (add --proto-path DIR, "
                 "$DLXTOOL_PROTO_PATH or proto_paths in the config; --demo-schemas for the demo's)")
    for note in registry.loaded.notes:
        app.info(f"decode: {note}")
    options: dict[str, Any] = {"type_name": type_name, "raw": raw, "top": top, "want_text": fmt == "text"}
    sink = _Sink(app, fmt)
    for name in files or ("-",):
        with _open(app, name) as stream:
            if input_kind == "lines":
                lines = _text_lines(stream)
                outcomes = decode_lines.decode_lines(registry, lines, source=name, passthrough=passthrough, **options)
                for outcome in outcomes:
                    sink.write(outcome)
            else:
                sink.write(decode_lines.decode_whole_input(registry, stream.read(), input_kind, source=name,
                                                           **options))
    return sink.close()


class _open:
    """Open FILE ('-' = stdin) for binary reading, with a dlxtool error when it cannot be read."""

    def __init__(self, app: App, name: str) -> None:
        self.app, self.name = app, name
        self.fh: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        if self.name == "-":
            stdin = self.app.stdin
            return cast(IO[bytes], getattr(stdin, "buffer", stdin))
        try:
            fh = self.fh = Path(self.name).open("rb")
        except OSError as exc:
            raise NotFoundError(f"cannot read {self.name}: {exc.strerror}", hint="check the file name") from exc
        return fh

    def __exit__(self, *exc: object) -> None:
        if self.fh is not None:
            self.fh.close()


def _text_lines(stream: IO[Any]) -> Iterator[str]:
    """Lines as text whatever the bytes (invalid UTF-8 kept as escapes), read as they arrive."""
    for line in iter(stream.readline, b"" if _is_binary(stream) else ""):
        yield line.decode("utf-8", "surrogateescape") if isinstance(line, bytes) else line


def _is_binary(stream: IO[Any]) -> bool:
    return not hasattr(stream, "encoding") or "b" in getattr(stream, "mode", "")


class _Sink:
    """Renders outcomes: jsonl streams, json collects one array, table/text stream rows for people."""

    def __init__(self, app: App, fmt: str) -> None:
        from dlxtool.decode_lines import Tally

        self.app, self.fmt = app, fmt
        self.width = app.table_width() if fmt == "table" else None  # a table's lines fit the terminal
        self.items: list[dict[str, Any]] = []
        self.tally = Tally()

    def write(self, outcome: Any) -> None:
        self.tally.add(outcome)
        out = self.app.stdout
        if self.fmt == "jsonl":
            render.write_json_line(outcome.to_dict(), out)
        elif self.fmt == "json":
            self.items.append(outcome.to_dict())
        elif self.fmt == "text":
            out.write(_text_block(outcome) + "\n")
            out.flush()
        else:
            row = _table_row(outcome)
            if self.width is not None:
                fitted = "\n".join(render.cut_to(line, self.width) for line in row.split("\n"))
                if fitted != row:
                    self.app.say_cut(self.width)
                row = fitted
            out.write(row + "\n")
            out.flush()

    def close(self) -> Outcome:
        """The run's end: exit 0 unless payloads were found and none decoded (then the documented exit 2)."""
        if self.fmt == "json":
            self.app.emit_json(self.items, "json")
        tally = self.tally
        if not tally.payloads:
            self.app.info("decode: no payload found")
        elif tally.payloads == tally.not_protobuf:
            self.app.info("decode: no protobuf payload found (the payloads found are JSON or text)")
        return tally.outcome()


def _where(outcome: Any) -> str:
    return f"{outcome.source}:{outcome.line}"


def _summary(decoded: Any) -> str:
    """The verdict in a few words: a guess is marked (?) and says why (defects, ambiguity); a payload that
    stops before its end says where and why, and what its fields before that read as."""
    from dlxtool import compression
    from dlxtool.decoding import NOT_PROTOBUF

    text = _verdict(decoded)
    if decoded.failed and decoded.status != "compressed":
        text = f"{decoded.status}: {decoded.error}" + (f"; the bytes before it read as {text}" if decoded.type else "")
    elif decoded.status == NOT_PROTOBUF:
        text = decoded.error or "not protobuf"
    if decoded.decompressed is not None and decoded.status != "compressed":
        text = f"[{compression.label(decoded.decompressed)}] {text}"
    return text


def _verdict(decoded: Any) -> str:
    from dlxtool.decoding import is_weak

    if decoded.type:
        text = f"{decoded.type}{'?' if is_weak(decoded.to_dict()) else ''} ({decoded.confidence:.2f}"
        if decoded.defects:
            text += ", does not fit cleanly: " + decoded.defects[0]
        if decoded.ambiguous:
            alts = decoded.alternatives[:3]
            more = decoded.alternatives_count - len(alts)
            text += ", ambiguous with " + ", ".join(alts) + (f", +{more} more" if more > 0 else "")
        return text + ")"
    words: dict[str, str] = {"no_match": "no registered type fits", "malformed": "not protobuf", "raw": "schema-less"}
    return words.get(decoded.status, str(decoded.error or decoded.status))


def _table_row(outcome: Any) -> str:
    decoded = outcome.decoded
    if decoded is None:
        return f"{_where(outcome)}  -  {render.safe_text(outcome.text_line or '')}"
    body: Any = decoded.message if decoded.message is not None else decoded.raw
    shown = render.truncate(render.safe_text(render.dumps(body).decode()), 160) if body is not None else ""
    if decoded.content is not None:
        shown = render.truncate(render.safe_text(decoded.content), 160)
    elif decoded.error and not decoded.failed or decoded.status == "error":
        shown = f"error: {decoded.error}"
    elif decoded.status == "compressed":
        shown = ""
    row = f"{_where(outcome)}  {render.safe_text(_summary(decoded))}  {shown}"
    for m in decoded.top:
        row += f"\n    {m['score']:.3f} {m['confidence']:.3f} {m['type']}"
    return row


def _text_block(outcome: Any) -> str:
    decoded = outcome.decoded
    if decoded is None:
        return f"# {_where(outcome)}: no payload\n"
    head = f"# {_where(outcome)}: {_summary(decoded)}"
    for m in decoded.top:
        head += f"\n#   {m['score']:.3f} {m['confidence']:.3f} {m['type']}"
    if decoded.error and decoded.content is None and not decoded.failed or decoded.status == "error":
        head += f"\n# error: {decoded.error}"
    body = decoded.text if decoded.text is not None else (decoded.content or "")
    return head + "\n" + render.safe_text(body, keep_newlines=True)
