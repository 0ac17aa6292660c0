"""A message body opened for editing, and closed again.

Opening: a body its message declares compressed (gzip/zlib/deflate: dlxtool.compression) is inflated within the cap;
what is inside is shown as the first of these that reads it whole:
  protobuf  a clean match of the schemas (dlxtool.decoding.decode_body), as its JSON mapping; a Confluent or gRPC
            framing is kept aside (a compressed gRPC payload is not opened: base64)
  json      a JSON body (its content type says so, or it is a JSON object or array), pretty-printed
  text      UTF-8 without control characters (tabs and line feeds allowed) and without a line the document
            would read as a section marker
  base64    anything else: the bytes, wrapped at 76 columns

Closing (`BodyView.read`): an unchanged view gives None — the message keeps its original bytes, whatever the
document's formatting did. A changed one: protobuf is the original message re-parsed with only the changed fields
applied (`apply_json`: unknown fields survive; serialisation puts the fields in field-number order), JSON and text
are the text as saved, base64 the bytes it spells; then framed and compressed again as the original was.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlxtool import compression, jsonbody
from dlxtool.compression import inflated_whole
from dlxtool.jsonbody import MISSING

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from proto_registry import Registry

PROTOBUF, JSON, TEXT, BASE64 = "protobuf", "json", "text", "base64"
MARKER = "### "  # a line starting so divides the document's sections (dlxtool.editing.document)
RegistryLoader = Callable[[], "Registry | None"]
_NOT_PROTOBUF = ("json", "text/", "xml", "yaml", "csv", "html")


class BodyError(Exception):
    """An edited body that cannot be published: `line` is 1-based within the body's text (0: not known)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.message, self.line = message, line


# -- compression and framing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wrapping:
    """What is around the payload shown: the compression its bytes are in (gzip, zlib, deflate: what the bytes
    are, whatever the label said), a Confluent framing's header (kept as it was) or a gRPC length prefix
    (recomputed)."""

    compression: str | None = None
    prefix: bytes = b""
    grpc: bool = False

    def close(self, payload: bytes) -> bytes:
        data = (b"\x00" + len(payload).to_bytes(4, "big") + payload) if self.grpc else self.prefix + payload
        return compress(data, self.compression) if self.compression else data

    def words(self) -> list[str]:
        """How an edited payload is closed, for the diff."""
        out = []
        if self.prefix:
            out.append("its Confluent framing header kept")
        if self.grpc:
            out.append("its gRPC length prefix recomputed")
        if self.compression:
            out.append(f"compressed again with {self.compression}")
        return out


def compress(data: bytes, method: str) -> bytes:
    """`data` compressed as `method` (dlxtool.compression's names). gzip with mtime 0: the same bytes each time."""
    if method == compression.GZIP:
        return gzip.compress(data, mtime=0)
    if method == compression.ZLIB:
        return zlib.compress(data)
    if method == compression.DEFLATE:
        packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        return packer.compress(data) + packer.flush()
    raise ValueError(f"unknown compression {method!r}")


