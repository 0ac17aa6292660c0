"""Survey plumbing without a broker: selection, sorting, deltas, snapshots, failures per broker."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dlxtool.config import BrokerProfile
from dlxtool.errors import ConnectError, DlxtoolError
from dlxtool.ops import queue_flags as qf
from dlxtool.ops.queues import (
    QUEUE_COLUMNS,
    TOTALS_COLUMNS,
    BrokerResult,
    QueueFilter,
    Snapshot,
    deltas,
    name_matches,
    snapshots,
    survey,
)


def row(name: str, ready: int = 0, *, redeliver: float = 0.0, flags: dict[str, str] | None = None,
        broker: str = "b") -> qf.QueueRow:
    return qf.QueueRow(broker=broker, vhost="/", queue=name, type="classic", ready=ready, unacked=0, consumers=0,
                       rates=qf.Rates(redeliver=redeliver), dead_letter_exchange=None, dead_letter_routing_key=None,
                       dead_letter_source={}, delivery_limit=None, message_ttl=None, policy=None,
                       flags=flags or {})


def test_match_is_a_glob_or_a_substring() -> None:
    assert name_matches("orders.dlq", "orders.*") and not name_matches("xorders.dlq", "orders.*")
    assert name_matches("orders.dlq", "dlq") and not name_matches("orders", "dlq")


def test_selection_filters_then_sorts_biggest_first() -> None:
    rows = [row("a", 5, flags={"no-consumer": "x"}), row("b", 50, redeliver=3.0, flags={"clogged": "x"}),
            row("c", 0), row("d", 50)]
    assert [r.queue for r in QueueFilter(sort="ready").apply(rows)] == ["b", "d", "a", "c"]
    assert [r.queue for r in QueueFilter(flags=("any",)).apply(rows)] == ["a", "b"]
    assert [r.queue for r in QueueFilter(flags=("clogged", "dlq")).apply(rows)] == ["b"]
    assert [r.queue for r in QueueFilter(min_messages=5, sort="redeliver-rate").apply(rows)] == ["b", "a", "d"]
    assert [r.queue for r in QueueFilter(match="[ab]").apply(rows)] == ["a", "b"]


def test_deltas_against_the_previous_snapshot() -> None:
    def snap(*rows: qf.QueueRow) -> Snapshot:
        return Snapshot(datetime.now(UTC), [BrokerResult("b", None, list(rows))])

    first, second = snap(row("a", 5), row("gone", 1)), snap(row("a", 8), row("new", 2))
    assert deltas(None, first) == {}
    changes = deltas(first, second)
    assert changes[("b", "/", "a")] == {"ready": 3, "unacked": 0, "consumers": 0}
    assert changes[("b", "/", "new")]["ready"] == 2


def test_snapshots_are_bounded_and_paced() -> None:
    naps: list[float] = []
    taken = list(snapshots(lambda: [], 2.0, 3, sleep=naps.append))
    assert len(taken) == 3 and len(naps) == 2 and all(0 < n <= 2.0 for n in naps)


class FakeClient:
    masked_url = "http://fake:15672/"
    probe_queue = None

    def __init__(self, profile: BrokerProfile) -> None:
        if profile.name == "dead":
            raise ConnectError("management API at http://dead:15672/ not reachable: refused")
        self.asked: dict[str, Any] = {}

    def prefetch_overview(self) -> None:  # sending ahead is the real client's business
        pass

    def prefetch_queues(self, vhost: str | None, *, columns: list[str], **_how: Any) -> None:
        pass

    def prefetch_bindings(self, vhost: str | None, *, columns: list[str]) -> None:
        pass

    def prefetch(self, path: str, **_query: Any) -> None:
        pass

    def version(self) -> str:
        return "3.10.8"

    def queues(self, vhost: str | None, *, columns: list[str], **_how: Any) -> list[dict[str, Any]]:
        assert columns == (TOTALS_COLUMNS if _how.get("totals") else QUEUE_COLUMNS) and vhost == "v"
        return [{"name": "q", "vhost": "v", "type": "classic", "messages_ready": 2, "consumers": 0}]

    def bindings(self, vhost: str | None, *, columns: list[str]) -> list[dict[str, Any]]:
        return []

    def get(self, path: str, **_query: Any) -> list[dict[str, Any]]:
        return []  # the cluster's nodes, the exchanges: none here


def test_one_failing_broker_does_not_stop_the_others() -> None:
    profiles = [BrokerProfile(name=n, urls=("amqp://h/",), vhost="v") for n in ("dead", "ok")]
    dead, ok = survey(profiles, client_factory=FakeClient)  # type: ignore[arg-type]
    assert isinstance(dead.error, ConnectError) and not dead.rows
    assert dead.error_json()["error"].startswith("management API at http://dead")
    assert ok.error is None and [r.flags for r in ok.rows] == [{"no-consumer": "2 message(s) ready and no consumer"}]


def test_a_plugin_that_refuses_an_unsorted_listing_is_asked_for_a_sorted_one() -> None:
    """The listing asks the server not to sort (`sort=`, rows are sorted here); a management plugin answering that
    with an HTTP error (none seen: 3.10.8 takes it) is asked again without it. Other errors stand."""
    asked: list[bool] = []
    totals_asked: list[bool] = []

    class Refusing(FakeClient):
        error: DlxtoolError = DlxtoolError("management API at http://fake:15672/: GET queues/v failed with HTTP 400")

        def queues(self, vhost: str | None, *, columns: list[str], **how: Any) -> list[dict[str, Any]]:
            if how.get("totals"):  # the listing without statistics (_fast_queues) is refused the same way
                totals_asked.append(bool(how.get("unsorted")))
                if how.get("unsorted"):
                    raise self.error
                return super().queues(vhost, columns=columns, **how)
            asked.append(bool(how.get("unsorted")))
            if how.get("unsorted"):
                raise self.error
            return super().queues(vhost, columns=columns)

    profile = BrokerProfile(name="ok", urls=("amqp://h/",), vhost="v")
    [result] = survey([profile], client_factory=Refusing)  # type: ignore[arg-type]
    assert result.error is None and [r.queue for r in result.rows] == ["q"] and asked == [True, False]
    assert totals_asked == [True]  # refused: the full listing instead

    asked.clear()
    totals_asked.clear()
    Refusing.error = ConnectError("management API at http://fake:15672/ not reachable: refused")
    [result] = survey([profile], client_factory=Refusing)  # type: ignore[arg-type]
    assert isinstance(result.error, ConnectError) and totals_asked == [True] and asked == []


class NodeDown(FakeClient):
    """A cluster with node c2 down whose listing left out the durable queue `dlq` (CI, 3.10.8, moments after its
    member's app stopped), which the definitions still hold; and a transient queue that went with the node."""

    definitions_asked = 0
    refuse_definitions = False

    def request(self, method: str, path: str, *, timeout: float | None = None) -> Any:
        assert method == "GET" and timeout is not None  # the listing's timeout: a big vhost's export takes a while
        return self.get(path)

    def get(self, path: str, **_query: Any) -> Any:
        if path == "nodes":
            return [{"name": "c1", "running": True}, {"name": "c2", "running": False}]
        if path == "definitions/v":
            NodeDown.definitions_asked += 1
            if self.refuse_definitions:
                raise DlxtoolError("management API at http://fake:15672/: GET definitions/v failed with HTTP 403")
            return {"queues": [{"name": "q", "vhost": "v", "durable": True, "arguments": {}},
                               {"name": "dlq", "vhost": "v", "durable": True,
                                "arguments": {"x-queue-type": "classic"}},
                               {"name": "gone", "vhost": "v", "durable": False, "arguments": {}}]}
        return []


def test_a_durable_queue_the_listing_left_out_while_a_node_is_down_is_shown_unavailable() -> None:
    profile = BrokerProfile(name="ok", urls=("amqp://h/",), vhost="v")
    NodeDown.definitions_asked = 0
    [result] = survey([profile], client_factory=NodeDown)  # type: ignore[arg-type]
    assert result.error is None and NodeDown.definitions_asked == 1
    rows = {r.queue: r for r in result.rows}
    assert sorted(rows) == ["dlq", "q"]  # not the transient one: it went with its node
    dlq = rows["dlq"].to_json()
    assert dlq["ready"] is None and dlq["node"] == "c2" and dlq["flags"] == ["unavailable"], dlq
    reason = dlq["reasons"]["unavailable"]
    assert "its node c2 is down" in reason and "not lost" in reason and "found in the vhost's definitions" in reason
    assert result.unlisted_unknown is None
    assert rows["q"].ready == 2 and not rows["q"].node_down  # what the listing says stands

    NodeDown.refuse_definitions = True  # an export the user may not read: the listing as it is
    try:
        [result] = survey([profile], client_factory=NodeDown)  # type: ignore[arg-type]
    finally:
        NodeDown.refuse_definitions = False
    assert result.error is None and [r.queue for r in result.rows] == ["q"]
    assert result.unlisted_unknown is not None and "HTTP 403" in result.unlisted_unknown  # said, not silent


def test_no_node_down_no_definitions_asked() -> None:
    NodeDown.definitions_asked = 0

    class AllUp(NodeDown):
        def get(self, path: str, **query: Any) -> Any:
            if path == "nodes":
                return [{"name": "c1", "running": True}]
            return super().get(path, **query)

    profile = BrokerProfile(name="ok", urls=("amqp://h/",), vhost="v")
    [result] = survey([profile], client_factory=AllUp)  # type: ignore[arg-type]
    assert result.error is None and NodeDown.definitions_asked == 0 and [r.queue for r in result.rows] == ["q"]
