"""The identification code as it was before issue 40 (commit 4f17f3b): a frozen reference, never edited.

``index.py``, ``score.py``, ``wire.py`` and ``registry.py`` are proto_registry's modules of that commit,
their imports pointed here. test_same_answers.py checks that today's registry gives the same answer
(type, confidence, ambiguity, alternatives, notes, defects) as this one on many payloads; the faster code
must not change what a user is told. Delete this package when a change to identification is *meant* to
change answers (and say so in the commit).
"""

from __future__ import annotations

from proto_registry import Registry, sources
from tests.proto_registry.baseline.index import build_index
from tests.proto_registry.baseline.registry import Registry as BaselineRegistry


def baseline_of(registry: Registry) -> BaselineRegistry:
    """The reference registry over the same loaded schemas (same pool, an index of its own)."""
    names, map_entries = sources.message_names(registry.loaded)
    descriptors = [registry.pool.FindMessageTypeByName(n) for n in names]
    return BaselineRegistry(registry.pool, build_index(descriptors, map_entries), registry.loaded)
