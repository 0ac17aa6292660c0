"""Protobuf type registry: load schemas, identify and decode payloads. No click, no pika.

from proto_registry import Registry, Hints, DEMO_PROTOS
reg = Registry.load(["protos/"])            # .proto dirs and descriptor sets
reg = Registry.load([DEMO_PROTOS])          # the demo's shop.* schemas, only when asked for
result = reg.identify(payload, Hints(amqp_type="shop.orders.v1.OrderPlaced"))
result.best.type, result.best.confidence, result.ambiguous, result.equivalent

The names below are imported on first use (PEP 562): `from proto_registry.errors import …` or a
command that never decodes a body does not pay for protobuf, the compiler or the scoring code.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The schemas of the demo shop (scripts/demo): example data, never loaded unless a caller names them.
DEMO_PROTOS = Path(__file__).parent / "protos"

_EXPORTS = {
    "CompileError": "proto_registry.errors",
    "DecodeError": "proto_registry.errors",
    "DescriptorSetError": "proto_registry.errors",
    "ProtoRegistryError": "proto_registry.errors",
    "SchemaConflictError": "proto_registry.errors",
    "SourceNotFoundError": "proto_registry.errors",
    "UnknownTypeError": "proto_registry.errors",
    "Framing": "proto_registry.hints",
    "Hints": "proto_registry.hints",
    "Registry": "proto_registry.registry",
    "EMPTY": "proto_registry.result",
    "HIGH_CONFIDENCE": "proto_registry.result",
    "MALFORMED": "proto_registry.result",
    "MATCH": "proto_registry.result",
    "NO_MATCH": "proto_registry.result",
    "Identification": "proto_registry.result",
    "Match": "proto_registry.result",
}

__all__ = [
    "DEMO_PROTOS",
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

if TYPE_CHECKING:
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
    from proto_registry.result import (
        EMPTY,
        HIGH_CONFIDENCE,
        MALFORMED,
        MATCH,
        NO_MATCH,
        Identification,
        Match,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'proto_registry' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
