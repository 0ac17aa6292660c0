"""Which broker a management API answers for, proven against the AMQP connection before its data is used.

A management URL derived from the AMQP host (host:15672) belongs to another broker as soon as two
port-forwards share a host, or a load balancer sits in front: a peek that took "classic" from the wrong API
peeked a quorum queue with a delivery limit and dropped its messages (issue 15). So every command gets its
management client from `verified_management(conn, profile)`, and nothing else of the API is used before:

1. Not the cluster name: `connection.start` carries `cluster_name` and `version` (no node name) and
   `/api/overview` `cluster_name`, `node`, `rabbitmq_version`, but on 3.x each node reports a name of its own
   unless an operator set one (`dlxtool-c1@vm`, `dlxtool-c2@vm` on one cluster, measured): comparing them
   refused the API of every node but the one AMQP reached, and two clusters can share a name anyway.
2. The proof, membership: over AMQP declare an exclusive queue
   with a server-generated name (`amq.gen-` + a 128-bit random id) and ask the API for it. Found: the API
   sees the AMQP connection's cluster and vhost (its `node` is the node AMQP reached). Not found: another
   broker. The queue, and the channel that declared it, stay until the connection goes. It carries the argument
   `dlxtool-probe` (management.PROBE_ARGUMENT): `dlxtool queues` leaves such queues out of its listing.
3. Without permission to declare it (a read-only user), this connection itself is looked for in the API's
   connection list by a random connection name. The list is refreshed every statistics interval (5 s by
   default), so this waits up to LISTING_WAIT; not seen by then proves nothing either way: the API is then
   not used (the AMQP-only path applies, as when it is unreachable), and the reason is reported.

A cluster profile lists one API per node (BrokerProfile.management_candidates): the node AMQP reached first,
then the others, skipping those that do not answer — after a failover the API follows the AMQP connection to
a node that is up. The proof names the node the connection is on (the probe queue's, or the connection row's
`node`), which `describe_session` says with the failover. An API proven to belong to another cluster is still
refused (exit 3) when none of the candidates proves to be this one.

Not used: the `listeners` of `/api/overview`. They list the ports the nodes listen on, not the port a client
dialled: behind a port-forward (localhost:5674 -> pod:5672) or a load balancer they never match, and two
clusters both listen on 5672. They can neither prove nor disprove which broker AMQP reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from dlxtool import waits
from dlxtool.broker.connection import park_channel, reached
from dlxtool.broker.management import OVERVIEW_COLUMNS, PROBE_ARGUMENT, ManagementClient
from dlxtool.broker.naming import connection_name as connection_name
from dlxtool.config import BrokerProfile
from dlxtool.errors import ConnectError, DlxtoolError, ManagementMismatch, NotFoundError
from dlxtool.json_shapes import is_object, items_of
from dlxtool.urls import host_port

# A 404 is asked again (a follower of the metadata store may answer a moment late) for up to PROBE_WAIT s, polls
# 0.1 s apart at first, then PROBE_RETRY_DELAY (dlxtool.waits)
PROBE_RETRY_DELAY = 0.2
PROBE_WAIT = 0.8
LISTING_WAIT = 6.0  # the statistics interval (5 s by default) and a margin
LISTING_POLL = 0.5


@dataclass(frozen=True)
class Identity:
    """Who answered: the AMQP side from connection.start, the API side from /api/overview."""

    cluster_name: str
    version: str
    node: str | None = None

    def describe(self) -> str:
        extra = f", node {self.node}" if self.node else ""
        return f"cluster {self.cluster_name or '?'} ({self.version or 'version ?'}{extra})"


class UnusableManagement(ManagementClient):
    """A management client that answers every request with the reason it cannot be used (not reachable,
    or not proven to answer for the broker AMQP reached): callers take their AMQP-only path at once, without
    a timeout per request."""

    def __init__(self, client: ManagementClient, error: DlxtoolError) -> None:
        self.__dict__.update(client.__dict__)
        self._prefetched = {}  # answers sent ahead of a proof that failed: never read
        self.error = error

    def request(self, method: str, path: str, body: Any = None, *, query: dict[str, Any] | None = None,
                timeout: float | None = None, accept: tuple[int, ...] = ()) -> Any:
        raise ConnectError(self.error.message, hint=self.error.hint)

    def prefetch(self, path: str, **query: Any) -> None:
        pass

    def _prefetch(self, path: str, query: dict[str, Any] | None, timeout: float | None = None) -> None:
        pass


def amqp_identity(conn: Any) -> Identity:
    # pika keeps connection.start's server-properties on the underlying connection only.
    props: dict[str, Any] = conn._impl.server_properties or {}  # noqa: SLF001
    return Identity(cluster_name=_text(props.get("cluster_name")), version=_text(props.get("version")))


def amqp_where(conn: Any) -> str:
    params = conn._impl.params  # noqa: SLF001
    return host_port(params.host, params.port)


def begin(client: ManagementClient) -> ManagementClient:
    """Send the proof's first question (the overview) now, before the AMQP connection is opened: its answer
    travels meanwhile, and `verified_management(conn, profile, client)` reads it.

    The node list is not sent ahead with it, though it would save a round trip: requests sent ahead share the
    connection, and on a busy 4.3.6 node `/api/nodes` answered in 0.5-4.9 s (the overview in 5-10 ms, measured
    while the suite ran against it). One that times out fails every request behind it on that connection, the
    probe queue's lookup with it, and the command would go on without the API."""
    client.prefetch_overview()
    return client


