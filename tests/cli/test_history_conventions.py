"""history/peek on dead letters made by frameworks (no x-death), through a real broker.

Spring, NServiceBus and MassTransit cannot run here: their dead letters are published with the header
names, value types and shapes their sources write (each shape names its source file, in
tests/test_conventions.py), so the broker and pika encode and decode them as they would a real one.
"""

from __future__ import annotations

import orjson
import pika
import pytest

from dlxtool.cli.output import ExitStatus
from tests.test_conventions import MT, NSB, RASCAL, SPRING

pytestmark = pytest.mark.broker


def park(broker, queue: str, headers: dict, n: int = 1, body: bytes = b'{"id": 1}') -> None:
    with broker.channel() as ch:
        ch.queue_declare(queue, durable=True)
        for i in range(n):
            ch.basic_publish("", queue, body, pika.BasicProperties(headers=headers, message_id=f"m{i}",
                                                                    delivery_mode=2), mandatory=True)


def history(run, broker, queue: str, *args: str, env: dict | None = None) -> list[dict]:
    result = run("history", queue, "--url", broker.url, "-f", "json", *args, env=env)
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)


def test_summary_groups_framework_dead_letters_by_origin_and_error(run, broker, qname) -> None:
    lot = f"{qname}.parkinglot"
    park(broker, lot, SPRING, 3)
    park(broker, lot, NSB, 2)
    park(broker, lot, MT, 1)
    park(broker, lot, RASCAL, 1)
    groups = history(run, broker, lot, "--summary")
    got = sorted((g["origin"], g["convention"], g["error"], g["messages"]) for g in groups)
    assert got == sorted([
        ("orders.ex → order.created", "spring", "no stock", 3),
        ("Sales", "nservicebus", "System.InvalidOperationException: Order 42 has no lines", 2),
        ("submit-order", "masstransit", "System.TimeoutException: db timeout", 1),
        ("/:q1", "rascal", "E_BAD: bad payload", 1)])
    spring = next(g for g in groups if g["convention"] == "spring")
    assert spring["origin_route"] == {"queue": None, "exchange": "orders.ex", "routing_key": "order.created"}
    table = run("history", lot, "--url", broker.url, "--summary", "-f", "table")
    assert table.exit_code == 0 and "convention" in table.stdout.splitlines()[0]
    assert broker.queue_depth(lot) == 7


def test_each_message_says_which_convention_explained_it(run, broker, qname) -> None:
    lot = f"{qname}.parkinglot"
    park(broker, lot, SPRING)
    park(broker, lot, NSB)
    items = history(run, broker, lot)
    spring, nsb = items
    assert spring["origin"] is None and spring["origin_route"] == {
        "queue": None, "exchange": "orders.ex", "routing_key": "order.created"}
    assert spring["origin_from"] == "spring" and spring["error"] == "no stock"
    assert nsb["origin"] == "Sales" and nsb["origin_from"] == "nservicebus" and nsb["attempts"] == 3
    timelines = run("history", lot, "--url", broker.url, "-f", "table").stdout
    assert ("#0 m0: origin exchange orders.ex, routing key order.created "
            "(Spring headers: x-original-exchange/x-original-routingKey)") in timelines
    assert "#1 m0: origin Sales (NServiceBus headers: NServiceBus.FailedQ)" in timelines
    peek = run("peek", lot, "--url", broker.url, "-f", "table")
    assert peek.exit_code == 0, peek.stderr
    assert "orders.ex → order.created (spring)" in peek.stdout and "Sales (nservicebus)" in peek.stdout


def test_masstransit_error_queue_name_gives_the_origin(run, broker, qname) -> None:
    queue = f"{qname}.submit_error"
    park(broker, queue, {k: v for k, v in MT.items() if k != "MT-Fault-InputAddress"})
    [item] = history(run, broker, queue)
    assert item["origin"] == f"{qname}.submit" and item["origin_why"] == f"queue name {queue}"


