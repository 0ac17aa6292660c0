"""protobuf's golden ``TestMaps`` message: 13,619 bytes, every map key type, ~1,300 nested messages.

protobuf's own test ``MapSerializationTest.Deterministic`` (src/google/protobuf/map_test.inc, v35.1)
builds it; this is that recipe, step for step, so that it needs no file of its own. Issue 40 measured
decode on it (13.6 KB, map-heavy); scripts/bench/decode.py and test_same_answers.py use it.
The schema is ``proto2_unittest.TestMaps`` of map_proto2_unittest.proto, in the vendored
public_sets/protobuf-unittest.binpb.
"""

from __future__ import annotations

from typing import Any

TYPE = "proto2_unittest.TestMaps"
SIZE = 13_619
_M64 = (1 << 64) - 1


def _construct_key(n: int) -> bytes:
    """map_test.inc's ConstructKey: a 7-bit ASCII string of n % 9 bytes (its decimal digits when 0)."""
    size = n % 9
    if size == 0:
        return str(n).encode()
    s = bytearray(size)
    while n != 0:
        s[n % size] = (n >> 10) & 0x7F
        n //= 888
    return bytes(s)


def _signed(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def build(message_class: Any) -> bytes:
    """The golden message, serialized deterministically (map keys sorted), as the C++ test does.
    ``message_class``: the ``TestMaps`` class (e.g. ``registry.message_class(TYPE)``)."""
    t = message_class()
    inner: dict[int, int] = {0: 0, 10: 0, -200: 0}
    frog = 9
    for i in range(25):
        i32 = _signed(frog, 32)
        u32 = (i32 * 91919) & 0xFFFFFFFF
        i64 = _signed(frog, 64)
        u64 = (frog * 187321) & _M64
        b = i32 > 0
        s = _construct_key(frog)
        inner[i] = i32
        keyed = (
            (t.m_int32, i32), (t.m_sint32, i32), (t.m_sfixed32, i32), (t.m_uint32, u32), (t.m_fixed32, u32),
            (t.m_int64, i64), (t.m_sint64, i64), (t.m_sfixed64, i64), (t.m_uint64, u64), (t.m_fixed64, u64),
            (t.m_bool, b), (t.m_string, s.decode("ascii")),
            (t.m_string, (s + bytes([b]) * (1 << (u32 % 9))).decode("ascii")),
        )
        for container, key in keyed:
            entry = container[key]
            entry.Clear()
            entry.m.update(inner)
        inner.pop(i, None)
        frog = (frog * 0xA29CD16F + i) & _M64
        frog ^= frog >> 41
    return bytes(t.SerializeToString(deterministic=True))
