"""Output fits the terminal and the pipe (issue 37): tables fit the terminal's width (--wide: everything), piped
output has one shape per format for every command (jsonl by default, -f json one array), and a long run without a
terminal says how it goes every few seconds — without start-up lines about internals that are about to change."""

from __future__ import annotations

import io
import json

import pika
import pytest
from click.testing import CliRunner

from dlxtool.cli import cli
from dlxtool.cli.app import App
from tests.support.topologies import reject_to_dlq

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def on_terminal(cli_env: dict[str, str], *args: str, columns: int = 80) -> tuple[int, str, str]:
    """The command with stdout and stderr on a terminal `columns` wide ($COLUMNS, as a shell sets it)."""
    env = {**cli_env, "COLUMNS": str(columns)}
    out, err = Terminal(), Terminal()
    result = CliRunner().invoke(cli, list(args), env=env, obj=App(out=out, err=err, env=env), catch_exceptions=False)
    return result.exit_code, out.getvalue(), err.getvalue()


def test_tables_fit_the_terminal_and_wide_shows_everything(cli_env, broker, qname) -> None:
    error = "ValueError: order o-00013 has no lines; " + "the order service could not price it " * 3
    topo = reject_to_dlq(broker, qname + ".a-rather-long-prefix-for-every-queue-name", n=2, error=error)
    code, out, err = on_terminal(cli_env, "--no-color", "peek", topo.dlq, "--url", broker.url)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("#  message id") and max(map(len, lines)) <= 80  # was ~190 (issue 37)
    assert lines[2].startswith("0  ") and "…" in lines[2]
    assert "--wide shows it whole" in err
    code, wide, err = on_terminal(cli_env, "--no-color", "peek", topo.dlq, "--url", broker.url, "--wide")
    assert code == 0 and max(map(len, wide.splitlines())) > 120
    assert topo.work in wide and "order 0" in wide and "--wide" not in err
    # a terminal wide enough: the table as it always was (tabulate's layout)
    widest = max(map(len, wide.splitlines()))
    code, roomy, _err = on_terminal(cli_env, "--no-color", "peek", topo.dlq, "--url", broker.url, columns=widest)
    assert roomy == wide
    # one column less: laid out to fit, nothing cut (tabulate's 2 spaces more under the headers go first)
    code, close, err = on_terminal(cli_env, "--no-color", "peek", topo.dlq, "--url", broker.url, columns=widest - 1)
    assert max(map(len, close.splitlines())) < widest and "--wide" not in err
    assert close.count("…") == wide.count("…")  # (the error column's own shortening: -v shows it whole)
    # not a terminal: a table asked for is whole (the reader decides)
    piped = CliRunner().invoke(cli, ["peek", topo.dlq, "--url", broker.url, "-f", "table"],
                               env={**cli_env, "COLUMNS": "80"}, obj=App(env={**cli_env, "COLUMNS": "80"}))
    assert piped.stdout == wide


def test_piped_output_has_one_shape_per_format_for_every_command(run, broker, qname) -> None:
    topo = reject_to_dlq(broker, qname, n=2)
    commands = [("peek", topo.dlq), ("history", topo.dlq), ("history", topo.dlq, "--summary"), ("queues",),
                ("brokers", "list")]
    for command in commands:
        piped = run(*command, "--url", broker.url)  # no -f: piped, jsonl
        assert piped.exit_code == 0, (command, piped.stderr)
        lines = [json.loads(line) for line in piped.stdout.splitlines()]
        assert lines and all(isinstance(x, dict) for x in lines), command
        as_json = run(*command, "--url", broker.url, "-f", "json")
        array = json.loads(as_json.stdout)  # -f json: the same objects (a peek has set `redelivered` since), one array
        assert isinstance(array, list) and [sorted(x) for x in array] == [sorted(x) for x in lines], command
    # a run's summary: one object (json), one line (jsonl, the piped default)
    summary = run("replay", topo.dlq, "--yes", "--url", broker.url)
    assert summary.exit_code == 0, summary.stderr
    [line] = summary.stdout.splitlines()
    assert json.loads(line)["moved"] == {topo.work: 2}


def test_a_long_run_without_a_terminal_says_how_it_goes(run, broker, qname) -> None:
    dlq, origin = f"{qname}.dlq", f"{qname}.work"
    with broker.channel() as ch:
        ch.queue_declare(origin, durable=True)
        ch.queue_declare(dlq, durable=True)
        for i in range(400):
            ch.basic_publish("", dlq, b"x" * 1024, pika.BasicProperties(message_id=f"m-{i}"), mandatory=True)
    # --rate: a run of about 2 s; a line every 0.5 s. --max-bytes: the byte budget narrows the prefetch (the
    # start-up line that said so, describing a window about to widen, is for -v now)
    result = run("replay", dlq, "--to", origin, "--yes", "--url", broker.url, "--rate", "200",
                 "--max-bytes", "16KiB", env={"DLXTOOL_PROGRESS_INTERVAL": "0.5"})
    assert result.exit_code == 0, result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("replaying: ")]
    assert len(progress) >= 2, result.stderr
    done = [int(line.split()[1].replace(",", "")) for line in progress]
    assert done == sorted(done) and done[0] < 400  # while it runs (the last may come as it ends)
    assert all(" of 400 handled in " in line and "/s; " in line and " left" in line for line in progress)
    assert "held at once" not in result.stderr
    assert broker.queue_depth(origin) == 400
