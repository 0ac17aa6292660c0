"""`load --reencode`: a message record whose `decoded` was changed (`dlxtool dump q | jq '…' | dlxtool load -
--reencode`) gets the body that says it; a record whose `decoded` still says what its body does keeps its bytes.

`decoded` as dump writes it (dlxtool.decoding.record_decoder): a protobuf match (`type`, `message` = its JSON
mapping) is re-encoded through its type — the original message with only the changed fields applied
(dlxtool.editing.bodies.apply_json: unknown fields kept, fields in field-number order); a JSON body (`status`
"json", `message` = the parsed JSON) is written back as compact JSON. Framing and compression are put back as
they were. Anything else is published as its `body` says, a body cut short or malformed (`status` truncated,
malformed: its `message` holds the fields before the stop only) too.
"""

from __future__ import annotations

from dataclasses import replace

from dlxtool.compression import inflated_whole
from dlxtool.decoding import FAILED, JSON_STATUS
from dlxtool.editing.bodies import (
    BodyError,
    RegistryLoader,
    Wrapping,
    apply_json,
    compact_json,
    parse_json,
    same_json,
)
from dlxtool.errors import UsageError
from dlxtool.record import MessageRecord
from proto_registry.hints import unframe


class Reencoder:
    """record, FILE:LINE -> the record to publish (UsageError naming FILE:LINE where it cannot be)."""

    def __init__(self, registry: RegistryLoader) -> None:
        self.registry = registry
        self.reencoded = 0  # records whose body was made from their `decoded`

    def __call__(self, record: MessageRecord, where: str) -> MessageRecord:
        decoded = record.decoded
        if not isinstance(decoded, dict) or decoded.get("message") is None or decoded.get("status") in FAILED:
            return record  # a body cut short or malformed: its `message` is only what came before the stop
        data, method, _note = inflated_whole(record.body, record.properties, record.headers)
        if decoded.get("status") == JSON_STATUS:
            body = self._json(data, decoded["message"], where)
        elif decoded.get("type"):
            body = self._protobuf(data, str(decoded["type"]), decoded["message"], where)
        else:
            return record
        if body is None:
            return record
        self.reencoded += 1
        return replace(record, body=Wrapping(method).close(body) if method else body)

    @staticmethod
    def _json(data: bytes, value: object, where: str) -> bytes | None:
        try:
            before = parse_json(data.decode("utf-8"))
        except (UnicodeDecodeError, BodyError):
            before = None  # a body that is not JSON now: what `decoded` says is written
        return None if before is not None and same_json(before, value) else compact_json(value)

    def _protobuf(self, data: bytes, type_name: str, value: object, where: str) -> bytes | None:
        registry = self.registry()
        if registry is None:
            raise UsageError(f"{where}: decoded.type is {type_name!r}, and no protobuf schemas are loaded",
                             hint="give the schemas (--proto-path, proto_paths in the config, or --demo-schemas)")
        if type_name not in registry:
            raise UsageError(f"{where}: decoded.type {type_name!r} is not a type of the schemas loaded",
                             hint="give the schemas that define it (--proto-path, proto_paths in the config)")
        payload, framing = unframe(data)
        if framing is not None and framing.compressed:
            raise UsageError(f"{where}: a compressed gRPC payload cannot be re-encoded",
                             hint="edit its base64 `body` instead, or load it without --reencode")
        try:
            new = apply_json(registry, type_name, payload, value)
        except BodyError as exc:
            raise UsageError(f"{where}: decoded.message: {exc.message}") from None
        if new is None:
            return None
        prefix = data[:framing.header_size] if framing is not None and framing.kind != "grpc" else b""
        return Wrapping(None, prefix, grpc=framing is not None and framing.kind == "grpc").close(new)
