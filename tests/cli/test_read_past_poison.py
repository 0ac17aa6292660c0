"""peek, history and dump read on past a message RabbitMQ cannot give to AMQP 0.9.1 (dlxtool.ops.peek_past_poison;
issue 39: "the others are read"). On RabbitMQ 4.x (skipped on 3.x): three dead letters published and rejected over
AMQP 1.0 by the broker's own rules, the middle one with a char application property — RabbitMQ closes a 0.9.1
connection it would give that message to. Without --protocol (auto) the read shows all three, the last two read again
over 1.0 from the head; --protocol 0-9-1 stops at it (exit 5) as before. The queue keeps its three messages in order."""

from __future__ import annotations

import json

import pytest

from dlxtool.amqp10_message import Amqp10Message, Body, Typed
from dlxtool.broker import versions
from dlxtool.cli.output import ExitStatus
from tests.ops.test_engine_amqp10 import _dead_letter as reject_10
from tests.support.amqp10 import read_head

pytestmark = pytest.mark.broker

IDS = ["first", "char", "last"]


def _message(name: str) -> Amqp10Message:
    app = [(Typed("string", "grade"), Typed("char", "A"))] if name == "char" else None
    return Amqp10Message(properties={"message_id": Typed("string", name)}, application_properties=app,
                         body=Body("data", [f"body of {name}".encode()]))


