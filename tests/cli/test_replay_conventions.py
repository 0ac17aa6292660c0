"""`replay` of dead letters made by frameworks (no x-death, or x-death and a framework's headers), on the real broker.

Spring, NServiceBus and MassTransit cannot run here: their dead letters are published with the header names,
value types and shapes their sources write (tests/test_conventions.py names each source file), with this
test's queue names put where each framework writes its origin. The broker makes the x-death ones itself.
"""

from __future__ import annotations

from typing import Any

import orjson
import pika
import pytest

from dlxtool.cli.output import ExitStatus
from dlxtool.ops.replay import PROVENANCE_HEADER
from tests.cli.test_history_conventions import park
from tests.test_conventions import MT, NSB, RASCAL, SPRING

pytestmark = pytest.mark.broker

FRAMEWORK_HEADERS = (*SPRING, *(k for k in NSB if k != "NServiceBus.MessageId"),
                     *(k for k in MT if k != "MT-Host-MachineName"))


def shapes(q: str) -> dict[str, dict[str, Any]]:
    """Each framework's dead letter, naming this test's queues and exchange as its origin."""
    return {
        "spring": {**SPRING, "x-original-exchange": f"{q}.ex", "x-original-routingKey": "order.created"},
        "nservicebus": {**NSB, "NServiceBus.FailedQ": f"{q}.sales"},
        "masstransit": {**MT, "MT-Fault-InputAddress": f"rabbitmq://rabbit.internal/shop/{q}.submit-order"},
        "rascal": {"rascal": {**RASCAL["rascal"], "originalQueue": f"{q}.q1",
                              "recovery": {f"{q}.q1": {"republished": 3, "forwarded": 1}}}},
    }


def origins(broker, q: str, *, dlx: str | None = None) -> None:
    """The queues the dead letters came from; Spring's through a topic exchange (its x-original-exchange)."""
    args = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlx} if dlx else None
    with broker.channel() as ch:
        ch.exchange_declare(f"{q}.ex", "topic")
        for name in ("orders", "sales", "submit-order", "q1"):
            ch.queue_declare(f"{q}.{name}", arguments=args, durable=True)
        ch.queue_bind(f"{q}.orders", f"{q}.ex", "order.*")


def broker_dead_letter(broker, work: str, dlq: str, body: bytes = b"o") -> tuple[Any, bytes]:
    """A real x-death: published to `work` (dead-letters to the default exchange, key `dlq`), rejected."""
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        ch.basic_publish("", work, body, pika.BasicProperties(message_id="m-x"), mandatory=True)
        method, _, _ = ch.basic_get(work)
        ch.basic_reject(method.delivery_tag, requeue=False)
    broker.wait_depth(dlq, 1)
    [(_, props, body)] = broker.drain(dlq)
    return props, body


def cli(run, broker, *args: str, code: int = 0, env: dict | None = None) -> Any:
    result = run(*args, "--url", broker.url, "-f", "json", env=env)
    assert result.exit_code == code, result.stderr
    return orjson.loads(result.stdout) if result.stdout.strip() else None


