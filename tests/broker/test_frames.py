"""dlxtool.broker.wire.frames writes the bytes pika writes and reads the values pika reads.

The oracle is pika itself: its frame marshalling (Connection._send_message, run on a stub that captures
the output), its table/properties encoders and decoders. Equality is strict: same bytes on encode;
same values *and* types on decode (a marker type for 64-bit integers: pika's `long`, dlxtool's Long; bytes
for non-UTF-8 strings,
truncated floats …); for invalid input, the same exception type.
"""

from __future__ import annotations

import random
import struct
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pika
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pika import data as pika_data
from pika import frame, spec
from pika.compat import long

from dlxtool.amqp_values import Long, RawValue
from dlxtool.broker.channel import AsyncChannel
from dlxtool.broker.publisher import PublishAnswer, Publisher
from dlxtool.broker.wire import codec as wire_codec
from dlxtool.broker.wire import frames, hotpath
from tests.support.codecs import CODECS

# -- strategies -------------------------------------------------------------------------------------

short_text = st.text(max_size=12)
keys = st.one_of(short_text, st.text(min_size=80, max_size=90).map(lambda s: s * 3))  # some too long (> 255 B)
datetimes = st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1)).flatmap(
    lambda d: st.sampled_from([d, d.replace(tzinfo=UTC), d.replace(tzinfo=timezone(timedelta(hours=5)))]))
scalars = st.one_of(
    st.text(), st.binary(max_size=20), st.booleans(), st.none(), datetimes,
    st.integers(min_value=-2**31, max_value=2**31 - 1),
    st.sampled_from([0, 2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**63 - 1, -2**63, 2**63, -2**63 - 1]),
    st.integers(min_value=-2**63, max_value=2**63 - 1),
    st.integers(min_value=-2**63, max_value=2**63 - 1).map(long),
    st.decimals(places=3, min_value=-10**5, max_value=10**5, allow_nan=False),
    st.integers(min_value=2**63, max_value=2**70),            # too big: pika raises
    st.floats(allow_nan=False),                               # pika cannot encode floats: raises
    st.tuples(st.integers()),                                 # nor tuples
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(short_text, inner, max_size=4)),
                      max_leaves=12)
tables = st.dictionaries(keys, values, max_size=6)
valid_scalars = st.one_of(st.text(), st.binary(max_size=20), st.booleans(), st.none(), datetimes,
                          st.integers(min_value=-2**63, max_value=2**63 - 1),
                          st.integers(min_value=-2**63, max_value=2**63 - 1).map(long),
                          st.decimals(places=2, min_value=-10**5, max_value=10**5, allow_nan=False))
valid_values = st.recursive(valid_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                   st.dictionaries(short_text, inner, max_size=4)),
                            max_leaves=12)
valid_tables = st.dictionaries(short_text, valid_values, max_size=6)

short_props = ("content_type", "content_encoding", "correlation_id", "reply_to", "expiration", "message_id",
               "type", "user_id", "app_id", "cluster_id")


@st.composite
def properties(draw: Any, headers: Any = tables) -> Any:
    kwargs: dict[str, Any] = {}
    for name in short_props:
        if draw(st.booleans()):
            kwargs[name] = draw(st.one_of(short_text, st.binary(max_size=5), st.just("x" * 256), st.integers()))
    if draw(st.booleans()):
        kwargs["headers"] = draw(st.one_of(headers, st.just({})))
    for name in ("delivery_mode", "priority"):
        if draw(st.booleans()):
            kwargs[name] = draw(st.integers(min_value=-1, max_value=256))
    if draw(st.booleans()):
        kwargs["timestamp"] = draw(st.integers(min_value=-1, max_value=2**64))
    return pika.BasicProperties(**kwargs)


# -- helpers ----------------------------------------------------------------------------------------


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the exception type is what we compare
        return "raised", type(exc)


def pika_publish_bytes(channel_number: int, exchange: Any, routing_key: Any, body: bytes, props: Any,
                       mandatory: bool, body_max: int) -> bytes:
    """What pika's own Connection._send_message emits for basic_publish."""
    out: list[bytes] = []

    class Stub:
        _body_max_length = body_max

        def _output_marshaled_frames(self, marshaled: list[bytes]) -> None:
            out.extend(marshaled)

    method = spec.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory)
    pika.connection.Connection._send_message(Stub(), channel_number, method, (props, body))  # noqa: SLF001
    return b"".join(out)


