"""What peek, history and replay's tables say in a few words, on the real broker: an error column, the headers of a
dead letter no convention explains with a config entry that would read them, reasons cut to their first clause."""

from __future__ import annotations

import orjson
import pika
import pytest

from dlxtool.cli.output import ExitStatus
from tests.cli.test_history_conventions import park
from tests.support import topologies

pytestmark = [pytest.mark.broker, pytest.mark.once]  # once: no broker version decides these (3.x pass only)

MOLECULER = {"x-original-channel": "order.created", "x-original-group": "payments"}
LONG_ERROR = "IllegalStateException: " + "the payment provider answered 502 Bad Gateway; " * 7  # 300+ characters


def table(run, broker, *args: str, env: dict | None = None):
    result = run(*args, "--url", broker.url, "-f", "table", env=env)
    assert result.exit_code == 0, result.stderr
    return result


def test_a_dead_letter_no_convention_explains_shows_its_headers_and_the_entry_that_reads_them(
        run, broker, qname, tmp_path) -> None:
    """@moleculer/channels' dead letters carry x-original-channel and x-original-group only."""
    dlq = f"{qname}.DEAD_LETTER"
    park(broker, dlq, MOLECULER, n=2)
    result = table(run, broker, "peek", dlq)
    rows = result.stdout.splitlines()[2:]
    assert len(rows) == 2 and all("? headers: x-original-channel, x-original-group" in row for row in rows)
    assert "no convention names an origin for 2 message(s) here" in result.stderr
    snippet = result.stderr.split("e.g.:\n")[1].splitlines()
    assert snippet[:3] == ["  [conventions.my-framework]", '  origin_exchange_header = "x-original-channel"',
                           "  # also present: x-original-group"]
    history = table(run, broker, "history", dlq)
    assert history.stdout.startswith("#0 m0: origin ? (no convention names an origin; its headers: x-original-channel, "
                                     "x-original-group), 0 deaths")
    assert '  origin_exchange_header = "x-original-channel"' in history.stderr.splitlines()
    [item, _] = orjson.loads(run("history", dlq, "--url", broker.url, "-f", "json").stdout)
    assert item["unexplained_headers"] == ["x-original-channel", "x-original-group"]
    # the entry printed, put in the config file: the origin is the channel's exchange, and the hint is gone
    config = tmp_path / "config.toml"
    entry = [line.strip().replace("[conventions.", "[brokers.test.conventions.") for line in snippet[:3]]
    config.write_text(broker.config_toml() + "\n".join(entry) + "\n")
    env = {"DLXTOOL_TEST_PASSWORD": "guest"}
    explained = run("--config", str(config), "--broker", "test", "peek", dlq, "-f", "table", env=env)
    assert explained.exit_code == 0, explained.stderr
    assert "order.created (empty key) (my-framework)" in explained.stdout
    assert "no convention names an origin" not in explained.stderr


def test_a_work_queues_messages_get_no_hint(run, broker, qname) -> None:
    """A message in a work queue never failed: no origin is normal there, and its headers are not a framework's."""
    park(broker, f"{qname}.orders", {"tenant": "acme"})
    result = table(run, broker, "peek", f"{qname}.orders")
    assert "? headers" not in result.stdout and "[conventions" not in result.stderr


def test_peek_shows_the_error_shortened_and_whole_with_v(run, broker, qname) -> None:
    topo = topologies.reject_to_dlq(broker, qname, 1, error=LONG_ERROR)
    result = table(run, broker, "peek", topo.dlq)
    header, _, row = result.stdout.splitlines()
    assert header.split()[-3:] == ["origin", "error", "body"]
    assert "IllegalStateException: the payment…" in row and LONG_ERROR.strip() not in row
    assert "-v or --format json shows them whole" in result.stderr
    whole = table(run, broker, "-v", "peek", topo.dlq)
    assert " ".join(LONG_ERROR.split()) in whole.stdout
    plain = topologies.reject_to_dlq(broker, f"{qname}-plain", 1)
    assert "error" not in table(run, broker, "peek", plain.dlq).stdout.splitlines()[0].split()


def test_a_long_reason_in_the_replay_plan_is_cut_to_its_first_clause(run, broker, qname) -> None:
    """A Spring dead letter whose exchange reaches two queues stays, with a reason of some 200 characters."""
    q = f"r{qname[-6:]}"  # names as long as real ones, not as the test's
    lot, ex = f"{q}.lot", f"{q}.orders"
    with broker.channel() as ch:
        ch.exchange_declare(ex, "fanout")
        for name in ("billing", "payments"):
            ch.queue_declare(f"{q}.{name}.order-created", durable=True)
            ch.queue_bind(f"{q}.{name}.order-created", ex)
    park(broker, lot, {"x-original-exchange": ex, "x-original-routingKey": "k", "x-exception-stacktrace": "at x"})
    result = run("replay", lot, "--url", broker.url, "--dry-run", "-f", "table")
    assert result.exit_code == 0, result.stderr
    [stay] = [line for line in result.stdout.splitlines() if line.startswith("stay")]
    assert f"exchange '{ex}', routing key 'k': routes to 2 queues" in stay and "--allow-fanout" not in stay
    assert len(stay.rstrip()) < 130
    assert "-v or --format json shows them whole" in result.stderr
    whole = run("-v", "replay", lot, "--url", broker.url, "--dry-run", "-f", "table")
    assert "--to QUEUE replays to one, --allow-fanout to all" in whole.stdout
    plan = orjson.loads(run("replay", lot, "--url", broker.url, "--dry-run", "-f", "json").stdout)["plan"]
    assert any("--allow-fanout to all" in why for why in plan["stay"])
    left = run("replay", lot, "--url", broker.url, "--yes", "-f", "table")
    assert left.exit_code == ExitStatus.REFUSED
    [row] = [line for line in left.stdout.splitlines() if line.startswith("LEFT")]
    assert "routes to 2 queues" in row and "--allow-fanout" not in row


def test_broker_made_and_framework_made_dead_letters_side_by_side(run, broker, qname) -> None:
    """The error column and the origin column of one table: x-death's origin, Spring's error."""
    topo = topologies.reject_to_dlq(broker, qname, 1)
    with broker.channel() as ch:
        ch.basic_publish("", topo.dlq, b"{}", pika.BasicProperties(headers={
            "x-exception-message": "NullPointerException: order.id", "x-exception-stacktrace": "at x",
            "x-original-exchange": "", "x-original-routingKey": topo.work}))
    rows = table(run, broker, "peek", topo.dlq).stdout.splitlines()[2:]
    assert f"{topo.work} (x-death)" in rows[0]
    assert f"{topo.work} (spring)" in rows[1] and "NullPointerException: order.id" in rows[1]
