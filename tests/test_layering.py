"""Imports point down: the model (record, deaths, selection, AMQP values) needs neither pika nor the broker
layer, the broker layer does not reach back up into the record model, and the operations (dlxtool/ops) talk
to the broker through dlxtool.broker only: never pika itself, never a pika channel's `impl`."""

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


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every import in a module, at the top or inside a function (lazy imports too);
    `from a import b` gives a.b, `from . import x` its resolved-looking name."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names += [(node.lineno, f"{'.' * node.level}{node.module or ''}.{a.name}") for a in node.names]
    return names


def offenders(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    """Imports of a module in `forbidden` (or of anything under it)."""
    found = []
    for path in paths:
        for line, name in imported(ast.parse(path.read_text())):
            if any(name == f or name.startswith(f"{f}.") for f in forbidden):
                found.append(f"{path}:{line}: {name}")
    return found


def test_the_broker_layer_does_not_import_the_record_model() -> None:
    assert offenders(sorted((ROOT / "dlxtool" / "broker").rglob("*.py")), ("dlxtool.record",)) == []


def test_the_record_model_imports_neither_pika_nor_the_broker_layer() -> None:
    assert offenders([ROOT / "dlxtool" / "record.py"], ("pika", "dlxtool.broker")) == []


OPS = sorted((ROOT / "dlxtool" / "ops").rglob("*.py"))


def test_the_operations_never_import_pika() -> None:
    """Not at the top, not inside a function: what an operation needs of pika is in dlxtool.broker."""
    assert offenders(OPS, ("pika",)) == []


def reaches_into_pika(paths: list[Path]) -> list[str]:
    """Uses of `.impl` / `._impl`: pika's channel or connection under dlxtool's own."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("impl", "_impl"):
                found.append(f"{path}:{node.lineno}: .{node.attr}")
    return found


def test_the_operations_never_reach_into_a_pika_channel() -> None:
    """The operations ask dlxtool.broker (AsyncChannel's consume, ack, qos …; broker.queues) instead."""
    assert reaches_into_pika(OPS) == []


def test_the_checks_above_see_what_they_look_for(tmp_path: Path) -> None:
    """Each kind of offence, written the ways it is written, is found (a check that finds nothing proves
    nothing)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import pika\nfrom pika import spec\nimport pika.exceptions as pe\n"
                   "def f(ch):\n    from dlxtool.broker import frames\n    ch.impl.basic_ack(1)\n"
                   "    return ch.connection._impl\n")
    names = [name for _line, name in imported(ast.parse(bad.read_text()))]
    assert names == ["pika", "pika.spec", "pika.exceptions", "dlxtool.broker.frames"]
    assert len(offenders([bad], ("pika",))) == 3
    assert len(offenders([bad], ("dlxtool.broker",))) == 1
    assert offenders([bad], ("pikachu",)) == []
    assert sorted(hit.rsplit(": ", 1)[1] for hit in reaches_into_pika([bad])) == ["._impl", ".impl"]
