"""`queues` reads the queue listing without statistics and asks for each queue's statistics only where its flags or
role read them (issue 40: dlxtool.ops.queues._fast_queues), on the real broker: the rows are the full listing's."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pytest

from dlxtool.broker import versions
from dlxtool.broker.management import ManagementClient
from dlxtool.config import BrokerProfile
from dlxtool.ops import queues as ops_queues
from dlxtool.ops.queues import BrokerResult, survey_broker
from tests.support.broker import BrokerEnv, open_vhost

pytestmark = pytest.mark.metrics

IDLE = [f"idle.{i}" for i in range(5)]
# the queues whose flags or role read their statistics: messages, a consumer, a dead-letter exchange (arguments, policy)
ASKED = {"full", "consumed", "src", "pol.q"}


@pytest.fixture(scope="module")
def topology(broker: BrokerEnv) -> Iterator[tuple[BrokerEnv, pika.BlockingConnection]]:
    """A vhost of its own: idle queues, one holding messages, one consumed (the connection held open), one that
    dead-letters to a DLQ by its arguments, one by a policy, one with a policy that does not dead-letter (a message
    TTL), an idle quorum queue with a delivery limit and an idle stream. Returned once the API has sampled them."""
    with open_vhost(broker.host, broker.amqp_port, broker.http_port,
                    f"{broker.vhost}-stats-{uuid.uuid4().hex[:6]}") as env:
        v = quote(env.vhost, safe="")
        env.mgmt.request("PUT", f"policies/{v}/dl", {"pattern": r"^pol\.", "apply-to": "queues",
                                                    "definition": {"dead-letter-exchange": "dlx"}})
        env.mgmt.request("PUT", f"policies/{v}/ttl", {"pattern": r"^ttl\.", "apply-to": "queues",
                                                     "definition": {"message-ttl": 60000}})
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            host=env.host, port=env.amqp_port, virtual_host=env.vhost,
            credentials=pika.PlainCredentials("guest", "guest")))
        ch = conn.channel()
        for name in [*IDLE, "full", "consumed", "dlq", "pol.q", "ttl.q"]:
            ch.queue_declare(name, durable=True)
        ch.queue_declare("src", durable=True, arguments={"x-dead-letter-exchange": "",
                                                          "x-dead-letter-routing-key": "dlq"})
        ch.queue_declare("qq", durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 5})
        # 3.10.8's listing without statistics gives an idle stream no count, node or members: asked for its own
        ch.queue_declare("st", durable=True, arguments={"x-queue-type": "stream"})
        for _ in range(3):
            ch.basic_publish("", "full", b"x")
        ch.basic_consume("consumed", lambda *_a: None)
        time.sleep(11)  # two statistics samples (5 s each): the counts sampled, the publish rate back to 0
        try:
            yield env, conn
        finally:
            conn.close()


class Counting(ManagementClient):
    """Records every GET: (path, query)."""

    asked: list[tuple[str, dict[str, Any]]]

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        if method == "GET":
            self.asked.append((path, kwargs.get("query") or {}))
        return super().request(method, path, body, **kwargs)


def surveyed(env: BrokerEnv, client_class: type[Counting] = Counting) -> tuple[BrokerResult, Counting]:
    clients: list[Counting] = []

    def factory(_profile: BrokerProfile) -> Counting:
        client = client_class(env.management_url, "guest", "guest", timeout=60)
        client.asked = []
        clients.append(client)
        return client

    profile = BrokerProfile(name="test", urls=(env.url,), vhost=env.vhost, management_url=env.management_url,
                            management_url_derived=False)
    result = survey_broker(profile, env.vhost, client_factory=factory)
    assert result.error is None, result.error
    return result, clients[0]


def one_by_one(client: Counting, vhost: str) -> set[str]:
    """The queues whose own GET the survey sent."""
    prefix = f"queues/{quote(vhost, safe='')}/"
    return {path.removeprefix(prefix) for path, _q in client.asked if path.startswith(prefix)}


def full_listing_asked(client: Counting, vhost: str) -> bool:
    return any(path == f"queues/{quote(vhost, safe='')}" and "disable_stats" not in query
               for path, query in client.asked)


def rows_json(result: BrokerResult) -> dict[str, dict[str, Any]]:
    return {row.queue: row.to_json() for row in result.rows}


def stats_off(env: BrokerEnv) -> bool:
    return versions.stats_disabled(env.mgmt.overview())


def test_the_rows_are_the_full_listings(topology: tuple[BrokerEnv, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """The survey asks for the statistics of the queues that hold messages, have a consumer or dead-letter, one by
    one, and not for the others; its rows are those the full listing makes (MAX_STATS_ASKS below 0: the full
    listing), flags, roles, counts and rates."""
    env, _conn = topology
    for _attempt in range(3):  # a statistics sample between the two surveys may change a count: ask both again
        fast, client = surveyed(env)
        monkeypatch.setattr(ops_queues, "MAX_STATS_ASKS", -1)
        full, full_client = surveyed(env)
        monkeypatch.undo()
        a, b = rows_json(fast), rows_json(full)
        # The one difference allowed: an idle queue the statistics have not sampled (3.10's idle quorum queues, at
        # times) is "?" in the full listing, its counted depth (0, no flag) without statistics.
        unsampled = {q for q in a if b.get(q, {}).get("figures_known") is False and a[q]["figures_known"]}
        if {q: r for q, r in a.items() if q not in unsampled} == {q: r for q, r in b.items() if q not in unsampled}:
            break
    assert {q: r for q, r in a.items() if q not in unsampled} == {q: r for q, r in b.items() if q not in unsampled}, \
        {q: {k: (a[q][k], b[q].get(k)) for k in a[q] if a[q][k] != b[q].get(k)} for q in a if a[q] != b.get(q)}
    assert all(a[q]["messages"] == 0 and a[q]["flags"] == [] and q not in ASKED for q in unsampled)
    assert full_listing_asked(full_client, env.vhost)
    rows = {row.queue: row for row in fast.rows}
    assert set(rows) == {*IDLE, "full", "consumed", "dlq", "pol.q", "ttl.q", "src", "qq", "st"}
    if stats_off(env):  # no statistics to save asking for: the full listing, which says what the API keeps
        assert full_listing_asked(client, env.vhost)
        return
    assert not full_listing_asked(client, env.vhost)
    assert one_by_one(client, env.vhost) - {"st"} == ASKED
    assert rows["full"].ready == 3 and rows["full"].flags == {"no-consumer": "3 message(s) ready and no consumer"}
    assert rows["consumed"].consumers == 1
    assert rows["dlq"].role == "dlq" and rows["pol.q"].dead_letter_exchange == "dlx"
    assert rows["ttl.q"].message_ttl == 60000 and rows["qq"].delivery_limit == 5
    assert all(rows[q].figures_known and rows[q].ready == 0 and not rows[q].flags for q in IDLE)


def test_a_policy_not_in_the_policy_list_is_read_from_the_queues_own_answer(
        topology: tuple[BrokerEnv, Any]) -> None:
    """A queue's policy that the policy list read does not have (changed between the two answers) is not guessed:
    the queue's own GET gives its effective settings."""
    env, _conn = topology
    if stats_off(env):
        pytest.skip("the full listing is used where the API keeps no statistics")

    class NoPolicies(Counting):
        def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
            answer = super().request(method, path, body, **kwargs)
            return [] if path.startswith("policies/") else answer

    result, client = surveyed(env, NoPolicies)
    assert one_by_one(client, env.vhost) - {"st"} == ASKED | {"ttl.q"}  # pol.q: asked anyway (it dead-letters)
    rows = {row.queue: row for row in result.rows}
    assert rows["ttl.q"].message_ttl == 60000 and rows["ttl.q"].policy == "ttl"
    assert rows["pol.q"].dead_letter_exchange == "dlx" and rows["pol.q"].dead_letter_source == {"exchange": "policy"}


