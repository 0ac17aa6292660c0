"""One code path to turn bytes into a readable protobuf message: used by ``decode`` and ``peek``.

:func:`decode_body` decodes one message body (hints from its AMQP properties); dlxtool.decode_lines
(`dlxtool decode` only, so not loaded by a peek) finds the best payload in a log line and decodes it. No click here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlxtool import compression
from dlxtool.errors import DlxtoolError, NotFoundError, UsageError
from dlxtool.record import MessageRecord
from dlxtool.render import dumps
from proto_registry.errors import (
    CompileError,
    DecodeError,
    DescriptorSetError,
    ProtoRegistryError,
    SchemaConflictError,
    SourceNotFoundError,
    UnknownTypeError,
)
from proto_registry.hints import Hints
from proto_registry.raw import Partial, decode_partial, decode_raw, format_raw
from proto_registry.result import HIGH_CONFIDENCE, MALFORMED, MATCH, NO_MATCH
from proto_registry.wire import TRUNCATED, scan, scan_prefix

# Not imported here: proto_registry.registry (protobuf, the compiler path, the scoring code) loads
# only when a body is decoded, and dlxtool.extract only when log lines are searched.
if TYPE_CHECKING:
    from proto_registry import Identification, Registry

PROTO_PATH_ENV = "DLXTOOL_PROTO_PATH"
MAX_RECORD_DECODE_BYTES = 1024 * 1024  # bodies read from a queue larger than this are not identified
MIN_WEAK_BYTES = 4  # payloads this short only count when the candidate is unmistakably binary
# How many ranked types to ask the registry for, whatever --top prints: whether the best guess is
# ambiguous (another type scores the same) must not depend on how many alternatives are shown.
RANKED = 10
NOT_PROTOBUF = "not_protobuf"  # status: a payload is there, but it is JSON or text
COMPRESSED = "compressed"  # status: a gzip/zlib payload that inflates past the cap (not decoded)
INVALID = "invalid"  # status: the value of a payload key (payload=…) that is no valid base64 or hex
# An invalid payload value: above "no payload" and a bare token's cut (0.6), below a payload key's value cut short
# (0.8) and anything that reads whole; the line's other payloads win if they decode.
INVALID_RATING = 0.7
# Statuses of a payload that did not decode: cut short, not protobuf wire format from some byte on, not
# parseable as the type it was forced to, or compressed past the cap. The others read the payload whole.
FAILED = frozenset({TRUNCATED, MALFORMED, "error", COMPRESSED, INVALID})
# A bare token (not the value of a payload key) that does not scan whole counts as a payload cut short only
# when a registered type explains at least this many bytes before the cut: random tokens (hashes, trace ids)
# are cut-looking protobuf by chance ~20% of the time, explained by a demo type over 8+ bytes ~0.02%.
MIN_EXPLAINED_PREFIX = 8
_NOT_PROTOBUF = ("json", "text/", "xml", "yaml", "csv", "html")


def proto_paths(cli_paths: Iterable[str] = (), profile_paths: Iterable[str] = (), *,
                env: Mapping[str, str]) -> list[str]:
    """``--proto-path`` values, then ``$DLXTOOL_PROTO_PATH`` of `env` (the command's environment, os.pathsep-
    separated), then the profile's ``proto_paths``; duplicates dropped, order kept."""
    out: list[str] = []
    listed = env.get(PROTO_PATH_ENV, "")
    for p in [*cli_paths, *(x for x in listed.split(os.pathsep) if x.strip()), *profile_paths]:
        p = str(Path(p).expanduser())
        if p not in out:
            out.append(p)
    return out