def _poisoned_dlq(broker, qname: str, dlq_type: str) -> str:
    if not versions.char_uuid_poison_091(broker.version):
        pytest.skip(f"RabbitMQ {broker.version} gives such a message to 0.9.1")
    work, dlq = f"{qname}.work", f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True, arguments={"x-queue-type": dlq_type})
        ch.queue_declare(work, durable=True, arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": dlq})
    reject_10(broker, work, [_message(n) for n in IDS])
    assert broker.wait_depth(dlq, 3) == 3
    return dlq


def _ids(records: list[dict]) -> list[str]:
    return [r["properties"]["message_id"] for r in records]


def _intact(broker, dlq: str) -> None:
    assert broker.wait_depth(dlq, 3) == 3
    assert [(m.properties or {})["message_id"].value for m in read_head(broker, dlq, 3)] == IDS


@pytest.mark.parametrize("dlq_type", ["classic", "quorum"])
def test_peek_reads_on_over_10_past_a_message_091_cannot_be_given(v4, qname, run, dlq_type) -> None:
    if dlq_type == "quorum" and versions.amqp10_peek_give_back(v4.version) is None:
        pytest.skip(f"RabbitMQ {v4.version}: a 1.0 peek of a quorum queue spends attempts (test_versions)")
    dlq = _poisoned_dlq(v4, qname, dlq_type)
    strict = run("--url", v4.url, "peek", dlq, "--protocol", "0-9-1", "--format", "json")
    assert strict.exit_code == ExitStatus.PARTIAL, strict.stderr
    assert _ids(json.loads(strict.stdout)) == ["first"]
    assert "position 1" in strict.stderr and "--protocol 1.0" in strict.stderr
    peeked = run("--url", v4.url, "peek", dlq, "--format", "json")
    assert peeked.exit_code == 0, peeked.stderr
    records = json.loads(peeked.stdout)
    assert _ids(records) == IDS and [r["position"] for r in records] == [0, 1, 2]
    # what is shown is the second read, over 1.0: each message whole, the char property with its type
    assert all("amqp10" in r for r in records)
    assert '"char"' in json.dumps(records[1]["amqp10"])
    said = peeked.stderr
    assert "position 1" in said and "read again from the head over AMQP 1.0" in said, said
    counted = dlq_type == "quorum" and versions.quorum_give_back_counts(v4.version, "lost")
    assert ("every run over 0.9.1 spends another" in said) == counted, said
    assert "leaves x-delivery-count as it was" not in said.split("reading on over AMQP 1.0")[0], said  # no nack did
    # the messages shown were read over 1.0: the note says what a move over 0.9.1 would do to them (the char one)
    assert "would not come back whole from a move over AMQP 0.9.1" in said and "#1 (char)" in said, said
    _intact(v4, dlq)
    # what the warning says the two runs cost: the broker's close of each 0.9.1 read counted an attempt of the message
    # held before the char message and of the char message (a quorum queue on 4.3), none of the one after it (all
    # three were dead-lettered alike: the same count before). Read here, not before the runs: a read's give-back
    # makes the head a block of returned messages, and the broker's close then puts those it took at the block's back
    counts = _delivery_counts(v4, dlq)
    assert [n - counts[2] for n in counts] == ([2, 2, 0] if counted else [0, 0, 0]), counts


def _delivery_counts(broker, dlq: str) -> list[int]:
    """x-delivery-count of each of the three, read over AMQP 1.0 with `released` (counted on no version where this is
    called for a quorum queue: 4.3)."""
    counts = []
    for m in read_head(broker, dlq, 3):
        annotations = {k.value: v.value for k, v in (m.message_annotations or [])}
        counts.append(int(annotations.get("x-delivery-count", 0)))
    return counts


def test_peek_n_1_of_a_poison_head_shows_it_over_10(v4, qname, run) -> None:
    dlq = _poisoned_dlq(v4, qname, "classic")
    taken = run("--url", v4.url, "peek", dlq, "--format", "json")
    assert taken.exit_code == 0, taken.stderr
    first = run("--url", v4.url, "dump", dlq, "-n", "1")  # the head is plain: the 0.9.1 read ends before the char
    assert first.exit_code == 0 and _ids([json.loads(first.stdout)]) == ["first"], first.stderr
    # with the char message at the head (the plain one taken away), -n 1 shows the char message, read over 1.0
    with v4.channel() as ch:
        method, _props, _body = ch.basic_get(dlq, auto_ack=True)
        assert method is not None
    head = run("--url", v4.url, "peek", dlq, "-n", "1", "--format", "json")
    assert head.exit_code == 0, head.stderr
    assert _ids(json.loads(head.stdout)) == ["char"]
    assert v4.wait_depth(dlq, 2) == 2


def test_history_and_dump_read_on_too(v4, qname, run, tmp_path) -> None:
    dlq = _poisoned_dlq(v4, qname, "classic")
    history = run("--url", v4.url, "history", dlq, "--format", "json")
    assert history.exit_code == 0, history.stderr
    items = json.loads(history.stdout)
    assert [(i["message_id"], i["position"]) for i in items] == [(n, p) for p, n in enumerate(IDS)], items
    assert "read again from the head over AMQP 1.0" in history.stderr
    out = tmp_path / "dlq.jsonl"
    dumped = run("--url", v4.url, "dump", dlq, "--all", "-o", str(out))
    assert dumped.exit_code == 0, dumped.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert _ids(lines) == IDS
    assert "dumped 3 messages" in dumped.stderr, dumped.stderr
    refused = run("--url", v4.url, "dump", dlq, "--all", "--protocol", "0-9-1", "-o", str(tmp_path / "strict.jsonl"))
    assert refused.exit_code == ExitStatus.PARTIAL, refused.stderr
    _intact(v4, dlq)



def test_the_brokers_close_puts_what_it_took_back_behind_a_returned_block(v4, qname, run) -> None:
    """What the 0.9.1 read says of where the messages it held went when the broker closed its connection at the char
    message: a quorum queue serves returned messages first, as a block at the head, and puts each return at the back of
    that block. A 1.0 read released all three (a block of three); the 0.9.1 read then took `first` and met the char
    message: both went behind `last`. Said as such, not as a give-back "in order" that never ran."""
    if versions.amqp10_peek_give_back(v4.version) is None:
        pytest.skip(f"RabbitMQ {v4.version}: a 1.0 read of a quorum queue spends attempts (test_versions)")
    dlq = _poisoned_dlq(v4, qname, "quorum")
    read_head(v4, dlq, 3)  # released: the three are a block of returned messages at the head
    strict = run("--url", v4.url, "peek", dlq, "--protocol", "0-9-1", "--format", "json")
    assert strict.exit_code == ExitStatus.PARTIAL, strict.stderr
    assert "the order of that block changed" in strict.stderr, strict.stderr
    assert "leaves x-delivery-count as it was" not in strict.stderr, strict.stderr  # no nack gave them back
    assert v4.wait_depth(dlq, 3) == 3
    assert [(m.properties or {})["message_id"].value for m in read_head(v4, dlq, 3)] == ["last", "first", "char"]


def test_a_returned_block_reordered_by_the_first_read_is_shown_as_it_is_now(v4, qname, run) -> None:
    """The broker's close of the first read puts what it held behind a block of returned messages (the test above):
    the second read is shown whole, so every message is shown once, in the queue's order now — not the first read's
    head spliced with the second's tail (which showed `first` twice and `last` never)."""
    if versions.amqp10_peek_give_back(v4.version) is None:
        pytest.skip(f"RabbitMQ {v4.version}: a 1.0 read of a quorum queue spends attempts (test_versions)")
    dlq = _poisoned_dlq(v4, qname, "quorum")
    read_head(v4, dlq, 3)  # released: a block of returned messages at the head
    peeked = run("--url", v4.url, "peek", dlq, "--format", "json")
    assert peeked.exit_code == 0, peeked.stderr
    shown = _ids(json.loads(peeked.stdout))
    assert sorted(shown) == sorted(IDS) and shown == ["last", "first", "char"], shown
    assert v4.wait_depth(dlq, 3) == 3
    assert [(m.properties or {})["message_id"].value for m in read_head(v4, dlq, 3)] == shown


@pytest.mark.parametrize("decimal_first", [True, False])
def test_a_message_neither_protocol_reads_past(v4, qname, run, decimal_first) -> None:
    """A message published over 0.9.1 with a decimal header ends an AMQP 1.0 read (4.x: mc_amqpl:from_091) as the char
    message ends a 0.9.1 read. Decimal first: the 0.9.1 read gets further (it shows the decimal message and stops at the
    char one); the 1.0 read stops earlier, so the first read is shown and its end stands (exit 5), with why the 1.0
    read was not. Char first: the 1.0 read gets further (it shows the char message and stops at the decimal one):
    shown, and exit 5 names both stops and a way past them — not the advice to leave --protocol out, which is what
    stopped first."""
    from decimal import Decimal

    import pika

    if not (versions.char_uuid_poison_091(v4.version) and versions.decimal_poison_amqp10(v4.version)):
        pytest.skip(f"RabbitMQ {v4.version}: not both poisons")
    work, dlq = f"{qname}.work", f"{qname}.dlq"
    with v4.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, durable=True, arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": dlq})

    def decimal() -> None:
        v4.publish(dlq, [b"decimal"], properties=pika.BasicProperties(message_id="decimal",
                                                                      headers={"price": Decimal("12.345")}))
    if decimal_first:
        decimal()
    reject_10(v4, work, [_message("char")])
    if not decimal_first:
        decimal()
    assert v4.wait_depth(dlq, 2) == 2
    peeked = run("--url", v4.url, "peek", dlq, "--format", "json")
    assert peeked.exit_code == ExitStatus.PARTIAL, peeked.stderr
    shown = _ids(json.loads(peeked.stdout))
    if decimal_first:
        assert shown == ["decimal"], peeked.stderr
        assert "over AMQP 1.0 (--protocol auto), the queue stopped earlier, at position 0" in peeked.stderr, \
            peeked.stderr
        assert "cannot be delivered over AMQP 0.9.1" in peeked.stderr
        # what the 1.0 read did is said (its session ended at the decimal message), and a way past both stops
        assert "the read over AMQP 1.0: " in peeked.stderr and "from_091" in peeked.stderr, peeked.stderr
        assert "--remove -n 1 --protocol 0-9-1" in peeked.stderr and "with --protocol 1.0" not in peeked.stderr
    else:
        assert shown == ["char"], peeked.stderr
        assert "cannot be delivered over AMQP 1.0 either" in peeked.stderr, peeked.stderr
        assert "--remove -n 1 --protocol 1.0" in peeked.stderr and "leave --protocol out" not in peeked.stderr
    assert v4.wait_depth(dlq, 2) == 2


def test_a_poison_this_machine_found_costs_one_attempt_not_one_per_run(v4, qname, run, cli_env) -> None:
    """On a quorum DLQ where the broker's close of a 0.9.1 read at the char message counts an attempt of every message
    it held (4.3), only the first auto read pays it: it remembers the stop (dlxtool.poison_memo), and the next auto
    reads from this machine go straight over AMQP 1.0 (`released`: no attempt), so a delivery limit's worth of peeks
    no longer has the broker drop the message and the healthy one before it. Once the queue holds no such message, a
    read over 1.0 of the whole queue lets the memo go and the 0.9.1 read (every header whole) is made again."""
    import pika

    from dlxtool.poison_memo import memo_path

    if not (versions.quorum_give_back_counts(v4.version, "lost") and versions.amqp10_peek_give_back(v4.version)):
        pytest.skip(f"RabbitMQ {v4.version}: the close of a 0.9.1 read costs nothing, or a 1.0 read does")
    dlq = _poisoned_dlq(v4, qname, "quorum")
    before = _delivery_counts(v4, dlq)
    memo = memo_path(cli_env)
    for n in range(3):
        peeked = run("--url", v4.url, "peek", dlq, "--format", "json")
        assert peeked.exit_code == 0, peeked.stderr
        assert sorted(_ids(json.loads(peeked.stdout))) == sorted(IDS)
        if n == 0:
            assert "read again from the head over AMQP 1.0" in peeked.stderr, peeked.stderr
            assert "this machine remembers it" in peeked.stderr, peeked.stderr
            assert dlq in memo.read_text()
        else:
            assert "reading over AMQP 1.0 first" in peeked.stderr, peeked.stderr
            assert "as a read from this machine found on" in peeked.stderr, peeked.stderr
            assert "no 0.9.1 read was made, no delivery attempt spent" in peeked.stderr, peeked.stderr
            assert "read again from the head" not in peeked.stderr, peeked.stderr
    # the first run's close counted one attempt of the first two; the two after it none
    after = _delivery_counts(v4, dlq)
    assert sorted(a - b for a, b in zip(after, before, strict=True)) == [0, 1, 1], (before, after)
    assert oct(memo.stat().st_mode & 0o777) == oct(0o600)
    # the poison leaves (the queue is emptied); a message with a table header, which only 0.9.1 reads whole, comes in
    with v4.channel() as ch:
        ch.queue_purge(dlq)
    v4.publish(dlq, [b"plain"], properties=pika.BasicProperties(message_id="plain", headers={"t": {"k": "v"}}))
    assert v4.wait_depth(dlq, 1) == 1
    clean = run("--url", v4.url, "peek", dlq, "--format", "json")
    assert clean.exit_code == 0, clean.stderr
    records = json.loads(clean.stdout)
    assert _ids(records) == ["plain"] and records[0]["headers"]["t"] == {"k": "v"}, records
    assert "is gone" in clean.stderr, clean.stderr
    assert dlq not in memo.read_text()
    again = run("--url", v4.url, "peek", dlq, "--format", "json")
    assert again.exit_code == 0 and "from this machine" not in again.stderr, again.stderr


def test_a_bounded_read_that_stops_before_the_remembered_poison_is_shown_over_10(v4, qname, run, cli_env) -> None:
    """`peek -n 1` of a queue the memo names: the read over 1.0 stops before the char message and is shown, and no
    0.9.1 read follows — one would take the block the 1.0 read gave back and the message after it (the char one, at
    an attempt's cost of both). The memo stays: the read did not reach the end. (The memo is written here as an
    earlier read would have: that read's cost is the test above.)"""
    from dlxtool.poison_memo import PoisonMemo, memo_key, memo_path

    if not (versions.quorum_give_back_counts(v4.version, "lost") and versions.amqp10_peek_give_back(v4.version)):
        pytest.skip(f"RabbitMQ {v4.version}: the close of a 0.9.1 read costs nothing, or a 1.0 read does")
    dlq = _poisoned_dlq(v4, qname, "quorum")
    key = memo_key([(v4.host, v4.amqp_port)], v4.vhost, dlq)
    PoisonMemo(memo_path(cli_env)).remember(key, 1, str(v4.version))
    for _ in range(2):
        head = run("--url", v4.url, "peek", dlq, "-n", "1", "--format", "json")
        assert head.exit_code == 0, head.stderr
        assert _ids(json.loads(head.stdout)) == ["first"]
        assert "no 0.9.1 read was made" in head.stderr and "this read did not reach it" in head.stderr, head.stderr
    # all three were dead-lettered alike (the same count): no run spent an attempt of any
    assert len(set(_delivery_counts(v4, dlq))) == 1
    assert PoisonMemo(memo_path(cli_env)).seen(key) is not None
    _intact(v4, dlq)


def test_replay_of_a_remembered_poison_dlq_refuses_without_spending_attempts(v4, qname, run) -> None:
    """replay under --protocol auto of a quorum DLQ holding the char message (4.3): the first plan's 0.9.1 read pays
    an attempt of it and of those before it once, and remembers; the next plan reads over 1.0 straight away, and the
    run's refusal (exit 6: a 0.9.1 message there would lose its table headers over 1.0, which cannot be judged
    without that cost) changes nothing, the delivery counts included — before, each run paid again."""
    if not (versions.quorum_give_back_counts(v4.version, "lost") and versions.amqp10_peek_give_back(v4.version)):
        pytest.skip(f"RabbitMQ {v4.version}: the close of a 0.9.1 read costs nothing, or a 1.0 read does")
    dlq = _poisoned_dlq(v4, qname, "quorum")
    first = run("--url", v4.url, "replay", dlq, "--dry-run")
    assert first.exit_code == 0, first.stderr
    assert "the plan's read over AMQP 0.9.1 stopped" in first.stderr, first.stderr
    before = _delivery_counts(v4, dlq)
    planned = run("--url", v4.url, "replay", dlq, "--dry-run", "--format", "json")
    assert planned.exit_code == 0, planned.stderr
    assert "reading the plan over AMQP 1.0 (--protocol auto): a read from this machine found" in planned.stderr
    assert "the plan's read over AMQP 0.9.1 stopped" not in planned.stderr, planned.stderr
    plan = json.loads(planned.stdout)["plan"]
    assert sorted(plan["message_ids"]) == sorted(IDS) and plan["conversion_losses"]["refused"], plan
    refused = run("--url", v4.url, "replay", dlq, "--yes")
    assert refused.exit_code == ExitStatus.REFUSED, refused.stderr
    assert "a read from this machine found" in refused.stderr and "nothing was changed" in refused.stderr
    assert _delivery_counts(v4, dlq) == before
    _intact_somehow(v4, dlq)


def _intact_somehow(broker, dlq: str) -> None:
    """All three still there (in whatever order the first run's close left them)."""
    assert broker.wait_depth(dlq, 3) == 3
    assert sorted((m.properties or {})["message_id"].value for m in read_head(broker, dlq, 3)) == sorted(IDS)


def test_a_selective_purge_of_a_remembered_poison_dlq_goes_over_10(v4, qname, run) -> None:
    """A purge that only deletes converts nothing, so auto keeps 0.9.1 — but on a quorum DLQ this machine knows holds
    the char message (4.3) a 0.9.1 run stops there (the broker closes it, exit 3) at an attempt's cost of it and of
    those before it, on every try. Its dry run's read and the run go over 1.0 instead: `first` removed, the other two
    given back in place, no attempt spent."""
    if not (versions.quorum_give_back_counts(v4.version, "lost") and versions.amqp10_peek_give_back(v4.version)):
        pytest.skip(f"RabbitMQ {v4.version}: the close of a 0.9.1 read costs nothing, or a 1.0 read does")
    dlq = _poisoned_dlq(v4, qname, "quorum")
    assert run("--url", v4.url, "peek", dlq).exit_code == 0  # pays once, remembers
    before = dict(zip(_ids_now(v4, dlq), _delivery_counts(v4, dlq), strict=True))
    dry = run("--url", v4.url, "purge", dlq, "--message-id", "first", "--dry-run", "--format", "json")
    assert dry.exit_code == 0, dry.stderr
    assert json.loads(dry.stdout)["would_remove"] == 1
    purged = run("--url", v4.url, "purge", dlq, "--message-id", "first", "--yes", "--format", "json")
    assert purged.exit_code == 0, purged.stderr
    assert "purging over AMQP 1.0 (--protocol auto): a read from this machine found" in purged.stderr
    summary = json.loads(purged.stdout)
    assert summary["removed"] == 1 and summary["possible_duplicates"] == 0, summary
    assert v4.wait_depth(dlq, 2) == 2
    after = dict(zip(_ids_now(v4, dlq), _delivery_counts(v4, dlq), strict=True))
    assert after == {k: v for k, v in before.items() if k != "first"}, (before, after)


def _ids_now(broker, dlq: str) -> list[str]:
    n = broker.queue_depth(dlq)
    return [(m.properties or {})["message_id"].value for m in read_head(broker, dlq, n)]


def _seed_memo(broker, env, queue: str, position: int) -> None:
    """The memo as an earlier auto read from this machine leaves it (that read's cost is the tests' above)."""
    from dlxtool.poison_memo import PoisonMemo, memo_key, memo_path

    assert PoisonMemo(memo_path(env)).remember(memo_key([(broker.host, broker.amqp_port)], broker.vhost, queue),
                                               position, str(broker.version))


def _memo_holds(broker, env, queue: str) -> bool:
    from dlxtool.poison_memo import PoisonMemo, memo_key, memo_path

    return PoisonMemo(memo_path(env)).seen(memo_key([(broker.host, broker.amqp_port)], broker.vhost, queue)) \
        is not None


def _quorum_with(broker, qname: str, messages: list[tuple[str, dict]]) -> str:
    import pika

    dlq = f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True, arguments={"x-queue-type": "quorum"})
    for message_id, headers in messages:
        broker.publish(dlq, [message_id.encode()], properties=pika.BasicProperties(message_id=message_id,
                                                                                   headers=headers))
    assert broker.wait_depth(dlq, len(messages)) == len(messages)
    return dlq


