"""purge (--backup, --move-to) and dump --remove over AMQP 1.0 (issue 39), on RabbitMQ 4.x.

AMQP 1.0 messages (several data sections, a subject, application properties of the types the 0.9.1 conversion loses
or cannot carry: ulong 2^64-1, symbol, timestamp in ms, uuid, char) are dead-lettered by the broker, then taken by
`purge --protocol 1.0` / `dump --remove --protocol 1.0` (or DLXTOOL_PROTOCOL=1.0): the backup record's `amqp10` is
the message as the DLQ held it, section by section and type by type; --move-to's queue holds it whole. Over 0.9.1 the
same runs are refused (exit 6, nothing changed) unless --accept-conversion-loss: the backup would hold only RabbitMQ's
conversion of a message that is then removed. A dropped connection mid-purge loses nothing. On 3.x, the 1.0 path is
refused (exit 2, nothing changed).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from dlxtool.amqp10_message import Amqp10Message, Body, Typed
from dlxtool.broker import versions
from dlxtool.cli.output import ExitStatus
from dlxtool.ops.actions import Deciding
from tests.ops.test_engine_amqp10 import _as_sent, _dead_letter, _dlq_type, _messages, _queues, _s
from tests.support.amqp10 import close_connections, connection_name, read_head

pytestmark = pytest.mark.broker

pytest.importorskip("proton")



def _dead(broker, qname: str, *, convertible: bool = False) -> tuple[str, str, list[Amqp10Message]]:
    """The two messages of _messages() dead-lettered into a DLQ (quorum on 4.3, classic on 4.0), and the DLQ's
    copies read over 1.0 (given back). `convertible`: without the char and uuid properties, which close the 0.9.1
    connection such a message is delivered to (docs/amqp10.md)."""
    from dataclasses import replace

    work, dlq = _queues(broker, qname)
    sent = _messages()
    if convertible:
        sent = [replace(m, application_properties=[(k, v) for k, v in m.application_properties or ()
                                                   if v.type not in ("char", "uuid")]) for m in sent]
    _dead_letter(broker, work, sent)
    assert broker.wait_depth(dlq, 2) == 2
    dead = read_head(broker, dlq, 2)
    assert all(m.annotation("x-opt-deaths") is not None for m in dead)
    return work, dlq, dead


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _whole(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each record's amqp10 field as a message's sections (without what a delivery adds)."""
    return [_as_sent(Amqp10Message.from_json(r["amqp10"])) for r in records]


def test_purge_backup_over_amqp10_keeps_each_message_whole(v4, qname, run, tmp_path) -> None:
    _work, dlq, dead = _dead(v4, qname)
    backup = tmp_path / "backup.jsonl"
    result = run("--url", v4.url, "purge", dlq, "--backup", str(backup), "--protocol", "1.0", "--yes",
                 "--format", "json")
    assert result.exit_code == 0, result.stderr
    # the check for 0.9.1 table headers (which a 1.0 reader never gets) reads the head over 0.9.1 — up to the first
    # message with a char property, which would close that connection (4.3): it says what it could not judge
    if versions.char_uuid_poison_091(v4.version):
        assert "conversion not checked over AMQP 0.9.1" in result.stderr
    summary = json.loads(result.stdout)
    assert summary["removed"] == 2 and summary["possible_duplicates"] == 0, summary
    assert v4.wait_depth(dlq, 0) == 0
    records = _records(backup)
    assert _whole(records) == [_as_sent(m) for m in dead]
    first = Amqp10Message.from_json(records[0]["amqp10"])
    assert first.body.sections == [b"part one|", b"\x00\xffpart two", b""]  # the 0.9.1 conversion merges them
    assert first.properties is not None and first.properties["subject"] == _s("orders.created")
    types = {k.value: v for k, v in first.application_properties or ()}
    assert types["big"] == Typed("ulong", 2**64 - 1) and types["c"] == Typed("char", "x")
    assert types["sym"] == Typed("symbol", "SYMBOL") and types["when"] == Typed("timestamp", 1_700_000_000_123)
    assert first.annotation("x-opt-deaths") is not None  # a backup keeps the death history: it is the message's


