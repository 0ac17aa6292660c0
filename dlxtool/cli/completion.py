"""`dlxtool completion SHELL`: print click's completion script for bash, zsh or fish."""

from __future__ import annotations

import click

from dlxtool.cli import cli


@click.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL (command, option, broker and queue names).

    \b
    Examples:
      dlxtool completion bash > ~/.local/share/bash-completion/completions/dlxtool
      dlxtool completion zsh > "${fpath[1]}/_dlxtool"
      dlxtool completion fish > ~/.config/fish/completions/dlxtool.fish
    """
    from click.shell_completion import get_completion_class


    comp_cls = get_completion_class(shell)
    assert comp_cls is not None  # the Choice above only admits shells click supports
    comp = comp_cls(cli, {}, "dlxtool", "_DLXTOOL_COMPLETE")
    click.echo(comp.source())
