"""The protocols dlxtool reads and moves over (dlxtool.broker.protocols): one list, the command line's choices."""

from __future__ import annotations

from dlxtool.broker.protocols import PROTOCOLS, wire_protocol


def test_the_protocols_are_the_two_dlxtool_speaks_and_nothing_else_passes() -> None:
    assert PROTOCOLS == ("0-9-1", "1.0")
    assert [wire_protocol(p) for p in PROTOCOLS] == list(PROTOCOLS)
    for text in ("", "0.9.1", "1", "amqp", "1.0 "):
        assert wire_protocol(text) is None, text


def test_every_protocol_option_offers_exactly_these() -> None:
    """--protocol of each command that has one offers these choices, in this order (one list, not copies), and
    nothing but a Choice of them (a free string would reach the core unchecked)."""
    import click

    from dlxtool.cli import cli

    offered = {}
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):  # the commands load lazily (start-up): ask for each
        command = cli.get_command(ctx, name)
        assert command is not None, name
        for param in command.params:
            if "--protocol" in getattr(param, "opts", ()):
                assert isinstance(param.type, click.Choice), name
                offered[name] = tuple(param.type.choices)
    assert {"peek", "history", "dump", "replay", "move", "purge", "load"} <= set(offered), sorted(offered)
    # every command that reads or moves messages offers auto, its default: the commands that move messages choose by
    # the messages (dlxtool.ops.protocol_choice); the reads (peek, history, dump) read over 0.9.1 and on over 1.0 past
    # a message 0.9.1 cannot be given (dlxtool.ops.peek_past_poison)
    assert set(offered.values()) == {(*PROTOCOLS, "auto")}, offered


def test_a_protocol_named_in_the_environment_that_is_none_of_them_is_a_usage_error(run) -> None:
    result = run("--url", "amqp://guest:guest@127.0.0.1:1/", "peek", "q", env={"DLXTOOL_PROTOCOL": "0.9.1"})
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert "DLXTOOL_PROTOCOL='0.9.1'" in result.stderr and "0-9-1, 1.0 or auto" in result.stderr


def test_auto_in_the_environment_is_0_9_1_for_a_command_that_does_not_choose(run) -> None:
    """DLXTOOL_PROTOCOL=auto is replay's and move's default; peek (which reads over 0.9.1 by default) takes it, and
    fails on the unreachable broker, not on the setting."""
    result = run("--url", "amqp://guest:guest@127.0.0.1:1/", "peek", "q", env={"DLXTOOL_PROTOCOL": "auto"})
    assert result.exit_code == 3, (result.exit_code, result.stderr)
    assert "DLXTOOL_PROTOCOL" not in result.stderr