def test_purge_move_to_over_amqp10_moves_the_selected_whole_and_keeps_the_rest_in_place(v4, qname, run) -> None:
    _work, dlq, dead = _dead(v4, qname)
    parked = f"{qname}.parked"
    with v4.channel() as ch:
        ch.queue_declare(parked, durable=True, arguments={"x-queue-type": _dlq_type(v4)})
    result = run("--url", v4.url, "purge", dlq, "--move-to", parked, "--message-id", "second", "--protocol", "1.0",
                 "--yes", "--format", "json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["moved"] == {parked: 1} and summary["kept"], summary
    assert v4.wait_depth(parked, 1) == 1 and v4.wait_depth(dlq, 1) == 1
    moved, stayed = read_head(v4, parked, 1), read_head(v4, dlq, 1)
    assert [_as_sent(m) for m in moved] == [_as_sent(dead[1])]
    assert moved[0].body.kind == "amqp-value"
    # held, given back in place, untouched (but for 4.3's count of its acquisitions, which the broker keeps)
    assert [_unacquired(m) for m in stayed] == [_unacquired(dead[0])]


def _unacquired(msg: Amqp10Message) -> dict[str, Any]:
    out = _as_sent(msg)
    out.get("message_annotations", {}).pop("x-acquired-count", None)
    return out


def test_dump_remove_over_amqp10_by_the_environment(v4, qname, run, tmp_path) -> None:
    _work, dlq, dead = _dead(v4, qname)
    out = tmp_path / "drained.jsonl"
    result = run("--url", v4.url, "dump", dlq, "--remove", "-o", str(out), "--yes", "--format", "json",
                 env={"DLXTOOL_PROTOCOL": "1.0"})
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["removed"] == 2
    assert v4.wait_depth(dlq, 0) == 0
    assert _whole(_records(out)) == [_as_sent(m) for m in dead]


def test_over_091_a_backup_or_move_that_loses_data_is_refused_unless_accepted(v4, qname, run, tmp_path) -> None:
    """Over 0.9.1 the backup would hold RabbitMQ's conversion (subject dropped, sections merged …) of a message then
    removed: said per kind, refused (exit 6) before anything is taken; --accept-conversion-loss takes them."""
    _work, dlq, _dead_ = _dead(v4, qname, convertible=True)
    parked = f"{qname}.parked"
    with v4.channel() as ch:
        ch.queue_declare(parked, durable=True, arguments={"x-queue-type": "classic"})
    backup = tmp_path / "backup.jsonl"
    for args in (("purge", dlq, "--backup", str(backup), "--yes"),
                 ("purge", dlq, "--move-to", parked, "--yes"),
                 ("dump", dlq, "--remove", "-o", str(backup), "--yes")):
        refused = run("--url", v4.url, *args, "--protocol", "0-9-1")
        assert refused.exit_code == ExitStatus.REFUSED, (args, refused.stderr)
        assert "subject dropped: 1 message(s), e.g. #0" in refused.stderr, refused.stderr
        assert "--protocol 1.0" in refused.stderr and "nothing was changed" in refused.stderr
        if "--move-to" not in args:
            assert "would not be backed up whole" in refused.stderr
        assert v4.queue_depth(dlq) == 2 and v4.queue_depth(parked) == 0
    assert not backup.exists() or not backup.read_text()
    dry = run("--url", v4.url, "purge", dlq, "--backup", str(backup), "--dry-run", "--format", "json",
              "--protocol", "0-9-1")
    assert dry.exit_code == 0, dry.stderr
    losses = json.loads(dry.stdout)["conversion_losses"]
    assert losses["refused"] and losses["taking"] == "backup" and losses["messages_losing"] == 2, losses
    limited = run("--url", v4.url, "purge", dlq, "--backup", str(backup), "--limit", "1", "--dry-run", "--format",
                  "json", "--protocol", "0-9-1")  # only what the run would take is judged: the first one
    assert limited.exit_code == 0, limited.stderr
    losses = json.loads(limited.stdout)["conversion_losses"]
    assert losses["messages_judged"] == 1 and losses["messages_losing"] == 1, losses
    taken = run("--url", v4.url, "purge", dlq, "--backup", str(backup), "--yes", "--accept-conversion-loss",
                "--protocol", "0-9-1")
    assert taken.exit_code == 0, taken.stderr
    assert v4.wait_depth(dlq, 0) == 0 and len(_records(backup)) == 2


@pytest.mark.parametrize("command", ["purge --backup", "purge --move-to", "dump --remove"])
def test_auto_takes_them_over_10_whole(v4, qname, run, tmp_path, command) -> None:
    """Without --protocol (auto): the messages a 0.9.1 backup or move would lose part of are taken over 1.0 —
    said before the question, each backup record whole (`amqp10`), --move-to's copy whole."""
    _work, dlq, dead = _dead(v4, qname, convertible=True)
    parked = f"{qname}.parked"
    with v4.channel() as ch:
        ch.queue_declare(parked, durable=True, arguments={"x-queue-type": "classic"})
    out = tmp_path / "taken.jsonl"
    args = {"purge --backup": ("purge", dlq, "--backup", str(out)), "purge --move-to": ("purge", dlq, "--move-to",
                                                                                        parked),
            "dump --remove": ("dump", dlq, "--remove", "-o", str(out))}[command]
    dry = None if command == "dump --remove" else run("--url", v4.url, *args, "--dry-run", "--format", "json")
    if dry is not None:
        assert dry.exit_code == 0, dry.stderr
        losses = json.loads(dry.stdout)["conversion_losses"]
        assert (losses["moved_over"], losses["chosen_by_auto"], losses["refused"]) == ("1.0", True, False), losses
        assert losses["other_protocol"]["messages_losing"] == 2
        assert f"the purge would {'move' if '--move-to' in args else 'take'} over AMQP 1.0 (--protocol auto)" in \
            dry.stderr
    done = run("--url", v4.url, *args, "--yes")
    assert done.exit_code == 0, done.stderr
    assert f"{args[0]}{' --remove' if args[0] == 'dump' else ''} over AMQP 1.0 (--protocol auto): 2 of the 2" in \
        done.stderr
    assert "subject dropped: 1 message(s), e.g. #0" in done.stderr
    assert v4.wait_depth(dlq, 0) == 0
    if command == "purge --move-to":
        assert v4.wait_depth(parked, 2) == 2
        assert [_unacquired(m) for m in read_head(v4, parked, 2)] == [_unacquired(m) for m in dead]
    else:
        assert _whole(_records(out)) == [_as_sent(m) for m in dead]


def test_the_amqp10_path_is_refused_on_3x(broker, qname, run, tmp_path) -> None:
    """3.x: purge --backup / dump --remove --protocol 1.0 refused (exit 2), nothing changed; a plain purge reads
    nothing, so --protocol changes nothing for it."""
    if versions.speaks_amqp10(broker.version):
        pytest.skip(f"RabbitMQ {broker.version} speaks AMQP 1.0")
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, b"x")
    assert broker.wait_depth(qname, 1) == 1
    for args in (("purge", qname, "--backup", str(tmp_path / "b.jsonl"), "--protocol", "1.0", "--yes"),
                 ("dump", qname, "--remove", "-o", str(tmp_path / "d.jsonl"), "--protocol", "1.0", "--yes")):
        result = run("--url", broker.url, *args)
        assert result.exit_code == 2, (args, result.stderr)
        assert "--protocol 1.0 moves messages on RabbitMQ 4.x" in result.stderr
        assert broker.queue_depth(qname) == 1
    plain = run("--url", broker.url, "purge", qname, "--protocol", "1.0", "--yes")
    assert plain.exit_code == 0, plain.stderr
    assert "--protocol changes nothing" in plain.stderr and broker.wait_depth(qname, 0) == 0