def test_conflict_names_the_winner_and_origin_from_forces_one(run, broker, qname) -> None:
    """A dead letter the broker made (real x-death from orders.q), then failed by a Spring consumer."""
    work, dlq, lot = f"{qname}.work", f"{qname}.dlq", f"{qname}.lot"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq}, durable=True)
        ch.queue_declare(lot, durable=True)
        ch.basic_publish("", work, b"o", pika.BasicProperties(message_id="m0"), mandatory=True)
        method, _, _ = ch.basic_get(work)
        ch.basic_reject(method.delivery_tag, requeue=False)
    broker.wait_depth(dlq, 1)
    [(_, props, body)] = broker.drain(dlq)
    # What RepublishMessageRecoverer does with a message it received from the DLQ: keeps the headers.
    park(broker, lot, {**props.headers, **SPRING}, body=body)
    [item] = history(run, broker, lot)
    assert item["origin_from"] == "spring" and "most recent failure" in item["origin_conflict"]
    assert f"x-death says queue {work}" in item["origin_conflict"]
    [forced] = history(run, broker, lot, "--origin-from", "x-death")
    assert forced["origin"] == work and forced["origin_from"] == "x-death" and forced["origin_conflict"] is None
    summary = run("history", lot, "--url", broker.url, "--summary")
    assert "conventions name different origins" in summary.stderr
    bad = run("history", lot, "--url", broker.url, "--origin-from", "sprnig")
    assert bad.exit_code == ExitStatus.USAGE and "no such convention" in bad.stderr and "spring" in bad.stderr


def test_a_team_convention_from_the_config_file(run, broker, qname, tmp_path) -> None:
    lot = f"{qname}.lot"
    park(broker, lot, {"acme-origin": "billing.q", "acme-error": "PDF failed", "acme-tries": 4})
    config = tmp_path / "config.toml"
    config.write_text(broker.config_toml() + '[brokers.test.conventions.acme]\norigin_queue_header = "acme-origin"\n'
                      'error_headers = ["acme-error"]\nattempts_header = "acme-tries"\n')
    env = {"DLXTOOL_TEST_PASSWORD": "guest"}
    result = run("--config", str(config), "--broker", "test", "history", lot, "-f", "json", env=env)
    assert result.exit_code == 0, result.stderr
    [item] = orjson.loads(result.stdout)
    assert (item["origin"], item["origin_from"], item["error"], item["attempts"]) == ("billing.q", "acme",
                                                                                      "PDF failed", 4)
    # Without the convention the same message has no origin.
    [plain] = history(run, broker, lot)
    assert plain["origin"] is None and plain["origin_from"] is None


@pytest.mark.parametrize(("section", "message"), [
    ('[conventions.acme]\norigin_routing_key_header = "x"\n', "[conventions.acme]: origin_exchange_header is missing"),
    ('[conventions.acme]\norigin_queue_header = "q"\norigin_exchange_header = "x"\n', "not both"),
    ('[conventions.acme]\norigin_queu_header = "x"\n', "[conventions.acme]: unknown key 'origin_queu_header'"),
    ('[conventions.spring]\norigin_queue_header = "x"\n', "'spring' is a built-in convention"),
    ('[conventions.acme]\nreset_headers = ["x"]\n', "[conventions.acme]: names no header to read"),
    ('[conventions.acme]\nattempts_header = 3\n', "[conventions.acme]: attempts_header must be a string"),
])
def test_config_convention_errors_name_file_section_and_key(run, tmp_path, section, message) -> None:
    config = tmp_path / "config.toml"
    config.write_text(section)
    result = run("--config", str(config), "history", "--from", "-", input="")
    assert result.exit_code == ExitStatus.USAGE
    assert str(config) in result.stderr and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_history_from_a_file_reads_conventions_too(run, broker, qname, tmp_path) -> None:
    lot = f"{qname}.lot"
    park(broker, lot, NSB)
    dump = tmp_path / "lot.jsonl"
    assert run("dump", lot, "--url", broker.url, "-o", str(dump)).exit_code == 0
    result = run("history", "--from", str(dump), "-f", "json")
    [item] = orjson.loads(result.stdout)
    assert item["origin"] == "Sales" and item["origin_from"] == "nservicebus"



def test_summary_first_and_last_come_from_the_framework_failure_times(run, broker, qname) -> None:
    lot = f"{qname}.lot"
    park(broker, lot, NSB)
    park(broker, lot, {**NSB, "NServiceBus.TimeOfFailure": "2026-11-24 05:00:00:000000 Z"})
    [group] = history(run, broker, lot, "--summary")
    assert (group["first"], group["last"]) == ("2026-11-24T04:10:12.123456Z", "2026-11-24T05:00:00Z")
