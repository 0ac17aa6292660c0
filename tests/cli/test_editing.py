"""`dlxtool replay DLQ --edit` on the real broker, with dead letters the broker made from real rejects. The editor is
played by a script through $EDITOR (tests/support/editor.py): it rewrites the document as each test says, keeps a
copy of what it was shown, and can take a message out of the DLQ while it is "open" (a consumer taking it)."""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

import pika
import pytest
from google.protobuf.unknown_fields import UnknownFieldSet

from dlxtool.broker import versions
from proto_registry import DEMO_PROTOS, Registry
from tests.cli.test_compressed_bodies import dead_letter
from tests.cli.test_peek_decoded import demo_config, order_placed_bytes
from tests.support.codecs import CODECS
from tests.support.topologies import _take

ORDER = "shop.orders.v1.OrderPlaced"
UNKNOWN = b"\xa0\x1f\x05"  # field 500: a field a newer producer added
EDITOR = Path(__file__).parent.parent / "support" / "editor.py"
GZIP_JSON = gzip.compress(b'{"amount": 10, "currency": "EUR"}', mtime=0)


def messages() -> list[tuple[bytes, pika.BasicProperties]]:
    """A protobuf event with a field its schema does not know, a JSON one, a gzip JSON one, text, bytes."""
    return [
        (order_placed_bytes() + UNKNOWN, pika.BasicProperties(content_type="application/x-protobuf", type=ORDER,
                                                              message_id="m-proto", headers={"tenant": "acme"})),
        (b'{"id": 7, "currency": "EURO"}', pika.BasicProperties(content_type="application/json", message_id="m-json",
                                                                timestamp=1763721005, priority=3)),
        (GZIP_JSON, pika.BasicProperties(content_type="application/json", content_encoding="gzip",
                                         message_id="m-gzip")),
        (b"plain text, left alone\n", pika.BasicProperties(content_type="text/plain", message_id="m-text")),
        (b"\x00\xffbinary", pika.BasicProperties(message_id="m-bin", headers={"raw": b"\x01\x02"})),
    ]


@pytest.fixture
def edit(run, broker, tmp_path):
    """edit(dlq, *args, replace=[(old, new[, count])], save=True, take=0) -> (result, the document the editor was
    shown)."""

    def _edit(dlq: str, *args: str, replace: list[tuple[str, str]] = (), save: bool = True, take: int = 0,
              empty: bool = False):
        plan = tmp_path / "plan.json"
        seen = tmp_path / "seen.txt"
        plan.write_text(json.dumps({"replace": list(replace), "save": save, "take": take, "empty": empty,
                                    "url": broker.url, "queue": dlq, "seen": str(seen)}))
        editor = f"{sys.executable} {EDITOR} {plan}"
        env = {**demo_config(tmp_path), "EDITOR": editor, "VISUAL": editor}
        result = run("replay", dlq, "--edit", *args, "--url", broker.url, "--format", "json", env=env)
        return result, seen.read_text() if seen.exists() else None

    return _edit


def by_id(got: list) -> dict[str, tuple]:
    return {props.message_id: (props, body) for _m, props, body in got}


