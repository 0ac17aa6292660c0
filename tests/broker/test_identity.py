"""dlxtool.broker.identity against real brokers: which broker a management API answers for."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from urllib.parse import quote

import pytest

from dlxtool.broker import identity
from dlxtool.broker.connection import close_quietly, connect
from dlxtool.broker.management import ManagementClient
from dlxtool.config import BrokerProfile
from dlxtool.errors import ConnectError, ManagementMismatch, NotFoundError
from dlxtool.outcome import Status
from tests.support.broker import BrokerEnv
from tests.support.retry_app import wait_until


def profile(amqp: BrokerEnv, api: BrokerEnv, user: str = "guest", password: str = "guest") -> BrokerProfile:
    url = f"amqp://{user}:{password}@{amqp.host}:{amqp.amqp_port}/{quote(amqp.vhost, safe='')}"
    return BrokerProfile(name="t", urls=(url,), vhost=amqp.vhost).with_management_url(api.management_url)


@contextmanager
def connected(p: BrokerProfile) -> Iterator[object]:
    conn = connect(p)
    try:
        yield conn
    finally:
        close_quietly(conn)


def probe_queues(env: BrokerEnv) -> list[str]:
    return [q["name"] for q in env.mgmt.get(f"queues/{quote(env.vhost, safe='')}") if q["name"].startswith("amq.gen-")]


def test_own_api_is_proven_with_the_node_amqp_reached(broker: BrokerEnv) -> None:
    p = profile(broker, broker)
    with connected(p) as conn:
        client = identity.verified_management(conn, p)
        assert not isinstance(client, identity.UnusableManagement)
        overview = broker.mgmt.overview(columns=["cluster_name", "node"])
        assert client.identity.cluster_name == overview["cluster_name"]
        assert client.identity.node == overview["node"]  # the probe queue lives on the node AMQP reached
        # It stays while the connection does: a new HTTP connection is proven by finding it (ManagementClient.reprove)
        assert probe_queues(broker) == [client.probe_queue]
    wait_until(lambda: probe_queues(broker) == [], "the probe queue gone with its connection", timeout=10)


def test_the_probes_channel_is_the_next_one_the_command_takes(broker: BrokerEnv) -> None:
    """The proof's channel is not closed (a round trip, and pika's close of the connection would close it first,
    another): connection.take_channel gives it to the read, open and with nothing on it; the one after is new."""
    from dlxtool.broker.connection import park_channel, take_channel

    p = profile(broker, broker)
    with connected(p) as conn:
        identity.verified_management(conn, p)
        first = take_channel(conn)
        assert first.is_open and first.channel_number == 1  # the probe's, the connection's first channel
        assert first.queue_declare(client_queue := f"t-{uuid.uuid4().hex[:8]}", exclusive=True).method.queue \
            == client_queue  # usable as any new channel
        second = take_channel(conn)
        assert second is not first and second.is_open and second.channel_number == 2
        first.close()
        park_channel(conn, first)  # parked, then closed: not given out
        third = take_channel(conn)
        assert third is not first and third.is_open


@pytest.mark.second_broker
def test_other_clusters_api_is_a_mismatch_naming_both(broker: BrokerEnv, second_broker: BrokerEnv) -> None:
    p = profile(second_broker, broker)
    with connected(p) as conn, pytest.raises(ManagementMismatch) as err:
        identity.verified_management(conn, p)
    assert err.value.status is Status.CONNECT
    main = broker.mgmt.overview(columns=["cluster_name"])["cluster_name"]
    second = second_broker.mgmt.overview(columns=["cluster_name"])["cluster_name"]
    before, after = err.value.message.split(" but ")
    assert main in before and second in after and f"localhost:{second_broker.amqp_port}" in after


@pytest.mark.second_broker
def test_same_cluster_name_told_apart_by_the_probe_queue(broker: BrokerEnv, second_broker: BrokerEnv) -> None:
    p = profile(second_broker, broker)
    main_name = broker.mgmt.overview(columns=["cluster_name"])["cluster_name"]
    with connected(p) as conn:
        conn._impl.server_properties["cluster_name"] = main_name  # noqa: SLF001 - two clusters, one name
        with pytest.raises(ManagementMismatch, match="unknown to that API"):
            identity.verified_management(conn, p)
    assert probe_queues(second_broker) == []


def test_unreachable_api_gives_a_client_that_fails_at_once(broker: BrokerEnv) -> None:
    p = replace(profile(broker, broker), management_url="http://127.0.0.1:1/")
    with connected(p) as conn:
        client = identity.verified_management(conn, p)
        assert isinstance(client, identity.UnusableManagement)
        started = time.monotonic()
        with pytest.raises(ConnectError, match="not reachable"):
            client.queue(broker.vhost, "q")
        assert time.monotonic() - started < 0.1


@pytest.fixture
def read_only_user(broker: BrokerEnv) -> Iterator[tuple[str, str]]:
    """A user that may read but not declare anything (configure ""), with the management tag."""
    name, password = f"dlxtool-ro-{uuid.uuid4().hex[:6]}", "ro-pw-" + uuid.uuid4().hex[:8]
    broker.mgmt.request("PUT", f"users/{name}", {"password": password, "tags": "management"})
    broker.mgmt.request("PUT", f"permissions/{quote(broker.vhost, safe='')}/{name}",
                        {"configure": "", "write": "", "read": ".*"})
    yield name, password
    broker.mgmt.request("DELETE", f"users/{name}")


def test_user_without_configure_permission_is_proven_by_the_connection_list(broker: BrokerEnv,
                                                                            read_only_user) -> None:
    p = profile(broker, broker, *read_only_user)
    with connected(p) as conn:
        client = identity.verified_management(conn, p)
        assert not isinstance(client, identity.UnusableManagement), getattr(client, "error", None)
        assert client.identity.cluster_name


def test_connection_not_listed_in_time_proves_nothing(broker: BrokerEnv, read_only_user,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A random connection name that is in no list (as on another cluster with the same name): the API is
    not used, and not called a mismatch either (a long statistics interval looks the same)."""
    monkeypatch.setattr(identity, "LISTING_WAIT", 0.5)
    p = profile(broker, broker, *read_only_user)
    with connected(p) as conn:
        conn._impl.params.client_properties["connection_name"] = "dlxtool not-this-one"  # noqa: SLF001
        client = identity.verified_management(conn, p)
        assert isinstance(client, identity.UnusableManagement)
        with pytest.raises(ConnectError, match="could not prove") as err:
            client.overview()
        assert "probe queue was refused" in err.value.message and "0.5s" in err.value.message