@dataclass(slots=True)
class DecodedBody:
    """A body decoded (or not) against the registry. ``to_dict`` is the JSON shape."""

    status: str  # match | empty | no_match | malformed | error
    type: str | None = None
    confidence: float = 0.0
    score: float = 0.0
    ambiguous: bool = False
    alternatives: list[str] = field(default_factory=list)
    alternatives_count: int = 0
    message: dict[str, Any] | None = None  # protobuf JSON mapping
    raw: list[dict[str, Any]] | None = None  # schema-less decode when no type fits (or --raw)
    source: str = "guess"
    framing: dict[str, Any] | None = None
    defects: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    top: list[dict[str, Any]] = field(default_factory=list)  # --top K: ranked matches with scores
    error: str | None = None
    text: str | None = None  # protobuf text format (or raw text), when asked for
    content: str | None = None  # not_protobuf: the payload as the JSON or text it is
    offset: int | None = None  # truncated/malformed: the byte where reading stopped
    size: int | None = None  # truncated/malformed: the payload's bytes
    decompressed: dict[str, Any] | None = None  # decoded after inflating (compression.Inflated.to_dict)
    amqp10: str | None = None  # decoded after unwrapping an AMQP 1.0 body: what it was (amqp10_message.unwrap_body)
    explained: bool = False  # truncated/malformed: a registered type explains the bytes before the stop

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "status": self.status,
            "type": self.type,
            "confidence": round(self.confidence, 4),
            "ambiguous": self.ambiguous,
            "alternatives": self.alternatives,
        }
        if self.alternatives_count > len(self.alternatives):
            d["alternatives_count"] = self.alternatives_count
        if self.source != "guess":
            d["source"] = self.source
        if self.framing:
            d["framing"] = self.framing
        if self.defects:
            d["defects"] = self.defects
        if self.notes:
            d["notes"] = self.notes
        if self.top:
            d["top"] = self.top
        d["message"] = self.message
        if self.raw is not None:
            d["raw"] = self.raw
        if self.error:
            d["error"] = self.error
        if self.content is not None:
            d["content"] = self.content
        if self.offset is not None:
            d["offset"] = self.offset
            d["size"] = self.size
        if self.decompressed is not None:
            d["decompressed"] = self.decompressed
        if self.amqp10 is not None:
            d["amqp10"] = self.amqp10
        return d

    @property
    def failed(self) -> bool:
        """The payload did not decode (see FAILED)."""
        return self.status in FAILED


def is_weak(decoded: Mapping[str, Any]) -> bool:
    """A guess not to be read as a fact: bytes that do not fit the type cleanly, another type that fits
    as well, or low confidence (e.g. a hinted type that fits, but so would many others); and a payload that
    stops before its end (cut short, malformed), whose type is read from the bytes before the stop only."""
    return bool(decoded.get("defects") or decoded.get("ambiguous") or decoded.get("status") in FAILED
                or (decoded.get("confidence") or 0.0) < HIGH_CONFIDENCE)


def stop_label(decoded: Mapping[str, Any]) -> str | None:
    """Where a payload that did not decode whole stops, for a one-line view: ``cut short at byte 48 of 73`` or
    ``not protobuf from byte 12 of 40``; None for one that decoded whole (or failed otherwise)."""
    status, offset, size = decoded.get("status"), decoded.get("offset"), decoded.get("size")
    if status not in (TRUNCATED, MALFORMED) or not isinstance(offset, int) or not isinstance(size, int):
        return None
    return f"{'cut short at' if status == TRUNCATED else 'not protobuf from'} byte {offset:,} of {size:,}"


def match_label(decoded: Mapping[str, Any]) -> str:
    """The type for a one-line view: the name alone when sure, else marked with ? and why not sure,
    e.g. ``shop.legacy.v1.StockAdjusted? (0.18, defective, ambiguous)``."""
    name = str(decoded.get("type") or "?")
    if not is_weak(decoded):
        return name
    why = [f"{decoded.get('confidence') or 0.0:.2f}"]
    if decoded.get("defects"):
        why.append("defective")
    if decoded.get("ambiguous"):
        why.append("ambiguous")
    return f"{name}? ({', '.join(why)})"


def hints_from_properties(properties: Mapping[str, Any] | None, headers: Mapping[str, Any] | None = None) -> Hints:
    props = properties or {}
    extra: list[str] = []
    for key in ("proto-type", "x-proto-type", "message-type", "x-message-type", "type"):
        value = (headers or {}).get(key)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, str):
            extra.append(value)
    return Hints(
        amqp_type=_str(props.get("type")),
        content_type=_str(props.get("content_type")),
        extra=tuple(extra),
    )


