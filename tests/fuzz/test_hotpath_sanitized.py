"""The C hot path under AddressSanitizer and UBSan: built here with the sanitizers, then fed mutated
input by tests/fuzz/hotpath_fuzz.py in a child process. DLXTOOL_FUZZ_EXAMPLES scales the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _runtime(name: str) -> str | None:
    found = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return found if os.path.isabs(found) else None


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc: the extension is not built here either")
def test_hotpath_survives_mutated_input_under_sanitizers(tmp_path: Path) -> None:
    asan, ubsan = _runtime("libasan.so"), _runtime("libubsan.so")
    if asan is None or ubsan is None:
        pytest.skip("gcc has no sanitizer runtimes here")
    built = tmp_path / "_hotpath.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer",
                    f"-I{sysconfig.get_paths()['include']}", str(ROOT / "dlxtool/broker/wire/_hotpath.c"),
                    "-o", str(built)],
                   check=True)
    iterations = int(os.environ.get("DLXTOOL_FUZZ_EXAMPLES", "0")) * 10 or 30_000
    env = {**os.environ, "LD_PRELOAD": f"{asan}:{ubsan}", "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "tests.fuzz.hotpath_fuzz", str(built), "1", str(iterations)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr, proc.stderr[-3000:]
    assert f"{iterations} inputs" in proc.stdout