def test_an_operator_policy_means_the_full_listing(topology: tuple[BrokerEnv, Any]) -> None:
    """An operator policy merges into the effective settings in ways the policy list does not say: the full
    listing, whose effective_policy_definition is the broker's."""
    env, _conn = topology
    v = quote(env.vhost, safe="")
    env.mgmt.request("PUT", f"operator-policies/{v}/cap", {"pattern": r"^ttl\.", "apply-to": "queues",
                                                          "definition": {"message-ttl": 30000}})
    try:
        for _attempt in range(100):  # the listing shows an operator policy's effect after its next sample
            listed = {q["name"]: q for q in env.mgmt.queues(env.vhost, columns=["name", "effective_policy_definition"])}
            if (listed["ttl.q"].get("effective_policy_definition") or {}).get("message-ttl") == 30000:
                break
            time.sleep(0.2)
        result, client = surveyed(env)
    finally:
        env.mgmt.request("DELETE", f"operator-policies/{v}/cap")
    assert full_listing_asked(client, env.vhost)
    assert {row.queue: row for row in result.rows}["ttl.q"].message_ttl == 30000  # the lower of the two


def test_a_queue_deleted_before_its_statistics_are_read_is_not_listed(broker: BrokerEnv) -> None:
    """A queue listed, then deleted before its own GET is answered (404): gone, not an error, the others listed."""
    if stats_off(broker):
        pytest.skip("the full listing is used where the API keeps no statistics")
    with open_vhost(broker.host, broker.amqp_port, broker.http_port,
                    f"{broker.vhost}-gone-{uuid.uuid4().hex[:6]}") as env:
        with env.channel() as ch:
            for name in ("stays", "goes"):
                ch.queue_declare(name, durable=True)
                ch.basic_publish("", name, b"x")
        v = quote(env.vhost, safe="")

        class Deleting(Counting):
            def queues(self, vhost: str | None = None, **how: Any) -> list[dict[str, Any]]:
                listed = super().queues(vhost, **how)
                if how.get("totals"):
                    env.mgmt.request("DELETE", f"queues/{v}/goes")
                return listed

        result, client = surveyed(env, Deleting)
        assert {"stays", "goes"} <= one_by_one(client, env.vhost)
        assert [row.queue for row in result.rows] == ["stays"]
