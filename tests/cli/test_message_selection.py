"""Issue 37, against the broker: every message can be named and picked (message id column, --message-id(s), the
--not- forms, dry runs that list ids), and a summary covers what it says (whole queue up to its bound, failures
grouped by fingerprint, attempts counted as handled). The dead letters come from real rejects and TTL expiry."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pika

from dlxtool.cli.output import ExitStatus
from tests.support.broker import BrokerEnv


def dlq_of(broker: BrokerEnv, prefix: str) -> tuple[str, str, str]:
    """work (DLX → DLQ) and a TTL queue dead-lettering into the same DLQ: (work, ttl, dlq)."""
    work, ttl, dlx, dlq = f"{prefix}.work", f"{prefix}.ttl", f"{prefix}.dlx", f"{prefix}.dlq"
    with broker.channel() as ch:
        ch.exchange_declare(dlx, "fanout")
        ch.queue_declare(dlq, durable=True)
        ch.queue_bind(dlq, dlx)
        ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": dlx})
        ch.queue_declare(ttl, durable=True, arguments={"x-dead-letter-exchange": dlx, "x-message-ttl": 30})
    return work, ttl, dlq


def reject_into(broker: BrokerEnv, work: str, messages: list[tuple[bytes, dict[str, Any]]]) -> None:
    """Publish (body, properties) to `work`, then take each and reject it (requeue=false): the broker dead-letters."""
    with broker.channel() as ch:
        for body, props in messages:
            ch.basic_publish("", work, body, pika.BasicProperties(delivery_mode=2, **props), mandatory=True)
        for _ in messages:
            deadline = time.monotonic() + 15
            while (got := ch.basic_get(work, auto_ack=False))[0] is None:
                assert time.monotonic() < deadline, f"nothing came to {work}"
                time.sleep(0.02)
            ch.basic_reject(got[0].delivery_tag, requeue=False)


def expire_into(broker: BrokerEnv, ttl: str, messages: list[tuple[bytes, dict[str, Any]]]) -> None:
    with broker.channel() as ch:
        for body, props in messages:
            ch.basic_publish("", ttl, body, pika.BasicProperties(**props), mandatory=True)


def ok(result: Any) -> Any:
    assert result.exit_code == 0, result.stderr
    return result


def as_json(result: Any) -> Any:
    return orjson.loads(ok(result).stdout)


def ids_of(records: list[dict[str, Any]]) -> list[str | None]:
    return [r["properties"].get("message_id") for r in records]


def mixed_dlq(broker: BrokerEnv, qname: str) -> tuple[str, str]:
    """m-0..m-2 (type A, error 'boom N') and two messages without a message_id (type B) rejected; e-0, e-1 expired."""
    work, ttl, dlq = dlq_of(broker, qname)
    reject_into(broker, work, [
        *((f"order {i}".encode(), {"message_id": f"m-{i}", "type": "shop.v1.A",
                                   "headers": {"x-exception-message": f"boom {i}"}}) for i in range(3)),
        (b"anonymous one", {"type": "shop.v1.B"}), (b"anonymous two", {"type": "shop.v1.B"})])
    expire_into(broker, ttl, [(f"late {i}".encode(), {"message_id": f"e-{i}"}) for i in range(2)])
    assert broker.wait_depth(dlq, 7) == 7
    return work, dlq


def test_peek_and_history_name_every_message_and_message_id_picks_it(run, broker, qname, tmp_path) -> None:
    work, dlq = mixed_dlq(broker, qname)
    url = ("--url", broker.url)
    table = ok(run("peek", dlq, *url, "-f", "table")).stdout.splitlines()
    assert table[0].split()[:3] == ["#", "message", "id"]
    names = [row.split()[1] for row in table[2:9]]
    assert names[:3] == ["m-0", "m-1", "m-2"] and names[5:] == ["e-0", "e-1"]
    anonymous = names[3:5]
    assert all(n.startswith("fp:") and len(n) == 19 for n in anonymous) and anonymous[0] != anonymous[1]
    # the same names the next time (the message is redelivered now) and in history, in its table and its JSON
    again = ok(run("peek", dlq, *url, "-f", "table")).stdout.splitlines()
    assert [row.split()[1] for row in again[2:9]] == names
    timelines = ok(run("history", dlq, *url, "-f", "table")).stdout
    assert f"#3 {anonymous[0]}: origin {work} (x-death" in timelines and f"#0 m-0: origin {work}" in timelines
    items = as_json(run("history", dlq, *url, "-f", "json"))
    assert [i["fingerprint"] for i in items[3:5]] == anonymous and items[0]["message_id"] == "m-0"

    def picked(*args: str, input: str | None = None) -> list[str | None]:
        return ids_of(as_json(run("peek", dlq, *url, "-f", "json", *args, input=input)))

    assert picked("--message-id", "m-1") == ["m-1"]
    assert picked("--message-id", "m-2", "--message-id", anonymous[1]) == ["m-2", None]
    assert picked("--message-id", anonymous[1][:11], "-f", "json") == [None]  # fp: + its first 8 digits
    ids = tmp_path / "ids.txt"
    ids.write_text(f"m-0\n\n  e-1  \n{anonymous[0]}\n")
    assert picked("--message-ids", str(ids)) == ["m-0", None, "e-1"]
    assert picked("--message-ids", "-", input="m-2\ne-0\n") == ["m-2", "e-0"]
    assert picked("--not-message-ids", str(ids), "--not-message-id", "m-1") == ["m-2", None, "e-0"]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    refused = run("peek", dlq, *url, "--message-ids", str(empty))
    assert refused.exit_code == ExitStatus.USAGE and "no message id in it" in refused.stderr
    both = run("history", "--from", "-", "--message-ids", "-")
    assert both.exit_code == ExitStatus.USAGE and "both would read stdin" in both.stderr
    assert broker.queue_depth(dlq) == 7


def test_a_fingerprint_name_is_the_src_a_replay_records(run, broker, qname) -> None:
    """The fp: name is the replay fingerprint: the copy at the origin carries it as its provenance's src."""
    work, dlq = mixed_dlq(broker, qname)
    items = as_json(run("history", dlq, "--url", broker.url, "-f", "json"))
    name = items[4]["fingerprint"]
    moved = ok(run("replay", dlq, "--url", broker.url, "--message-id", name, "--yes", "-f", "json"))
    assert orjson.loads(moved.stdout)["moved"] == {work: 1}
    [(_method, props, body)] = broker.drain(work)
    assert body == b"anonymous two" and props.headers["dlxtool-replay"]["src"] == name[3:]


