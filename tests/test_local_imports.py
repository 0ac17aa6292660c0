"""Function-local imports only where they defer something (issue 36).

An import inside a function costs a lookup per call and hides a dependency from the top of the file; its one reason
here is start-up time: the module it imports is not loaded when the importing module is (`dlxtool peek` should not
load the engine, protobuf's descriptor pool or the AMQP 1.0 client). So each function-local import must name a
module outside its own module's top-level closure (the modules its top-level imports load, parents included);
one that imports what is loaded anyway belongs at the top. The import graph has no cycle even with function-local
imports counted (tests/test_import_cycles.py), so moving one to the top can never make a cycle.

Not counted: `if TYPE_CHECKING:` blocks (never run) and imports inside try (optional dependencies, looked for at run
time)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_import_cycles import ROOT, _modules


def _targets(node: ast.Import | ast.ImportFrom, name: str, path: Path, modules: dict[str, Path]) -> list[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join([*up, base] if base else up)
    names = [f"{base}.{alias.name}" for alias in node.names]
    return names if all(n in modules for n in names) else [base]


def _with_parents(names: set[str]) -> set[str]:
    return {".".join(n.split(".")[:i]) for n in names for i in range(1, len(n.split(".")) + 1)}


def _top_level(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> what its top-level imports name (parents included): stdlib and third-party names too."""
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        named: set[str] = set()
        for node in tree.body:
            statements = node.body if isinstance(node, ast.Try) else [node]
            for sub in statements:
                if isinstance(sub, ast.Import | ast.ImportFrom):
                    named.update(_targets(sub, name, path, modules))
        edges[name] = _with_parents(named)
    return edges


def _closure(module: str, edges: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = [module, *_with_parents({module})]
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(edges.get(current, ()))
    return seen


def _local_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports inside functions, but not in a try or an `if TYPE_CHECKING:` block."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Try) or (isinstance(child, ast.If)
                                              and getattr(child.test, "id", None) == "TYPE_CHECKING"):
                continue
            if isinstance(child, ast.Import | ast.ImportFrom) and in_function:
                found.append(child)
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(tree, False)
    return found


def _lazy_packages(modules: dict[str, Path]) -> set[str]:
    """Modules with a module-level __getattr__ (PEP 562): `from them import Name` may import more on first use."""
    lazy: set[str] = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        if any(isinstance(node, ast.FunctionDef) and node.name == "__getattr__" for node in tree.body):
            lazy.add(name)
    return lazy


def pointless_imports(modules: dict[str, Path]) -> list[tuple[str, Path, ast.Import | ast.ImportFrom]]:
    """Function-local imports of modules their module loads anyway: (module, path, the import)."""
    edges = _top_level(modules)
    lazy = _lazy_packages(modules)
    found: list[tuple[str, Path, ast.Import | ast.ImportFrom]] = []
    for name, path in sorted(modules.items()):
        tree = ast.parse(path.read_text())
        loaded = _closure(name, edges)
        for sub in _local_imports(tree):
            targets = _targets(sub, name, path, modules)
            if isinstance(sub, ast.ImportFrom) and len(targets) == 1 and targets[0] in lazy:
                continue  # names a lazy package hands out on first use: that may load more
            if all(t in loaded for t in targets):
                found.append((name, path, sub))
    return found


def _pointless(modules: dict[str, Path]) -> list[str]:
    """pointless_imports as `path:line module`."""
    found: list[str] = []
    for name, path, sub in pointless_imports(modules):
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        found.append(f"{where}:{sub.lineno} {', '.join(_targets(sub, name, path, modules))}")
    return found


def test_function_local_imports_defer_something() -> None:
    pointless = _pointless(_modules())
    assert not pointless, ("function-local imports of modules their own module loads anyway (move them to the "
                           "top):\n" + "\n".join(pointless))


def test_the_local_import_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("import json\n\ndef f():\n    import json\n    from pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text("def g():\n    import decimal\n")
    found = _pointless({"pkg": tmp_path / "pkg" / "__init__.py", "pkg.a": tmp_path / "pkg" / "a.py",
                        "pkg.b": tmp_path / "pkg" / "b.py"})
    assert [line.split(" ", 1)[1] for line in found] == ["json"]  # pkg.b and decimal are deferred: allowed
