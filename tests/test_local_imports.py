"""Function-local imports only where they defer something (issue 36).

An import inside a function costs a lookup per call and hides a dependency from the top of the file; its reason
here is start-up time (dlxtool.entry's alone is start-up's order: the signal handlers first): the module it imports
is not loaded when the importing module is (`dlxtool peek` should not load the engine, protobuf's descriptor pool or
the AMQP 1.0 client). So each function-local import must name a module outside its own module's top-level closure
(the modules its top-level imports load, parents included); one that imports what is loaded anyway belongs at the
top. The import graph has no cycle even with function-local imports counted (tests/test_import_cycles.py), so moving
one to the top can never make a cycle.

Each deferred module has its reason in tests/deferred_imports.py (DEFERRED: module -> Reason), one entry per module a
function-local import names: a new one without a reason fails here, and so does an entry nothing defers any more. A
reason about start-up names the cheap command lines that must not load the module (`dlxtool --help`,
`dlxtool peek --help`, some `dlxtool journal`); test_the_start_up_reasons_are_true runs them in fresh interpreters
(as tests/cli/test_imports.py does) and fails where one loads the module anyway: that deferral buys nothing.

Not counted: `if TYPE_CHECKING:` blocks (never run) and imports inside try (optional dependencies, looked for at run
time)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from tests.cli.test_imports import loaded
from tests.deferred_imports import DEFERRED, PROBES, Reason
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


def deferred_modules(modules: dict[str, Path]) -> dict[str, list[str]]:
    """Each module a function-local import names -> where (`path:line`), over `modules`."""
    found: dict[str, list[str]] = {}
    for name, path in sorted(modules.items()):
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for sub in _local_imports(ast.parse(path.read_text())):
            for target in _targets(sub, name, path, modules):
                found.setdefault(target, []).append(f"{where}:{sub.lineno}")
    return found


def table_problems(deferred: Mapping[str, list[str]], table: Mapping[str, Reason]) -> list[str]:
    """What the reason table misses (a deferred module without a reason) and what it holds in vain (stale)."""
    problems = [f"{module}: deferred at {', '.join(deferred[module][:3])} with no reason in tests/deferred_imports.py "
                f"(add it to DEFERRED with why it is not imported at the top, or import it at the top)"
                for module in sorted(set(deferred) - set(table))]
    problems += [f"{module}: in tests/deferred_imports.py DEFERRED, but no function-local import names it any more "
                 f"(remove the entry)" for module in sorted(set(table) - set(deferred))]
    return problems


def false_claims(table: Mapping[str, Reason], loaded_by: Mapping[str, set[str]]) -> list[str]:
    """Deferred modules that a command line their reason says does not load them loads anyway."""
    return [f"{module}: `dlxtool {probe}` loads it anyway, so deferring it buys that command nothing (reason: "
            f"{reason.why}): import it at the top of its importers, or give the reason it has"
            for module, reason in sorted(table.items()) for probe in reason.not_loaded_by
            if module in loaded_by[probe]]


def test_every_deferred_module_has_its_reason() -> None:
    problems = table_problems(deferred_modules(_modules()), DEFERRED)
    assert not problems, "the reasons for function-local imports (tests/deferred_imports.py):\n" + "\n".join(problems)


def test_the_reason_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    import decimal\n    from pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text("")
    modules = {"pkg": tmp_path / "pkg" / "__init__.py", "pkg.a": tmp_path / "pkg" / "a.py",
               "pkg.b": tmp_path / "pkg" / "b.py"}
    deferred = deferred_modules(modules)
    assert sorted(deferred) == ["decimal", "pkg.b"]
    why = Reason("made up")
    assert table_problems(deferred, {"decimal": why, "pkg.b": why}) == []
    problems = table_problems(deferred, {"decimal": why, "json": why})
    assert [p.split(":")[0] for p in problems] == ["pkg.b", "json"]
    assert "no reason" in problems[0] and "no function-local import names it" in problems[1]


def test_the_reasons_name_only_command_lines_that_are_run() -> None:
    assert {probe for reason in DEFERRED.values() for probe in reason.not_loaded_by} <= set(PROBES)


def test_the_start_up_reasons_are_true(tmp_path: Path, cli_env: dict[str, str]) -> None:
    """Each command line a reason names, in a fresh interpreter as a user's (no broker): none of the modules deferred
    for it is in sys.modules after it ran."""
    loaded_by = {probe: loaded(tmp_path, cli_env, *probe.split()) for probe in PROBES}
    assert "dlxtool.cli.peek" in loaded_by["peek --help"]  # the command lines ran what they say
    claims = false_claims(DEFERRED, loaded_by)
    assert not claims, "deferred for start-up, and loaded at start-up anyway:\n" + "\n".join(claims)


def test_the_start_up_check_can_fail() -> None:
    early, late = Reason("made up", ("--help", "peek --help")), Reason("made up", ("--help",))
    loaded_by = {"--help": {"a"}, "peek --help": {"a", "b", "c"}}
    assert false_claims({"a": early, "b": early, "c": late, "d": early}, loaded_by) == [
        "a: `dlxtool --help` loads it anyway, so deferring it buys that command nothing (reason: made up): import it "
        "at the top of its importers, or give the reason it has",
        "a: `dlxtool peek --help` loads it anyway, so deferring it buys that command nothing (reason: made up): "
        "import it at the top of its importers, or give the reason it has",
        "b: `dlxtool peek --help` loads it anyway, so deferring it buys that command nothing (reason: made up): "
        "import it at the top of its importers, or give the reason it has"]