@pytest.mark.parametrize("codec", CODECS, indirect=True)
def test_edited_messages_are_replayed_as_edited_and_the_others_byte_for_byte(codec, edit, broker, qname) -> None:
    """On each wire codec: the engine's deliveries (decoded by dlxtool's codec, or pika's) are found again by the
    fingerprint of the peek reader's."""
    sent = messages()
    topo = dead_letter(broker, qname, sent)
    result, seen = edit(topo.dlq, "--yes", replace=[
        ('"currencyCode": "EUR"', '"currencyCode": "USD"'),    # protobuf: one field of a nested message
        ('"currency": "EURO"', '"currency": "EUR"'),             # JSON
        ('"amount": 10', '"amount": 11'),                       # gzip JSON
        ('"tenant": "acme"', '"tenant": "acme-eu"'),           # a header
    ])
    assert result.exit_code == 0, result.stderr
    assert seen is not None and f"### body: protobuf {ORDER} as its JSON mapping" in seen
    assert "field 500: unknown to" in seen and "### body: JSON, gzip-compressed: shown inflated" in seen
    assert json.loads(result.stdout)["moved"] == {topo.work: 5}
    assert broker.queue_depth(topo.dlq) == 0
    # the diff and the fidelity rules were said before the question
    assert '-    "currencyCode": "EUR",' in result.stderr and '+    "currencyCode": "USD",' in result.stderr
    assert "fields serialised in field-number order" in result.stderr and "compressed again with gzip" in result.stderr
    assert "unchanged, replayed as they are: message 4, 5" in result.stderr

    got = by_id(broker.drain(topo.work))
    props, body = got["m-proto"]
    order = Registry.load([DEMO_PROTOS]).message_class(ORDER).FromString(body)
    assert order.total.currency_code == "USD" and order.total.units == 129 and order.order_id == "ord-42"
    assert [(f.field_number, f.data) for f in UnknownFieldSet(order)] == [(500, 5)]  # the unknown field survived
    assert props.headers["tenant"] == "acme-eu" and "x-death" not in props.headers  # edited; counts reset
    prov = props.headers["dlxtool-replay"]
    assert prov["edited"] == "body,headers" and prov["count"] == 1 and prov["from"] == topo.dlq
    assert prov["original-sha256"] == hashlib.sha256(sent[0][0]).hexdigest()

    props, body = got["m-json"]
    assert body == b'{\n  "id": 7,\n  "currency": "EUR"\n}'  # as the editor saved it
    assert (props.timestamp, props.priority, props.content_type) == (1763721005, 3, "application/json")
    props, body = got["m-gzip"]
    assert props.content_encoding == "gzip" and gzip.decompress(body) == b'{\n  "amount": 11,\n  "currency": "EUR"\n}'
    for mid, (body, _props) in {"m-text": sent[3], "m-bin": sent[4]}.items():
        props, got_body = got[mid]
        assert got_body == body, mid  # unchanged: byte for byte
        assert "edited" not in props.headers["dlxtool-replay"] and "original-sha256" not in props.headers[
            "dlxtool-replay"]
    assert got["m-bin"][0].headers["raw"] == b"\x01\x02"


def test_an_unedited_document_replays_exactly_as_replay_does(edit, run, broker, qname) -> None:
    """Saved without a change: each message goes out as a plain replay sends it (same bytes, properties and headers
    but the provenance's id and time)."""
    sent = messages()
    first = dead_letter(broker, qname, sent)
    second = dead_letter(broker, qname + "b", sent)
    result, _seen = edit(first.dlq, "--yes", replace=[("\n### message 1", "\n\n### message 1")])
    assert result.exit_code == 0, result.stderr
    plain = run("replay", second.dlq, "--yes", "--url", broker.url, "--format", "json")
    assert plain.exit_code == 0, plain.stderr
    edited, replayed = by_id(broker.drain(first.work)), by_id(broker.drain(second.work))
    assert edited.keys() == replayed.keys() == {p.message_id for _b, p in sent}
    for mid, (props, body) in edited.items():
        other_props, other_body = replayed[mid]
        assert body == other_body
        mine, theirs = dict(props.headers), dict(other_props.headers)
        p1, p2 = mine.pop("dlxtool-replay"), theirs.pop("dlxtool-replay")
        assert mine == theirs
        for volatile in ("id", "at", "from"):
            p1.pop(volatile), p2.pop(volatile)
        assert repr(p1).replace(first.work, "ORIGIN") == repr(p2).replace(second.work, "ORIGIN"), mid
        assert "edited" not in p1 and "original-sha256" not in p1
        for name in ("content_type", "content_encoding", "delivery_mode", "priority", "timestamp", "type",
                     "message_id"):
            assert getattr(props, name) == getattr(other_props, name), (mid, name)


