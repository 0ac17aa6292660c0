"""The wire codec setting: which code turns received bytes into deliveries and publishes into frames.

One setting per process, chosen here and nowhere else:

- ``c``: dlxtool's frame reader and encoder (dlxtool.broker.wire.frames) with the optional C extension
  (dlxtool.broker.wire.hotpath) doing the engine's per-message work: reading runs of deliveries,
  scanning and splicing header tables on the encoded bytes (replay), building publish frames. The
  default where it is built.
- ``python``: the same reader and encoder without the C: the same results, slower. The default where
  the extension is not built.
- ``pika``: pika's own frame reader and ``basic_publish``, nothing of dlxtool's on the wire. For
  comparison (scripts/bench/replay.py) and as the escape hatch should dlxtool's codec ever misbehave.
  Fidelity is pika's: a float header arrives truncated to an integer, the rare integer kinds lose their
  width, and a header value pika cannot decode (a timestamp past year 9999) closes the connection
  instead of arriving as a RawValue (dlxtool.amqp_values).

``DLXTOOL_CODEC=c|python|pika`` chooses (``DLXTOOL_NO_HOTPATH=1``, the older switch, means ``python``);
``connect()`` reads it from the command's environment (the profile's, :func:`configure`); tests flip it with
:func:`using`. Everything that depends on it asks :func:`current` at the moment it acts: ``connect()`` when it
opens a connection, the channel when it starts consuming, the publisher when it is made, replay when it builds
its decider.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from dlxtool.broker.wire import hotpath
from dlxtool.errors import UsageError

NAMES = ("c", "python", "pika")
ENV = "DLXTOOL_CODEC"
LEGACY_ENV = "DLXTOOL_NO_HOTPATH"  # =1: the Python path (what it always meant)

# (consumer callback, run callback): see frames.fast_deliveries
Batch = tuple[Callable[..., Any], Callable[[list[tuple[Any, Any, bytes]]], Any]]


class Codec:
    """One setting: what a connection reads frames with, and what a publish is written with."""

    def __init__(self, name: str, accelerator: ModuleType | None) -> None:
        self.name = name
        self.accelerator = accelerator  # the C extension, on `c` only

    @property
    def reads_frames(self) -> bool:
        """dlxtool's frame reader replaces pika's on this setting's connections."""
        return self.name != "pika"

    @property
    def header_splice(self) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]] | None:
        """The C extension's (scan_headers, splice_headers, fingerprint): replay's fast path reads and splices
        header tables and hashes a delivery on the encoded bytes with them (dlxtool.ops.replay_raw). None
        without the extension."""
        a = self.accelerator
        return (a.scan_headers, a.splice_headers, a.fingerprint) if a is not None else None

    @property
    def bloom(self) -> Callable[..., bool] | None:
        """The C extension's bloom(filter, key, add) (dlxtool.ops.provenance.CopyGuard's filter bits, on every
        replayed message's path); None without the extension: CopyGuard sets the same bits in Python."""
        a = self.accelerator
        return a.bloom if a is not None else None

    def install(self, connection: Any) -> None:
        """On a new BlockingConnection: every frame through dlxtool's reader, so that content headers are
        decoded by dlxtool.broker.wire.frames (a header value pika cannot decode or would change arrives as
        a RawValue, on basic_get as on a consumer). Nothing on `pika`."""
        if self.reads_frames:
            from dlxtool.broker.wire.frames import fast_input

            fast_input(connection, self.accelerator)

    def deliveries(self, connection: Any, channel: Any, *, raw: bool = False, batch: Batch | None = None) -> None:
        """Before a basic.consume on `channel` (pika's asynchronous Channel): its deliveries assembled by
        dlxtool's reader (raw: properties left encoded; batch: see frames.fast_deliveries). On `pika` the
        consumer gets pika's deliveries, properties decoded: callers must take either."""
        if self.reads_frames:
            from dlxtool.broker.wire.frames import fast_deliveries

            fast_deliveries(connection, channel, raw=raw, batch=batch, accelerator=self.accelerator)

    def confirms(self, connection: Any, channel: Any, on_ack: Callable[[Any], None]) -> None:
        """Basic.Ack frames of a confirming channel straight to `on_ack` (pika's ack_nack_callback path
        otherwise, as on `pika`)."""
        if self.reads_frames:
            from dlxtool.broker.wire.frames import fast_confirms

            fast_confirms(connection, channel, on_ack, self.accelerator)

    def sender(self, connection: Any, channel: Any) -> Callable[[str, str, bytes, Any], bytes]:
        """publish(exchange, routing_key, body, properties) on `channel`, mandatory, for a publisher that
        sends many: what `publish` does, with the choice made once (it is on every message's path)."""
        from dlxtool.broker.wire import frames

        if self.reads_frames:
            return frames.publish_sender(connection, channel, self.accelerator)
        pika_publish = frames.pika_publish

        def publish(exchange: str, routing_key: str, body: bytes, properties: Any) -> bytes:
            return pika_publish(connection, channel, exchange, routing_key, body, properties, mandatory=True)

        return publish

    def publish(self, connection: Any, channel: Any, exchange: str, routing_key: str, body: bytes,
                properties: Any, *, mandatory: bool) -> bytes:
        """Send one basic.publish; returns the encoded properties as sent. EncodeError (nothing sent)
        when the message cannot go on the wire."""
        from dlxtool.broker.wire import frames

        if self.reads_frames:
            return frames.send_publish(connection, channel, exchange, routing_key, body, properties,
                                       mandatory=mandatory, accelerator=self.accelerator)
        return frames.pika_publish(connection, channel, exchange, routing_key, body, properties,
                                   mandatory=mandatory)

    def __repr__(self) -> str:
        return f"Codec({self.name!r})"


