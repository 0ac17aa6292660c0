"""scripts/bench/decode.py: a held-out corpus it cannot fetch fails the run (no silent half report)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_held_out_corpus_that_cannot_be_fetched_fails_the_run_at_once(tmp_path: Path) -> None:
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    # pip with no index and nothing to find: the download fails, without the network.
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(empty), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    got = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench" / "decode.py"), "--lines", "10", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert got.returncode == 1, got.stderr
    figures = json.loads(got.stdout)
    assert figures["heldout"] is None and "pip download" in figures["heldout_error"]
    assert "HELD-OUT CORPUS MISSING" in got.stderr and "--no-heldout" in got.stderr


def test_the_wire_shape_count_sees_one_shape_read_two_ways(tmp_path: Path) -> None:
    """Why decode does not cache its answer per wire shape: the same top-level shape (field 1, length-delimited)
    is text that fits 14 types alike, or bytes that only one type takes. The bench must count that shape as one
    a cache would get wrong, and the two payloads that agree as one shape."""
    import importlib.util

    from proto_registry import DEMO_PROTOS, Registry

    spec = importlib.util.spec_from_file_location("bench_decode", ROOT / "scripts" / "bench" / "decode.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    registry = Registry.load([DEMO_PROTOS], cache_dir=tmp_path)
    text, other_text, binary = b"\x0a\x03o-1", b"\x0a\x03o-2", b"\x0a\x02\xff\xfe"
    assert registry.identify(text).ambiguous and not registry.identify(binary).ambiguous
    name = "shop.orders.v1.OrderCancelled"
    got = bench.shape_figures(registry, [("", name, text), ("", name, other_text)])
    assert (got["shapes"], got["shared_shapes"], got["shared_shapes_other_type"]) == (1, 1, 0)
    got = bench.shape_figures(registry, [("", name, text), ("", name, other_text), ("", name, binary)])
    assert (got["payloads"], got["shapes"], got["shared_shapes"], got["shared_shapes_other_type"]) == (3, 1, 1, 1)
