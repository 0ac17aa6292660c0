"""Robustness: no exception escapes identify/raw decode; garbage never gets a confident type."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proto_registry import HIGH_CONFIDENCE, Registry
from tests.proto_registry.helpers import order_cancelled, order_placed

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(st.binary(max_size=512))
def test_identify_never_raises_on_random_bytes(registry: Registry, data: bytes) -> None:
    res = registry.identify(data)
    registry.decode_raw(data)
    for m in res.matches:
        assert 0.0 <= m.confidence <= 1.0 and 0.0 <= m.score <= 1.0
    if len(data) >= 16 and res.best is not None and res.best.confidence >= HIGH_CONFIDENCE:
        # Random bytes that happen to be a confident, clean message must decode as that type.
        assert res.best.clean
        registry.decode(res.payload, res.best.type)


@SETTINGS
@given(st.data())
def test_mutated_real_payloads(registry: Registry, data: st.DataObject) -> None:
    base = data.draw(st.sampled_from([order_placed(registry), order_cancelled(registry)]))
    cut = data.draw(st.integers(0, len(base)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, max(len(base) - 1, 0)), st.integers(0, 255)), max_size=4))
    mutated = bytearray(base[:cut] if data.draw(st.booleans()) else base)
    for pos, value in flips:
        if pos < len(mutated):
            mutated[pos] = value
    res = registry.identify(bytes(mutated))
    if res.best is not None and res.best.confidence >= HIGH_CONFIDENCE:
        # A confident answer must be a type the bytes really parse as, cleanly.
        assert res.best.clean
        msg = registry.decode(res.payload, res.best.type)
        assert msg is not None


def test_bounded_random_garbage_is_never_confident(registry: Registry) -> None:
    rng = random.Random(1234)
    confident = 0
    for _ in range(5000):
        data = rng.randbytes(rng.randint(8, 200))
        res = registry.identify(data)
        if res.best is not None and res.best.confidence >= HIGH_CONFIDENCE:
            confident += 1
    assert confident == 0


def test_deeply_nested_payload_does_not_blow_the_stack(registry: Registry) -> None:
    data = b""
    for _ in range(3000):
        data = b"\x0a" + _varint(len(data)) + data
    res = registry.identify(data)
    assert res.status in ("match", "no_match", "malformed")
    assert registry.decode_raw(data) is not None


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)