def test_management_client_for_profile_unchanged_for_other_users(broker: BrokerEnv) -> None:
    """The check needs nothing from ManagementClient but what commands already use."""
    client = ManagementClient(broker.management_url, "guest", "guest")
    assert client.identity is None


def test_a_proof_begun_before_connecting_uses_what_was_sent_ahead(broker: BrokerEnv) -> None:
    """identity.begin sends the overview before the AMQP connection opens; the queue asked for ahead comes
    over the connection the proof came over, so it is used as it came."""
    p = profile(broker, broker)
    client = identity.begin(ManagementClient.for_profile(p))
    client.prefetch_queue(broker.vhost, "no-such-queue")
    with connected(p) as conn:
        assert identity.verified_management(conn, p, client) is client
    assert client.proven_connection == 1 and client.version() == broker.version
    with pytest.raises(NotFoundError):
        client.queue(broker.vhost, "no-such-queue")
    assert client.last_connection == 1


@pytest.mark.second_broker
def test_a_proof_begun_against_another_brokers_api_is_a_mismatch(broker: BrokerEnv,
                                                                  second_broker: BrokerEnv) -> None:
    p = profile(second_broker, broker)
    client = identity.begin(ManagementClient.for_profile(p))
    client.prefetch_queue(second_broker.vhost, "q")
    with connected(p) as conn, pytest.raises(ManagementMismatch):
        identity.verified_management(conn, p, client)


def test_a_version_read_before_the_proof_stands_only_over_the_proven_connection() -> None:
    """The overview's version decides a quorum queue's default delivery limit: read over another connection
    than the proof's (or through urllib, a connection per request), it is asked for again."""
    client = ManagementClient("http://h:1/", "u", "p")
    for overview_on, proof_on, kept in ((1, 1, True), (1, 2, False), (0, 0, False)):
        client._version, client.last_connection = "4.0.5", proof_on  # noqa: SLF001
        identity._proven(client, overview_on)  # noqa: SLF001
        assert client.proven_connection == proof_on
        assert (client._version == "4.0.5") is kept  # noqa: SLF001


def test_a_new_http_connection_after_the_amqp_one_closed_is_not_another_broker(broker: BrokerEnv) -> None:
    """Issue 35: an API re-proof on a new HTTP connection (the server closed the kept-alive one) after the AMQP
    connection went (dropped after a stall) took the probe queue's absence for "another broker" (exit 3,
    ManagementMismatch). The queue went with the connection: that proves nothing, and the API is not used."""
    p = profile(broker, broker)
    conn = connect(p)
    client = identity.verified_management(conn, p)
    assert not isinstance(client, identity.UnusableManagement)
    close_quietly(conn)
    _drop_kept_alive(client)  # the next answer comes over a new TCP connection: it must be proven again
    with pytest.raises(ConnectError) as raised:
        client.overview()
    assert not isinstance(raised.value, ManagementMismatch)
    assert "cannot be proven again" in raised.value.message


def test_a_new_http_connection_is_proven_again_while_the_amqp_one_is_open(broker: BrokerEnv) -> None:
    p = profile(broker, broker)
    with connected(p) as conn:
        client = identity.verified_management(conn, p)
        first = client.proven_connection
        _drop_kept_alive(client)
        assert client.overview().get("rabbitmq_version")
        assert client.proven_connection not in (None, first)


def _drop_kept_alive(client: ManagementClient) -> None:
    """As a server that closed the idle kept-alive connection (cowboy does after a few seconds): the next request
    opens a new one."""
    http = client._http  # noqa: SLF001 - the test stands in for the server closing the connection
    assert http is not None
    http._close()  # noqa: SLF001
