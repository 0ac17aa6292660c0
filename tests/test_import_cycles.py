"""The import graph has no cycle (issue 31): imports inside functions count. Nor has it one at type level (issue 36):
with the imports of `if TYPE_CHECKING:` blocks (types only, never run) counted too, two modules that need each
other's types are one module in two files, or want a third that holds what both need."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    found = {}
    for path in [*ROOT.glob("dlxtool/**/*.py"), *ROOT.glob("proto_registry/**/*.py")]:
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _edges(modules: dict[str, Path], *, types: bool = False) -> dict[str, set[str]]:
    """module -> the modules it imports; `types`: those of `if TYPE_CHECKING:` blocks too."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        types_only = set() if types else {
            id(sub) for node in ast.walk(tree) if isinstance(node, ast.If) and getattr(node.test, "id", None) ==
            "TYPE_CHECKING" for inner in node.body for sub in ast.walk(inner)}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in types_only or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                # `from package import submodule` needs the submodule: not the package's own imports (a package
                # that re-exports its modules' names for type checkers would otherwise be a cycle with each)
                names = [f"{base}.{alias.name}" for alias in node.names]
                targets = names if all(n in modules for n in names) else [base, *names]
            edges[name].update(t for t in targets if t in modules and t != name)
    return edges


def _cycles(edges: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_import_graph_has_no_cycle() -> None:
    modules = _modules()
    assert _cycles(_edges(modules), sorted(modules)) == []


def test_the_import_graph_has_no_cycle_at_type_level_either() -> None:
    modules = _modules()
    assert _cycles(_edges(modules, types=True), sorted(modules)) == []


def test_a_cycle_through_a_types_only_import_is_seen_at_type_level(tmp_path: Path) -> None:
    """It can fail: two modules whose only import of each other is under TYPE_CHECKING on one side."""
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from b import B\n")
    (tmp_path / "b.py").write_text("import a\n")
    modules = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert _cycles(_edges(modules), ["a", "b"]) == []
    assert _cycles(_edges(modules, types=True), ["a", "b"]) == [["a", "b"]]


def test_the_cycle_finder_finds_one() -> None:
    """It can fail: a made-up graph with a cycle through a function-local import is found."""
    edges: dict[str, set[str]] = defaultdict(set, {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert _cycles(edges, ["a", "b", "c", "d"]) == [["a", "b", "c"]]
