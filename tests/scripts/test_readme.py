"""The docs stay true (README.md and docs/): their --help blocks are the current --help, every command has one, every
command line they show still parses, README.md shows the six 3 a.m. examples, and links lead somewhere."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme", ROOT / "scripts" / "docs" / "readme.py")
assert _spec and _spec.loader
readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme)

DOCS = readme.read_docs()


def _page_with(marker: str) -> str:
    return next(page for page, text in DOCS.items() if marker in text)


def test_help_blocks_match_help_and_cover_every_command() -> None:
    assert readme.problems(DOCS) == [], "the docs are stale: run python scripts/docs/readme.py"


def test_the_check_catches_a_stale_block_and_a_missing_one() -> None:
    page = _page_with("<!-- help: dlxtool peek -->")
    text = DOCS[page]
    stale = text.replace("$ dlxtool peek --help\n", "$ dlxtool peek --help\nan old line\n", 1)
    assert stale != text
    assert readme.problems({**DOCS, page: stale}) == [f"{page}: the `dlxtool peek --help` block differs from --help"]

    page = _page_with("<!-- help: dlxtool purge -->")
    text = DOCS[page]
    start = text.index("<!-- help: dlxtool purge -->")
    missing = text[:start] + text[text.index("<!-- /help -->", start) + len("<!-- /help -->"):]
    assert readme.problems({**DOCS, page: missing}) == [
        "no `<!-- help: dlxtool purge -->` block for `dlxtool purge` in README.md or docs/"]


def test_every_command_line_shown_still_parses(run) -> None:
    commands = list(readme.example_commands(DOCS))
    assert len(commands) >= 25
    assert {where for where, _ in commands} >= {f"README.md: example {name!r}" for name in readme.README_EXAMPLES}
    for where, argv in commands:
        result = run(*argv, "--help")
        assert result.exit_code == 0, f"{where}: dlxtool {' '.join(argv)}: {result.output}"


def test_command_lines_are_found_in_every_console_block_and_pipeline() -> None:
    page = ("```console\n"
            "$ dlxtool dump orders.dlq --type T \\\n"
            "    | jq -c '.decoded.message.n = 1 | .x' \\\n"
            "    | dlxtool load - --reencode --yes 2>&1 > log.txt\n"
            "loaded\n"
            "$ echo 'payload=AAAA' | dlxtool decode -f table\n"
            "```\n"
            "  ```console\n  $ dlxtool peek q -n 5 > head.txt\n  ```\n"
            "```text\n$ dlxtool --help\n```\n")
    assert list(readme.example_commands({"docs/x.md": page})) == [
        ("docs/x.md:2", ["dump", "orders.dlq", "--type", "T"]),
        ("docs/x.md:2", ["load", "-", "--reencode", "--yes"]),
        ("docs/x.md:6", ["decode", "-f", "table"]),
        ("docs/x.md:9", ["peek", "q", "-n", "5"]),
    ]


def test_readme_shows_the_six_3am_examples_and_the_pages_every_demo_step() -> None:
    generated = {}
    for page, text in DOCS.items():
        for m in readme.EXAMPLE.finditer(text):
            name = m.group("name")
            assert m.group("body").startswith("```console\n$ "), f"{page}: example {name!r} was never generated"
            generated.setdefault(page, set()).add(name)
    assert set(readme.README_EXAMPLES) <= generated["README.md"]
    shown_in_docs = set().union(*(names for page, names in generated.items() if page != "README.md"))
    assert {"queues", "peek", "history", "decode", "replay-dry-run", "replay", "peek-rest", "purge"} <= shown_in_docs


def test_the_readme_stays_short() -> None:
    assert DOCS["README.md"].count("\n") < 250, "README.md is for a newcomer's ten minutes: put reference in docs/"


def test_links_lead_to_a_page_and_a_heading() -> None:
    assert readme.broken_links(DOCS) == []
    broken = {**DOCS, "docs/x.md": "[a](commands/nope.md) [b](config.md#no-such-heading) [c](#here)\n## Here\n"
                                   "```\n[not a link](nowhere.md)\n```\n[d](https://example.com/x)\n"}
    assert readme.broken_links(broken) == [
        "docs/x.md: link to commands/nope.md: no such file",
        "docs/x.md: link to config.md#no-such-heading: no such heading in docs/config.md"]


def test_every_page_is_in_the_index() -> None:
    index = DOCS["docs/README.md"]
    for page in DOCS:
        if page.startswith("docs/") and page != "docs/README.md":
            assert f"]({page.removeprefix('docs/')})" in index, f"{page} is not linked from docs/README.md"
    assert "](docs/README.md)" in DOCS["README.md"]


def test_stale_example_wording_is_found_whatever_the_numbers() -> None:
    block = ("<!-- example: peek -->\n```console\n$ dlxtool peek orders.dlq\n"
             "holding up to 4 messages unacked until the read ends (about 296 B of message bodies); "
             "they are returned with one nack\n"
             "#  routing key  body\n-- ----------- ----\n0  order.placed  {}\n```\n<!-- /example -->\n")
    same_wording = ("holding up to 17 messages unacked until the read ends (about 1.2 KiB of message bodies); "
                    "they are returned with one nack\n0    order.placed    {}\n")
    assert readme.stale_examples(block, {"peek": same_wording}) == []  # counts, sizes, spacing differ: fine
    reworded = same_wording.replace("returned with one nack", "given back all at once before anything is decoded")
    stale_line = ("'holding up to 4 messages unacked until the read ends (about 296 B of message bodies); "
                  "they are returned with one nack' is no longer printed")
    assert readme.stale_examples(block, {"peek": reworded}) == [f"example 'peek': {stale_line}"]
    assert readme.stale_examples({"README.md": block, "docs/commands/peek.md": block}, {"peek": reworded}) == [
        f"README.md: example 'peek': {stale_line}", f"docs/commands/peek.md: example 'peek': {stale_line}"]
    assert readme.stale_examples(block, {}) == []  # no fresh run of that step: nothing to compare
