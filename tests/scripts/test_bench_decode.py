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