def test_every_reading_command_takes_the_excluding_forms(run, broker, qname) -> None:
    """--not-reason expired, --not-type, --not-error in peek, history, dump, replay --dry-run and purge --dry-run:
    each leaves out what its including form selects."""
    _work, dlq = mixed_dlq(broker, qname)
    url = ("--url", broker.url)
    rejected = ["m-0", "m-1", "m-2", None, None]
    assert ids_of(as_json(run("peek", dlq, *url, "--not-reason", "expired", "-f", "json"))) == rejected
    assert ids_of(as_json(run("peek", dlq, *url, "--reason", "expired", "-f", "json"))) == ["e-0", "e-1"]
    history = as_json(run("history", dlq, *url, "--not-type", "A", "--not-type", "shop.v1.B", "-f", "json"))
    assert [i["message_id"] for i in history] == ["e-0", "e-1"]
    dump = ok(run("dump", dlq, *url, "--not-error", "^boom [01]$")).stdout.splitlines()
    assert [orjson.loads(line)["properties"].get("message_id") for line in dump] == ["m-2", None, None, "e-0", "e-1"]
    plan = as_json(run("replay", dlq, *url, "--dry-run", "--not-reason", "expired", "--not-message-id", "m-1",
                       "-f", "json"))["plan"]
    assert plan["message_ids"][:2] == ["m-0", "m-2"] and len(plan["message_ids"]) == 4
    assert plan["stay_message_ids"]["not selected"] == ["m-1", "e-0", "e-1"]
    purge = as_json(run("purge", dlq, *url, "--dry-run", "--reason", "rejected", "--not-type", "B", "-f", "json"))
    assert (purge["would_remove"], purge["message_ids"]) == (3, ["m-0", "m-1", "m-2"])
    assert purge["filters"] == {"reasons": ["rejected"], "not_types": ["B"]}
    assert broker.queue_depth(dlq) == 7