def test_a_quorum_queue_is_refused_where_give_backs_count(v4, qname, run, tmp_path) -> None:
    """4.0: every AMQP 1.0 give-back of a quorum queue's message counts a delivery attempt (what a 1.0 run leaves, or
    has in hand at a stop, is given back): refused (exit 6) before anything is read, as replay is; nothing changed."""
    if versions.amqp10_peek_give_back(v4.version) is not None:
        pytest.skip(f"RabbitMQ {v4.version}: a 1.0 give-back spends no attempt here")
    work, dlq = _queues(v4, qname, dlq_type="quorum")
    _dead_letter(v4, work, _messages())
    assert v4.wait_depth(dlq, 2) == 2
    backup = tmp_path / "backup.jsonl"
    for args in (("purge", dlq, "--backup", str(backup), "--protocol", "1.0", "--yes"),
                 ("dump", dlq, "--remove", "-o", str(backup), "--protocol", "1.0", "--yes")):
        result = run("--url", v4.url, *args)
        assert result.exit_code == ExitStatus.REFUSED, (args, result.stderr)
        assert "counts a delivery attempt" in result.stderr and "nothing was changed" in result.stderr
    assert v4.wait_depth(dlq, 2) == 2 and (not backup.exists() or not backup.read_text())


def _close(broker, name: str) -> None:
    """Close (management API) the connection whose connection_name is `name`, as an operator or a restart would."""
    close_connections(broker, lambda r: connection_name(r) == name, what=f"connection {name!r}")


