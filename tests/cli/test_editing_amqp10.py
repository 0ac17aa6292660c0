"""`dlxtool replay DLQ --edit --protocol 1.0` on RabbitMQ 4.x (issue 39): AMQP 1.0 messages dead-lettered by the
broker (real rejects over 1.0), edited through $EDITOR (tests/support/editor.py), replayed over 1.0 and read back
at their origin over 1.0: what was edited changed, of the type it had; everything else as it was sent, section by
section. An edit with no AMQP 1.0 form is a problem in the document (exit 2, nothing moved). Skipped on 3.x, where
the refusal (exit 2) is proved instead."""

from __future__ import annotations

import json
import sys
from dataclasses import replace

import pytest

from dlxtool.amqp10_message import Amqp10Message, Body, Typed
from dlxtool.broker import versions
from tests.cli.test_editing import EDITOR
from tests.ops.test_engine_amqp10 import _as_sent, _dead_letter, _queues
from tests.support.amqp10 import read_head

pytestmark = pytest.mark.broker

pytest.importorskip("proton")


def _s(text: str) -> Typed:
    return Typed("string", text)


def _messages() -> list[Amqp10Message]:
    """A JSON order with a subject, a ulong message-id, application properties of types the 0.9.1 view changes
    (ulong 2^64-1, symbol) or keeps (int), an x-opt annotation; a message of two data sections; an amqp-value one."""
    order = Amqp10Message(
        header={"durable": Typed("boolean", True)},
        message_annotations=[(Typed("symbol", "x-opt-tenant"), _s("acme"))],
        properties={"message_id": Typed("ulong", 1000), "subject": _s("orders.created"),
                    "content_type": Typed("symbol", "application/json")},
        application_properties=[(_s("big"), Typed("ulong", 2**64 - 1)), (_s("sym"), Typed("symbol", "SYMBOL")),
                                (_s("tries"), Typed("int", 4))],
        body=Body("data", [b'{"id": 7, "currency": "EURO"}']))
    parts = Amqp10Message(properties={"message_id": _s("parts")}, body=Body("data", [b"one|", b"two"]))
    value = Amqp10Message(properties={"message_id": _s("value")},
                          body=Body("amqp-value", [Typed("map", [(_s("a"), Typed("long", 1))])]))
    return [order, parts, value]


@pytest.fixture
def edit(run, tmp_path):
    """edit(broker, dlq, *args, replace=[(old, new[, count])]) -> (result, the document the editor was shown)."""

    def _edit(broker, dlq: str, *args: str, replace: list[tuple[str, str]] = ()):
        plan, seen = tmp_path / "plan.json", tmp_path / "seen.txt"
        plan.write_text(json.dumps({"replace": list(replace), "save": True, "url": broker.url, "queue": dlq,
                                    "seen": str(seen)}))
        editor = f"{sys.executable} {EDITOR} {plan}"
        result = run("--url", broker.url, "replay", dlq, "--edit", "--protocol", "1.0", "--format", "json", *args,
                     env={"EDITOR": editor, "VISUAL": editor})
        return result, seen.read_text() if seen.exists() else None

    return _edit


def test_an_edit_over_amqp10_changes_what_was_edited_typed_as_it_was_and_nothing_else(v4, qname, edit) -> None:
    work, dlq = _queues(v4, qname)
    sent = _messages()
    _dead_letter(v4, work, sent)
    assert v4.wait_depth(dlq, 3) == 3
    result, seen = edit(v4, dlq, "--yes", replace=[
        ('"currency": "EURO"', '"currency": "EUR"'),  # the body (one data section)
        ('"sym": "SYMBOL"', '"sym": "OTHER"'),        # a symbol application property
        ('"x-opt-tenant": "acme"', '"x-opt-tenant": "globex"'),  # an annotation the view shows as a header
        ('"message_id": "1000"', '"message_id": "1001"'),        # a ulong message-id, shown as its text
    ])
    assert result.exit_code == 0, result.stderr
    assert seen is not None and seen.count("### message ") == 3
    assert json.loads(result.stdout)["moved"] == {work: 3}
    assert v4.wait_depth(dlq, 0) == 0 and v4.wait_depth(work, 3) == 3

    order, parts, value = read_head(v4, work, 3)
    [body] = order.body.sections  # one data section, as the editor saved it
    assert json.loads(body) == {"id": 7, "currency": "EUR"}
    assert order.property("message_id") == Typed("ulong", 1001)  # still a ulong
    assert order.property("subject") == _s("orders.created")      # what the 0.9.1 view drops, kept
    assert order.application_properties == [
        (_s("big"), Typed("ulong", 2**64 - 1)),  # unedited: as sent (the view shows it as -1)
        (_s("sym"), Typed("symbol", "OTHER")),   # edited: still a symbol
        (_s("tries"), Typed("int", 4))]
    assert order.annotation("x-opt-tenant") == _s("globex") and order.annotation("x-opt-deaths") is None
    provenance = order.annotation("x-opt-dlxtool-replay")
    assert provenance is not None
    assert dict((str(k.value), v.value) for k, v in provenance.value)["edited"] == "body,properties,headers"
    # the others went as they were sent, every section and type (the broker writes a header of its own when it
    # delivers a message sent without one: durable false on 4.3.6's quorum queue, true on 4.0.5's classic one)
    for got, original in ((parts, sent[1]), (value, sent[2])):
        assert original.header is None and set(got.header or {}) <= {"durable", "first_acquirer", "delivery_count"}
        assert _as_sent(replace(got, header=None)) == _as_sent(original)


def test_an_edit_with_no_amqp10_form_is_a_problem_in_the_document_and_nothing_moves(v4, qname, edit) -> None:
    work, dlq = _queues(v4, qname)
    _dead_letter(v4, work, _messages())
    assert v4.wait_depth(dlq, 3) == 3
    # a table where an application property holds simple values only
    result, _seen = edit(v4, dlq, "--yes", replace=[('"tries": 4', '"tries": {"a": 1}')])
    assert result.exit_code == 2, result.stderr
    assert "application property cannot hold" in result.stderr and "message 1 (position 0" in result.stderr
    # the body of two data sections: which one would the edit be?
    result, _seen = edit(v4, dlq, "--yes", replace=[("one|", "ONE|")])
    assert result.exit_code == 2, result.stderr
    assert "2 data sections" in result.stderr and "message 2 (position 1" in result.stderr
    assert v4.wait_depth(dlq, 3) == 3 and v4.wait_depth(work, 0) == 0


def test_a_quorum_dlq_where_give_backs_count_is_refused_before_the_editor_opens(v4, qname, edit) -> None:
    if versions.amqp10_peek_give_back(v4.version) is not None:
        pytest.skip(f"RabbitMQ {v4.version}: a 1.0 give-back spends no attempt here")
    work, dlq = _queues(v4, qname, dlq_type="quorum")
    _dead_letter(v4, work, _messages()[:1])
    assert v4.wait_depth(dlq, 1) == 1
    result, seen = edit(v4, dlq, "--yes", "--spend-attempts")
    assert result.exit_code == 6, result.stderr
    assert "counts a delivery attempt" in result.stderr and seen is None
    assert v4.wait_depth(dlq, 1) == 1
