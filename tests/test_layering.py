"""Imports point down: the model (record, deaths, selection, AMQP values) needs neither pika nor the broker
layer, and the broker layer does not reach back up into the record model."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_model_loads_without_pika_or_the_broker_layer() -> None:
    code = ("import sys, dlxtool.amqp_values, dlxtool.record, dlxtool.deaths, dlxtool.selection; "
            "print(sorted(m for m in sys.modules if m == 'pika' or m.startswith(('pika.', 'dlxtool.broker'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_the_broker_layer_does_not_import_the_record_model() -> None:
    offenders = []
    for path in sorted((ROOT / "dlxtool" / "broker").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[:2] == ["dlxtool", "record"]]
    assert offenders == []