def test_quitting_without_saving_or_an_empty_document_changes_nothing(edit, broker, qname) -> None:
    sent = messages()
    topo = dead_letter(broker, qname, sent)
    before = broker.snapshot(topo.dlq)
    result, seen = edit(topo.dlq, "--yes", save=False)
    assert result.exit_code == 0, result.stderr
    assert seen is not None and "closed without saving: nothing changed" in result.stderr
    result, _seen = edit(topo.dlq, "--yes", empty=True)
    assert result.exit_code == 0, result.stderr
    assert "nothing changed" in result.stderr
    assert [b for b, _h in broker.snapshot(topo.dlq)] == [b for b, _h in before]
    assert broker.queue_depth(topo.work) == 0


def test_an_editor_that_fails_or_is_missing_changes_nothing_and_says_so(run, broker, qname) -> None:
    """An editor that exits with an error (vim's :cq) or cannot be started: exit 2 with what happened, no
    traceback, nothing replayed."""
    topo = dead_letter(broker, qname, messages()[:1])
    for editor in ("false", "/nonexistent/editor"):
        result = run("replay", topo.dlq, "--edit", "--yes", "--url", broker.url, env={"EDITOR": editor,
                                                                                      "VISUAL": editor})
        assert result.exit_code == 2, result.output
        assert "the editor did not finish" in result.stderr and "nothing was replayed" in result.stderr
        assert "Traceback" not in result.output
    assert broker.queue_depth(topo.dlq) == 1 and broker.queue_depth(topo.work) == 0


def test_a_problem_is_named_with_its_message_and_line_and_nothing_changes(edit, broker, qname) -> None:
    topo = dead_letter(broker, qname, messages())
    result, seen = edit(topo.dlq, "--yes", replace=[('"currencyCode": "EUR"', '"currency": "EUR"'),
                                                    ('"id": 7', '"id": 7,,')])
    assert result.exit_code == 2
    assert seen is not None
    lines = seen.replace('"currencyCode": "EUR"', '"currency": "EUR"').split("\n")
    at = next(i for i, line in enumerate(lines, 1) if '"currency": "EUR"' in line)
    assert f"message 1, body (line {at}): {ORDER}: Failed to parse total field" in result.stderr
    assert "message 2, body (line" in result.stderr and "not valid JSON" in result.stderr
    assert "2 problem(s) in the edited messages (above): nothing was replayed" in result.stderr
    assert broker.queue_depth(topo.dlq) == 5 and broker.queue_depth(topo.work) == 0


def test_a_message_gone_meanwhile_is_reported_and_a_deleted_section_stays(edit, broker, qname) -> None:
    sent = messages()
    topo = dead_letter(broker, qname, sent)
    # while the editor is open a consumer takes the head of the DLQ (message 1); section 3 is deleted
    result, seen = edit(topo.dlq, "--yes", take=1, replace=[("@section 3", "")])
    assert result.exit_code == 5, result.stderr
    assert "message 1 (position 0, message_id 'm-proto') was not found in" in result.stderr
    assert "left out (its section was deleted)" in result.stderr
    assert json.loads(result.stdout)["moved"] == {topo.work: 3}
    assert sorted(p.message_id for _m, p, _b in broker.drain(topo.work)) == ["m-bin", "m-json", "m-text"]
    assert [p.message_id for _m, p, _b in broker.drain(topo.dlq)] == ["m-gzip"]


def test_dry_run_and_an_unconfirmed_run_change_nothing(edit, broker, qname) -> None:
    topo = dead_letter(broker, qname, messages())
    result, _seen = edit(topo.dlq, "--dry-run", replace=[('"id": 7', '"id": 8')])
    assert result.exit_code == 0, result.stderr
    assert '+  "id": 8,' in result.stderr and "dry run: nothing was replayed" in result.stderr
    result, _seen = edit(topo.dlq, replace=[('"id": 7', '"id": 8')])  # no --yes, no terminal to ask on
    assert result.exit_code == 6 and "not confirmed" in result.stderr
    assert broker.queue_depth(topo.dlq) == 5 and broker.queue_depth(topo.work) == 0


