"""Colour: only on a terminal, off with --no-color or NO_COLOR, never in JSON."""

from __future__ import annotations

import io

import pytest

from dlxtool.cli import cli
from dlxtool.cli.app import App

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only

ESC = "\x1b["


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def invoke(args: list[str], env: dict[str, str], *, tty: bool = True) -> tuple[int, str, str]:
    out, err = (Terminal(), Terminal()) if tty else (io.StringIO(), io.StringIO())
    with pytest.raises(SystemExit) as exit_:
        cli.main(args=args, prog_name="dlxtool", obj=App(out=out, err=err, env=env), standalone_mode=True)
    return int(exit_.value.code or 0), out.getvalue(), err.getvalue()


def test_style_follows_the_terminal_and_the_switches() -> None:
    assert App(out=Terminal(), env={}).style("x", fg="red") == f"{ESC}31mx{ESC}0m"
    assert App(out=io.StringIO(), env={}).style("x", fg="red") == "x"
    assert App(out=Terminal(), env={"NO_COLOR": "1"}).style("x", fg="red") == "x"
    assert App(out=Terminal(), env={}, color=False).style("x", fg="red") == "x"
    # stderr is judged on its own: stdout piped, stderr on the terminal
    app = App(out=io.StringIO(), err=Terminal(), env={})
    assert app.style("x", fg="red") == "x" and ESC in app.style("x", err=True, fg="red")


DOWN = ["--url", "amqp://guest:guest@127.0.0.1:1/", "peek", "orders"]


def test_errors_are_red_on_a_terminal_only(cli_env) -> None:
    code, _out, err = invoke(DOWN, cli_env)
    assert code == 3 and err.startswith(f"{ESC}31m{ESC}1mdlxtool: error:{ESC}0m ")
    for args, env, tty in ((["--no-color", *DOWN], cli_env, True), (DOWN, {**cli_env, "NO_COLOR": "1"}, True),
                           (DOWN, cli_env, False)):
        code, _out, err = invoke(args, env, tty=tty)
        assert code == 3 and err.startswith("dlxtool: error: ") and ESC not in err


def test_warnings_are_yellow_on_a_terminal(cli_env, tmp_path) -> None:
    app = App(err=Terminal(), env=cli_env)
    app.warn("careful \x1b[2J")
    # the prefix is coloured, the message stays sanitised
    assert app.stderr.getvalue() == f"{ESC}33m{ESC}1mwarning:{ESC}0m careful \\x1b[2J\n"


def test_queue_flags_coloured_on_a_terminal_never_in_json(cli_env, broker, qname) -> None:
    with broker.channel() as ch:
        ch.exchange_declare(qname + ".dlx", "fanout")
        ch.queue_declare(qname + ".work", arguments={"x-dead-letter-exchange": qname + ".dlx"}, durable=True)
        ch.queue_declare(qname + ".dlq", durable=True)
        ch.queue_bind(qname + ".dlq", qname + ".dlx")
    # cli.main reads option env vars from os.environ, not cli_env: name the management API here
    args = ["--url", broker.url, "--management-url", broker.management_url, "queues", "--match", qname + "*"]
    code, out, _err = invoke(args, cli_env)
    assert code == 0 and f"{ESC}33mdlq{ESC}0m" in out, out
    code, out, _err = invoke([*args, "--format", "json"], cli_env)
    assert code == 0 and ESC not in out and '"dlq"' in out
    code, out, _err = invoke(["--no-color", *args], cli_env)
    assert code == 0 and ESC not in out and "dlq" in out