def _str(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def decode_body(
    registry: Registry,
    body: bytes,
    properties: Mapping[str, Any] | None = None,
    *,
    headers: Mapping[str, Any] | None = None,
    type_name: str | None = None,
    raw: bool = False,
    top: int = 0,
    want_text: bool = False,
    max_inflated: int = compression.DEFAULT_MAX_INFLATED,
) -> DecodedBody | None:
    """Decode a message body. ``None`` when its content type says it is not protobuf (JSON, text)
    and no type was forced. ``type_name`` forces a type (an unknown name raises UnknownTypeError).
    A gzip or zlib body (recognised by its header) is decoded inflated, within ``max_inflated``."""
    ct = (_str((properties or {}).get("content_type")) or "").lower()
    if type_name is None and not raw and any(x in ct for x in _NOT_PROTOBUF):
        return None
    return decode_candidate(registry, body, hints_from_properties(properties, headers), type_name, raw, top,
                             want_text=want_text, max_inflated=max_inflated)


def from_identification(
    registry: Registry, ident: Identification, *, top: int = 0, want_text: bool = False
) -> DecodedBody:
    out = DecodedBody(
        status=ident.status,
        source=ident.source,
        framing=ident.framing.to_dict() if ident.framing else None,
        notes=list(ident.notes),
    )
    if top:
        out.top = [m.to_dict() for m in ident.matches[:top]]
    best = ident.best
    if best is not None and (best.clean or ident.source == "explicit" or best.score >= 0.5):
        out.type = best.type
        out.confidence = best.confidence
        out.score = best.score
        out.ambiguous = ident.ambiguous
        out.alternatives = ident.alternatives()
        out.alternatives_count = max(ident.equivalent_count - 1, len(out.alternatives))
        out.defects = list(best.defects)
        try:
            msg = registry.decode(ident.payload, best.type)
            out.message = registry.to_dict(msg)
            if want_text:
                out.text = registry.to_text(msg)
            return out
        except DecodeError as e:
            out.status = "error"
            out.error = e.message
    if ident.status in (NO_MATCH, MATCH, "error") and ident.payload:
        out.raw = decode_raw(ident.payload)
        if want_text and out.raw is not None:
            out.text = format_raw(out.raw)
    return out


def _raw_only(body: bytes, want_text: bool) -> DecodedBody:
    fields = decode_raw(body)
    if fields is None:
        partial = decode_partial(body)
        assert partial is not None  # what does not scan whole stops somewhere
        return _partial_body(partial, want_text=want_text)
    out = DecodedBody(status="raw", raw=fields)
    if want_text:
        out.text = format_raw(fields)
    return out


# -- payloads that stop being protobuf before their end (cut short, malformed) ------------------------------


def decode_partial_body(
    registry: Registry,
    data: bytes,
    *,
    hints: Hints | None = None,
    type_name: str | None = None,
    want_text: bool = False,
) -> DecodedBody | None:
    """Where ``data`` stops being protobuf and what it holds up to there, or ``None`` when it scans whole.

    The fields before the stop are shown raw (numbers, wire types) and, when a registered type explains them
    cleanly (the forced ``type_name``, else the best-ranked type), decoded as that type: ``message`` holds
    them by name, and the field the cut went through gets its name in ``raw``."""
    partial = decode_partial(data)
    if partial is None:
        return None
    out = _partial_body(partial, want_text=False)
    prefix = data[: partial.offset]
    # A few bytes fit many types by chance: unless a type is forced, a prefix this short is not worth a guess
    # (and random tokens in log lines, most of them this short before they stop, cost no identification).
    if len(registry) and (type_name is not None or len(prefix) >= MIN_EXPLAINED_PREFIX):
        with registry_errors():
            ident = (registry.identify_as(prefix, type_name) if type_name is not None
                     else registry.identify(prefix, hints, limit=RANKED))
        _explain_prefix(registry, out, ident, want_text)
    if want_text and out.text is None:
        out.text = format_raw(out.raw or [])
    return out


def _explain_prefix(registry: Registry, out: DecodedBody, ident: Identification, want_text: bool) -> None:
    """Name the fields before the stop after the best-ranked type that explains them cleanly and renders
    (an Any whose type URL is some text does not render)."""
    cut = next((f for f in out.raw or [] if f.get("cut") and "field" in f), None)
    clean = [m for m in ident.matches if m.clean] if ident.status == MATCH else []
    # Among types that explain the prefix equally, those that declare the cut field with its wire type first.
    clean.sort(key=lambda m: cut is not None and _cut_field_name(registry, m.type, cut) is None)
    for match in clean:
        try:
            msg = registry.decode(ident.payload, match.type)
            message = registry.to_dict(msg)
        except DecodeError:
            continue
        out.type, out.confidence, out.score, out.message = match.type, match.confidence, match.score, message
        out.ambiguous = ident.ambiguous
        out.alternatives = [t for t in ident.equivalent if t != match.type]
        out.alternatives_count = max(ident.equivalent_count - 1, len(out.alternatives))
        out.source = ident.source
        out.explained = True
        if cut is not None and (name := _cut_field_name(registry, match.type, cut)) is not None:
            cut["name"] = name
        out.notes.append(f"the {len(ident.payload):,} bytes before the stop read as {match.type}")
        if want_text:
            out.text = registry.to_text(msg) + ("\n" + format_raw([cut]) if cut is not None else "")
        return


def _may_be_cut(data: bytes) -> bool:
    """Whether a bare token could be a payload cut short (payload_shaped): truncated, with enough bytes before
    the cut for a type to explain. Most tokens in log lines are not: they are told so without more work."""
    _fields, stop = scan_prefix(data)
    return stop is not None and stop.kind == TRUNCATED and stop.offset >= MIN_EXPLAINED_PREFIX


def _stop_only(data: bytes) -> DecodedBody:
    """A bare token that stops being protobuf where it cannot be a payload cut short: not reported."""
    return DecodedBody(status=MALFORMED, size=len(data), error="not protobuf")


def _partial_body(partial: Partial, *, want_text: bool) -> DecodedBody:
    out = DecodedBody(status=partial.kind, raw=partial.fields, offset=partial.offset, size=partial.size)
    if partial.kind == TRUNCATED:
        out.error = f"cut short at byte {partial.offset:,} of {partial.size:,}: {partial.reason}"
    else:
        out.error = f"not protobuf from byte {partial.offset:,} of {partial.size:,}: {partial.reason}"
    if want_text:
        out.text = format_raw(partial.fields)
    return out


def _cut_field_name(registry: Registry, type_name: str, cut: Mapping[str, Any]) -> str | None:
    """The name `type_name` declares for the field a cut went through, when it declares it with that wire type."""
    declared = registry.message_class(type_name).DESCRIPTOR.fields_by_number.get(cut["field"])
    if declared is None:
        return None
    native = "len" if declared.type in _LEN_TYPES else _WIRE_OF.get(declared.type, "varint")
    packed = declared.is_repeated and native not in ("len", "group")  # repeated scalars may come packed
    return declared.name if cut.get("wire_type") == native or (packed and cut.get("wire_type") == "len") else None


# protobuf FieldDescriptor.TYPE_* numbers: string 9, group 10, message 11, bytes 12; fixed64 6, sfixed64 16,
# double 1; fixed32 7, sfixed32 15, float 2. The rest are varints.
_LEN_TYPES = frozenset({9, 11, 12})
_WIRE_OF = {10: "group", 6: "i64", 16: "i64", 1: "i64", 7: "i32", 15: "i32", 2: "i32"}


def decode_candidate(
    registry: Registry,
    data: bytes,
    hints: Hints | None,
    type_name: str | None,
    raw: bool,
    top: int,
    want_text: bool = False,
    *,
    strong: bool = True,
    max_inflated: int = compression.DEFAULT_MAX_INFLATED,
) -> DecodedBody:
    """Decode one payload; a gzip/zlib one (recognised by its header, proven by its checksum) after inflating
    it within `max_inflated`. Never None: what does not decode says where and why — in full when it may be
    reported (`strong`: meant as binary data, see payload_shaped), else only as far as needed to tell.
    An AMQP 1.0 body (RabbitMQ 4.x hands a 0.9.1 reader an amqp-value or amqp-sequence body as its encoding) is
    unwrapped first: the bytes it carries are decoded, a structured value is shown as JSON; `amqp10` says what it
    was."""
    unwrapped = None
    if data[:2] == b"\x00\x53":  # a described section, as every AMQP 1.0 body starts: only then load the 1.0 codec
        from dlxtool.amqp10_message import unwrap_body

        unwrapped = unwrap_body(data)
    if unwrapped is not None:
        if unwrapped.payload is None:
            return DecodedBody(status=NOT_PROTOBUF, error=f"an AMQP 1.0 {unwrapped.what}, not protobuf",
                               content=dumps(unwrapped.value).decode("utf-8"), amqp10=unwrapped.what)
        out = decode_candidate(registry, unwrapped.payload, hints, type_name, raw, top, want_text, strong=strong,
                                max_inflated=max_inflated)
        kind = extract_content_kind(unwrapped.payload) if out.failed else None
        if kind is not None:
            out = DecodedBody(status=NOT_PROTOBUF, error=f"payload is {kind}, not protobuf",
                              content=unwrapped.payload.decode("utf-8"))
        out.amqp10 = unwrapped.what
        out.notes.append(f"unwrapped from an AMQP 1.0 {unwrapped.what}")
        return out
    inflated = _inflate(data, max_inflated)
    if inflated is not None and inflated.over_cap:
        return DecodedBody(status=COMPRESSED, error=inflated.label(), decompressed=inflated.to_dict())
    if inflated is not None and not inflated.ok:
        inflated = None  # a header sniffed by chance (protobuf bytes can start like zlib): just bytes
    body = inflated.data if inflated is not None else data
    out = _decode_bytes(registry, body, hints, type_name, raw, top, want_text, strong=strong or inflated is not None)
    if inflated is not None:
        out.decompressed = inflated.to_dict()
        if out.failed:
            kind = extract_content_kind(body)
            if kind is not None:
                out = DecodedBody(status=NOT_PROTOBUF, error=f"payload is {kind}, not protobuf",
                                  content=body.decode("utf-8"), decompressed=inflated.to_dict())
    return out


def _inflate(data: bytes, max_inflated: int) -> compression.Inflated | None:
    method = compression.sniff(data)
    return None if method is None else compression.inflate(data, method, max_inflated=max_inflated)


def extract_content_kind(data: bytes) -> str | None:
    from dlxtool import extract

    return extract.content_kind(data, strong=True)


def _decode_bytes(
    registry: Registry,
    data: bytes,
    hints: Hints | None,
    type_name: str | None,
    raw: bool,
    top: int,
    want_text: bool,
    *,
    strong: bool,
) -> DecodedBody:
    if raw:
        return _raw_only(data, want_text) if strong or scan(data) is not None else _stop_only(data)
    if type_name is not None:
        with registry_errors():
            ident = registry.identify_as(data, type_name)
    else:
        ident = registry.identify(data, hints, limit=max(top, RANKED))
    if ident.status == MALFORMED:
        if not strong and not _may_be_cut(ident.payload):
            return _stop_only(ident.payload)
        partial = decode_partial_body(registry, ident.payload, hints=hints, type_name=type_name,
                                      want_text=want_text)
        if partial is not None:  # offsets count from the payload's start, after any framing (said so)
            partial.framing = ident.framing.to_dict() if ident.framing else None
            return partial
    return from_identification(registry, ident, top=top, want_text=want_text)


# -- registry loading and errors ------------------------------------------------------------------


def translate_error(exc: ProtoRegistryError) -> DlxtoolError:
    """proto_registry's exceptions as dlxtool errors (and so exit statuses)."""
    if isinstance(exc, SourceNotFoundError | UnknownTypeError):
        return NotFoundError(exc.message, hint=exc.hint)
    if isinstance(exc, CompileError | DescriptorSetError | SchemaConflictError):
        return UsageError(exc.message, hint=exc.hint)
    return DlxtoolError(exc.message, hint=exc.hint)


@contextmanager
def registry_errors() -> Iterator[None]:
    try:
        yield
    except ProtoRegistryError as exc:
        raise translate_error(exc) from exc


def load_registry(paths: Iterable[str], *, demo: bool = False, cache_dir: Path | None = None) -> Registry:
    """The schemas of ``paths`` (and the demo's bundled shop.* ones with ``demo``), compiled ones cached in
    `cache_dir` (None: proto_registry's default); registry errors become dlxtool errors."""
    from proto_registry import Registry

    with registry_errors():
        return Registry.load(list(paths), include_defaults=demo, cache_dir=cache_dir)


# -- records read from a queue (peek, dump, history) ------------------------------------------------


def record_decoder(
    paths: Iterable[str],
    *,
    demo: bool = False,
    on_error: Callable[[str], None] | None = None,
    max_inflated: int = compression.DEFAULT_MAX_INFLATED,
    cache_dir: Path | None = None,
) -> Callable[[MessageRecord], dict[str, Any] | None]:
    """The `decoded` field for records read from a queue: the match as a dict; a body that stops being protobuf
    before its end as `dlxtool decode` reports it (status truncated or malformed, error, offset, size: see
    stopped_protobuf); or None.

    The registry loads on the first body that may be protobuf, so reading a queue of JSON costs
    nothing. A registry that fails to load (a broken --proto-path) is reported once through
    `on_error` and the read goes on without decoding: a peek must not fail over a schema.
    A body compressed as its message declares (content_encoding, kombu's compression header) is decoded
    inflated, within `max_inflated` (the caller's byte budget goes there), and says so in `decompressed`;
    the record keeps its raw bytes.
    """
    state: dict[str, Any] = {"registry": None, "failed": False, "told_size": False}
    paths = list(paths)

    def too_big(record: MessageRecord, size: int, what: str) -> None:
        # Identification costs many times the body in memory (2.5 GB for a 100 MB body, measured):
        # a peek must stay bounded. `dlxtool decode` still takes any size on purpose.
        if on_error and not state["told_size"]:
            state["told_size"] = True
            on_error(f"bodies over {MAX_RECORD_DECODE_BYTES // 1024 // 1024} MiB are not decoded "
                     f"(message {record.position} {what} {size:,} bytes); "
                     "dump it and use `dlxtool decode --input binary` to decode it")

    def decode(record: MessageRecord) -> dict[str, Any] | None:
        ct = (_str(record.properties.get("content_type")) or "").lower()
        found = json_decoded(record, ct)
        if found is not None:
            return found
        if not (paths or demo):  # no schema to identify against: not even protobuf is imported
            return None
        if state["failed"] or not record.body or any(x in ct for x in _NOT_PROTOBUF):
            return None
        body, inflated = record.body, None
        declared = compression.declared(record.properties, record.headers)
        if declared is not None:
            if declared.method is None:  # a compression dlxtool does not inflate (bzip2, lzma, ...)
                return None
            inflated = compression.inflate(body, declared.method, max_inflated=max_inflated,
                                           keep=MAX_RECORD_DECODE_BYTES + 1)
            if not inflated.ok or inflated.size is None:
                return None
            if inflated.size > MAX_RECORD_DECODE_BYTES:
                too_big(record, inflated.size, "inflates to")
                return None
            body = inflated.data
        if len(body) > MAX_RECORD_DECODE_BYTES:
            too_big(record, len(body), "has")
            return None
        if state["registry"] is None:
            try:
                state["registry"] = load_registry(paths, demo=demo, cache_dir=cache_dir)
            except DlxtoolError as exc:
                state["failed"] = True
                if on_error:
                    on_error(f"bodies not decoded: {exc.message}")
                return None
        result = decode_body(state["registry"], body, record.properties, headers=record.headers,
                             max_inflated=max_inflated)
        if result is None or not (result.status == MATCH or stopped_protobuf(result, body, ct)):
            return None
        if inflated is not None:
            result.decompressed = inflated.to_dict()
        found = result.to_dict()
        # A record carries its body: the raw fields up to a stop are `dlxtool decode`'s to show (whole, with --raw)
        found.pop("raw", None)
        return found

    return decode


def stopped_protobuf(result: DecodedBody, body: bytes, content_type: str) -> bool:
    """Whether a message body that stops being protobuf before its end (cut short, malformed) is reported as such
    in its record's `decoded`, as `dlxtool decode` reports it: where its message says it is protobuf (content type),
    or where a registered type explains the bytes before the stop (MIN_EXPLAINED_PREFIX+, as a bare token in a log
    line counts) and the body is no text. Any other binary body that is not protobuf (an image, msgpack) is none of
    the registry's business: `decoded` stays null."""
    if result.status not in (TRUNCATED, MALFORMED):
        return False
    if "proto" in content_type:
        return True
    return result.explained and extract_content_kind(body) is None


JSON_STATUS = "json"  # a record's `decoded` for a JSON body


def json_decoded(record: MessageRecord, content_type: str) -> dict[str, Any] | None:
    """The `decoded` of a JSON body (its content type says JSON, or it is a JSON object or array, inflated first when
    its message declares a compression; at most MAX_RECORD_DECODE_BYTES): {"status": "json", "type": null,
    "message": the parsed JSON}, with `decompressed` as for protobuf. `load --reencode` writes a changed `message`
    back (dlxtool.editing.reencode). None for anything else, and for a body its content type says is protobuf."""
    if not record.body or "proto" in content_type.split(";")[0]:
        return None
    from dlxtool import jsonbody

    data, method, _note = compression.inflated_whole(record.body, record.properties, record.headers,
                                                     max_inflated=MAX_RECORD_DECODE_BYTES)
    if len(data) > MAX_RECORD_DECODE_BYTES or (method is None and compression.declared(record.properties,
                                                                                        record.headers)):
        return None
    value = jsonbody.body_value(data, content_type)
    if value is jsonbody.MISSING:
        return None
    out: dict[str, Any] = {"status": JSON_STATUS, "type": None, "message": value}
    if method is not None:
        out["decompressed"] = {"from": method, "compressed_bytes": len(record.body), "bytes": len(data)}
    return out