def test_the_selection_picks_what_is_shown_and_the_journal_records_the_edit(edit, run, broker, qname) -> None:
    topo = dead_letter(broker, qname, messages())
    result, seen = edit(topo.dlq, "--yes", "--body-contains", "EURO", replace=[('"EURO"', '"EUR"')])
    assert result.exit_code == 0, result.stderr
    assert seen is not None and seen.count("### message ") == 1 and "### message 1 of 1" in seen
    assert [p.message_id for _m, p, _b in broker.drain(topo.work)] == ["m-json"]
    assert broker.queue_depth(topo.dlq) == 4
    runs = json.loads(run("journal", "--format", "json").stdout)
    assert runs[-1]["command"] == "replay --edit" and runs[-1]["status"] == "ok"
    counts = runs[-1]["counts"]
    assert (counts["moved"], counts["edited"], counts["bodies_edited"], counts["vanished"]) == (1, 1, 1, 0)


def test_peek_options_are_the_plans_too(run, broker, qname) -> None:
    """--max-unacked, --allow-reorder and --spend-attempts read the messages --edit shows, and replay's plan
    without --edit (tests/cli/test_replay_plan_quorum.py): no usage error either way."""
    with broker.channel() as ch:
        ch.queue_declare(f"{qname}.dlq", durable=True)
    result = run("replay", f"{qname}.dlq", "--spend-attempts", "--max-unacked", "5", "--dry-run", "--url", broker.url)
    assert result.exit_code == 0, result.output


def test_a_quorum_dlq_is_read_under_peeks_rules(edit, broker, qname) -> None:
    """The messages are read as `peek` reads them: where a give-back costs a delivery attempt (3.x, 4.0-4.2) a DLQ
    with a delivery limit is refused before the editor opens, nothing changed; --spend-attempts accepts the cost.
    Where it costs none (4.3), the edit goes ahead without it."""
    from dlxtool.broker.versions import quorum_give_back_counts
    from tests.cli.test_replay_plan_quorum import quorum_dlq

    top, bodies = quorum_dlq(broker, qname, 3, **{"x-delivery-limit": 5})
    result, seen = edit(top.dlq, "--yes", replace=[("### message 1", "### message 1")])
    if quorum_give_back_counts(broker.version, "nack"):
        assert result.exit_code == 6 and "--spend-attempts" in result.stderr
        assert seen is None  # the editor never opened
        assert broker.queue_depth(top.dlq) == 3
        result, seen = edit(top.dlq, "--yes", "--spend-attempts", replace=[("### message 1", "### message 1")])
    assert result.exit_code == 0, result.stderr
    assert seen is not None and seen.count("### message ") == 3
    assert sorted(body for _m, _p, body in broker.drain(f"{qname}.origin")) == sorted(bodies)


def test_history_tells_an_edited_copy_that_failed_again(edit, run, broker, qname) -> None:
    sent = messages()
    topo = dead_letter(broker, qname, sent)
    result, _seen = edit(topo.dlq, "--yes", "--body-contains", "EURO", replace=[('"EURO"', '"EUR"')])
    assert result.exit_code == 0, result.stderr
    with broker.channel() as ch:  # the fixed message fails again at its origin
        method, _props, _body = ch.basic_get(topo.work)
        ch.basic_reject(method.delivery_tag, requeue=False)
    assert broker.wait_depth(topo.dlq, 5) == 5
    items = json.loads(run("history", topo.dlq, "--url", broker.url, "--format", "json").stdout)
    [again] = [i for i in items if i.get("replayed")]
    assert again["replayed"]["edited"] == "body"
    assert again["replayed"]["original_sha256"] == hashlib.sha256(sent[1][0]).hexdigest()
    lines = run("history", topo.dlq, "--url", broker.url, "-f", "table").stdout
    assert "edited (body) by that replay" in lines