# -- JSON values ---------------------------------------------------------------------------------------------------


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers by value (1 and 1.0, as jq may rewrite them), but never a boolean and a
    number (Python's True == 1); objects whatever their key order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def parse_json(text: str) -> Any:
    """Strict JSON (dlxtool.jsonbody); BodyError with the line."""
    try:
        return jsonbody.parse(text)
    except jsonbody.JsonError as exc:
        raise BodyError(exc.message, exc.line) from None


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def compact_json(value: Any) -> bytes:
    """A JSON value as `load --reencode` writes a changed one back: compact, UTF-8, keys in their order."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# -- protobuf ------------------------------------------------------------------------------------------------------


def apply_json(registry: Registry, type_name: str, payload: bytes, edited: Any) -> bytes | None:
    """`payload` (a `type_name` message) with the fields whose JSON mapping differs in `edited` set from it; None when
    no field differs. The original is parsed and only the changed fields are replaced — recursively into nested
    messages, whole for repeated fields, maps and well-known types — so unknown fields survive; serialisation puts
    the fields in field-number order. BodyError for a value the schema rejects (with the field's name)."""
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError, EncodeError

    if not isinstance(edited, dict):
        raise BodyError(f"a {type_name} message is a JSON object, not {_kind(edited)}", 1)

    cls = registry.message_class(type_name)
    try:
        original = cls.FromString(payload)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BodyError(f"the original body does not parse as {type_name}: {exc}") from None
    before = registry.to_dict(original)
    after = cls()
    try:
        json_format.ParseDict(edited, after, descriptor_pool=registry.pool)
    except json_format.ParseError as exc:
        raise SchemaError(f"{type_name}: " + " ".join(str(exc).split()), _field_named(str(exc))) from None
    if not _merge(original, before, after, edited):
        return None
    try:
        return bytes(original.SerializeToString(deterministic=True))
    except EncodeError:  # proto2: a required field left out
        missing: list[str] = original.FindInitializationErrors()  # type: ignore[attr-defined]  # on every message
        raise SchemaError(f"{type_name}: required field(s) missing: {', '.join(missing)}",
                          missing[0] if missing else None) from None


class SchemaError(BodyError):
    """The schema rejects a value: `field` is the JSON name the error is about (its line is looked up)."""

    def __init__(self, message: str, field: str | None) -> None:
        super().__init__(message)
        self.field = field


_NO_FIELD = re.compile(r'has no field named "([^"]+)"')
_FAILED = re.compile(r"Failed to parse (\S+) field")


def _field_named(error: str) -> str | None:
    found = _NO_FIELD.search(error)
    if found:
        return found.group(1)
    names = _FAILED.findall(error)
    return names[-1] if names else None


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


def _merge(target: Message, before: dict[str, Any], source: Message, after: dict[str, Any]) -> bool:
    """Fields of `target` whose JSON (`before`) differs from `after` set from `source` (`after` parsed); whether any
    did."""
    changed = False
    for fd in target.DESCRIPTOR.fields:
        old, new = _json_field(before, fd), _json_field(after, fd)
        if (old is MISSING and new is MISSING) or (old is not MISSING and new is not MISSING
                                                     and same_json(old, new)):
            continue
        changed = True
        if new is MISSING:
            target.ClearField(fd.name)
        elif _nested(fd) and isinstance(old, dict) and isinstance(new, dict) and target.HasField(fd.name):
            _merge(getattr(target, fd.name), old, getattr(source, fd.name), new)
        elif fd.is_repeated:  # repeated fields and maps: replaced whole
            target.ClearField(fd.name)
            getattr(target, fd.name).MergeFrom(getattr(source, fd.name))
        elif fd.message_type is not None:
            getattr(target, fd.name).CopyFrom(getattr(source, fd.name))
        else:
            setattr(target, fd.name, getattr(source, fd.name))
    return changed


def _json_field(mapping: dict[str, Any], fd: Any) -> Any:
    if fd.json_name in mapping:
        return mapping[fd.json_name]
    return mapping.get(fd.name, MISSING)


def _nested(fd: Any) -> bool:
    """A singular message field whose JSON is its fields (not a well-known type with a JSON form of its own)."""
    return (fd.message_type is not None and not fd.is_repeated
            and not fd.message_type.full_name.startswith("google.protobuf."))


# -- the view ------------------------------------------------------------------------------------------------------


@dataclass
class BodyView:
    """A body as the document shows it (`text`), and what `read` needs to make the body from an edited text."""

    kind: str                     # protobuf | json | text | base64
    text: str
    original: bytes               # the body as the queue holds it
    payload: bytes                # what `text` shows: inside compression and framing
    wrapping: Wrapping = Wrapping()
    type_name: str | None = None  # protobuf
    value: Any = None             # json: the parsed value
    note: str | None = None       # why a compressed body is shown as it is; a protobuf guess's confidence

    def describe(self) -> str:
        """For the section marker: `protobuf shop.orders.v1.OrderPlaced as its JSON mapping, gzip-compressed …`."""
        what = {PROTOBUF: f"protobuf {self.type_name} as its JSON mapping", JSON: "JSON", TEXT: "text (UTF-8)",
                BASE64: "base64 (bytes)"}[self.kind]
        if self.wrapping.compression:
            what += f", {self.wrapping.compression}-compressed: shown inflated"
        if self.note:
            what += f"; {self.note}"
        return what

    def how_edited(self) -> str:
        """How an edited body of this view is made, for the diff."""
        first = {PROTOBUF: f"re-encoded as {self.type_name}: the original with only the changed fields applied, "
                           "unknown fields kept, fields serialised in field-number order",
                 JSON: "published as saved", TEXT: "published as saved (UTF-8)",
                 BASE64: "published as the bytes the base64 spells"}[self.kind]
        return "; ".join([first, *self.wrapping.words()])

    def read(self, text: str, registry: RegistryLoader) -> bytes | None:
        """The body for an edited `text`, or None when it says what the original does (its bytes are kept).
        BodyError when it cannot be published as this kind."""
        if text == self.text:
            return None
        if self.kind == PROTOBUF:
            loaded = registry()
            assert loaded is not None and self.type_name is not None  # a protobuf view was made with them
            payload = apply_json(loaded, self.type_name, self.payload, parse_json(text))
            return None if payload is None else self.wrapping.close(payload)
        if self.kind == JSON:
            if same_json(parse_json(text), self.value):
                return None
            return self.wrapping.close(text.encode("utf-8"))
        if self.kind == TEXT:
            return self.wrapping.close(text.encode("utf-8"))
        try:
            data = base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            raise BodyError("not valid base64", 1) from None
        return None if data == self.payload else self.wrapping.close(data)


def view_body(body: bytes, properties: Mapping[str, Any], headers: Mapping[str, Any] | None,
              registry: RegistryLoader, *, max_inflated: int = compression.DEFAULT_MAX_INFLATED) -> BodyView:
    """How the document shows `body` (the module docstring)."""
    data, method, note = inflated_whole(body, properties, headers, max_inflated=max_inflated)
    wrapping = Wrapping(method)
    content_type = _text(properties.get("content_type")).lower()
    if data and not any(x in content_type for x in _NOT_PROTOBUF):
        view = _protobuf_view(body, data, wrapping, properties, headers, registry)
        if view is not None:
            return view
    value = jsonbody.body_value(data, content_type)
    if value is not MISSING:
        return BodyView(JSON, json_text(value), body, data, wrapping, value=value, note=note)
    text = _plain_text(data)
    if text is not None:
        return BodyView(TEXT, text, body, data, wrapping, note=note)
    return BodyView(BASE64, base64.encodebytes(data).decode("ascii").rstrip("\n"), body, data, wrapping, note=note)


def _protobuf_view(body: bytes, data: bytes, wrapping: Wrapping, properties: Mapping[str, Any],
                   headers: Mapping[str, Any] | None, registry: RegistryLoader) -> BodyView | None:
    """A match of the schemas — of the type the message names (its defects, e.g. fields unknown to the type, said
    and kept), or a sure guess — its framing kept aside; None otherwise."""
    loaded = registry()
    if loaded is None:
        return None
    from dlxtool.decoding import decode_body, hints_from_properties, is_weak
    from proto_registry.hints import unframe
    from proto_registry.result import MATCH

    decoded = decode_body(loaded, data, properties, headers=headers)
    if decoded is None or decoded.status != MATCH or decoded.message is None or decoded.type is None \
            or decoded.decompressed is not None:
        return None
    # the message names its type (its properties or headers): edited as that type, defects or not
    hinted = decoded.source in ("hint", "explicit") or decoded.type in hints_from_properties(properties,
                                                                                             headers).names()
    if not hinted and is_weak(decoded.to_dict()):
        return None  # a guess: shown as bytes rather than as a type the body may not be
    payload, framing = unframe(data)
    if framing is not None:
        if framing.compressed:
            return None
        wrapping = Wrapping(wrapping.compression, data[:framing.header_size] if framing.kind != "grpc" else b"",
                            grpc=framing.kind == "grpc")
    notes = [f"{d} (kept as it is)" for d in decoded.defects]
    if not hinted:
        notes.insert(0, f"the type is the schemas' guess (confidence {decoded.confidence:.2f})")
    note = "; ".join(notes) or None
    return BodyView(PROTOBUF, json_text(decoded.message), body, payload, wrapping, type_name=decoded.type,
                    note=note)


def _plain_text(data: bytes) -> str | None:
    """The body as text the document can hold unchanged: UTF-8, printable (tabs and line feeds allowed, no carriage
    returns an editor might rewrite), no line the document would read as a section marker."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not all(c.isprintable() or c in "\t\n" for c in text):
        return None
    if any(line.startswith(MARKER.rstrip()) for line in text.split("\n")):
        return None
    return text


def _text(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else ""
