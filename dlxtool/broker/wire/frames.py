"""Fast AMQP 0-9-1 encoding and decoding for the hot path of the transfer engine (replay, purge …).

pika's codec (pika.spec, pika.data, pika.frame) is pure Python written for generality: a list of
pieces and a struct call per field, an object per frame, an `isinstance` chain per header value.
Moving dead letters spends most of its CPU there. This module produces and reads *exactly the same
bytes and values* as pika, only with less work per message:

- `publish_frames` builds the Basic.Publish method, content header and body frames in one bytes
  object; `encode_properties` / `encode_amqp_table` encode BasicProperties and field tables (the field
  values with dlxtool.amqp_values' codec). Equality with pika: any value or property this fast path
  does not handle itself (a subclass, an invalid value) makes it fall back to pika's own encoder for
  the whole thing, so the bytes — and the exceptions for invalid input — are pika's.
  tests/broker/test_frames.py proves byte equality for generated properties/headers (hypothesis) and
  decode equality (values *and* types: 64-bit integers as a marker type, amqp_values.Long where pika
  has its `long`; `bytes` for non-UTF-8 strings; the values pika would change kept as RawValue).
- `decode_properties` / `decode_amqp_table` mirror pika's decoders (same quirks), and fall back to pika
  on anything malformed so errors are pika's too.
- `FastInput` replaces a pika connection's input parsing: it reads frames at an offset into the
  received bytes (pika re-slices its whole buffer after every frame) with larger socket reads, and
  assembles Basic.Deliver + header + body itself for the channels registered with
  `fast_deliveries(channel)`, calling the consumer callback exactly as pika's Channel._on_deliver
  does. Every other frame (and every delivery pika would treat specially: cancelled consumer, a
  Basic.Return, a get-ok …) goes through pika's own frame processing unchanged.

Whether a connection uses any of this is the codec setting's choice (dlxtool.broker.wire.codec): `c`
and `python` read and write with this module (with or without the C extension), `pika` leaves both to
pika (pika_publish only checks the encoded size before pika's basic_publish sends it).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, cast

from dlxtool.broker import pika_import

pika_import.load()  # before any `from pika import`: without the asyncio adapter nobody here uses

from pika import data as pika_data  # noqa: E402
from pika import exceptions, frame, spec  # noqa: E402

from dlxtool.amqp_values import (  # noqa: E402
    FieldError,
    decode_field_table,
    encode_field_table,
    short_string,
    text_or_bytes,
)

FRAME_END = 0xCE
_END = b"\xce"

_B = struct.Struct(">B")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_i = struct.Struct(">i")
_Q = struct.Struct(">Q")
_q = struct.Struct(">q")
_FRAME_HEAD = struct.Struct(">BHI")
_CONTENT_HEAD = struct.Struct(">HHQ")
_PUBLISH_ID = _I.pack(spec.Basic.Publish.INDEX) + b"\x00\x00"  # method id + ticket 0

_BP = spec.BasicProperties
_DELIVER_INDEX = spec.Basic.Deliver.INDEX
_ACK_INDEX = spec.Basic.Ack.INDEX
_Deliver = spec.Basic.Deliver
_Ack = spec.Basic.Ack
_MethodFrame = frame.Method


# -- encoding ---------------------------------------------------------------------------------------


def encode_amqp_table(table: dict[Any, Any] | None) -> bytes:
    """A field table with its 4-byte size, byte-equal to pika.data.encode_table (dlxtool.amqp_values
    writes it); a value that codec cannot write (a Decimal subclass, a float …) and pika's encoder decides:
    its bytes or its exception."""
    try:
        return encode_field_table(table)
    except Exception:  # noqa: BLE001 - pika's answer, whatever it is
        return _pika_table(table or {})


# BasicProperties in AMQP order: (attribute, flag bit, how it is written: short string, table, octet, 64-bit)
_LAYOUT = (("content_type", 0x8000, "s"), ("content_encoding", 0x4000, "s"), ("headers", 0x2000, "F"),
           ("delivery_mode", 0x1000, "B"), ("priority", 0x0800, "B"), ("correlation_id", 0x0400, "s"),
           ("reply_to", 0x0200, "s"), ("expiration", 0x0100, "s"), ("message_id", 0x0080, "s"),
           ("timestamp", 0x0040, "Q"), ("type", 0x0020, "s"), ("user_id", 0x0010, "s"), ("app_id", 0x0008, "s"),
           ("cluster_id", 0x0004, "s"))


_USER_ID_FLAG = next(bit for name, bit, _how in _LAYOUT if name == "user_id")


def has_user_id(props: bytes) -> bool:
    """Whether encoded properties carry a user_id (its flag bit is set)."""
    return len(props) >= 2 and bool(int.from_bytes(props[:2], "big") & _USER_ID_FLAG)


_REPLY_TO_FLAG = next(bit for name, bit, _how in _LAYOUT if name == "reply_to")


def has_reply_to(props: bytes) -> bool:
    """Whether encoded properties carry a reply_to (its flag bit is set)."""
    return len(props) >= 2 and bool(int.from_bytes(props[:2], "big") & _REPLY_TO_FLAG)


def _properties_fast(p: Any) -> bytes:
    flags = 0
    out: list[bytes] = []
    d = p.__dict__
    for name, bit, how in _LAYOUT:
        v = d[name]
        if v is None:
            continue
        flags |= bit
        if how == "s":
            out.append(short_string(_string(v)))
        elif how == "F":
            out.append(encode_field_table(v))
        elif how == "B":
            out.append(_B.pack(v))
        else:
            out.append(_Q.pack(v))
    return _H.pack(flags) + b"".join(out)


class _NotFast(Exception):
    pass


def _string(value: Any) -> Any:
    if not isinstance(value, str | bytes):  # pika asserts this; let it say so
        raise _NotFast
    return value


def encode_properties(properties: Any) -> bytes:
    """BasicProperties as the content header frame carries them (flags + values), byte-equal to pika."""
    if type(properties) is _BP:
        try:
            return _properties_fast(properties)
        except Exception:  # noqa: BLE001 - anything odd: pika's encoder gives the bytes or the error
            pass
    return b"".join(properties.encode())


def basic_properties(properties: Mapping[str, Any], headers: Mapping[str, Any] | None) -> spec.BasicProperties:
    """The BasicProperties every codec publishes: AMQP basic properties by name (a record's `properties`),
    and the headers table (None or empty: none; a dict is taken as it is, another mapping copied)."""
    # cast: narrowing on `type(...) is dict` forgets the key and value types
    table = cast("dict[str, Any] | None", headers if headers is None or type(headers) is dict else dict(headers))
    return _BP(headers=table or None, **properties)


class EncodeError(ValueError):
    """A message that cannot be put on the wire as it is (a header value AMQP cannot carry, a content
    header larger than a frame). Raised before anything is sent: the channel is untouched."""


FRAME_OVERHEAD = 8  # frame type, channel, size, frame-end around every frame payload
VIEW_FROM = 1024 * 1024  # _emit hands pika's transport frames this big as a memoryview


def publish_frames(channel_number: int, exchange: str, routing_key: str, body: bytes, properties: Any,
                   *, mandatory: bool, body_max: int) -> bytes:
    """Basic.Publish + content header + body frames, as pika's Connection._send_message writes them."""
    method = _publish_method(exchange, routing_key, mandatory)  # first, as pika: its errors come first
    return _frames(channel_number, method, body, encode_properties(properties), body_max, None)


_METHODS: dict[tuple[Any, Any, bool], bytes] = {}  # replay publishes to a handful of queues, over and over


def _name(value: Any) -> bytes:
    """A method's name field (exchange, routing key): pika's exception when it is too long."""
    try:
        return short_string(value)
    except FieldError:
        raise exceptions.ShortStringTooLong(value) from None


def _publish_method(exchange: str, routing_key: str, mandatory: bool) -> bytes:
    key = (exchange, routing_key, mandatory)
    method = _METHODS.get(key)
    if method is None:
        method = _PUBLISH_ID + _name(exchange) + _name(routing_key) + (b"\x01" if mandatory else b"\x00")
        if type(exchange) is str and type(routing_key) is str:
            if len(_METHODS) >= 4096:
                _METHODS.clear()
            _METHODS[key] = method
    return method


def _frames(channel_number: int, method: bytes, body: bytes, props: bytes, body_max: int,
            accelerator: ModuleType | None) -> bytes:
    if accelerator is not None:
        return cast(bytes, accelerator.publish_frames(channel_number, method, props, body, body_max))
    return _py_frames(channel_number, method, body, props, body_max)


def _py_frames(channel_number: int, method: bytes, body: bytes, props: bytes, body_max: int) -> bytes:
    length = len(body)
    pieces = [_FRAME_HEAD.pack(1, channel_number, len(method)), method, _END,
              _FRAME_HEAD.pack(2, channel_number, len(props) + 12), _CONTENT_HEAD.pack(60, 0, length), props, _END]
    for start in range(0, length, body_max):
        chunk = body[start:start + body_max]
        pieces += (_FRAME_HEAD.pack(3, channel_number, len(chunk)), chunk, _END)
    return b"".join(pieces)


def encode_for_publish(properties: Any, frame_max: int, *, pika_codec: bool = False) -> bytes:
    """The encoded properties (of BasicProperties, or bytes encoded already), or EncodeError when they
    cannot be sent: a value AMQP cannot carry (pika or struct raise), or a content header frame larger
    than frame_max — which the broker answers by closing the whole connection (FRAME_ERROR), so it must
    never be sent. pika_codec: encoded by pika's own encoder (which cannot carry a RawValue)."""
    if type(properties) is bytes:  # encoded already (the replay fast path, a delivery's own bytes)
        props = properties
    else:
        try:
            props = _pika_encode(properties) if pika_codec else encode_properties(properties)
        except Exception as exc:  # struct.error, OverflowError, TypeError, pika's asserts …
            culprit = _culprit(properties, _pika_table if pika_codec else encode_amqp_table)
            raise EncodeError(f"cannot re-encode {culprit}: {type(exc).__name__}: {exc}") from exc
    if frame_max and len(props) + 12 + FRAME_OVERHEAD > frame_max:
        raise EncodeError(f"headers too large: content header of {len(props) + 12} bytes exceeds "
                          f"frame_max {frame_max} - {FRAME_OVERHEAD}")
    return props


def _pika_table(table: dict[Any, Any]) -> bytes:
    pieces: list[bytes] = []
    pika_data.encode_table(pieces, table)
    return b"".join(pieces)


def _culprit(properties: Any, encode_table: Callable[[dict[Any, Any]], bytes]) -> str:
    """Name the header that does not encode (for the reason a message stays)."""
    headers: Any = getattr(properties, "headers", None) or {}
    for key, value in headers.items():
        try:
            encode_table({key: value})
        except Exception:  # noqa: BLE001 - this is the one
            return f"header {key!r}"
    return "the properties"


# -- decoding ---------------------------------------------------------------------------------------


def _dshort(buf: bytes, o: int) -> tuple[Any, int]:
    end = o + 1 + buf[o]
    return text_or_bytes(buf[o + 1:end]), end


_unpack_Q = _Q.unpack_from


def decode_amqp_table(buf: bytes, o: int) -> tuple[dict[Any, Any], int]:
    """(table, offset after it) from the table's 4-byte size at buf[o], the values pika.data.decode_table
    reads (dlxtool.amqp_values decodes it: RawValue and Long, see there); on bytes that codec cannot
    read, pika's decoder answers, its values or its exception."""
    try:
        return decode_field_table(buf, o)
    except Exception:  # noqa: BLE001 - pika's answer, whatever it is
        table: dict[Any, Any]
        table, end = pika_data.decode_table(buf, o)
        return table, end


_PROPS_NONE = dict.fromkeys(name for name, _bit, _how in _LAYOUT)


def _decode_properties_fast(buf: bytes, o: int) -> Any:
    flags = _H.unpack_from(buf, o)[0]
    o += 2
    if flags & 1:
        raise _NotFast  # a second flag word: only pika knows what to do with it
    values = dict(_PROPS_NONE)
    for name, bit, how in _LAYOUT:
        if not flags & bit:
            continue
        if how == "s":
            values[name], o = _dshort(buf, o)
        elif how == "F":
            values[name], o = decode_field_table(buf, o)
        elif how == "B":
            values[name] = buf[o]
            o += 1
        else:
            values[name] = _unpack_Q(buf, o)[0]
            o += 8
    props = _BP.__new__(_BP)
    props.__dict__ = values
    return props


def decode_properties(buf: bytes) -> Any:
    """BasicProperties from a content header's property bytes (flags first), equal to pika's decode."""
    try:
        return _decode_properties_fast(buf, 0)
    except Exception:  # noqa: BLE001 - malformed or unusual: pika decodes it (or raises its own error)
        return _BP().decode(buf)


# -- input ------------------------------------------------------------------------------------------

# Bigger socket reads than pika's 4 KB: fewer trips through the ioloop per message.
RECV_BYTES = 256 * 1024
CONSUME_BYTES = 1024 * 1024


class _Content:
    """A delivery being assembled on a fast channel: method, then header, then body frames."""

    __slots__ = ("method", "props", "size", "chunks", "got")

    def __init__(self, method: Any) -> None:
        self.method = method
        self.props: Any = None
        self.size = -1
        self.chunks: list[bytes] = []
        self.got = 0


class FastInput:
    """Replaces one pika connection's `_on_data_available` (see module docstring). accelerator: the C
    extension reads runs of deliveries for raw channels (the `c` codec), or None (the `python` codec)."""

    def __init__(self, impl: Any, accelerator: ModuleType | None) -> None:
        self.impl = impl
        self.accelerator = accelerator
        self.buffer: bytes = bytes(impl._frame_buffer)  # noqa: SLF001 - take over what pika had not parsed
        impl._frame_buffer = b""  # noqa: SLF001
        self.channels: dict[int, Any] = {}           # channel number -> pika Channel with fast deliveries
        self.content: dict[int, _Content | None] = {}
        self.confirms: dict[int, Any] = {}           # channel number -> its Basic.Ack callback
        self.raw: set[int] = set()                   # channels whose consumers take the properties encoded
        self.batches: dict[int, tuple[Any, Any]] = {}  # channel number -> (consumer callback, its batch callback)
        impl._on_data_available = self.on_data  # noqa: SLF001 - instance attribute shadows the method
        transport = getattr(impl, "_transport", None)
        if transport is not None and hasattr(transport, "_MAX_RECV_BYTES"):
            transport._MAX_RECV_BYTES = RECV_BYTES  # noqa: SLF001
            transport._MAX_CONSUME_BYTES = CONSUME_BYTES  # noqa: SLF001

    def on_data(self, data: bytes) -> None:
        buf = self.buffer + data if self.buffer else data
        self.buffer = b""
        impl = self.impl
        size = len(buf)
        o = 0
        unpack = _FRAME_HEAD.unpack_from
        channels = self.channels
        raw = self.raw
        accelerator = self.accelerator
        try:
            while size - o >= 8:
                if buf[o] == 65 and buf[o:o + 4] == b"AMQP":  # a protocol header: pika's business
                    break
                kind, number, length = unpack(buf, o)
                if kind == 1 and number in raw and accelerator is not None and self.content[number] is None:
                    o, taken = self._read_deliveries(accelerator.read_deliveries, number, buf, o)
                    if taken:
                        continue
                end = o + 7 + length
                if end >= size:
                    break
                if buf[end] != FRAME_END:
                    raise exceptions.InvalidFrameError("Invalid FRAME_END marker")
                start = o + 7
                o = end + 1
                impl.bytes_received += end + 1 - start + 7
                if number in channels and self._fast(kind, number, buf, start, end):
                    impl.frames_received += 1
                    if kind == 1:  # a delivery began: its header and body are usually right behind it
                        whole = self._rest_of_delivery(number, buf, o, size)
                        if whole is not None:
                            o, content, body = whole
                            self._deliver(number, content, body)
                    continue
                if kind == 1 and number in self.confirms and _I.unpack_from(buf, start)[0] == _ACK_INDEX:
                    impl.frames_received += 1
                    ack = _Ack(_Q.unpack_from(buf, start + 4)[0], (buf[start + 12] & 1) != 0)
                    self.confirms[number](_MethodFrame(number, ack))
                    continue
                if number in channels and self.content.get(number) is not None:
                    self.content[number] = None  # a frame out of sequence: pika sorts it out
                if kind == 2:  # a content header (basic.get-ok, a consumer pika assembles): decoded here
                    value: Any = frame.Header(number, _Q.unpack_from(buf, start + 4)[0],
                                              decode_properties(buf[start + 12:end]))
                else:
                    _consumed, value = frame.decode_frame(buf[start - 7:end + 1])
                impl._process_frame(value)  # noqa: SLF001
        finally:
            if o < size:
                self.buffer = buf[o:]
        if self.buffer and self.buffer[:4] == b"AMQP":  # hand pika what only it understands
            impl._frame_buffer = self.buffer  # noqa: SLF001
            self.buffer = b""
            pika_reader: Any = cast("Any", type(impl))._on_data_available  # noqa: SLF001 - ours shadows it
            pika_reader(impl, b"")  # pika's own reader

    def _read_deliveries(self, read_deliveries: Callable[..., Any], number: int, buf: bytes,
                         o: int) -> tuple[int, bool]:
        """The whole deliveries from buf[o] on, in C, for a raw channel: (offset after them, any taken)."""
        channel = self.channels[number]
        tags = tuple(_tag_bytes(t) for t in channel._consumers if t not in channel._cancelled)  # noqa: SLF001
        end, deliveries, frame_count = read_deliveries(buf, o, number, tags)
        if not deliveries:
            return o, False
        self.impl.bytes_received += end - o
        self.impl.frames_received += frame_count
        consumers, cancelled = channel._consumers, channel._cancelled  # noqa: SLF001
        batch = self.batches.get(number)
        # all of them are for the channel's one consumer: is it the one that takes runs?
        if batch is not None and len(consumers) == 1 and not cancelled and batch[0] == next(iter(consumers.values())):
            batch[1](deliveries)
            return end, True
        for method, props, body in deliveries:
            tag = method.consumer_tag
            if tag in cancelled or tag not in consumers:  # cancelled by a callback just now: pika's way (reject)
                channel._on_deliver(_MethodFrame(number, _Deliver(*method)),  # noqa: SLF001
                                    frame.Header(number, len(body), decode_properties(props)), body)
            else:
                consumers[tag](channel, method, props, body)
        return end, True

    def _fast(self, kind: int, number: int, buf: bytes, start: int, end: int) -> bool:
        content = self.content.get(number)
        if kind == 1:
            if content is not None or _I.unpack_from(buf, start)[0] != _DELIVER_INDEX:
                return False
            method = _decode_deliver(buf, start + 4)
            channel = self.channels[number]
            tag = method.consumer_tag
            if tag in channel._cancelled or tag not in channel._consumers:  # noqa: SLF001
                return False  # pika rejects or logs it, as it always did
            self.content[number] = _Content(method)
            return True
        if content is None:
            return False
        if kind == 2 and content.size < 0:
            content.size = _Q.unpack_from(buf, start + 4)[0]
            content.props = buf[start + 12:end] if number in self.raw else decode_properties(buf[start + 12:end])
            if content.size == 0:
                self._deliver(number, content, b"")
            return True
        if kind == 3 and content.size >= 0:
            chunk = buf[start:end]
            content.got += len(chunk)
            if content.got >= content.size:
                body = chunk if not content.chunks else b"".join([*content.chunks, chunk])
                self._deliver(number, content, body)
            else:
                content.chunks.append(chunk)
            return True
        return False

    def _rest_of_delivery(self, number: int, buf: bytes, o: int, size: int) -> tuple[int, _Content, bytes] | None:
        """Header + one body frame of the delivery just started, when both are complete in buf: decoded
        in one go (the common case). Returns (offset after them, content, body), or None."""
        if size - o < 8:
            return None
        kind, channel, length = _FRAME_HEAD.unpack_from(buf, o)
        h_end = o + 7 + length
        if kind != 2 or channel != number or h_end + 8 >= size or buf[h_end] != FRAME_END:
            return None
        body_size = _Q.unpack_from(buf, o + 11)[0]
        b = h_end + 1
        b_kind, b_channel, b_length = _FRAME_HEAD.unpack_from(buf, b)
        b_end = b + 7 + b_length
        if (b_kind != 3 or b_channel != number or b_length != body_size or body_size == 0 or b_end >= size
                or buf[b_end] != FRAME_END):
            return None
        content = self.content[number]
        assert content is not None
        content.size = body_size
        content.props = buf[o + 19:h_end] if number in self.raw else decode_properties(buf[o + 19:h_end])
        self.impl.bytes_received += b_end + 1 - o
        self.impl.frames_received += 2
        return b_end + 1, content, buf[b + 7:b_end]

    def _deliver(self, number: int, content: _Content, body: bytes) -> None:
        self.content[number] = None
        channel = self.channels[number]
        callback = channel._consumers.get(content.method.consumer_tag)  # noqa: SLF001
        if callback is not None:  # as pika's Channel._on_deliver
            callback(channel, content.method, content.props, body)


def _tag_bytes(tag: Any) -> bytes:
    return tag if isinstance(tag, bytes) else tag.encode()




def _decode_deliver(buf: bytes, o: int) -> Any:
    tag, o = _dshort(buf, o)
    delivery_tag = _Q.unpack_from(buf, o)[0]
    redelivered = (buf[o + 8] & 1) != 0
    exchange, o = _dshort(buf, o + 9)
    routing_key, o = _dshort(buf, o)
    return _Deliver(tag, delivery_tag, redelivered, exchange, routing_key)


def fast_input(connection: Any, accelerator: ModuleType | None) -> FastInput:
    """The FastInput of a BlockingConnection (installed on first use, with `accelerator`; a connection keeps
    the reader it got first). Only dlxtool.broker.wire.codec calls this: the codec decides."""
    impl = connection._impl  # noqa: SLF001
    existing = impl.__dict__.get("_dlxtool_fast_input")
    if existing is None:
        existing = impl._dlxtool_fast_input = FastInput(impl, accelerator)  # noqa: SLF001
    return cast(FastInput, existing)


def fast_deliveries(connection: Any, channel: Any, *, raw: bool = False,
                    batch: tuple[Callable[..., Any], Callable[[list[tuple[Any, Any, bytes]]], Any]] | None = None,
                    accelerator: ModuleType | None = None) -> None:
    """Assemble this (pika, asynchronous) channel's consumer deliveries on the fast path. raw: the consumer
    gets the properties as their encoded bytes (decode_properties decodes them) — except for the rare
    delivery pika assembles itself, which comes with BasicProperties as usual.

    batch (raw only): (consumer callback, run callback). While that callback is the channel's one
    consumer, each run of its deliveries read at once goes to the run callback as a list of (method,
    properties, body), instead of to the consumer callback one by one. The run callback must not raise
    (the run would be read again): appending to a queue is what it is for.
    accelerator: the C extension, for a connection whose reader is installed here (see fast_input)."""
    reader = fast_input(connection, accelerator)
    reader.channels[channel.channel_number] = channel
    reader.content[channel.channel_number] = None
    if raw:
        reader.raw.add(channel.channel_number)
    else:
        reader.raw.discard(channel.channel_number)
    if raw and batch is not None:
        reader.batches[channel.channel_number] = batch
    else:
        reader.batches.pop(channel.channel_number, None)
    def forget(ch: Any, _reason: object) -> None:
        _forget(reader, ch.channel_number, ch)

    channel.add_on_close_callback(forget)


def _forget(reader: FastInput, number: int, channel: Any) -> None:
    if reader.channels.get(number) is channel:
        del reader.channels[number]
        reader.content.pop(number, None)
        reader.raw.discard(number)
        reader.batches.pop(number, None)


def fast_confirms(connection: Any, channel: Any, on_ack: Any, accelerator: ModuleType | None = None) -> None:
    """Hand this channel's Basic.Ack frames straight to `on_ack` (the ack_nack_callback it gave
    confirm_delivery, and the only Basic.Ack callback on it); Basic.Nack keeps pika's path."""
    reader = fast_input(connection, accelerator)
    reader.confirms[channel.channel_number] = on_ack
    def forget(ch: Any, _reason: object) -> None:
        _forget_confirms(reader, ch.channel_number, on_ack)

    channel.add_on_close_callback(forget)


def _forget_confirms(reader: FastInput, number: int, on_ack: Any) -> None:
    if reader.confirms.get(number) is on_ack:
        del reader.confirms[number]


def send_publish(connection: Any, channel: Any, exchange: str, routing_key: str, body: bytes | str, properties: Any,
                 *, mandatory: bool, accelerator: ModuleType | None) -> bytes:
    """channel.basic_publish(...) with the frames built here (by the C extension when `accelerator` is
    it); same checks, same bytes on the wire. Returns the encoded properties (the publisher matches a
    basic.return with them). EncodeError (nothing sent) when the message cannot go on the wire."""
    channel._raise_if_not_open()  # noqa: SLF001 - what basic_publish does first
    impl = connection._impl  # noqa: SLF001
    if not isinstance(body, bytes):
        body = body.encode("UTF-8")  # pika's as_bytes
    method = _publish_method(exchange, routing_key, mandatory)
    props = encode_for_publish(properties if properties is not None else _BP(),
                               impl._body_max_length + FRAME_OVERHEAD)  # noqa: SLF001 - = negotiated frame_max
    data = _frames(channel.channel_number, method, body, props, impl._body_max_length,  # noqa: SLF001
                   accelerator)
    _emit(impl, data)
    return props


def publish_sender(connection: Any, channel: Any, accelerator: ModuleType | None) -> Callable[..., bytes]:
    """send_publish(connection, channel, …, mandatory=True, accelerator=accelerator) as one publisher's sender
    (Publisher: every message's path). Encoded properties and a bytes body, the common case, take the same steps
    with what does not change looked up once; anything else goes through send_publish."""
    impl = connection._impl  # noqa: SLF001
    number = channel.channel_number
    methods = _METHODS
    frames = accelerator.publish_frames if accelerator is not None else None

    def publish(exchange: str, routing_key: str, body: bytes, properties: Any) -> bytes:
        if frames is None or type(properties) is not bytes or type(body) is not bytes:
            return send_publish(connection, channel, exchange, routing_key, body, properties, mandatory=True,
                                accelerator=accelerator)
        channel._raise_if_not_open()  # noqa: SLF001 - what basic_publish does first
        method = methods.get((exchange, routing_key, True)) or _publish_method(exchange, routing_key, True)
        body_max = impl._body_max_length  # noqa: SLF001 - = negotiated frame_max - FRAME_OVERHEAD
        props = encode_for_publish(properties, body_max + FRAME_OVERHEAD)
        _emit(impl, frames(number, method, props, body, body_max))
        return props

    return publish


class _Encoded:
    """Properties encoded already, in the shape pika's frame.Header marshals (its INDEX, encode())."""

    __slots__ = ("raw",)
    INDEX = _BP.INDEX

    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def encode(self) -> list[bytes]:
        return [self.raw]


def _pika_encode(properties: Any) -> bytes:
    return b"".join(properties.encode())


def pika_publish(connection: Any, channel: Any, exchange: str, routing_key: str, body: bytes, properties: Any,
                 *, mandatory: bool) -> bytes:
    """channel.basic_publish(...) as pika does it: pika's property encoder, its frames, its output (the
    `pika` codec). The properties are encoded first, by pika's encoder, once: to refuse a content header
    the broker would answer by closing the connection (frame_max), and for the publisher to match a
    basic.return; pika's Header frame then takes those bytes. Returns them; EncodeError (nothing sent)."""
    impl = connection._impl  # noqa: SLF001
    props = encode_for_publish(properties if properties is not None else _BP(),
                               impl._body_max_length + FRAME_OVERHEAD, pika_codec=True)  # noqa: SLF001
    channel.basic_publish(exchange, routing_key, body, _Encoded(props), mandatory=mandatory)
    return props


def _emit(impl: Any, data: bytes | memoryview) -> None:
    """impl._output_marshaled_frames((data,)), shortened when a send is pending anyway: then pika's transport
    write only appends to its buffer (its write watcher is on already), and so does this.

    A big message goes as a memoryview: where the socket takes part of it, pika keeps the rest as `data[sent:]`,
    a copy of what is left for bytes (a 64 MB body was copied again at every partial send), a view of it for a
    memoryview."""
    if len(data) >= VIEW_FROM:
        data = memoryview(data)
    transport = impl._transport  # noqa: SLF001
    buffers = getattr(transport, "_tx_buffers", None)
    if buffers and transport._state == transport._STATE_ACTIVE:  # noqa: SLF001
        buffers.append(data)
        transport._tx_buffered_byte_count += len(data)  # noqa: SLF001
        impl.bytes_sent += len(data)
        impl.frames_sent += 1
    else:
        impl._output_marshaled_frames((data,))  # noqa: SLF001