def test_a_lost_connection_mid_backup_over_amqp10_loses_nothing(v4, qname, tmp_path) -> None:
    """The broker closes the reading connection while the purge decides its 210th message (of 300: the first drain
    of 200 written, flushed, settled and proven by the second drain's answer): the run ends with the error; every
    message is in the backup or still in the queue, in both only where the run counts a possible duplicate, and
    each record holds its message whole."""
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.ops.engine_amqp10 import Amqp10Transfer
    from dlxtool.ops.purge import PurgeDecider, PurgeSettings
    from dlxtool.ops.record_files import open_record_sink
    from dlxtool.ops.transfer_settings import TransferOptions
    from tests.ops.test_engine_amqp10 import versions_give_back

    n = 300
    work, dlq = _queues(v4, qname)
    _dead_letter(v4, work, [Amqp10Message(properties={"message_id": _s(f"m{i}"), "subject": _s("s")},
                                          body=Body("data", [b"%d" % i, b"|two"])) for i in range(n)])
    assert v4.wait_depth(dlq, n) == n
    conn = open_connection(v4.profile())
    removing = PurgeDecider(PurgeSettings(dlq, backup="backup.jsonl"))
    seen = [0]

    def decide(record: Any) -> Any:
        seen[0] += 1
        if seen[0] == 210:
            _close(v4, conn.name)
        return removing(record)

    path = tmp_path / "backup.jsonl"
    try:
        with open_record_sink(str(path), io.StringIO(), warn=lambda _m: None, info=lambda _m: None) as sink:
            result = Amqp10Transfer(conn, dlq, Deciding(decide), snapshot=n, give_back=versions_give_back(v4),
                                    options=TransferOptions(sink=sink, handle_sigint=False)).run()
    finally:
        conn.close()
    assert result.error is not None and result.removed >= 200, result
    saved = [Amqp10Message.from_json(r["amqp10"]) for r in _records(path)]
    assert all(m.body.sections == [b"%d" % i, b"|two"] for m in saved
               for i in [int(str(m.properties["message_id"].value)[1:])] if m.properties)
    in_file = {str(m.properties["message_id"].value) for m in saved if m.properties}
    left = v4.wait_depth(dlq, n - result.removed + result.possible_duplicates)
    assert left <= n - 200  # the first drain's are gone for good
    in_queue = {str(m.properties["message_id"].value) for m in read_head(v4, dlq, left) if m.properties}
    assert in_file | in_queue == {f"m{i}" for i in range(n)}
    assert len(in_file & in_queue) <= result.possible_duplicates
