"""Every command explains itself with at least one example."""

import click
import pytest

from dlxtool.cli import COMMANDS, cli


def all_commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli)
    out = []

    def walk(prefix: str, group: click.Group) -> None:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            out.append((f"{prefix} {name}".strip(), cmd))
            if isinstance(cmd, click.Group):
                walk(f"{prefix} {name}", cmd)

    walk("", cli)
    return out


def test_every_registered_command_loads() -> None:
    assert {name for name, _ in all_commands()} >= set(COMMANDS)


@pytest.mark.parametrize("name, command", all_commands(), ids=lambda v: v if isinstance(v, str) else "")
def test_help_has_an_example(run, name: str, command: click.Command) -> None:
    result = run(*name.split(), "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout, f"`dlxtool {name} --help` has no example"
    assert "dlxtool " in result.stdout.split("Example", 1)[1]


def test_top_level_help_lists_what_each_command_says_of_itself() -> None:
    """`dlxtool --help` lists commands from SUMMARIES (so it needs not import them): they must agree."""
    from dlxtool.cli import SUMMARIES

    ctx = click.Context(cli)
    assert set(SUMMARIES) == set(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None and not command.short_help
        for limit in (45, 80, 300):
            listed = click.Command(name, help=SUMMARIES[name]).get_short_help_str(limit)
            assert listed == command.get_short_help_str(limit), name
