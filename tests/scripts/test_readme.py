"""README.md stays true: its --help blocks are the current --help, every command has one, examples parse."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme", ROOT / "scripts" / "docs" / "readme.py")
assert _spec and _spec.loader
readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme)

TEXT = (ROOT / "README.md").read_text()


def test_readme_help_blocks_match_help_and_cover_every_command() -> None:
    assert readme.problems(TEXT) == [], "README.md is stale: run python scripts/docs/readme.py"


def test_the_check_catches_a_stale_block_and_a_missing_one() -> None:
    stale = TEXT.replace("The table shows position", "The table shows positions", 1)
    assert stale != TEXT
    assert readme.problems(stale) == ["the `dlxtool peek --help` block differs from --help"]
    start = TEXT.index("<!-- help: dlxtool purge -->")
    missing = TEXT[:start] + TEXT[TEXT.index("<!-- /help -->", start) + len("<!-- /help -->"):]
    assert readme.problems(missing) == ["no `<!-- help: dlxtool purge -->` block for `dlxtool purge`"]


def test_every_example_command_still_parses(run) -> None:
    commands = list(readme.example_commands(TEXT))
    assert len(commands) >= 10
    for name, argv in commands:
        result = run(*argv, "--help")
        assert result.exit_code == 0, f"README example {name!r}: dlxtool {' '.join(argv)}: {result.output}"


def test_the_demo_steps_are_all_shown() -> None:
    shown = {m.group("name") for m in readme.EXAMPLE.finditer(TEXT)}
    assert {"queues", "peek", "history", "decode", "replay-dry-run", "replay", "purge"} <= shown
    for m in readme.EXAMPLE.finditer(TEXT):
        assert m.group("body").startswith("```console\n$ "), f"example {m.group('name')!r} was never generated"


def test_stale_example_wording_is_found_whatever_the_numbers() -> None:
    block = ("<!-- example: peek -->\n```console\n$ dlxtool peek orders.dlq\n"
             "holding up to 4 messages unacked until the read ends (about 296 B of message bodies); "
             "they are returned with one nack\n"
             "#  routing key  body\n-- ----------- ----\n0  order.placed  {}\n```\n<!-- /example -->\n")
    same_wording = ("holding up to 17 messages unacked until the read ends (about 1.2 KiB of message bodies); "
                    "they are returned with one nack\n0    order.placed    {}\n")
    assert readme.stale_examples(block, {"peek": same_wording}) == []  # counts, sizes, spacing differ: fine
    reworded = same_wording.replace("returned with one nack", "given back all at once before anything is decoded")
    assert readme.stale_examples(block, {"peek": reworded}) == [
        "example 'peek': 'holding up to 4 messages unacked until the read ends (about 296 B of message bodies); "
        "they are returned with one nack' is no longer printed"]
    assert readme.stale_examples(block, {}) == []  # no fresh run of that step: nothing to compare
