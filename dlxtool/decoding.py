"""One code path to turn bytes into a readable protobuf message: used by ``decode`` and ``peek``.

:func:`decode_body` decodes one message body (hints from its AMQP properties);
:func:`decode_line` finds the best payload in a log line and decodes it. No click here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlxtool.errors import DlxtoolError, NotFoundError, UsageError
from dlxtool.record import MessageRecord
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
from proto_registry.raw import decode_raw, format_raw
from proto_registry.result import HIGH_CONFIDENCE, MALFORMED, MATCH, NO_MATCH

# Not imported here: proto_registry.registry (protobuf, the compiler path, the scoring code) loads
# only when a body is decoded, and dlxtool.extract only when log lines are searched.
if TYPE_CHECKING:
    from dlxtool import extract
    from proto_registry import Identification, Registry

PROTO_PATH_ENV = "DLXTOOL_PROTO_PATH"
MAX_RECORD_DECODE_BYTES = 1024 * 1024  # bodies read from a queue larger than this are not identified
MIN_WEAK_BYTES = 4  # payloads this short only count when the candidate is unmistakably binary
# How many ranked types to ask the registry for, whatever --top prints: whether the best guess is
# ambiguous (another type scores the same) must not depend on how many alternatives are shown.
RANKED = 10
NOT_PROTOBUF = "not_protobuf"  # status: a payload is there, but it is JSON or text
_NOT_PROTOBUF = ("json", "text/", "xml", "yaml", "csv", "html")


def proto_paths(cli_paths: Iterable[str] = (), profile_paths: Iterable[str] = ()) -> list[str]:
    """``--proto-path`` values, then ``$DLXTOOL_PROTO_PATH`` (os.pathsep-separated), then the
    profile's ``proto_paths``; duplicates dropped, order kept."""
    out: list[str] = []
    env = os.environ.get(PROTO_PATH_ENV, "")
    for p in [*cli_paths, *(x for x in env.split(os.pathsep) if x.strip()), *profile_paths]:
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
        return d


def is_weak(decoded: Mapping[str, Any]) -> bool:
    """A guess not to be read as a fact: bytes that do not fit the type cleanly, another type that fits
    as well, or low confidence (e.g. a hinted type that fits, but so would many others)."""
    return bool(decoded.get("defects") or decoded.get("ambiguous")
                or (decoded.get("confidence") or 0.0) < HIGH_CONFIDENCE)


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
) -> DecodedBody | None:
    """Decode a message body. ``None`` when its content type says it is not protobuf (JSON, text)
    and no type was forced. ``type_name`` forces a type (an unknown name raises UnknownTypeError)."""
    ct = (_str((properties or {}).get("content_type")) or "").lower()
    if type_name is None and not raw and any(x in ct for x in _NOT_PROTOBUF):
        return None
    if raw:
        return _raw_only(body, want_text)
    if type_name is not None:
        with registry_errors():
            ident = registry.identify_as(body, type_name)
    else:
        ident = registry.identify(body, hints_from_properties(properties, headers), limit=max(top, RANKED))
    return from_identification(registry, ident, top=top, want_text=want_text)


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
    out = DecodedBody(status="raw" if fields is not None else MALFORMED, raw=fields)
    if fields is None:
        out.error = "not protobuf wire format"
    elif want_text:
        out.text = format_raw(fields)
    return out


# -- log lines --------------------------------------------------------------------------------


@dataclass(slots=True)
class LineResult:
    candidate: extract.Candidate
    decoded: DecodedBody


def rate(decoded: DecodedBody | None, cand: extract.Candidate) -> float:
    """How well a candidate decoded: a clean typed match beats a defective one beats raw structure."""
    if decoded is None:
        return 0.0
    if decoded.type is not None and decoded.status == MATCH:
        base = 3.0 if decoded.score >= 1.0 else 2.0
        return base + decoded.confidence
    if decoded.raw is not None and (cand.strong or len(cand.data) >= 12):
        return 1.0
    return 0.0


def decode_line(
    registry: Registry,
    line: str,
    *,
    hints: Hints | None = None,
    type_name: str | None = None,
    raw: bool = False,
    top: int = 0,
    want_text: bool = False,
) -> LineResult | None:
    """The best-decoding payload of ``line``, or ``None`` when the line holds no payload."""
    from dlxtool import extract

    cands = extract.candidates(line)
    if not cands:
        return None
    cache: dict[bytes, DecodedBody | None] = {}

    def rating(cand: extract.Candidate) -> tuple[float, DecodedBody | None]:
        if cand.data not in cache:
            cache[cand.data] = _decode_candidate(registry, cand.data, hints, type_name, raw, top)
        d = cache[cand.data]
        r = rate(d, cand)
        if r >= 2.0 and len(cand.data) < MIN_WEAK_BYTES and not cand.strong and not type_name:
            r = 0.5  # a short word that happens to be base64 of a tiny valid message: not evidence
        return r, d

    got = extract.best(cands, rating)
    if got is None:
        return None
    cand, score, decoded = got
    if decoded is None or (score <= 0.5 and (not (type_name or raw) or decoded.status == MALFORMED)):
        return _not_protobuf(cands)
    if want_text:
        decoded = _decode_candidate(registry, cand.data, hints, type_name, raw, top, want_text=True)
        assert decoded is not None
    return LineResult(cand, decoded)