def twin_copies(broker, qname: str) -> tuple[str, str, str]:
    """One fanout publish that fails in two queues, `billing` and `shipping` (real rejects, shipping's first): two
    dead letters in the DLQ with the same body and properties, one per origin, shipping's at the head."""
    dlq, billing, shipping = f"{qname}.dlq", f"{qname}.billing", f"{qname}.shipping"
    with broker.channel() as ch:
        ch.exchange_declare(f"{qname}.dlx", "fanout")
        ch.queue_declare(dlq, durable=True)
        ch.queue_bind(dlq, f"{qname}.dlx")
        ch.exchange_declare(f"{qname}.events", "fanout")
        for queue in (shipping, billing):
            ch.queue_declare(queue, durable=True, arguments={"x-dead-letter-exchange": f"{qname}.dlx"})
            ch.queue_bind(queue, f"{qname}.events")
        ch.basic_publish(f"{qname}.events", "order.placed", b'{"order": 1, "amount": 10}',
                         pika.BasicProperties(content_type="application/json", message_id="m-twin"))
        for queue in (shipping, billing):
            ch.basic_reject(_take(ch, queue), requeue=False)
    assert broker.wait_depth(dlq, 2) == 2
    return dlq, billing, shipping


def _over(protocol: str, broker) -> tuple[str, ...]:
    """The replay's --protocol (1.0: skipped where the broker has no AMQP 1.0)."""
    if protocol == "1.0" and not versions.speaks_amqp10(broker.version):
        pytest.skip(f"RabbitMQ {broker.version}: no AMQP 1.0")
    return ("--protocol", protocol)


@pytest.mark.parametrize("protocol", ["0-9-1", "1.0"])
def test_twin_copies_of_one_fanout_publish_the_copy_shown_is_the_copy_replayed(edit, broker, qname, protocol) -> None:
    """--origin billing shows billing's copy; the replay publishes that copy, edited, to billing — not shipping's
    (which has the same fingerprint and sits first in the DLQ) — and the question names the destination. Over
    either protocol: each reads the copies, and finds them again, its own way."""
    over = _over(protocol, broker)
    dlq, billing, shipping = twin_copies(broker, qname)
    # no terminal to ask on: refused, the question (naming where the message goes) in the refusal, nothing changed
    result, _seen = edit(dlq, "--origin", billing, *over, replace=[('"amount": 10', '"amount": 11')])
    assert result.exit_code == 6, result.stderr
    assert f"1 to '{billing}'?" in result.stderr and shipping not in result.stderr
    assert broker.queue_depth(dlq) == 2

    result, seen = edit(dlq, "--yes", "--origin", billing, *over, replace=[('"amount": 10', '"amount": 11')])
    assert result.exit_code == 0, result.stderr
    assert seen is not None and seen.count("### message ") == 1
    assert f"goes to '{billing}'" in result.stderr
    assert json.loads(result.stdout)["moved"] == {billing: 1}
    [(_m, props, body)] = broker.drain(billing)
    # over 1.0 the provenance travels as the annotation x-opt-dlxtool-replay, which a 0.9.1 reader gets as a header
    provenance = props.headers["dlxtool-replay" if protocol == "0-9-1" else "x-opt-dlxtool-replay"]
    assert json.loads(body) == {"order": 1, "amount": 11} and provenance["edited"] == "body"
    assert broker.queue_depth(shipping) == 0
    [(_m, props, body)] = broker.drain(dlq)  # shipping's copy stays, as it was
    assert body == b'{"order": 1, "amount": 10}' and props.headers["x-death"][0]["queue"] == shipping


@pytest.mark.parametrize("protocol", ["0-9-1", "1.0"])
def test_twin_copies_each_go_to_their_own_origin(edit, broker, qname, protocol) -> None:
    """Both copies shown and edited differently: each edit goes with its own delivery to its own origin."""
    over = _over(protocol, broker)
    dlq, billing, shipping = twin_copies(broker, qname)
    result, seen = edit(dlq, "--yes", *over, replace=[('"amount": 10', '"amount": 11', 1)])  # the first: shipping's
    assert result.exit_code == 0, result.stderr
    assert seen is not None and seen.index(shipping) < seen.index(billing)
    assert json.loads(result.stdout)["moved"] == {billing: 1, shipping: 1}
    [(_m, _p, shipped)] = broker.drain(shipping)
    [(_m, _p, billed)] = broker.drain(billing)
    assert json.loads(shipped)["amount"] == 11 and json.loads(billed)["amount"] == 10
