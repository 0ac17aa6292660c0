"""`-v` says what a command waited for that was not its messages (dlxtool.waits), at the end of a real process (the
console script's main: dlxtool.cli.main). No time is asserted: only that the waits are named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pika
import pytest

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only

ROOT = Path(__file__).resolve().parents[2]

RUN = "import sys; from dlxtool.cli import main; sys.exit(main(sys.argv[1:]))"


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", RUN, *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)


def test_verbose_names_the_api_answers_it_waited_for_and_quiet_does_not(cli_env, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, b"one", pika.BasicProperties(message_id="m1"), mandatory=True)
    env = {**cli_env, "DLXTOOL_URL": broker.url}
    loud = run(env, "-v", "peek", qname, "-f", "json")
    assert loud.returncode == 0, loud.stderr
    said = [line for line in loud.stderr.splitlines() if line.startswith("waited ")]
    assert any("for the management API's answers (at most" in line and "answer" in line for line in said), loud.stderr
    quiet = run(env, "peek", qname, "-f", "json")
    assert quiet.returncode == 0, quiet.stderr
    assert not [line for line in quiet.stderr.splitlines() if line.startswith("waited ")]