def test_dry_runs_list_the_ids_they_would_move(run, broker, qname) -> None:
    """Table: the first 10 and how many; JSON: all of them. A whole-queue purge reads nothing: no ids, said so."""
    work, _ttl, dlq = dlq_of(broker, qname)
    reject_into(broker, work, [(b"x%d" % i, {"message_id": f"o-{i:05d}"}) for i in range(14)])
    assert broker.wait_depth(dlq, 14) == 14
    url = ("--url", broker.url)
    table = ok(run("replay", dlq, *url, "--dry-run", "-f", "table")).stdout.splitlines()
    at = table.index("message ids it would replay (the first 10 of 14; --format json lists all):")
    assert [line.split() for line in table[at + 1:at + 12]] == [
        *([work, f"o-{i:05d}"] for i in range(10)), ["…", "and", "4", "more"]]
    plan = as_json(run("replay", dlq, *url, "--dry-run", "-f", "json"))["plan"]
    assert plan["message_ids"] == [f"o-{i:05d}" for i in range(14)] == plan["origins"][0]["message_ids"]
    few = ok(run("replay", dlq, *url, "--dry-run", "--message-id", "o-00003", "-f", "table")).stdout
    assert "message ids it would replay (1):\n  " + work + "  o-00003\n" in few
    purge = ok(run("purge", dlq, *url, "--dry-run", "--body-matches", "x1", "-f", "table"))
    assert "message ids it would remove (5):\n  o-00001\n  o-00010\n  o-00011\n  o-00012\n  o-00013\n" in purge.stdout
    whole = run("purge", dlq, *url, "--dry-run", "-f", "json")
    assert as_json(whole)["message_ids"] is None and "no message ids: without a selection" in whole.stderr
    assert broker.queue_depth(dlq) == 14


def test_a_summary_groups_errors_that_differ_only_in_ids_numbers_and_times(run, broker, qname) -> None:
    """The issue's `ValueError: order o-00013 has no lines` and `… o-00058 …` are one group (with one example and
    how many texts it stands for); --ungrouped gives the raw texts."""
    work, ttl, dlq = dlq_of(broker, qname)
    reject_into(broker, work, [
        *((b"o", {"message_id": f"o-{n:05d}", "headers": {"x-exception-message": f"ValueError: order o-{n:05d} has "
                                                                                  f"no lines (at 22:30:{n % 60:02d})"}})
          for n in (13, 58, 71, 99)),
        *((b"s", {"headers": {"x-exception-message": f"KeyError: sku-{h} not in stock"}})
          for h in ("3bb292a1", "106db5e1"))])
    expire_into(broker, ttl, [(b"late", {"message_id": "late-1"})])
    assert broker.wait_depth(dlq, 7) == 7
    url = ("--url", broker.url)
    groups = as_json(run("history", dlq, *url, "--summary", "-f", "json"))
    by_pattern = {g["error_pattern"]: g for g in groups}
    orders = by_pattern["ValueError: order o-<n> has no lines (at <time>)"]
    assert (orders["messages"], orders["error_texts"], orders["error"]) == (
        4, 4, "ValueError: order o-00013 has no lines (at 22:30:13)")
    assert orders["message_ids"] == ["o-00013", "o-00058", "o-00071", "o-00099"]
    assert by_pattern["KeyError: sku-<id> not in stock"]["messages"] == 2
    assert len(groups) == 3  # the expired one has no error: a group of its own
    table = ok(run("history", dlq, *url, "--summary", "-f", "table", "-v")).stdout
    assert "ValueError: order o-00013 has no lines (at 22:30:13) (+3 like it)" in table
    raw = as_json(run("history", dlq, *url, "--summary", "--ungrouped", "-f", "json"))
    assert len(raw) == 7 and all(g["messages"] == 1 for g in raw)
    raw = as_json(run("history", dlq, *url, "--summary", "--ungrouped", "--not-reason", "expired", "--not-error",
                      "KeyError", "-f", "json"))
    assert sorted(g["example_message_id"] for g in raw) == ["o-00013", "o-00058", "o-00071", "o-00099"]


SPRING_STACK = """org.springframework.amqp.rabbit.support.ListenerExecutionFailedException: Listener threw exception
\tat org.springframework.amqp.rabbit.listener.AbstractMessageListenerContainer.doInvokeListener(A.java:1663)
Caused by: java.lang.IllegalStateException: {text}
\tat com.acme.orders.{where}(OrderValidator.java:{line})
\tat com.acme.orders.OrderListener.onOrder(OrderListener.java:17)
\t... 12 more"""


