"""Guards of the structure the project guide asks for (issue 36): the exit-code tables people read (docs, --help,
the README where it has one) are the code's one map; the library never imports click (only dlxtool/cli/ does).
Pure checks of the source and the CLI's help: no broker."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from click.testing import CliRunner

from dlxtool.cli.output import EXIT_CODES, SIGNAL_CODES, ExitStatus

ROOT = Path(__file__).resolve().parent.parent
CODES = {int(s) for s in ExitStatus}


def markdown_exit_codes(text: str) -> dict[int, str]:
    """code -> meaning of every `| N | meaning |` row of the first table whose header is `| code | meaning |`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if re.fullmatch(r"\|\s*code\s*\|\s*meaning\s*\|", line.strip())),
                 None)
    if start is None:
        return {}
    rows: dict[int, str] = {}
    for line in lines[start + 2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or not cells[0].isdigit():
            break
        rows[int(cells[0])] = cells[1]
    return rows


def help_exit_codes(text: str) -> dict[int, str]:
    """code -> words of the `Exit status:` block of the top-level --help: `0 ok · 1 error · …` over some lines."""
    block = text[text.index("Exit status:"):].split("\n\n", 1)[0].removeprefix("Exit status:")
    return {int(code): words.strip() for code, words in re.findall(r"(?:^|·|\n)\s*(\d+) ([^·\n]+)", block)}


def test_the_docs_exit_code_table_is_the_exit_status_map() -> None:
    table = markdown_exit_codes((ROOT / "docs" / "exit-codes.md").read_text())
    assert set(table) == CODES
    assert table[ExitStatus.REFUSED].startswith("refused") and table[ExitStatus.PARTIAL].startswith("partial")
    assert table[ExitStatus.NOT_FOUND].startswith("not found")


def test_the_readme_has_the_same_table_or_links_to_it() -> None:
    readme = (ROOT / "README.md").read_text()
    table = markdown_exit_codes(readme)
    if table:
        assert set(table) == CODES
    else:
        assert "docs/exit-codes.md" in readme


def test_the_help_exit_codes_are_the_exit_status_map() -> None:
    from dlxtool.cli import cli

    text = CliRunner().invoke(cli, ["--help"]).output
    said = help_exit_codes(text)
    assert set(said) == CODES, said
    # each status and stop signal the map gives a code to is said with that code
    assert {int(c) for c in EXIT_CODES.values()} | {int(c) for c in SIGNAL_CODES.values()} <= set(said)


def test_the_table_readers_can_fail() -> None:
    assert set(markdown_exit_codes("| code | meaning |\n|---|---|\n| 0 | ok |\n| 9 | new |\n")) == {0, 9}
    assert set(help_exit_codes("Exit status: 0 ok · 1 error\n   5 partial\n\nmore")) == {0, 1, 5}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file: at the top, in functions, under TYPE_CHECKING."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


def test_no_module_outside_the_cli_imports_click() -> None:
    cli = ROOT / "dlxtool" / "cli"
    offenders = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "dlxtool").rglob("*.py"))
                 if cli not in path.parents for line, name in imports_of(path)
                 if name == "click" or name.startswith("click.")]
    assert offenders == [], "the library never imports click: move the click part to dlxtool/cli/"


def test_the_click_guard_can_fail(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("def f():\n    from click import echo\n")
    assert imports_of(tmp_path / "m.py") == [(2, "click")]


VERSION_WORDS = re.compile(r"version|quorum|stream|x-queue-type|classic|queue_type|\bv4\b|amqp10|amqp 1\.0|"
                           r"rabbitmq [34]|3\.1[0-3]|4\.[0-3]|deprecat|khepri|polic|x-delivery-count|codec|"
                           r"feature.flag|metrics", re.I)


def test_tests_marked_once_never_name_a_version_or_queue_type() -> None:
    """`once` (the 3.x pass only: scripts/test) is for files no broker version decides; one that names a version,
    a queue type or a version-dependent feature runs on every broker."""
    marked = [p for p in sorted((ROOT / "tests").rglob("test_*.py")) if "pytest.mark.once" in p.read_text()]
    assert marked, "no file is marked once"
    def text(path: Path) -> str:  # but the marker's own line, which says why it is there
        return "\n".join(line for line in path.read_text().splitlines() if "pytest.mark.once" not in line)

    named = {str(p.relative_to(ROOT)): sorted({m.group().lower() for m in VERSION_WORDS.finditer(text(p))})
             for p in marked if p.name != "test_structure.py"}
    assert {p: words for p, words in named.items() if words} == {}
