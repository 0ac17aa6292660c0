from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proto_registry import DEMO_PROTOS, Registry


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proto-cache")


@pytest.fixture(scope="session")
def registry(cache_dir: Path) -> Registry:
    """The bundled demo schemas (shop.*), compiled once per test session."""
    return Registry.load([DEMO_PROTOS], cache_dir=cache_dir)


@pytest.fixture(autouse=True)
def _isolated_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("DLXTOOL_CACHE_DIR", str(tmp_path / "cache"))
    yield
