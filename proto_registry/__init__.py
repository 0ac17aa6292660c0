"""Protobuf type registry: load schemas, identify and decode payloads. No click, no pika.

from proto_registry import Registry, Hints
reg = Registry.load(["protos/"])            # .proto dirs and descriptor sets; bundled schemas too
result = reg.identify(payload, Hints(amqp_type="shop.orders.v1.OrderPlaced"))
result.best.type, result.best.confidence, result.ambiguous, result.equivalent
"""

from proto_registry.errors import (
    CompileError,
    DecodeError,
    DescriptorSetError,
    ProtoRegistryError,
    SchemaConflictError,
    SourceNotFoundError,
    UnknownTypeError,
)
from proto_registry.hints import Framing, Hints
from proto_registry.registry import Registry
from proto_registry.result import EMPTY, HIGH_CONFIDENCE, MALFORMED, MATCH, NO_MATCH, Identification, Match

__all__ = [
    "EMPTY",
    "HIGH_CONFIDENCE",
    "MALFORMED",
    "MATCH",
    "NO_MATCH",
    "CompileError",
    "DecodeError",
    "DescriptorSetError",
    "Framing",
    "Hints",
    "Identification",
    "Match",
    "ProtoRegistryError",
    "Registry",
    "SchemaConflictError",
    "SourceNotFoundError",
    "UnknownTypeError",
]