def make(name: str) -> Codec:
    """The codec called `name`; UsageError for an unknown name or `c` where the extension is not built."""
    if name not in NAMES:
        raise UsageError(f"{ENV}={name!r} is not a codec", hint=f"one of: {', '.join(NAMES)}")
    if name != "c":
        return Codec(name, None)
    accelerator = hotpath.load()
    if accelerator is None:
        raise UsageError(f"{ENV}=c, but the C extension dlxtool.broker.wire._hotpath is not built here",
                         hint="reinstall with a C compiler and the Python headers (Debian: build-essential "
                              f"python3-dev), or {ENV}=python")
    return Codec(name, accelerator)


def chosen_in_env(environ: Mapping[str, str]) -> str | None:
    """The setting the environment names (DLXTOOL_CODEC, or DLXTOOL_NO_HOTPATH=1 for `python`), or None."""
    chosen = environ.get(ENV, "").strip().lower()
    if chosen:
        return chosen
    return "python" if environ.get(LEGACY_ENV, "") not in ("", "0") else None


def name_from_env(environ: Mapping[str, str]) -> str:
    """The setting the environment asks for; none named: `c` where the extension is built, else `python`."""
    return chosen_in_env(environ) or ("c" if hotpath.load() is not None else "python")


_forced: Codec | None = None      # using(): wins over the environment
_configured: Codec | None = None  # configure(): the one the command's environment asks for
_made: dict[str, Codec] = {}


def _made_once(name: str) -> Codec:
    made = _made.get(name)
    if made is None:
        made = _made[name] = make(name)
    return made


def configure(environ: Mapping[str, str]) -> Codec:
    """The process's codec from now on is the one `environ` asks for (a command's environment: App.env, through
    the profile `connect()` is given); UsageError, and nothing changed, for a setting that names no codec."""
    global _configured
    _configured = _made_once(name_from_env(environ))
    return current()


def current() -> Codec:
    """The process's codec: the one `use` chose, else the one `configure` was last given an environment for,
    else the default (`c` where the extension is built, else `python`)."""
    if _forced is not None:
        return _forced
    if _configured is not None:
        return _configured
    return _made_once("c" if hotpath.load() is not None else "python")


@contextmanager
def using(name: str) -> Generator[Codec]:
    """Codec `name` for the duration of a with block (tests), whatever the environment says; then back to
    what was before. Connections opened before keep the reader they were opened with."""
    global _forced
    before = _forced
    try:
        chosen = make(name)
        _forced = chosen
        yield chosen
    finally:
        _forced = before
