"""`dlxtool queues` lists every queue of a big vhost exactly once (issue 28), on the real broker.

The listing used to come page by page (500 queues a page). A queue created or deleted between two pages shifted
the queues after it: one was skipped (deleted) or shown twice (created). The identity proof's probe queue was such a
queue: counted on page 1, gone before page 2 (10,000 of 10,001 queues in 9 of 16 runs). Here another connection
creates or deletes a queue after each answer the listing reads, with more queues than a page held.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pika
import pytest

from dlxtool.broker.management import PROBE_ARGUMENT, ManagementClient
from dlxtool.config import BrokerProfile
from dlxtool.ops.queues import QUEUE_COLUMNS, survey_broker
from tests.support.broker import BrokerEnv, open_vhost

OLD_PAGE_SIZE = 500  # what a page held: the vhost below needs more than one
KEPT = OLD_PAGE_SIZE + 20  # queues that exist for the whole listing


@pytest.fixture(scope="module")
def big_vhost(broker: BrokerEnv) -> Iterator[BrokerEnv]:
    """A vhost of its own (the run's vhost stays small for the other tests) with KEPT queues `keep.NNNN`, created in
    one definitions import."""
    with open_vhost(broker.host, broker.amqp_port, broker.http_port,
                    f"{broker.vhost}-listing-{uuid.uuid4().hex[:6]}") as env:
        queues = [{"name": f"keep.{i:04d}", "vhost": env.vhost, "durable": True, "auto_delete": False,
                   "arguments": {}} for i in range(KEPT)]
        env.mgmt.request("POST", f"definitions/{quote(env.vhost, safe='')}", {"queues": queues})
        assert len(env.mgmt.queues(env.vhost, columns=["name"])) == KEPT
        yield env


def assert_each_once(names: list[str]) -> None:
    counts = Counter(n for n in names if n.startswith("keep."))
    missing = [f"keep.{i:04d}" for i in range(KEPT) if counts[f"keep.{i:04d}"] == 0]
    twice = sorted(n for n, c in counts.items() if c > 1)
    assert not missing and not twice, f"skipped: {missing}; listed more than once: {twice}"


class Churn:
    """Another connection that, each time it is called, deletes one of the queues sorting first (`a.gone.N`, made
    beforehand) or creates one that sorts first (`a.new.N`)."""

    def __init__(self, env: BrokerEnv, mode: str, tag: str) -> None:
        self.env, self.mode, self.tag = env, mode, tag
        self.conn = pika.BlockingConnection(pika.ConnectionParameters(
            host=env.host, port=env.amqp_port, virtual_host=env.vhost,
            credentials=pika.PlainCredentials("guest", "guest")))
        self.channel = self.conn.channel()
        self.done = 0
        if mode == "deleted":
            for i in range(10):
                self.channel.queue_declare(self.name(i), durable=True)

    def name(self, i: int) -> str:
        return f"a.{'gone' if self.mode == 'deleted' else 'new'}.{self.tag}.{i}"

    def __call__(self) -> None:
        if self.mode == "deleted":
            self.channel.queue_delete(self.name(self.done))
        else:
            self.channel.queue_declare(self.name(self.done), durable=True)
        self.done += 1

    def close(self) -> None:
        for i in range(10):
            self.channel.queue_delete(self.name(i))
        self.conn.close()


@pytest.mark.parametrize("mode", ["deleted", "created"])
def test_a_queue_created_or_deleted_meanwhile_shifts_nothing(big_vhost: BrokerEnv, mode: str) -> None:
    """Between the answers the survey reads (pages, once), another connection deletes or creates a queue that sorts
    before all others. Every `keep.` queue is listed once. With pages of 500 a deletion skipped keep.0499 or so
    and a creation listed one twice."""
    env = big_vhost
    churn = Churn(env, mode, uuid.uuid4().hex[:6])
    listings: list[str] = []

    class Churning(ManagementClient):
        def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
            answer = super().request(method, path, body, **kwargs)
            if method == "GET" and path.startswith("queues/"):
                listings.append(path)
                churn()  # after each page (or the one listing) has been answered
            return answer

    profile = BrokerProfile(name="test", urls=(env.url,), vhost=env.vhost, management_url=env.management_url,
                            management_url_derived=False)
    try:
        result = survey_broker(profile, env.vhost,
                               client_factory=lambda _p: Churning(env.management_url, "guest", "guest", timeout=60))
    finally:
        churn.close()
    assert result.error is None, result.error
    assert listings, "the survey read no queue listing"
    assert_each_once([row.queue for row in result.rows])


def test_the_cli_lists_every_queue_once_and_no_probe_queue(big_vhost: BrokerEnv, run) -> None:
    """Through the CLI with --url: the management API is proven over AMQP first with a probe queue (gone when the
    proof ends), and another dlxtool's proof holds a probe queue of its own while this one lists. Every queue is
    listed once; no probe queue is listed."""
    from dlxtool.broker import identity

    env = big_vhost
    other = pika.BlockingConnection(pika.ConnectionParameters(
        host=env.host, port=env.amqp_port, virtual_host=env.vhost,
        credentials=pika.PlainCredentials("guest", "guest")))
    try:
        client = ManagementClient(env.management_url, "guest", "guest", timeout=30)
        assert identity._probe_queue_node(other, client, env.vhost)  # noqa: SLF001 - another run's proof, held open
        assert client.probe_queue is not None
        result = run("--url", env.url, "--management-url", env.management_url, "queues", "-f", "json")
        assert result.exit_code == 0, result.stderr
        names = [row["queue"] for row in json.loads(result.stdout)]
        # the other proof's queue is there, and not listed
        assert client.probe_queue in {q["name"] for q in env.mgmt.queues(env.vhost, columns=["name"])}
    finally:
        other.close()
    assert_each_once(names)
    assert [n for n in names if n.startswith("amq.gen-")] == []
    assert len(names) == KEPT


def test_the_listing_is_one_request(big_vhost: BrokerEnv) -> None:
    """One GET for all queues, whatever their number (pages cost the server a listing of every queue each)."""
    env = big_vhost
    asked: list[dict[str, Any] | None] = []

    class Counting(ManagementClient):
        def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
            if path.startswith("queues/"):
                asked.append(kwargs.get("query"))
            return super().request(method, path, body, **kwargs)

    client = Counting(env.management_url, "guest", "guest", timeout=60)
    listed = client.queues(env.vhost, columns=QUEUE_COLUMNS)
    # An exclusive probe queue of the test before may still be listed: its connection is closed, and on 4.3 the
    # API showed it for a moment after (a CI run's one failure: 521 == 520). `queues` leaves such queues out.
    kept = [q for q in listed if PROBE_ARGUMENT not in (q.get("arguments") or {})]
    assert len(kept) == KEPT
    assert len(asked) == 1 and "page" not in (asked[0] or {})


@pytest.mark.parametrize("max_asks", [64, 0])
def test_dead_letter_bindings_exchange_by_exchange(broker: BrokerEnv, max_asks: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A queue dead-letters to a topic exchange bound to a fanout exchange bound to the DLQ (exchange to exchange);
    another to an exchange that does not exist. The survey asks for those exchanges' bindings one by one, level by
    level (max_asks 64), or reads the vhost's whole binding listing past the limit (max_asks 0): the same flags."""
    from dlxtool.ops import queues as ops_queues

    monkeypatch.setattr(ops_queues, "MAX_EXCHANGE_ASKS", max_asks)
    with open_vhost(broker.host, broker.amqp_port, broker.http_port,
                    f"{broker.vhost}-dlx-{uuid.uuid4().hex[:6]}") as env:  # its own: no other test's exchanges
        _dead_letter_bindings(env, max_asks)


def _dead_letter_bindings(broker: BrokerEnv, max_asks: int) -> None:
    p = "t"
    with broker.channel() as ch:
        ch.exchange_declare(f"{p}.dlx", "topic")
        ch.exchange_declare(f"{p}.fan", "fanout")
        ch.exchange_bind(f"{p}.fan", f"{p}.dlx", routing_key="#")
        ch.queue_declare(f"{p}.dlq", durable=True)
        ch.queue_bind(f"{p}.dlq", f"{p}.fan")
        ch.queue_declare(f"{p}.src", durable=True, arguments={"x-dead-letter-exchange": f"{p}.dlx"})
        ch.queue_declare(f"{p}.lost", durable=True, arguments={"x-dead-letter-exchange": f"{p}.missing"})
    asked: list[str] = []

    class Counting(ManagementClient):
        def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
            asked.append(path)
            return super().request(method, path, body, **kwargs)

    profile = BrokerProfile(name="test", urls=(broker.url,), vhost=broker.vhost,
                            management_url=broker.management_url, management_url_derived=False)
    result = survey_broker(profile, broker.vhost,
                           client_factory=lambda _p: Counting(broker.management_url, "guest", "guest", timeout=60))
    assert result.error is None, result.error
    flags = {r.queue: r.flags for r in result.rows if r.queue.startswith(p + ".")}
    assert flags[f"{p}.dlq"] == {"dlq": f"target of {p}.src"}
    assert "dlq" not in flags[f"{p}.src"] and "dlq" not in flags[f"{p}.lost"]
    listings = [a for a in asked if a.startswith("bindings/")]
    if max_asks:
        assert not listings
        v = quote(broker.vhost, safe="")
        assert {f"exchanges/{v}/{quote(x, safe='')}/bindings/source" for x in (f"{p}.dlx", f"{p}.fan")} <= set(asked)
    else:
        assert listings == [f"bindings/{quote(broker.vhost, safe='')}"]