def verified_management(conn: Any, profile: BrokerProfile, client: ManagementClient | None = None,
                        ) -> ManagementClient:
    """The management client of `profile` proven to answer for the cluster `conn` reached: the first of its
    candidates (BrokerProfile.management_candidates) that proves it.

    Raises ManagementMismatch (exit 3) when none proves it and one answers for another broker. When none can be
    reached or proven, returns an UnusableManagement (every request raises ConnectError) saying why.

    Answers `client` was sent ahead for (`begin`, ManagementClient.prefetch) are used afterwards only when
    they came over the TCP connection the proof came over (ManagementClient.proven_connection); the
    overview's version too (a quorum queue's default delivery limit depends on it)."""
    where = reached(conn)
    candidates = profile.management_candidates(where.node if where is not None else None)
    mismatch: ManagementMismatch | None = None
    unusable: list[UnusableManagement] = []
    for url in candidates or [profile.management_url or ""]:
        tried = client if client is not None and client.base_url.rstrip("/") == url.rstrip("/") \
            else ManagementClient.for_profile(profile, url)
        try:
            found = _verified(conn, profile, tried)
        except ManagementMismatch as exc:
            mismatch = mismatch or exc
            continue
        if not isinstance(found, UnusableManagement):
            found.tried = [u.masked_url for u in unusable]
            return found
        unusable.append(found)
    if mismatch is not None:
        raise mismatch
    first = unusable[0]
    if len(unusable) > 1:  # say each: which node's API answered how
        first.error = ConnectError("; ".join(u.error.message for u in unusable), hint=first.error.hint)
    return first


def _verified(conn: Any, profile: BrokerProfile, client: ManagementClient) -> ManagementClient:
    """One candidate API: proven (its identity's node is the node AMQP reached), or UnusableManagement."""
    try:
        overview = client.overview(columns=OVERVIEW_COLUMNS)
    except DlxtoolError as exc:
        return UnusableManagement(client, exc)
    overview_on = client.last_connection
    api = Identity(cluster_name=_text(overview.get("cluster_name")), version=_text(overview.get("rabbitmq_version")),
                   node=_text(overview.get("node")) or None)
    from dlxtool.broker.queues import cluster_without_majority

    # A Khepri cluster without its majority: said now (exit 7), not after the probe queue's declare waited 30 s.
    if (lost := cluster_without_majority(client, api.version)) is not None:
        raise lost
    try:
        node = _probe_queue_node(conn, client, profile.vhost)
    except _NotPermitted as refused:
        return _by_connection_listing(conn, client, profile, api, str(refused), overview_on)
    except DlxtoolError as exc:  # the API failed between two requests: not usable, as when unreachable
        return UnusableManagement(client, exc)
    if node is None:
        raise _mismatch(client, profile, api, f"AMQP {amqp_where(conn)} reached another broker "
                        f"({amqp_identity(conn).describe()}): a queue just declared there over AMQP is unknown to "
                        "that API")
    client.identity = Identity(api.cluster_name, api.version, node)
    _proven(client, overview_on)
    client.reprove = lambda: _reprove(conn, profile, client)
    return client


