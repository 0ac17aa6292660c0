"""Hints about a payload's type, and framings that wrap a protobuf payload.

Hints come first, guessing second: an AMQP ``type`` property, a content-type parameter
(``proto=`` / ``messageType=``), an explicit type, a ``google.protobuf.Any`` type URL. Framings are
recognised from the bytes: Confluent schema-registry (magic 0, schema id, message indexes) and the
gRPC 5-byte length prefix.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from proto_registry.wire import read_varint, zigzag

_CT_PARAMS = ("proto", "messagetype", "message_type", "type", "schema")


@dataclass(frozen=True, slots=True)
class Hints:
    """What the surroundings say about a payload. All optional."""

    amqp_type: str | None = None  # AMQP basic property `type`
    content_type: str | None = None  # e.g. 'application/x-protobuf; proto=shop.orders.v1.OrderPlaced'
    type_name: str | None = None  # preferred type (tried first, but the bytes must agree)
    type_url: str | None = None  # google.protobuf.Any type URL
    extra: tuple[str, ...] = field(default=())  # more candidate names (e.g. from headers)

    def names(self) -> list[str]:
        """Candidate type names, strongest first."""
        out: list[str] = []
        for name in (
            self.type_name,
            type_from_url(self.type_url) if self.type_url else None,
            type_from_content_type(self.content_type) if self.content_type else None,
            self.amqp_type,
            *self.extra,
        ):
            if name and name.strip() and name.strip() not in out:
                out.append(name.strip())
        return out


def type_from_url(url: str) -> str:
    """``type.googleapis.com/pkg.Msg`` -> ``pkg.Msg`` (anything up to the last '/' is dropped)."""
    return url.rsplit("/", 1)[-1].strip()


def type_from_content_type(content_type: str) -> str | None:
    """The ``proto=`` / ``messageType=`` parameter of a content type, if any."""
    parts = content_type.split(";")
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if not sep:
            continue
        if key.strip().lower() in _CT_PARAMS:
            value = value.strip().strip('"').strip("'")
            if value:
                return type_from_url(value) if "/" in value else value
    return None


@dataclass(frozen=True, slots=True)
class Framing:
    """A wrapper found around the protobuf bytes."""

    kind: str  # "confluent" | "grpc"
    header_size: int
    schema_id: int | None = None  # confluent
    message_indexes: tuple[int, ...] = ()  # confluent: path of the message type in the schema
    compressed: bool = False  # grpc: flag byte set
    note: str | None = None

    def to_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"kind": self.kind, "header_size": self.header_size}
        if self.kind == "confluent":
            d["schema_id"] = self.schema_id
            d["message_indexes"] = list(self.message_indexes)
        if self.compressed:
            d["compressed"] = True
        if self.note:
            d["note"] = self.note
        return d


def unframe(payload: bytes) -> tuple[bytes, Framing | None]:
    """Strip a gRPC or Confluent framing. A bare protobuf message never starts with byte 0
    (field number 0 is invalid), so only payloads starting with 0 or 1 are examined."""
    if len(payload) < 5 or payload[0] > 1:
        return payload, None
    length = int.from_bytes(payload[1:5], "big")
    if length == len(payload) - 5:
        body = payload[5:]
        if payload[0] == 1:
            try:
                return _decompress(body), Framing("grpc", 5, compressed=True)
            except (OSError, zlib.error, EOFError):
                return body, Framing("grpc", 5, compressed=True, note="compressed with an unknown codec")
        return body, Framing("grpc", 5)
    if payload[0] != 0:
        return payload, None
    schema_id = int.from_bytes(payload[1:5], "big")
    try:
        count, pos = read_varint(payload, 5, len(payload))
        count = zigzag(count)
        indexes: list[int] = []
        if count == 0:
            indexes = [0]
        elif 0 < count <= 32:
            for _ in range(count):
                value, pos = read_varint(payload, pos, len(payload))
                indexes.append(zigzag(value))
        else:
            return payload[5:], Framing("confluent", 5, schema_id, (), note="no message indexes")
    except ValueError:
        return payload[5:], Framing("confluent", 5, schema_id, (), note="no message indexes")
    return payload[pos:], Framing("confluent", pos, schema_id, tuple(indexes))


def _decompress(body: bytes) -> bytes:
    try:
        import gzip  # rare (a gzip-framed payload): not worth its import on every start

        return gzip.decompress(body)
    except (OSError, EOFError):
        return zlib.decompress(body)
