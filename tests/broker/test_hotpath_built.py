"""The optional C extension is there wherever it can be: a compiler at install time and nothing switched it off.

tests/broker/test_hotpath.py skips where the extension is absent; this one says when that absence is a broken
install rather than a machine without gcc."""

from __future__ import annotations

import shutil

import pytest

from dlxtool.broker import hotpath


@pytest.mark.skipif(hotpath.disabled_by_env() or shutil.which("gcc") is None,
                    reason="no gcc to build it, or DLXTOOL_NO_HOTPATH=1")
def test_the_accelerator_is_built() -> None:
    # pip install -e . compiles it (setup.py, optional=True); without it replay is correct but ~2x slower.
    assert hotpath.active is not None, "dlxtool/broker/_hotpath.c was not compiled: pip install -e . with gcc"


def test_the_environment_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLXTOOL_NO_HOTPATH", "1")
    assert hotpath._import() is None  # noqa: SLF001 - what `active` is made from at import
    monkeypatch.setenv("DLXTOOL_NO_HOTPATH", "0")
    assert hotpath.disabled_by_env() is False