def test_a_stale_memo_does_not_let_a_move_over_10_go_unjudged(v4, qname, run, cli_env) -> None:
    """The check of a move over AMQP 1.0 reads the head over 0.9.1 for the table headers a 1.0 reader never gets; with
    this machine's memo naming the queue, that read goes no further than the plan's 1.0 read looked (no such message
    there), and is still made: a 0.9.1 message with a table header is named and the move refused, as without the
    memo (review: the memo had turned that read into 'not judged', and the run went ahead, the header lost)."""
    if not (versions.quorum_give_back_counts(v4.version, "lost") and versions.amqp10_peek_give_back(v4.version)):
        pytest.skip(f"RabbitMQ {v4.version}: the close of a 0.9.1 read costs nothing, or a 1.0 read does")
    dlq = _quorum_with(v4, qname, [("tabled", {"trace": {"id": 7}})])
    with v4.channel() as ch:
        ch.queue_declare(f"{qname}.back", durable=True)
    _seed_memo(v4, cli_env, dlq, 3)
    planned = run("--url", v4.url, "replay", dlq, "--to", f"{qname}.back", "--protocol", "1.0", "--dry-run",
                  "--format", "json")
    assert planned.exit_code == 0, planned.stderr
    losses = json.loads(planned.stdout)["plan"]["conversion_losses"]
    assert losses["refused"] and [k["kind"] for k in losses["kinds"]] == ["table-header"], losses
    assert v4.wait_depth(dlq, 1) == 1