def strict_equal(a: Any, b: Any) -> bool:
    """Equal values of identical types, all the way down (dlxtool's Long is pika's `long`: the 64-bit
    marker)."""
    if _marker(type(a)) is not _marker(type(b)):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(strict_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _marker(kind: type) -> type:
    return long if kind is Long else kind


def pika_encoded_table(table: dict[str, Any]) -> bytes:
    pieces: list[bytes] = []
    pika_data.encode_table(pieces, table)
    return b"".join(pieces)


# -- encoding ---------------------------------------------------------------------------------------


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(props=properties(), body=st.binary(max_size=70), channel_number=st.integers(1, 2047),
       exchange=st.one_of(short_text, st.just("e" * 256)), routing_key=short_text, mandatory=st.booleans(),
       body_max=st.sampled_from([8, 31, 131064]))
def test_publish_frames_are_byte_equal_to_pika(props: Any, body: bytes, channel_number: int, exchange: str,
                                               routing_key: str, mandatory: bool, body_max: int) -> None:
    expected = outcome(pika_publish_bytes, channel_number, exchange, routing_key, body, props, mandatory, body_max)
    got = outcome(frames.publish_frames, channel_number, exchange, routing_key, body, props,
                  mandatory=mandatory, body_max=body_max)
    assert got == expected


class CapturingConnection:
    """A BlockingConnection as the codecs' publish sees it: `_impl` is pika's Connection's own send path
    (its _send_method/_send_message) on a stub that captures the frames instead of writing them."""

    def __init__(self, body_max: int) -> None:
        self.out: list[bytes] = []
        out = self.out

        class Impl:
            _body_max_length = body_max
            _transport = None
            bytes_sent = frames_sent = 0
            callbacks = None  # pika's Channel keeps a reference; publishing never uses it
            _send_method = pika.connection.Connection._send_method  # noqa: SLF001
            _send_message = pika.connection.Connection._send_message  # noqa: SLF001

            def _output_marshaled_frames(self, marshaled: list[bytes]) -> None:
                out.extend(marshaled)

        self._impl = Impl()
        self.channel = pika.channel.Channel(self._impl, 1, lambda *_a: None)
        self.channel._state = self.channel.OPEN  # noqa: SLF001 - as after channel.open-ok

    def sent(self) -> bytes:
        return b"".join(self.out)


def codecs_available() -> list[wire_codec.Codec]:
    return [wire_codec.make(name) for name in CODECS if name != "c" or hotpath.load() is not None]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(props=properties(headers=valid_tables), body=st.binary(max_size=70), exchange=short_text,
       routing_key=short_text, mandatory=st.booleans(), body_max=st.sampled_from([31, 200, 131064]))
def test_every_codec_publishes_the_bytes_pikas_basic_publish_writes(props: Any, body: bytes, exchange: str,
                                                                     routing_key: str, mandatory: bool,
                                                                     body_max: int) -> None:
    """c, python and pika: the same message gives the same frames, and the same encoded properties back (what
    the publisher matches a basic.return with) — or, for what cannot go on the wire, EncodeError and nothing
    sent."""
    expected = outcome(pika_publish_bytes, 1, exchange, routing_key, body, props, mandatory, body_max)
    if expected[0] == "ok" and len(b"".join(props.encode())) + 12 > body_max:  # frame_max = body_max + 8
        expected = ("raised", frames.EncodeError)  # the broker would close the connection: never sent
    for chosen in codecs_available():
        conn = CapturingConnection(body_max)
        got = outcome(chosen.publish, conn, conn.channel, exchange, routing_key, body, props, mandatory=mandatory)
        if expected[0] == "ok":
            assert (got, conn.sent()) == (("ok", b"".join(props.encode())), expected[1]), chosen
        else:
            assert (got, conn.sent()) == (("raised", frames.EncodeError), b""), chosen


def test_every_codec_refuses_a_content_header_larger_than_frame_max_before_sending() -> None:
    props = pika.BasicProperties(headers={"big": "x" * 200})
    for chosen in codecs_available():
        conn = CapturingConnection(body_max=100)  # frame_max 108
        with pytest.raises(frames.EncodeError, match="exceeds frame_max"):
            chosen.publish(conn, conn.channel, "", "q", b"body", props, mandatory=True)
        assert conn.sent() == b"", chosen


BOUNDARIES = {"i32-max": 2**31 - 1, "i32-over": 2**31, "i32-min": -2**31, "i32-under": -2**31 - 1,
              "i64-max": 2**63 - 1, "i64-min": -2**63, "long-small": long(1), "zero": 0, "true": True}


@settings(max_examples=400, deadline=None)
@given(table=tables)
@example(table=BOUNDARIES)
@example(table={"too-big": 2**63})
def test_tables_encode_byte_equal_to_pika_or_fail_alike(table: dict[str, Any]) -> None:
    assert outcome(frames.encode_amqp_table, table) == outcome(pika_encoded_table, table)


def test_the_replay_shapes_encode_byte_equal() -> None:
    """The properties replay publishes: provenance table with a datetime, ints of both widths, bytes."""
    at = datetime(2026, 11, 21, 10, 0, 5, tzinfo=UTC)
    headers = {"tenant": "acme", "i": 7, "big": 2**40, "raw": b"\xff\x00", "dlxtool-replay": {
        "from": "orders.dlq", "at": at, "count": 1, "exchange": "", "routing-key": "orders",
        "deaths": "rejected×3 from orders"}, "list": [1, "a", at, None, {"k": Decimal("1.50")}]}
    props = pika.BasicProperties(content_type="application/json", delivery_mode=2, message_id="m-1",
                                 timestamp=1763721005, type="shop.OrderPlaced", app_id="orders-svc",
                                 correlation_id="c-1", headers=headers)
    for body in (b"", b"x" * 200, bytes(range(256)) * 1100):
        assert frames.publish_frames(5, "", "orders", body, props, mandatory=True, body_max=131064) == \
            pika_publish_bytes(5, "", "orders", body, props, True, 131064)
    # twice: the key/short-string and datetime caches give the same bytes the second time
    assert frames.encode_properties(props) == b"".join(props.encode()) == frames.encode_properties(props)


# -- decoding ---------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(table=valid_tables)
def test_tables_decode_to_pikas_values_and_types(table: dict[str, Any]) -> None:
    raw = b"junk" + pika_encoded_table(table)
    mine, mine_end = frames.decode_amqp_table(raw, 4)
    theirs, their_end = pika_data.decode_table(raw, 4)
    assert mine_end == their_end
    assert strict_equal(mine, theirs)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(props=properties(headers=valid_tables))
def test_properties_decode_to_pikas(props: Any) -> None:
    try:
        raw = b"".join(props.encode())
    except Exception:  # noqa: BLE001 - pika cannot encode it: nothing to decode
        return
    mine = frames.decode_properties(raw)
    theirs = spec.BasicProperties().decode(raw)
    assert type(mine) is type(theirs)
    assert mine.__dict__.keys() == theirs.__dict__.keys()
    assert all(strict_equal(getattr(mine, k), getattr(theirs, k)) for k in theirs.__dict__)


def test_rare_kinds_decode_as_pika_does() -> None:
    """A kind pika only reads (D, where pika re-encodes it as it was) and non-UTF-8 strings/keys: as pika
    decodes them (U and L, which pika would change, are kept raw: below)."""
    entries = [b"D\x02\x00\x00\x01\x00", b"S\x00\x00\x00\x02\xff\xfe", b"V", b"t\x02"]
    body = b"".join(bytes((1,)) + bytes((65 + i,)) + e for i, e in enumerate(entries)) + b"\x02\xff\xfeV"
    raw = len(body).to_bytes(4, "big") + body
    mine, _ = frames.decode_amqp_table(raw, 0)
    theirs, _ = pika_data.decode_table(raw, 0)
    assert strict_equal(mine, theirs)


@pytest.mark.parametrize(("encoded", "value"), [
    (b"b\xff", -1), (b"B\xff", 255), (b"s\x80\x00", -32768), (b"u\xff\xfe", 65534),
    (b"i\xee\x6b\x28\x00", 4_000_000_000), (b"f\x3f\xc0\x00\x00", 1.5),
    (b"d" + struct.pack(">d", 1.1), 1.1), (b"D\x02\x00\x00\x00\x64", Decimal("1.00")),
    (b"T" + struct.pack(">Q", 2**62), 2**62), (b"U\xff\xfe", -2), (b"U\x7f\xff", 32767),
    (b"L" + struct.pack(">q", -2), -2), (b"L" + struct.pack(">q", 2**63 - 1), 2**63 - 1),
])
def test_values_pika_would_change_decode_raw_and_encode_back_byte_for_byte(encoded: bytes, value: Any) -> None:
    """pika: double 1.1 -> 1, float 1.5 -> 1, b/B/s/u/U -> I, i 4e9 -> l, L -> l, D(2,100) -> D(0,1),
    T 2^62 -> error."""
    table = b"\x01k" + encoded
    raw = len(table).to_bytes(4, "big") + table
    decoded, end = frames.decode_amqp_table(raw, 0)
    assert end == len(raw)
    assert isinstance(decoded["k"], RawValue) and decoded["k"].value == value
    assert frames.encode_amqp_table(decoded) == raw


RAW_KINDS = {"b": 1, "B": 1, "s": 2, "u": 2, "U": 2, "i": 4, "I": 4, "L": 8, "l": 8, "f": 4, "d": 8, "T": 8,
             "D": 5}
raw_scalars = st.sampled_from(sorted(RAW_KINDS)).flatmap(
    lambda kind: st.binary(min_size=RAW_KINDS[kind], max_size=RAW_KINDS[kind]).map(lambda p: kind.encode() + p))
# Not pika's `long` for small values: a record stores it as a JSON number, which comes back as an I (a
# known limit of the record format, not of the wire codec).
plain_scalars = st.one_of(st.text(), st.binary(max_size=20), st.booleans(), st.none(), datetimes,
                          st.integers(min_value=-2**63, max_value=2**63 - 1),
                          st.decimals(places=2, min_value=-10**5, max_value=10**5, allow_nan=False))
raw_tables = st.dictionaries(short_text, st.recursive(
    st.one_of(raw_scalars.map(lambda b: ("raw", b)), plain_scalars.map(lambda v: ("value", v))),
    lambda inner: st.one_of(st.lists(inner, max_size=3).map(lambda xs: ("list", xs)),
                            st.dictionaries(short_text, inner, max_size=3).map(lambda d: ("table", d))),
    max_leaves=10), max_size=5)


def _wire(tree: tuple[str, Any]) -> bytes:
    """One field value as bytes on the wire: raw kinds as given, the rest as pika encodes them."""
    how, v = tree
    if how == "raw":
        return v
    if how == "list":
        inner = b"".join(_wire(x) for x in v)
        return b"A" + len(inner).to_bytes(4, "big") + inner
    if how == "table":
        return b"F" + _wire_table(v)
    pieces: list[bytes] = []
    pika_data.encode_value(pieces, v)
    return b"".join(pieces)


def _wire_table(table: dict[str, Any]) -> bytes:
    body = b"".join(bytes((len(k.encode()),)) + k.encode() + _wire(v) for k, v in table.items())
    return len(body).to_bytes(4, "big") + body


@pytest.fixture
def deep_headers() -> None:
    """What dlxtool sets when it connects or reads an $amqp tag, set before hypothesis watches the limit."""
    from dlxtool.amqp_values import allow_deep_headers

    allow_deep_headers()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(table=raw_tables)
def test_every_kind_on_the_wire_survives_decode_encode_and_a_record_byte_for_byte(deep_headers: None,
                                                                                   table: dict[str, Any]) -> None:
    """Any mix of kinds, nested anywhere (U and L among them): decoding and encoding again gives the same
    bytes, directly and through a message record's JSON ($amqp tags)."""
    import orjson

    from dlxtool.record import MessageRecord

    raw = _wire_table(table)
    decoded, end = frames.decode_amqp_table(raw, 0)
    assert end == len(raw)
    assert frames.encode_amqp_table(decoded) == raw
    record = MessageRecord(queue="q", body=b"", headers=decoded)
    again = MessageRecord.from_json(orjson.loads(record.to_jsonl()))
    assert frames.encode_amqp_table(again.headers) == raw


@settings(max_examples=1500, deadline=None)
@given(raw=st.one_of(st.binary(max_size=60),
                     st.binary(max_size=40).map(lambda b: b"\x20\x00" + len(b).to_bytes(4, "big") + b)))
def test_garbage_decodes_as_pika_does_or_fails_alike(raw: bytes) -> None:
    """Same values as pika, except where we keep the AMQP bytes on purpose (RawValue): there the value
    must be what pika makes of it (floats truncated), or pika must fail where we keep it (a T past 9999)."""
    def pika_decode(data: bytes) -> Any:
        return spec.BasicProperties().decode(data).__dict__

    def mine(data: bytes) -> Any:
        return frames.decode_properties(data).__dict__

    ours, theirs = outcome(mine, raw), outcome(pika_decode, raw)
    if ours[0] == "ok" and theirs[0] == "raised":
        assert _holds_raw(ours[1]), (ours, theirs)
        return
    assert ours[0] == theirs[0]
    if ours[0] == "ok":
        assert all(strict_equal(_as_pika(ours[1][k]), theirs[1][k]) for k in theirs[1])
    else:
        assert ours == theirs


def _as_pika(value: Any) -> Any:
    """What pika would have decoded where we kept a RawValue."""
    from dlxtool.amqp_values import RawValue

    if isinstance(value, RawValue):
        if value.kind == "L":
            return long(value.value)
        return int(value.value) if value.kind in ("f", "d") else value.value
    if isinstance(value, dict):
        return {k: _as_pika(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_pika(v) for v in value]
    return value


def _holds_raw(value: Any) -> bool:
    from dlxtool.amqp_values import RawValue

    if isinstance(value, RawValue):
        return True
    if isinstance(value, dict):
        return any(_holds_raw(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_raw(v) for v in value)
    return False


# -- input: frames in, deliveries out ---------------------------------------------------------------


class FakeChannel:
    """pika's Channel as frames.py reads it: its private names alias the public ones the tests set."""

    def __init__(self, number: int) -> None:
        self.channel_number = number
        self.consumers: dict[str, Any] = {}
        self.cancelled: set[str] = set()
        self.on_deliver: Any = None  # what pika's Channel._on_deliver would do
        self._consumers = self.consumers
        self._cancelled = self.cancelled

    def _on_deliver(self, method_frame: Any, header: Any, body: bytes) -> None:
        self.on_deliver(method_frame, header, body)

    def add_on_close_callback(self, _cb: Any) -> None:
        pass


class FakeImpl:
    """The parts of a pika Connection FastInput touches; slow-path frames are recorded, decoded by pika."""

    def __init__(self) -> None:
        self._frame_buffer = b""
        self.bytes_received = 0
        self.frames_received = 0
        self.slow: list[Any] = []

    def _process_frame(self, value: Any) -> None:
        self.frames_received += 1
        self.slow.append(value)


def deliver_frames(number: int, tag: str, delivery_tag: int, props: Any, body: bytes, body_max: int) -> bytes:
    method = spec.Basic.Deliver(tag, delivery_tag, delivery_tag % 2 == 0, "ex", f"rk.{delivery_tag}")
    out = [frame.Method(number, method).marshal(), frame.Header(number, len(body), props).marshal()]
    out += [frame.Body(number, body[i:i + body_max]).marshal() for i in range(0, len(body), body_max)]
    return b"".join(out)


# decoded: BasicProperties (peek, dump); raw: encoded properties, read by C (the engine) or, where the
# extension is not built, by the Python path; raw-c-batch: C's runs handed over as lists (the engine's way)
@pytest.mark.parametrize("mode", ["decoded", "raw-c", "raw-python", "raw-c-batch"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(messages=st.lists(st.tuples(properties(headers=valid_tables), st.binary(max_size=300)), min_size=1,
                         max_size=6),
       seed=st.integers(0, 2**32))
def test_fast_input_delivers_what_pika_would_across_any_read_boundaries(mode: str, messages: list[Any],
                                                                        seed: int) -> None:
    rng = random.Random(seed)
    impl = FakeImpl()
    if mode.startswith("raw-c") and hotpath.load() is None:
        pytest.skip("the optional C extension dlxtool.broker.wire._hotpath is not built")
    # the `c` codec's reader, or the `python` codec's (decoded channels never take the C path)
    accelerator = None if mode == "raw-python" else hotpath.load()
    reader = frames.fast_input(type("Conn", (), {"_impl": impl})(), accelerator)
    channel = FakeChannel(3)
    got: list[Any] = []
    channel.consumers["ctag"] = lambda ch, method, props, body: got.append((ch, method, props, body))
    reader.channels[3] = channel
    reader.content[3] = None
    if mode != "decoded":
        reader.raw.add(3)
    batches: list[int] = []
    if mode == "raw-c-batch":
        reader.batches[3] = (channel.consumers["ctag"], lambda runs: (
            batches.append(len(runs)), got.extend((channel, m, p, b) for m, p, b in runs)))
    acks: list[Any] = []
    reader.confirms[4] = acks.append
    stream, expected, slow_expected = [], [], 0
    for i, (props, body) in enumerate(messages, 1):
        try:
            props.encode()
        except Exception:  # noqa: BLE001 - pika could not have sent it
            continue
        stream.append(deliver_frames(3, "ctag", i, props, body, 64))
        expected.append((i, props, body))
        stream.append(frame.Method(4, spec.Basic.Ack(i, i % 2 == 1)).marshal())   # a confirm on another channel
        stream.append(frame.Method(3, spec.Basic.QosOk()).marshal())               # not ours: pika's path
        stream.append(frame.Heartbeat().marshal())
        slow_expected += 2
    data = b"".join(stream)
    pos = 0
    while pos < len(data):  # arbitrary read boundaries, down to single bytes
        step = rng.choice([1, 2, 7, 13, 100, 4096])
        reader.on_data(data[pos:pos + step])
        pos += step
    assert reader.buffer == b""
    assert impl.bytes_received == len(data)
    assert [(m.delivery_tag, m.redelivered, m.exchange, m.routing_key, m.consumer_tag) for _c, m, _p, _b in got] == \
        [(i, i % 2 == 0, "ex", f"rk.{i}", "ctag") for i, _p, _b in expected]
    for (_c, _m, props, body), (_i, want_props, want_body) in zip(got, expected, strict=True):
        assert body == want_body
        if mode != "decoded":
            assert props == b"".join(want_props.encode())
            props = frames.decode_properties(props)
        decoded = spec.BasicProperties().decode(b"".join(want_props.encode()))
        assert all(strict_equal(getattr(props, k), getattr(decoded, k)) for k in decoded.__dict__)
    assert [(a.method.delivery_tag, a.method.multiple, a.channel_number) for a in acks] == \
        [(i, i % 2 == 1, 4) for i, _p, _b in expected]
    assert len(impl.slow) == slow_expected
    body_frames = sum(len(range(0, len(b), 64)) for _i, _p, b in expected)
    assert impl.frames_received == len(expected) * 3 + body_frames + slow_expected  # method, header, ack + bodies


@pytest.mark.parametrize("raw", [False, True], ids=["decoded", "raw"])
def test_deliveries_to_a_cancelled_consumer_take_pikas_path(raw: bool) -> None:
    impl = FakeImpl()
    reader = frames.fast_input(type("Conn", (), {"_impl": impl})(), hotpath.load())
    channel = FakeChannel(1)
    channel.consumers["ctag"] = lambda *a: pytest.fail("a cancelled consumer must not get deliveries")
    channel.cancelled.add("ctag")
    reader.channels[1] = channel
    reader.content[1] = None
    if raw:
        reader.raw.add(1)
    reader.on_data(deliver_frames(1, "ctag", 1, pika.BasicProperties(), b"body", 64))
    assert [type(f).__name__ for f in impl.slow] == ["Method", "Header", "Body"]


@pytest.mark.parametrize("consumers", [1, 2, "another"])
def test_a_batch_consumer_takes_whole_runs_only_when_it_is_the_channels_one_consumer(consumers: Any) -> None:
    if hotpath.load() is None:
        pytest.skip("the optional C extension dlxtool.broker.wire._hotpath is not built")
    impl = FakeImpl()
    reader = frames.fast_input(type("Conn", (), {"_impl": impl})(), hotpath.load())
    channel = FakeChannel(1)
    one_by_one: list[int] = []
    runs: list[list[int]] = []
    def consumer(_ch: Any, method: Any, _p: Any, _b: Any) -> None:
        one_by_one.append(method.delivery_tag)

    channel.consumers["ctag"] = consumer
    if consumers == 2:
        channel.consumers["other"] = lambda *a: pytest.fail("no delivery is for it")
    reader.channels[1] = channel
    reader.content[1] = None
    reader.raw.add(1)
    # "another": the runs belong to a consumer that has gone; the channel's one consumer now is someone else
    owner = (lambda *a: None) if consumers == "another" else consumer
    reader.batches[1] = (owner, lambda run: runs.append([m.delivery_tag for m, _p, _b in run]))
    props = pika.BasicProperties(headers={"a": 1})
    reader.on_data(b"".join(deliver_frames(1, "ctag", i, props, b"body", 4096) for i in (1, 2, 3)))
    if consumers == 1:
        assert (runs, one_by_one) == ([[1, 2, 3]], [])
    else:  # whose is each delivery? the per-consumer callbacks say
        assert (runs, one_by_one) == ([], [1, 2, 3])


@pytest.mark.parametrize("reader_codec", ["c", "python"])
def test_a_consumer_cancelled_by_its_callback_leaves_the_rest_of_a_read_to_pika(reader_codec: str) -> None:
    if reader_codec == "c" and hotpath.load() is None:
        pytest.skip("the optional C extension dlxtool.broker.wire._hotpath is not built")
    impl = FakeImpl()
    reader = frames.fast_input(type("Conn", (), {"_impl": impl})(), wire_codec.make(reader_codec).accelerator)
    channel = FakeChannel(1)
    got, pikas = [], []

    def first_only(_ch: Any, method: Any, props: bytes, body: bytes) -> None:
        got.append(method.delivery_tag)
        channel.cancelled.add("ctag")

    channel.consumers["ctag"] = first_only
    channel.on_deliver = lambda method_frame, header, body: pikas.append(
        (method_frame.method.delivery_tag, header.properties.headers, body))
    reader.channels[1] = channel
    reader.content[1] = None
    reader.raw.add(1)
    props = pika.BasicProperties(headers={"a": 1})
    reader.on_data(b"".join(deliver_frames(1, "ctag", i, props, b"body%d" % i, 4096) for i in (1, 2, 3)))
    assert got == [1]
    if reader_codec == "c":  # read in C as one run: the rest handed to pika's channel as pika would
        assert pikas == [(2, {"a": 1}, b"body2"), (3, {"a": 1}, b"body3")]
    else:  # read frame by frame: the rest never leaves pika's own frame path
        assert [type(f).__name__ for f in impl.slow] == ["Method", "Header", "Body"] * 2


# -- against the broker -----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, indirect=True)
def test_publisher_and_deliveries_round_trip_through_the_broker_on_each_codec(broker, qname, codec) -> None:
    """Empty, multi-frame (> frame_max) and header-heavy messages: published by Publisher, consumed as the
    engine consumes, on each codec (dlxtool's frames with and without C, pika's own), equal to what pika's
    own basic_get reads of the same messages."""
    headers = {"s": "héllo", "b": b"\xff\x00", "t": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "l": 2**40,
               "i": -5, "d": Decimal("1.25"), "v": None, "f": {"x": [1, "two", True]}, "bool": False}
    props = pika.BasicProperties(content_type="text/plain", delivery_mode=2, priority=1, message_id="m",
                                 timestamp=1763721005, headers=headers)
    bodies = [b"", b"small", bytes(range(256)) * 1200]  # the last one spans several body frames
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        pub = Publisher(conn, window=10)
        for i, body in enumerate(bodies):
            pub.publish("", qname, body, props, i)
        assert {o for _t, o, _d in pub.flush(10)} == {PublishAnswer.CONFIRMED}
        with broker.channel() as ch:
            reference = [ch.basic_get(qname, auto_ack=False) for _ in bodies]
            ch.basic_nack(0, multiple=True, requeue=True)
        channel = AsyncChannel(conn)
        codec.deliveries(conn, channel.impl)
        got: list[Any] = []
        channel.impl.basic_consume(qname, lambda _c, m, p, b: got.append((m, p, b)), auto_ack=True)
        channel.wait_for(lambda: len(got) == len(bodies), "deliveries")
        for (method, p, body), (ref_method, ref_props, ref_body) in zip(got, reference, strict=True):
            assert body == ref_body
            assert all(strict_equal(getattr(p, k), getattr(ref_props, k)) for k in ref_props.__dict__)
            assert (method.exchange, method.routing_key) == (ref_method.exchange, ref_method.routing_key)
        assert [b for _m, _p, b in got] == bodies
    finally:
        conn.close()