def describe_session(conn: Any, profile: BrokerProfile, client: ManagementClient) -> str | None:
    """One line for a cluster profile: the node this command is on, the nodes it failed over from, the API it
    reads (and the ones that did not answer first); None for a single-node profile that reached its node."""
    where = reached(conn)
    skipped = where.skipped if where is not None else ()
    tried = getattr(client, "tried", [])
    if len(profile.urls) < 2 and not skipped and not tried:
        return None
    node = client.identity.node if client.identity is not None and client.identity.node else None
    line = f"broker {profile.name}: on node {node or (where.node.masked() if where else '?')}"
    if skipped:
        line += " (failed over: " + "; ".join(skipped) + ")"
    if isinstance(client, UnusableManagement):
        return line + f"; management API not used ({client.error.message})"
    line += f"; management API {client.masked_url}"
    if tried:
        line += " (" + ", ".join(tried) + " did not answer)"
    return line


def _reprove(conn: Any, profile: BrokerProfile, client: ManagementClient) -> None:
    """The proof again, for the connection the client has open now (ManagementClient.reprove), over HTTP only (no
    AMQP call in the middle of a command's work) and in one request, so that it fits on the same connection as
    the answer it proves: this AMQP connection's random name is in that API's connection list. ManagementMismatch
    (exit 3) when it is not (within LISTING_WAIT); nothing proven when the list came over yet another connection.
    Where the first proof declared a probe queue, finding it is the proof (no wait: the connection list lags)."""
    if client.probe_queue is not None:  # the first proof's queue, there while this AMQP connection is
        if not getattr(conn, "is_open", False):
            # The queue went with the connection (closed, or dropped after a stall): its absence proves nothing.
            raise ConnectError(f"management API {client.masked_url} not used any more: its answers came over a new "
                               "HTTP connection, and the AMQP connection that proved it is closed, so it cannot be "
                               "proven again")
        try:
            client.queue(profile.vhost, client.probe_queue)
        except NotFoundError:
            raise _switched(client, conn) from None  # the queue is there while the connection is: another broker
        client.proven_connection = client.last_connection
        return
    name = _connection_name(conn)
    wait = waits.Wait("this connection in the management API's connection list (proving the API again)", LISTING_WAIT,
                      LISTING_POLL)
    first_on: int | None = None
    while True:
        listed = _lists_connection(client, profile.vhost, name)
        on = client.last_connection
        if first_on is None:
            first_on = on
        if on != first_on:
            return  # a poll answered over yet another connection: nothing proven
        if listed:
            client.proven_connection = on
            return
        if not wait.pause():
            break
    raise _switched(client, conn)


def _connection_name(conn: Any) -> str:
    """The random client-provided name this AMQP connection was opened with (connection_name())."""
    said: Any = conn._impl.params.client_properties  # noqa: SLF001
    return _text(said.get("connection_name")) if is_object(said) else ""


def _lists_connection(client: ManagementClient, vhost: str, name: str) -> str | None:
    """The node of the connection named `name` in the API's connection list of `vhost` ("?" where the row does not
    say it), or None where the list does not hold it."""
    rows = client.get(f"vhosts/{_q(vhost)}/connections", columns="user_provided_name,node")
    for row in items_of(rows):
        if is_object(row) and row.get("user_provided_name") == name:
            return _text(row.get("node")) or "?"
    return None


