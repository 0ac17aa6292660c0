"""Running a test on a chosen wire codec (dlxtool.broker.wire.codec): the one switch tests flip."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dlxtool.broker.wire import codec, hotpath
from dlxtool.broker.wire.codec import Codec

CODECS = codec.NAMES  # c, python, pika


@contextmanager
def wire_codec(name: str | None) -> Iterator[Codec]:
    """The test runs on codec `name` (None: the environment's). Skips `c` where the C extension is not
    built, and any codec but the one the environment names (DLXTOOL_CODEC, DLXTOOL_NO_HOTPATH=1): a run
    that pins a codec (scripts/test's passes without C) tests that one."""
    if name is None:
        yield codec.current()
        return
    pinned = codec.chosen_in_env(os.environ)
    if pinned is not None and pinned != name:
        pytest.skip(f"the environment pins the codec to {pinned!r}")
    if name == "c" and hotpath.load() is None:
        pytest.skip("the optional C extension dlxtool.broker.wire._hotpath is not built")
    with codec.using(name) as chosen:
        yield chosen
