"""A reader (peek, history) stopped by SIGTERM or SIGHUP mid-wait gives back what it holds and says so.

Apart from tests/cli/test_stop_signals.py (which runs in the 3.x pass only): a stream read waits (--wait) for more
messages, the one long read that is reliably mid-way, and streams are read differently on each broker.
"""

from __future__ import annotations

import signal
import time

import pika
import pytest

from tests.cli.test_stop_signals import _dlxtool, _ended

pytestmark = pytest.mark.broker


@pytest.mark.parametrize(("command", "sig"), [(["peek", "-n", "100000"], signal.SIGTERM),
                                              (["history", "-n", "100000"], signal.SIGHUP)])
def test_a_reader_stopped_by_a_signal_gives_back_and_says_so(broker, qname, cli_env, command, sig) -> None:
    # A stream read waits (--wait) for more messages: a long command that is reliably mid-way.
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
        for i in range(5):
            ch.basic_publish("", qname, f"m{i}".encode(), pika.BasicProperties(delivery_mode=2))
    proc = _dlxtool([command[0], qname, *command[1:], "--url", broker.url, "--wait", "120"], cli_env)
    seen = ""
    while "(stream" not in seen:
        line = proc.stderr.readline().decode()
        assert line, seen
        seen += line
    time.sleep(0.3)
    proc.send_signal(sig)
    _out, err = _ended(proc, 60)
    assert proc.returncode == 128 + sig, seen + err.decode()
    assert {signal.SIGTERM: "terminated (SIGTERM)", signal.SIGHUP: "hung up (SIGHUP)"}[sig] in err.decode()
    assert b"Traceback" not in err