def _not_protobuf(cands: list[extract.Candidate]) -> LineResult | None:
    """A payload that is there but is JSON or text: said so, rather than "no payload found"."""
    from dlxtool import extract

    for cand in sorted(cands, key=lambda c: (not c.strong, -len(c.data))):
        kind = extract.content_kind(cand.data, strong=cand.strong)
        if kind is not None:
            decoded = DecodedBody(status=NOT_PROTOBUF, error=f"payload is {kind}, not protobuf",
                                  content=cand.data.decode("utf-8"))
            return LineResult(cand, decoded)
    return None


def _decode_candidate(
    registry: Registry,
    data: bytes,
    hints: Hints | None,
    type_name: str | None,
    raw: bool,
    top: int,
    want_text: bool = False,
) -> DecodedBody | None:
    if raw:
        return _raw_only(data, want_text)
    if type_name is not None:
        with registry_errors():
            ident = registry.identify_as(data, type_name)
    else:
        ident = registry.identify(data, hints, limit=max(top, RANKED))
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


def load_registry(paths: Iterable[str], *, demo: bool = False) -> Registry:
    """The schemas of ``paths`` (and the demo's bundled shop.* ones with ``demo``); registry errors
    become dlxtool errors."""
    from proto_registry import Registry

    with registry_errors():
        return Registry.load(list(paths), include_defaults=demo)


# -- streams of lines -------------------------------------------------------------------------------


@dataclass(slots=True)
class Outcome:
    """One payload found in (or one line passed through from) an input."""

    source: str
    line: int
    decoded: DecodedBody | None  # None: the line holds no payload (passed through)
    candidate: extract.Candidate | None = None
    text_line: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"source": self.source, "line": self.line}
        if self.candidate is not None:
            d["span"] = [self.candidate.start, self.candidate.end]
            d["encoding"] = self.candidate.encoding
            if self.candidate.key:
                d["key"] = self.candidate.key
        if self.decoded is None:
            d["status"] = "no_payload"
            d["text"] = self.text_line
            return d
        d.update(self.decoded.to_dict())
        return d


def decode_lines(
    registry: Registry,
    lines: Iterable[str],
    *,
    source: str = "-",
    type_name: str | None = None,
    raw: bool = False,
    top: int = 0,
    want_text: bool = False,
    passthrough: bool = False,
) -> Iterator[Outcome]:
    """Decode the payload of each line, lazily (so ``tail -f`` streams)."""
    if type_name is not None:
        with registry_errors():
            type_name = registry.resolve_one(type_name)
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        found = decode_line(registry, line, type_name=type_name, raw=raw, top=top, want_text=want_text)
        if found is not None:
            yield Outcome(source, number, found.decoded, found.candidate)
        elif passthrough:
            yield Outcome(source, number, None, text_line=line)


def decode_whole_input(
    registry: Registry,
    data: bytes,
    encoding: str,
    *,
    source: str = "-",
    type_name: str | None = None,
    raw: bool = False,
    top: int = 0,
    want_text: bool = False,
) -> Outcome:
    """``--input base64|hex|binary``: the whole input is one payload."""
    from dlxtool import extract

    try:
        body = extract.decode_whole(data, encoding)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{source}: not valid {encoding} ({exc})", hint="check --input") from exc
    with registry_errors():
        decoded = decode_body(registry, body, type_name=type_name, raw=raw, top=top, want_text=want_text)
    assert decoded is not None  # no content type given: never skipped
    return Outcome(source, 1, decoded)


# -- records read from a queue (peek, dump, history) ------------------------------------------------


def record_decoder(
    paths: Iterable[str], *, demo: bool = False, on_error: Callable[[str], None] | None = None
) -> Callable[[MessageRecord], dict[str, Any] | None]:
    """The `decoded` field for records read from a queue: the match as a dict, or None.

    The registry loads on the first body that may be protobuf, so reading a queue of JSON costs
    nothing. A registry that fails to load (a broken --proto-path) is reported once through
    `on_error` and the read goes on without decoding: a peek must not fail over a schema.
    """
    state: dict[str, Any] = {"registry": None, "failed": False, "told_size": False}
    paths = list(paths)

    def decode(record: MessageRecord) -> dict[str, Any] | None:
        ct = (_str(record.properties.get("content_type")) or "").lower()
        if not (paths or demo):  # no schema to identify against: not even protobuf is imported
            return None
        if state["failed"] or not record.body or any(x in ct for x in _NOT_PROTOBUF):
            return None
        if len(record.body) > MAX_RECORD_DECODE_BYTES:
            # Identification costs many times the body in memory (2.5 GB for a 100 MB body, measured):
            # a peek must stay bounded. `dlxtool decode` still takes any size on purpose.
            if on_error and not state["told_size"]:
                state["told_size"] = True
                on_error(f"bodies over {MAX_RECORD_DECODE_BYTES // 1024 // 1024} MiB are not decoded "
                         f"(message {record.position} has {len(record.body):,} bytes); "
                         "dump it and use `dlxtool decode --input binary` to decode it")
            return None
        if state["registry"] is None:
            try:
                state["registry"] = load_registry(paths, demo=demo)
            except DlxtoolError as exc:
                state["failed"] = True
                if on_error:
                    on_error(f"bodies not decoded: {exc.message}")
                return None
        result = decode_body(state["registry"], record.body, record.properties, headers=record.headers)
        return result.to_dict() if result is not None and result.status == "match" else None

    return decode