def test_a_summary_groups_spring_failures_by_exception_and_first_application_frame(run, broker, qname) -> None:
    """Spring's republish recoverer parks failures with their stack: grouped by the root cause's type and the first
    application frame, whatever the message text or line number; another throw site is another group."""
    lot = f"{qname}.parking"
    failures = [("order 1 has no lines", "OrderValidator.validate", 42),
                ("customer Zoë is blocked", "OrderValidator.validate", 51),
                ("order 3 has no lines", "OrderValidator.validate", 42),
                ("order 4 has no lines", "Pricing.total", 7)]
    with broker.channel() as ch:
        ch.queue_declare(lot, durable=True)
        for i, (text, where, line) in enumerate(failures):
            headers = {"x-exception-message": text, "x-original-exchange": "orders.ex",
                       "x-original-routingKey": "order.created",
                       "x-exception-stacktrace": SPRING_STACK.format(text=text, where=where, line=line)}
            ch.basic_publish("", lot, b"{}", pika.BasicProperties(message_id=f"s-{i}", headers=headers),
                             mandatory=True)
    groups = as_json(run("history", lot, "--url", broker.url, "--summary", "-f", "json"))
    assert sorted((g["exception"], g["frame"], g["messages"], g["message_ids"][0]) for g in groups) == [
        ("java.lang.IllegalStateException", "com.acme.orders.OrderValidator.validate", 3, "s-0"),
        ("java.lang.IllegalStateException", "com.acme.orders.Pricing.total", 1, "s-3")]
    table = ok(run("history", lot, "--url", broker.url, "--summary", "-f", "table", "-v")).stdout
    assert "order 1 has no lines at OrderValidator.validate (+2 like it)" in table


def test_attempts_count_every_handling(run, broker, qname) -> None:
    """The demo's consumer: it fails a message, sends it round a TTL wait queue with x-retry-count + 1, and at the
    third failure rejects it (the broker dead-letters it). x-retry-count says 2; the message was handled three
    times, and history says 3 ("3 each"), not 2 — on 3.x (x-death keeps counting) and 4.x (it restarts) alike."""
    work, _ttl, dlq = dlq_of(broker, qname)
    retry, wait = f"{qname}.retry", f"{qname}.wait"
    handled: dict[str, int] = {}
    with broker.channel() as ch:
        ch.exchange_declare(retry, "direct")
        ch.queue_declare(wait, durable=True, arguments={"x-message-ttl": 30, "x-dead-letter-exchange": ""})
        ch.queue_bind(wait, retry, work)
        for i in range(3):
            ch.basic_publish("", work, b"p", pika.BasicProperties(message_id=f"p-{i}"), mandatory=True)
        deadline = time.monotonic() + 30
        while sum(handled.values()) < 9:
            assert time.monotonic() < deadline, handled
            method, props, body = ch.basic_get(work, auto_ack=False)
            if method is None:
                time.sleep(0.02)
                continue
            handled[props.message_id] = handled.get(props.message_id, 0) + 1
            headers = dict(props.headers or {})
            attempt = int(headers.get("x-retry-count", 0)) + 1
            if attempt >= 3:
                ch.basic_reject(method.delivery_tag, requeue=False)
                continue
            headers["x-retry-count"] = attempt
            ch.basic_publish(retry, work, body, pika.BasicProperties(message_id=props.message_id, headers=headers))
            ch.basic_ack(method.delivery_tag)
    assert broker.wait_depth(dlq, 3) == 3 and set(handled.values()) == {3}
    items = as_json(run("history", dlq, "--url", broker.url, "-f", "json"))
    assert [(i["message_id"], i["attempts"]) for i in items] == [(f"p-{i}", handled[f"p-{i}"]) for i in range(3)]
    assert {i["retry_headers"]["x-retry-count"] for i in items} == {2}
    assert {i["attempts_from"] for i in items} == {"retry-headers: x-retry-count + 1 (the first try, then each retry)"}
    [group] = as_json(run("history", dlq, "--url", broker.url, "--summary", "-f", "json"))
    assert (group["attempts"], group["attempts_per_message"]) == (9, [3, 3])
    table = ok(run("history", dlq, "--url", broker.url, "--summary", "-f", "table")).stdout
    assert "  3 each  " in table