def test_a_stale_memo_over_a_decimal_header_is_let_go_of(v4, qname, run, cli_env) -> None:
    """The memo names the queue, but what the direct read over 1.0 meets first is a 0.9.1 message with a decimal
    header, which ends a 1.0 read (4.3: at an attempt's cost of what it held). That read's end is said, the memo is let
    go of (going straight over 1.0 costs here too), the 0.9.1 read is shown — and the next auto read makes no 1.0
    read at all."""
    from decimal import Decimal

    if not (versions.quorum_give_back_counts(v4.version, "lost") and versions.amqp10_peek_give_back(v4.version)
            and versions.decimal_poison_amqp10(v4.version)):
        pytest.skip(f"RabbitMQ {v4.version}: not the costs this is about")
    dlq = _quorum_with(v4, qname, [("plain", {}), ("decimal", {"price": Decimal("12.345")})])
    _seed_memo(v4, cli_env, dlq, 5)
    peeked = run("--url", v4.url, "peek", dlq, "--format", "json")
    assert peeked.exit_code == 0, peeked.stderr
    assert _ids(json.loads(peeked.stdout)) == ["plain", "decimal"]
    assert "the read over AMQP 1.0: " in peeked.stderr and "from_091" in peeked.stderr, peeked.stderr
    assert not _memo_holds(v4, cli_env, dlq)
    again = run("--url", v4.url, "peek", dlq, "--format", "json")
    assert again.exit_code == 0 and "AMQP 1.0" not in again.stderr, again.stderr