def test_history_and_replay_agree_and_each_message_goes_home(run, broker, qname) -> None:
    lot, q = f"{qname}.lot", qname
    origins(broker, q)
    framework = shapes(q)
    for i, headers in enumerate(framework.values()):
        park(broker, lot, {**headers, "tenant": "acme"}, n=i + 1)
    with broker.channel() as ch:  # and one the broker dead-lettered itself
        ch.queue_declare(f"{q}.work", durable=True,
                         arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": lot})
        ch.basic_publish("", f"{q}.work", b"w", pika.BasicProperties(message_id="w"), mandatory=True)
        method, _, _ = ch.basic_get(f"{q}.work")
        ch.basic_reject(method.delivery_tag, requeue=False)
    assert broker.wait_depth(lot, 11) == 11

    groups = cli(run, broker, "history", lot, "--summary")
    said = {orjson.dumps(g["origin_route"]): (g["convention"], g["messages"]) for g in groups}
    plan = cli(run, broker, "replay", lot, "--dry-run")["plan"]
    planned = {orjson.dumps(o["origin_route"]): (o["convention"], o["messages"]) for o in plan["origins"]}
    assert planned == said and len(said) == 5 and not plan["stay"]
    texts = {o["queue"]: o["route_text"] for o in plan["origins"]}
    assert texts == {
        f"{q}.ex → order.created": f"exchange {q}.ex, routing key order.created, from Spring headers",
        f"{q}.sales": "original routing key, from NServiceBus headers",
        f"{q}.submit-order": "original routing key, from MassTransit headers",
        f"{q}.q1": "original routing key, from rascal headers",
        f"{q}.work": "original routing key, from x-death"}
    exchange_origin = next(o for o in plan["origins"] if o["origin_route"]["exchange"])
    assert exchange_origin["reaches"] == [f"{q}.orders"] and exchange_origin["exists"] is True

    summary = cli(run, broker, "replay", lot, "--yes")
    assert summary["moved_total"] == 11 and broker.queue_depth(lot) == 0
    arrived = {name: broker.drain(f"{q}.{name}") for name in ("orders", "sales", "submit-order", "q1", "work")}
    assert {k: len(v) for k, v in arrived.items()} == {"orders": 1, "sales": 2, "submit-order": 3, "q1": 4,
                                                       "work": 1}
    [(method, _, _)] = arrived["orders"]
    assert (method.exchange, method.routing_key) == (f"{q}.ex", "order.created")  # through Spring's exchange
    for name, messages in arrived.items():
        for _, props, _ in messages:
            headers = props.headers
            assert headers["tenant"] == "acme" if name != "work" else True
            assert not set(FRAMEWORK_HEADERS) & set(headers), (name, headers)
            assert "x-death" not in headers and PROVENANCE_HEADER in headers
    [(_, props, _)] = arrived["orders"]
    assert "x-exception-message=no stock" in props.headers[PROVENANCE_HEADER]["reset"]
    # rascal keeps what its subscriber needs (the original routing it restores), not the failure
    _, rascal_props, _ = arrived["q1"][0]
    assert rascal_props.headers["rascal"] == {"originalVhost": "/", "restoreRoutingHeaders": True}


def test_keep_history_keeps_the_framework_headers(run, broker, qname) -> None:
    lot, q = f"{qname}.lot", qname
    origins(broker, q)
    framework = shapes(q)
    park(broker, lot, framework["spring"])
    park(broker, lot, framework["rascal"])
    cli(run, broker, "replay", lot, "--yes", "--keep-history")
    [(_, spring, _)] = broker.drain(f"{q}.orders")
    [(_, rascal, _)] = broker.drain(f"{q}.q1")
    assert {k: spring.headers[k] for k in SPRING} == framework["spring"]
    assert rascal.headers["rascal"] == framework["rascal"]["rascal"]


def test_a_later_broker_death_is_not_outranked_by_stale_framework_headers(run, broker, qname) -> None:
    """After a replay the consumer fails again and this time the broker dead-letters it: history must name
    the queue it failed in (x-death), which it cannot do when the replay left Spring's headers in place (without
    times, a framework's headers beat x-death: see dlxtool.conventions.explain)."""
    lot, dlq, q = f"{qname}.lot", f"{qname}.dlq", qname
    origins(broker, q, dlx=dlq)
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
    spring = shapes(q)["spring"]
    for keep in ((), ("--keep-history",)):
        park(broker, lot, spring)
        cli(run, broker, "replay", lot, "--yes", *keep)
        with broker.channel() as ch:
            broker.wait_depth(f"{q}.orders", 1)
            method, _, _ = ch.basic_get(f"{q}.orders")
            ch.basic_reject(method.delivery_tag, requeue=False)
        broker.wait_depth(dlq, 1)
        [item] = cli(run, broker, "history", dlq)
        broker.drain(dlq)
        if keep:  # what the count reset prevents: the stale Spring headers still win
            assert item["origin_from"] == "spring" and f"x-death says queue {q}.orders" in item["origin_conflict"]
        else:
            assert (item["origin_from"], item["origin"], item["conventions"]) == ("x-death", f"{q}.orders",
                                                                                  ["x-death"])


def test_conflicting_conventions_the_most_recent_failure_wins_and_origin_from_forces_one(run, broker, qname) -> None:
    """A broker dead letter (x-death from work), then failed by a Spring consumer reading the DLQ, which
    republished it with its own headers naming another route."""
    lot, q = f"{qname}.lot", qname
    origins(broker, q)
    props, body = broker_dead_letter(broker, f"{q}.work", f"{q}.dlq")
    for _ in range(2):
        park(broker, lot, {**props.headers, **shapes(q)["spring"]}, body=body)
    plan = cli(run, broker, "replay", lot, "--dry-run")["plan"]
    assert plan["origin_conflicts"] == 2 and [o["queue"] for o in plan["origins"]] == [f"{q}.ex → order.created"]
    table = run("replay", lot, "--dry-run", "--url", broker.url, "-f", "table")
    assert "conventions name different origins" in table.stderr
    [item, _] = cli(run, broker, "history", lot)
    assert item["origin_route"] == plan["origins"][0]["origin_route"]  # history and replay agree

    forced = cli(run, broker, "replay", lot, "--dry-run", "--origin-from", "x-death")["plan"]
    assert [(o["queue"], o["convention"]) for o in forced["origins"]] == [(f"{q}.work", "x-death")]
    [forced_item, _] = cli(run, broker, "history", lot, "--origin-from", "x-death")
    assert forced_item["origin"] == f"{q}.work"
    summary = cli(run, broker, "replay", lot, "--yes", "--origin-from", "x-death", "--limit", "1")
    assert summary["moved"] == {f"{q}.work": 1}
    summary = cli(run, broker, "replay", lot, "--yes")
    assert summary["moved"] == {f"{q}.ex → order.created": 1}
    [(_, work, _)] = broker.drain(f"{q}.work")
    [(_, orders, _)] = broker.drain(f"{q}.orders")
    for headers in (work.headers, orders.headers):  # both conventions' failure headers went, whichever won
        assert not {"x-death", *SPRING} & set(headers)
    bad = run("replay", lot, "--url", broker.url, "--dry-run", "--origin-from", "sprnig")
    assert bad.exit_code == ExitStatus.USAGE and "no such convention" in bad.stderr


def test_an_exchange_origin_must_reach_one_queue_with_room(run, broker, qname) -> None:
    lot, q = f"{qname}.lot", qname
    with broker.channel() as ch:
        ch.exchange_declare(f"{q}.ex", "topic")
        for name, args in (("a", None), ("b", None), ("full", {"x-max-length": 1})):
            ch.queue_declare(f"{q}.{name}", arguments=args, durable=True)
        ch.queue_bind(f"{q}.a", f"{q}.ex", "order.*")
        ch.queue_bind(f"{q}.b", f"{q}.ex", "order.created")
        ch.queue_bind(f"{q}.full", f"{q}.ex", "invoice.*")
        ch.basic_publish("", f"{q}.full", b"healthy", mandatory=True)
    spring = shapes(q)["spring"]
    park(broker, lot, spring)                                                       # reaches a and b
    park(broker, lot, {**spring, "x-original-routingKey": "invoice.due"})           # reaches full only
    park(broker, lot, {**spring, "x-original-routingKey": "nobody.listens"})        # reaches no queue
    park(broker, lot, {**spring, "x-original-exchange": f"{q}.gone"})               # no such exchange
    plan = cli(run, broker, "replay", lot, "--dry-run")["plan"]
    stay = plan["stay"]
    assert any(f"routes to 2 queues ({q}.a, {q}.b)" in why and "--allow-fanout" in why for why in stay)
    assert any("nobody.listens" in why and "routes to no queue" in why for why in stay)
    assert any(f"{q}.gone" in why and "does not exist" in why for why in stay)
    [full] = plan["origins"]
    assert full["reaches"] == [f"{q}.full"] and full["would_stay_full"] == 1

    summary = cli(run, broker, "replay", lot, "--yes", code=ExitStatus.REFUSED)
    assert broker.queue_depth(lot) == 4 and summary["moved_total"] == 0
    assert broker.queue_depth(f"{q}.full") == 1  # the healthy message was not pushed out
    assert any("origin full" in why for why in summary["left"])

    summary = cli(run, broker, "replay", lot, "--yes", "--allow-fanout", code=ExitStatus.PARTIAL)
    assert summary["moved"] == {f"{q}.ex → order.created": 1}
    assert (broker.queue_depth(f"{q}.a"), broker.queue_depth(f"{q}.b"), broker.queue_depth(lot)) == (1, 1, 3)


def test_a_team_convention_with_an_exchange_and_routing_key(run, broker, qname, tmp_path) -> None:
    lot, q = f"{qname}.lot", qname
    origins(broker, q)
    park(broker, lot, {"acme-exchange": f"{q}.ex", "acme-key": "order.created", "acme-error": "PDF failed",
                       "acme-tries": 4, "acme-trace": "...", "tenant": "acme"})
    config = tmp_path / "config.toml"
    config.write_text(broker.config_toml() + '[brokers.test.conventions.acme]\n'
                      'origin_exchange_header = "acme-exchange"\norigin_routing_key_header = "acme-key"\n'
                      'error_headers = ["acme-error"]\nattempts_header = "acme-tries"\n'
                      'reset_headers = ["acme-trace"]\n')
    env = {"DLXTOOL_TEST_PASSWORD": "guest"}
    result = run("--config", str(config), "--broker", "test", "replay", lot, "--dry-run", "-f", "json", env=env)
    assert result.exit_code == 0, result.stderr
    [origin] = orjson.loads(result.stdout)["plan"]["origins"]
    assert origin["route_text"] == f"exchange {q}.ex, routing key order.created, from acme headers"
    result = run("--config", str(config), "--broker", "test", "replay", lot, "--yes", env=env)
    assert result.exit_code == 0, result.stderr
    [(_, props, _)] = broker.drain(f"{q}.orders")
    assert sorted(props.headers) == [PROVENANCE_HEADER, "tenant"]
    # the journal names the queue the exchange took it to (not the route), so `journal --queue` finds the run
    found = run("journal", "--queue", f"{q}.orders", "--format", "json")
    assert [r["queues"] for r in orjson.loads(found.stdout)] == [[lot, f"{q}.orders"]], found.stdout


def test_an_exchange_origin_whose_queue_would_drop_its_next_dead_letter_stays(run, broker, qname) -> None:
    """The queue Spring's exchange and key reach dead-letters through a direct exchange that routes that key
    nowhere: replayed there, the message's next broker death would be dropped."""
    lot, q = f"{qname}.lot", qname
    with broker.channel() as ch:
        ch.exchange_declare(f"{q}.ex", "topic")
        ch.exchange_declare(f"{q}.dlx", "direct")
        ch.queue_declare(f"{q}.orders", durable=True, arguments={"x-dead-letter-exchange": f"{q}.dlx"})
        ch.queue_bind(f"{q}.orders", f"{q}.ex", "order.*")
    park(broker, lot, shapes(q)["spring"])
    summary = cli(run, broker, "replay", lot, "--yes", code=ExitStatus.REFUSED)
    [why] = summary["left"]
    assert why.startswith(f"exchange '{q}.ex', routing key 'order.created': reaches '{q}.orders', whose "
                          f"dead-letter exchange '{q}.dlx' (direct) routes routing key 'order.created' to no queue")
    assert broker.queue_depth(lot) == 1 and broker.queue_depth(f"{q}.orders") == 0


def test_a_team_convention_naming_only_a_fanout_exchange(run, broker, qname, tmp_path) -> None:
    """@moleculer/channels' dead letters carry only x-original-channel (the channel's fanout exchange) and
    x-original-group; a convention naming the exchange alone replays them there, to its one bound queue."""
    lot, channel = f"{qname}.lot", f"{qname}.order.created"
    with broker.channel() as ch:
        ch.exchange_declare(channel, "fanout")
        ch.queue_declare(f"payments.{channel}", durable=True)
        ch.queue_bind(f"payments.{channel}", channel)
    park(broker, lot, {"x-original-channel": channel, "x-original-group": "payments"}, n=2)
    config = tmp_path / "config.toml"
    config.write_text(broker.config_toml() + '[brokers.test.conventions.moleculer]\n'
                      'origin_exchange_header = "x-original-channel"\nreset_headers = ["x-original-group"]\n')
    env = {"DLXTOOL_TEST_PASSWORD": "guest"}
    base = ("--config", str(config), "--broker", "test")
    result = run(*base, "history", lot, "-f", "json", env=env)
    assert result.exit_code == 0, result.stderr
    assert [(i["origin_route"], i["origin_from"]) for i in orjson.loads(result.stdout)] == [
        ({"queue": None, "exchange": channel, "routing_key": ""}, "moleculer")] * 2
    result = run(*base, "replay", lot, "--dry-run", "-f", "json", env=env)
    assert result.exit_code == 0, result.stderr
    [origin] = orjson.loads(result.stdout)["plan"]["origins"]
    assert origin["reaches"] == [f"payments.{channel}"]
    assert origin["route_text"] == f"exchange {channel}, empty routing key, from moleculer headers"
    result = run(*base, "replay", lot, "--yes", env=env)
    assert result.exit_code == 0, result.stderr
    assert broker.queue_depth(lot) == 0
    moved = broker.drain(f"payments.{channel}")
    assert len(moved) == 2 and all(sorted(p.headers) == [PROVENANCE_HEADER] for _, p, _ in moved)
    # a second group on the channel: a publish would copy the message to both, so it stays, said why
    with broker.channel() as ch:
        ch.queue_declare(f"billing.{channel}", durable=True)
        ch.queue_bind(f"billing.{channel}", channel)
    park(broker, lot, {"x-original-channel": channel, "x-original-group": "payments"})
    result = run(*base, "replay", lot, "--yes", "-f", "json", env=env)
    assert result.exit_code == ExitStatus.REFUSED, result.stderr
    [why] = orjson.loads(result.stdout)["left"]
    assert f"routes to 2 queues (billing.{channel}, payments.{channel})" in why
    assert broker.queue_depth(lot) == 1
