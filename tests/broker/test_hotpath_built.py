"""The optional C extension is there wherever it can be: a compiler at install time.

tests/broker/test_hotpath.py skips where the extension is absent; this one says when that absence is a broken
install rather than a machine without gcc. Whether it is used is the codec setting's (tests/broker/test_codec.py)."""

from __future__ import annotations

import shutil

import pytest

from dlxtool.broker.wire import hotpath


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc to build it")
def test_the_accelerator_is_built() -> None:
    # pip install -e . compiles it (setup.py, optional=True); without it replay is correct but slower.
    assert hotpath.load() is not None, "dlxtool/broker/wire/_hotpath.c was not compiled: pip install -e . with gcc"