def test_a_selective_purge_by_header_is_not_moved_to_10(v4, qname, run, cli_env) -> None:
    """A selection that reads headers would see a 0.9.1 message without its table and array headers over AMQP 1.0
    (--not-header on one would select it): the memo does not move such a purge to 1.0; and as a read over 0.9.1 would
    stop at the remembered message at an attempt's cost, nothing is read: the run is refused (exit 6, nothing changed)
    and its dry run says it would be, --protocol 0-9-1 named as the way to run it anyway (review)."""
    if not (versions.quorum_give_back_counts(v4.version, "lost") and versions.amqp10_peek_give_back(v4.version)):
        pytest.skip(f"RabbitMQ {v4.version}: the close of a 0.9.1 read costs nothing, or a 1.0 read does")
    dlq = _quorum_with(v4, qname, [("tagged", {"tags": ["a", "b"]}), ("plain", {})])
    _seed_memo(v4, cli_env, dlq, 5)
    by_id = run("--url", v4.url, "purge", dlq, "--message-id", "plain", "--dry-run")
    assert by_id.exit_code == 0 and "purging over AMQP 1.0" in by_id.stderr, by_id.stderr
    by_header = run("--url", v4.url, "purge", dlq, "--not-header", "tags~a", "--dry-run", "--format", "json")
    assert by_header.exit_code == 0, by_header.stderr
    # neither protocol reads it for free and whole: the dry run reads no message (a read over 0.9.1 would pay)
    assert "no message was read, and the purge would be refused (exit 6)" in by_header.stderr, by_header.stderr
    assert "purging over AMQP 1.0" not in by_header.stderr and "holding up to" not in by_header.stderr
    assert json.loads(by_header.stdout)["queue"] == dlq
    refused = run("--url", v4.url, "purge", dlq, "--not-header", "tags~a", "--yes")
    assert refused.exit_code == ExitStatus.REFUSED, refused.stderr
    assert "--protocol 0-9-1" in refused.stderr and "nothing was changed" in refused.stderr
    replay = run("--url", v4.url, "replay", dlq, "--header", "tags~a", "--dry-run")
    assert replay.exit_code == ExitStatus.REFUSED, replay.stderr
    assert "the selection (it reads headers)" in replay.stderr, replay.stderr
    assert v4.wait_depth(dlq, 2) == 2


