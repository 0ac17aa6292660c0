"""What :meth:`Registry.identify` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proto_registry.hints import Framing

# status values
MATCH = "match"  # one type fits best (possibly ambiguous with equivalents)
EMPTY = "empty"  # empty payload: any type fits
NO_MATCH = "no_match"  # well-formed protobuf, but no registered type explains it
MALFORMED = "malformed"  # not protobuf wire format at all

HIGH_CONFIDENCE = 0.8


@dataclass(slots=True)
class Match:
    """One candidate type for a payload, with how well the payload parses as it."""

    type: str  # full name, e.g. shop.orders.v1.OrderPlaced
    score: float  # 0..1: share of payload bytes explained by valid fields (1.0 = clean parse)
    confidence: float  # 0..1: how sure we are that this is the type
    clean: bool  # parses with no unknown field, mismatch, bad string/enum or missing required
    hinted: bool = False  # named by a hint (type property, content type, --type, Any URL)
    defects: tuple[str, ...] = ()  # why it is not clean, or not canonical (only the first few matches)
    # The payload is exactly what protobuf's serializer writes for the message it parses as: fields
    # in number order, singular ones once, no default of an implicit-presence field, packed as the
    # schema says, shortest varints, map entries whole. Standard producers only write such bytes.
    canonical: bool = False

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "type": self.type,
            "score": round(self.score, 4),
            "confidence": round(self.confidence, 4),
            "clean": self.clean,
            "canonical": self.canonical,
        }
        if self.hinted:
            d["hinted"] = True
        if self.defects:
            d["defects"] = list(self.defects)
        return d


@dataclass(slots=True)
class Identification:
    """What a payload was identified as: a status and the ranked matches."""

    status: str
    matches: list[Match] = field(default_factory=list)  # ranked, best first
    ambiguous: bool = False  # the payload cannot tell the best match from `equivalent`
    equivalent: list[str] = field(default_factory=list)  # indistinguishable types (best included)
    equivalent_count: int = 0  # may exceed len(equivalent), which is capped
    source: str = "guess"  # "hint" | "explicit" | "guess"
    framing: Framing | None = None
    payload: bytes = b""  # the protobuf bytes (framing removed)
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> Match | None:
        return self.matches[0] if self.matches and self.status == MATCH else None

    def alternatives(self) -> list[str]:
        b = self.best
        return [t for t in self.equivalent if b is None or t != b.type]
