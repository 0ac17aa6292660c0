"""Streams read over AMQP 1.0 (issue 39), on RabbitMQ 4.x: `peek`/`dump --protocol 1.0` of a stream read from
--offset with RabbitMQ's source filter (rabbitmq:stream-offset-spec) and give each message whole — every section,
property, application property and type — where the 0.9.1 read gets RabbitMQ's conversion (data sections merged, the
subject dropped; on 4.3 a char or uuid application property closes the 0.9.1 connection). Nothing is taken: a stream
keeps what it is read from. The 0.9.1 stream reads: tests/cli/test_streams.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dlxtool.amqp10_message import Amqp10Message, Body, Typed
from tests.ops.test_engine_amqp10 import _as_sent, _messages
from tests.support.amqp10 import send

pytestmark = pytest.mark.broker

pytest.importorskip("proton")

STREAM_ANNOTATIONS = ("x-stream-offset",)  # what the stream adds to each message it delivers


def _stream(broker, name: str, messages: list[Amqp10Message]) -> None:
    """A stream holding `messages`, sent over AMQP 1.0 as a 1.0 client sends them."""
    with broker.channel() as ch:
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    send(broker, name, messages)


def _sent(messages: list[Amqp10Message]) -> list[dict[str, Any]]:
    return [_as_sent(m) for m in messages]


def _read(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records' messages as sent: without what the stream's delivery adds."""
    out = []
    for record in records:
        msg = _as_sent(Amqp10Message.from_json(record["amqp10"]))
        kept = {k: v for k, v in msg.get("message_annotations", {}).items() if k not in STREAM_ANNOTATIONS}
        msg.pop("message_annotations", None)
        if kept:
            msg["message_annotations"] = kept
        out.append(msg)
    return out


def _peek(run, broker, stream: str, *args: str) -> tuple[list[dict[str, Any]], str]:
    """`peek STREAM --protocol 1.0 ARGS` as JSON Lines: (the records' messages as sent, stderr); exit 0."""
    result = run("--url", broker.url, "peek", stream, "--protocol", "1.0", *args, "--format", "jsonl")
    assert result.exit_code == 0, result.stderr
    return _read([json.loads(line) for line in result.stdout.splitlines()]), result.stderr


def _plain(i: int) -> Amqp10Message:
    # durable: a message without a header is delivered with one saying durable false (the default), written out
    return Amqp10Message(header={"durable": Typed("boolean", True)},
                         properties={"message_id": Typed("string", f"m{i}")}, body=Body("data", [f"body {i}".encode()]))


def test_a_stream_read_over_amqp10_gives_every_message_whole_from_its_offset(v4, qname, run) -> None:
    stream = f"{qname}.stream"
    sent = [*_messages(), *(_plain(i) for i in range(2, 6))]
    _stream(v4, stream, sent)

    result = run("--url", v4.url, "peek", stream, "--protocol", "1.0", "-n", "3", "--format", "jsonl")
    assert result.exit_code == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert _read(records) == _sent(sent[:3])  # section by section, type by type
    first = Amqp10Message.from_json(records[0]["amqp10"])
    assert first.body.sections == [b"part one|", b"\x00\xffpart two", b""]  # 0.9.1 would merge them
    types = {k.value: v for k, v in first.application_properties or ()}
    assert types["c"] == Typed("char", "x") and types["big"] == Typed("ulong", 2**64 - 1)
    assert [r["position"] for r in records] == [0, 1, 2]

    # from an offset number; the stream's own offsets count from 0 here (a new stream)
    later, said = _peek(run, v4, stream, "--offset", "4")
    assert later == _sent(sent[4:])
    assert "the stream ended after 2 of the 10 messages asked for" in said

    # nothing was taken: read whole again, by dump, from the first message
    dumped = run("--url", v4.url, "dump", stream, "--protocol", "1.0", "--all", "--wait", "0.5")
    assert dumped.exit_code == 0, dumped.stderr
    assert _read([json.loads(line) for line in dumped.stdout.splitlines()]) == _sent(sent)


def test_a_stream_read_over_amqp10_from_next_waits_its_wait_and_says_none_came(v4, qname, run) -> None:
    stream = f"{qname}.stream"
    _stream(v4, stream, [_plain(0)])
    shown, said = _peek(run, v4, stream, "--offset", "next", "--wait", "0.3")
    assert shown == []
    assert "no message at or after offset next of the stream (none arrived within 0.3s)" in said


def test_a_stream_read_over_amqp10_with_a_selection_counts_what_it_selects(v4, qname, run) -> None:
    stream = f"{qname}.stream"
    sent = [_plain(i) for i in range(6)]
    _stream(v4, stream, sent)
    shown, said = _peek(run, v4, stream, "--message-id", "m4", "--wait", "0.5")
    assert shown == _sent(sent[4:5])
    assert "selected 1 of the 6 message(s) looked at" in said  # read to the stream's end, as over 0.9.1
    first_two = run("--url", v4.url, "dump", stream, "--protocol", "1.0", "-n", "2")
    assert first_two.exit_code == 0 and len(first_two.stdout.splitlines()) == 2, first_two.stderr
    assert "(the first 2; -n N or --all for more)" in first_two.stderr  # -n stopped it: a sample, as over 0.9.1
    whole = run("--url", v4.url, "dump", stream, "--protocol", "1.0", "--all", "--wait", "0.3")
    assert whole.exit_code == 0 and "dumped 6 messages of" in whole.stderr and "the first" not in whole.stderr


def test_a_stream_read_over_amqp10_from_a_point_in_time(v4, qname, run) -> None:
    """--offset as a time: RabbitMQ's timestamp (milliseconds) in the filter. Sent now: an hour ago is before all of
    them, an hour ahead after all of them."""
    from datetime import UTC, datetime, timedelta

    stream = f"{qname}.stream"
    sent = [_plain(i) for i in range(3)]
    _stream(v4, stream, sent)
    assert _peek(run, v4, stream, "--offset", "1h", "--wait", "0.5")[0] == _sent(sent)
    ahead = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert _peek(run, v4, stream, "--offset", ahead, "--wait", "0.5")[0] == []


def test_a_stream_read_over_amqp10_whose_connection_the_broker_closes_says_so_at_once(v4, qname, cli_env) -> None:
    """Silence ends a stream read (--wait); a connection the broker closed is not silence: exit 3 with what the broker
    said, at once — not "none arrived" and exit 0 at the end of --wait (proton's wait returns quietly there)."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from tests.ops.test_engine_amqp10 import _close_amqp10_connections

    stream = f"{qname}.stream"
    _stream(v4, stream, [_plain(0)])
    root = Path(__file__).resolve().parents[2]
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "dlxtool", "--url", v4.url, "peek", stream, "--protocol", "1.0",
                             "--offset", "next", "--wait", "60", "--format", "jsonl"],
                            env={**cli_env, "PYTHONPATH": str(root)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _close_amqp10_connections(v4, proc.pid) >= 1
        _out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 3, err.decode()
    assert b"the AMQP 1.0 connection was closed or lost" in err and b"Closed via management plugin" in err
    assert time.monotonic() - began < 40  # not the 60 s of --wait