@pytest.mark.parametrize("selection", [[], ["--header", "x-kind~poison"]])
def test_dump_remove_of_a_remembered_poison_dlq_refuses_without_spending_attempts(v4, qname, run, tmp_path,
                                                                                  selection) -> None:
    """dump --remove under --protocol auto is a purge --backup: on a quorum DLQ this machine knows holds the char
    message (4.3) it is refused (exit 6: a 0.9.1 message there would lose its table headers over 1.0, which cannot be
    judged without a paid 0.9.1 read), with or without a selection that reads headers, and nothing is read at a cost:
    every delivery count stays, no file is written."""
    if not (versions.quorum_give_back_counts(v4.version, "lost") and versions.amqp10_peek_give_back(v4.version)):
        pytest.skip(f"RabbitMQ {v4.version}: the close of a 0.9.1 read costs nothing, or a 1.0 read does")
    dlq = _poisoned_dlq(v4, qname, "quorum")
    assert run("--url", v4.url, "peek", dlq).exit_code == 0  # pays once, remembers
    before = dict(zip(_ids_now(v4, dlq), _delivery_counts(v4, dlq), strict=True))
    out = tmp_path / "drained.jsonl"
    refused = run("--url", v4.url, "dump", dlq, "--remove", "-o", str(out), "--yes", *selection)
    assert refused.exit_code == ExitStatus.REFUSED, refused.stderr
    assert "nothing was changed" in refused.stderr, refused.stderr
    assert not out.exists() or out.stat().st_size == 0
    assert dict(zip(_ids_now(v4, dlq), _delivery_counts(v4, dlq), strict=True)) == before