def _switched(client: ManagementClient, conn: Any) -> ManagementMismatch:
    return ManagementMismatch(
        f"management API {client.masked_url} answered over a new HTTP connection for another broker than the one "
        f"AMQP {amqp_where(conn)} reached (what proved it over an earlier connection is unknown there): nothing "
        "more was read from it",
        hint="a load balancer or port-forward in front of the API sends new connections to another broker: give "
             "one broker's API with --management-url")


def _proven(client: ManagementClient, overview_on: int | None) -> None:
    """The last answer read proved the API: the connection it came over is the proven one. The overview's
    version stands only if it came over that connection too (0: urllib, a connection per request)."""
    client.proven_connection = client.last_connection
    if overview_on != client.proven_connection or not overview_on:
        client.forget_version()


class _NotPermitted(Exception):
    pass


def _probe_queue_node(conn: Any, client: ManagementClient, vhost: str) -> str | None:
    """Declare a server-named exclusive queue over AMQP and look it up in the API: the node hosting it,
    or None when the API does not know it. The queue stays while the connection does (ManagementClient.probe_queue:
    a new HTTP connection is proven by finding it again, _reprove; `queues` leaves it out) and goes with it."""
    import pika.exceptions as pe

    channel = conn.channel()
    try:
        name = channel.queue_declare("", exclusive=True, auto_delete=True,
                                     arguments={PROBE_ARGUMENT: True}).method.queue
    except pe.ChannelClosedByBroker as exc:
        # 403 without configure permission on amq.gen-*; anything else a channel error refuses: no proof.
        raise _NotPermitted(f"declaring a probe queue was refused ({exc.reply_code} {exc.reply_text})") from None
    client.probe_queue = name
    # The channel is not closed (a round trip before the first message): the command's next channel is this one
    # (connection.take_channel); the queue stays until the connection goes.
    park_channel(conn, channel)
    wait = waits.Wait("the management API to know the probe queue (proving it answers for this broker)",
                      PROBE_WAIT, PROBE_RETRY_DELAY)
    while True:
        try:
            return _text(client.queue(vhost, name).raw.get("node")) or "?"
        except NotFoundError:
            if not wait.pause():
                return None


def _by_connection_listing(conn: Any, client: ManagementClient, profile: BrokerProfile, api: Identity,
                           why: str, overview_on: int | None) -> ManagementClient:
    """Proof for a user who may not declare queues: this connection's random name in the API's list."""
    name = _connection_name(conn)
    wait = waits.Wait("this connection in the management API's connection list (proving it answers for this broker)",
                      LISTING_WAIT, LISTING_POLL)
    while name.startswith("dlxtool "):
        try:
            listed = _lists_connection(client, profile.vhost, name)
        except DlxtoolError as exc:
            why += f"; the API's connection list cannot be read ({exc.message})"
            break
        if listed:
            client.identity = Identity(api.cluster_name, api.version, listed if listed != "?" else api.node)
            _proven(client, overview_on)
            client.reprove = lambda: _reprove(conn, profile, client)
            return client
        if not wait.pause():
            why += f"; this connection did not show in the API's connection list within {LISTING_WAIT:g}s"
            break
    return UnusableManagement(client, ConnectError(
        f"management API at {client.masked_url} not used: could not prove that it answers for the broker "
        f"AMQP {amqp_where(conn)} reached ({why})",
        hint="give the user configure permission on amq.gen-.* (a probe queue proves it), or check "
             "--management-url / management_url"))


def _mismatch(client: ManagementClient, profile: BrokerProfile, api: Identity, amqp_side: str) -> ManagementMismatch:
    if profile.management_url_derived:
        hint = ("the management URL was derived from the AMQP host (host:15672), which port-forwards and load "
                "balancers break; give it with --management-url or management_url in the broker profile")
    else:
        hint = (f"{profile.management_url_source or 'management_url'} names the API of another broker than "
                "the AMQP URL")
    return ManagementMismatch(
        f"management API {client.masked_url} answers for {api.describe()}, but {amqp_side}: pass that broker's "
        "API with --management-url; nothing was read or changed", hint=hint)


def _q(segment: str) -> str:
    return quote(segment, safe="")


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)
