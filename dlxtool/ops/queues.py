"""`dlxtool queues`: survey one broker or all of them through the management API and flag trouble.

Each broker costs GETs sent together on one connection (pipelined: dlxtool.broker.http) before its identity is
proven, read after (the version; every queue in one listing without statistics, with only the columns used; the
consumer list, the connections' names and the vhost's policies), then each queue's statistics for the queues whose
flags or role read them (_fast_queues; the full listing with statistics where that cannot be told), then, where queues
dead-letter, what their roles are read from (dlxtool.ops.dead_letter_roles): the exchanges, the bindings of the
exchanges they dead-letter to, and the bindings into the queues whose dead letters keep their own key; brokers are
asked in parallel, and a broker that fails is reported on its own, never stopping others. No message is read.

What it costs the broker (issue 40, 3.10.8, 10,001 idle queues, the shared broker at load average 5-9, broker CPU
least and median of 5-8 rounds): the full listing of 14 columns with statistics 0.75-2.6 s (median 1.6-3.0 s), of 6
columns 0.65-0.87 s; the listing without statistics (`totals`, 11 columns) 0.93-2.2 s (median 1.0-3.8 s: it asks
every queue for its count); rabbitmqadmin's sorted listing 2.1-3.6 s (median 2.8-5.3 s); one queue's own GET 2-4 ms.
Before it (least CPU of 10 paired rounds on a node of its own;
rabbitmqadmin's `list queues`, one sorted listing of 2 columns: 1.34 s; scripts/bench/queues.py for whole runs):
- The queues come in one listing, not page by page: a page is cut from the queues of its own moment, so a queue
  created or deleted between two pages (the identity proof's probe queue, gone when the proof ends, was one)
  shifted the rest and one queue was skipped. Pages cost more too: the plugin lists and sorts every queue for
  each page (21 pages of 500: 6.2 s of CPU, against 1.8 s for the same 15 columns in one listing).
- Few columns: the management plugin keeps or drops every field of every queue (about 45) against the columns
  asked for, and its work grows with their number. `message_stats` is one column (the rates are read from it),
  and `vhost` is asked for only with --all-vhosts: 9 columns instead of 15 (1.44 s against 1.78 s).
- Unsorted (`sort=`; rows are sorted here): the plugin's sort looks each sort key up among every queue's fields
  (0.88 s unsorted against 1.44 s sorted).
- Bindings exchange by exchange (those the queues dead-letter to, and where they lead) and queue by queue (into
  the queues whose dead letters keep their key), up to MAX_EXCHANGE_ASKS: the vhost's whole binding listing holds a
  default-exchange binding per queue and cost a fifth to a third of the queue listing.
- Commas written as commas in the query (ManagementClient._target): `%2C` cost the plugin about 0.7 s more.
"""

from __future__ import annotations

import fnmatch
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any
from urllib.parse import quote

from dlxtool.broker.management import ManagementClient, is_probe_queue, queue_path
from dlxtool.config import BrokerProfile
from dlxtool.errors import ConnectError, DlxtoolError, ManagementMismatch, NotFoundError
from dlxtool.json_shapes import is_array, is_object
from dlxtool.ops.dead_letter_roles import Listings, needs_keys
from dlxtool.ops.queue_flags import FLAGS, QueueRow, flag_rows, row_from_api

# What rows are made of (queue_flags.row_from_api); the rates are read from message_stats (Rates.from_message_stats).
# Listing one vhost: without "vhost" (the one asked for), QUEUE_COLUMNS_ALL_VHOSTS with it.
QUEUE_COLUMNS = ["name", "type", "messages_ready", "messages_unacknowledged", "consumers", "arguments", "policy",
                 "effective_policy_definition", "message_stats", "node", "leader", "state", "members", "online"]
QUEUE_COLUMNS_ALL_VHOSTS = ["vhost", *QUEUE_COLUMNS]
BINDING_COLUMNS = ["vhost", "source", "destination", "destination_type", "routing_key"]
EXCHANGE_COLUMNS = ["name", "type", "arguments"]
# Past this many exchanges to ask for bindings one by one, the vhost's whole binding listing is read instead.
MAX_EXCHANGE_ASKS = 64
# How long the queue listing may take to come once asked, at least (the profile's timeout when longer): the server
# makes it in one go, seconds for thousands of queues (about 4 s for 10,000 on a loaded 2-core machine). The
# overview, asked ahead of it on the same connection, has answered within the profile's timeout by then: the
# broker is there, and busy.
LISTING_TIMEOUT = 60.0

_BY_KEY = attrgetter("broker", "vhost", "queue")  # QueueRow.key

# --sort keys -> (value, biggest first?)
SORT_KEYS: dict[str, tuple[Callable[[QueueRow], Any], bool]] = {
    "name": (lambda r: r.key, False),
    "ready": (lambda r: r.ready, True),
    "unacked": (lambda r: r.unacked, True),
    "messages": (lambda r: r.messages, True),
    "consumers": (lambda r: r.consumers, True),
    "publish-rate": (lambda r: r.rates.publish, True),
    "deliver-rate": (lambda r: r.rates.deliver, True),
    "ack-rate": (lambda r: r.rates.ack, True),
    "redeliver-rate": (lambda r: r.rates.redeliver, True),
    "flags": (lambda r: len(r.flags), True),
}


@dataclass
class BrokerResult:
    """One broker's queues, or why it could not be asked."""

    broker: str
    management_url: str | None
    rows: list[QueueRow] = field(default_factory=list[QueueRow])
    error: DlxtoolError | None = None
    nodes: dict[str, bool] | None = None  # the cluster's nodes and whether each runs (None: the API would not say)
    # A cluster profile's node APIs that did not answer before this one did (masked URL: why), in the order tried
    passed_over: list[str] = field(default_factory=list[str])
    # With a node down: why the queues the listing may have left out could not be looked for (unlisted_on_down_nodes)
    unlisted_unknown: str | None = None

    @property
    def down_nodes(self) -> list[str]:
        return sorted(name for name, running in (self.nodes or {}).items() if not running)

    def error_json(self) -> dict[str, Any]:
        return {"broker": self.broker, "management_url": self.management_url,
                "error": self.error.message if self.error else None}


@dataclass
class QueueFilter:
    """Which queues to show, in which order (the CLI's filter and sort options)."""

    flags: tuple[str, ...] = ()  # any of these ("any": any flag at all)
    match: str | None = None
    min_messages: int = 0
    sort: str = "name"

    def keep(self, row: QueueRow) -> bool:
        """A flag that cannot be told for a row (no figures: QueueRow.cannot_tell) keeps it, as does a count it does
        not have: what cannot be ruled out is shown, marked, not left out."""
        told = [*row.flags, *row.cannot_tell]
        if self.flags and not any(f in told or (f == "any" and told) for f in self.flags):
            return False
        if self.match and not name_matches(row.queue, self.match):
            return False
        return row.messages >= self.min_messages or not row.figures_known

    def apply(self, rows: Sequence[QueueRow]) -> list[QueueRow]:
        value, descending = SORT_KEYS[self.sort]
        selecting = self.flags or self.match or self.min_messages
        # ties: by name (QueueRow.key; attrgetter: a third of a property's cost on 10,001 rows)
        kept = sorted((r for r in rows if self.keep(r)) if selecting else rows, key=_BY_KEY)
        return kept if self.sort == "name" else sorted(kept, key=value, reverse=descending)


def name_matches(name: str, pattern: str) -> bool:
    """Shell-style glob (`orders.*`, `*dlq`); a pattern without wildcards matches as a substring."""
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern)
    return pattern in name


Verify = Callable[[BrokerProfile, ManagementClient], None]


# Where an explicit management URL came from when typed for this run (dlxtool.cli.app), not paired with its
# AMQP URL in the config file.
_AD_HOC_SOURCES = ("--management-url", "DLXTOOL_MANAGEMENT_URL")


def _ad_hoc(profile: BrokerProfile) -> bool:
    """The management URL is a guess or was given for this run (a config profile plus --management-url too):
    not the pairing the config file's author made."""
    return (profile.management_url_derived or profile.source == "--url"
            or profile.management_url_source in _AD_HOC_SOURCES)


class IdentityCheck:
    """`queues` reads the API only. Where its URL is a guess (derived from the AMQP host) or ad hoc (--url,
    --management-url), prove that it answers for the broker the AMQP URL names before showing its queues as
    that broker's (dlxtool.broker.identity; ManagementMismatch, exit 3, when not). Once per profile: --watch
    asks every few seconds. When AMQP cannot be reached the survey is still the API's, and shown."""

    def __init__(self) -> None:
        self.proven: set[tuple[str, str | None]] = set()

    def __call__(self, profile: BrokerProfile, client: ManagementClient) -> None:
        key = (profile.name, profile.management_url)
        if key in self.proven or not _ad_hoc(profile):
            return
        if self._prove(profile, client):
            self.proven.add(key)

    @staticmethod
    def _prove(profile: BrokerProfile, client: ManagementClient) -> bool:
        """The proof over an AMQP connection of its own, closed after it (with it goes the probe queue a new
        HTTP connection would be proven by): so a new HTTP connection (--watch outlives a kept-alive one) is
        proven the same way again (ManagementClient.reprove). False when AMQP cannot be reached."""
        from dlxtool.broker.connection import close_quietly, connect
        from dlxtool.broker.identity import verified_management

        try:
            conn = connect(profile)
        except DlxtoolError:
            return False
        try:
            verified_management(conn, profile, client)
        finally:
            close_quietly(conn)

        def again() -> None:
            if not IdentityCheck._prove(profile, client):
                raise ConnectError(f"management API at {client.masked_url}: a new HTTP connection cannot be proven "
                                   f"(the AMQP side of broker {profile.name!r} is not reachable now)")

        client.reprove = again
        return True


def survey_broker(profile: BrokerProfile, vhost: str | None,
                  client_factory: Callable[[BrokerProfile], ManagementClient] = ManagementClient.for_profile,
                  verify: Verify | None = None) -> BrokerResult:
    """All queues of one broker (one vhost, or all when `vhost` is None), flagged. A cluster profile with one
    API per node (management_urls) is asked through the next node's API when one does not answer (its node is
    down: an incident's usual state); an API that answers for another broker is not passed over (exit 3)."""
    candidates = profile.management_candidates() if len(profile.management_urls) > 1 else []
    if not candidates:
        return _survey_through(profile, vhost, client_factory, verify)
    passed_over: list[BrokerResult] = []
    for url in candidates:
        result = _survey_through(replace(profile, management_url=url), vhost, client_factory, verify)
        if not isinstance(result.error, ConnectError) or isinstance(result.error, ManagementMismatch):
            result.passed_over = [r.error.message for r in passed_over if r.error is not None]
            return result
        passed_over.append(result)
    first = passed_over[0]
    if first.error is not None:
        first.error = ConnectError("no node's management API could be used: "
                                   + "; ".join(r.error.message for r in passed_over if r.error is not None),
                                   hint=first.error.hint)
    return first


def _survey_through(profile: BrokerProfile, vhost: str | None,
                    client_factory: Callable[[BrokerProfile], ManagementClient],
                    verify: Verify | None) -> BrokerResult:
    """survey_broker through the API of `profile.management_url`."""
    result = BrokerResult(broker=profile.name, management_url=profile.management_url)
    try:
        client = client_factory(profile)
        result.management_url = client.masked_url
        # Two independent GETs, each a round trip and the broker's work: sent together now, so that they
        # travel while `verify` opens an AMQP connection; read only once it has proven the API (their
        # answers come over the connection of the proof, or are asked for again: ManagementClient.prefetch).
        client.prefetch_overview()
        _prefetch_fast(client, profile, vhost)
        if verify is not None:
            verify(profile, client)
        version = client.version()
        consumers = _consumer_lists(client, vhost)
        listed = _fast_queues(client, profile, vhost, consumers)
        if listed is None:
            listed = _queues(client, profile, vhost)
        rows = [row_from_api(profile.name, item, broker_version=version) for item in listed]
        _count_real_consumers(consumers, rows)
        result.nodes = _nodes(client)
        down = {name for name, running in (result.nodes or {}).items() if not running}
        for row in rows:
            row.node_down = row.node in down
        if down:
            unlisted, result.unlisted_unknown = unlisted_on_down_nodes(client, rows, vhost, sorted(down), profile.name,
                                                                       version, _listing_timeout(profile))
            rows += unlisted
        listings = dead_letter_listings(client, rows, vhost)
        result.rows = flag_rows(rows, lambda v: listings.get(v, Listings()))
    except DlxtoolError as exc:
        result.error = exc
    return result


def unlisted_on_down_nodes(client: ManagementClient, rows: Sequence[QueueRow], vhost: str | None, down: list[str],
                           broker: str, version: str | None, timeout: float) -> tuple[list[QueueRow], str | None]:
    """The durable queues of `vhost` its definitions hold and the API's listing left out, while `down` nodes are not
    running: a queue on a node that went down moments before (CI, 3.10.8: a classic DLQ on a member whose app had just
    stopped was missing from /api/queues, and `queues` showed nothing of it). Each is a row of its own, flagged
    unavailable (its node is down: named where one node is, since a queue whose node runs is listed; the definitions do
    not say it); depth unknown. One more GET, only while a node is down, of one vhost's definitions (never the whole
    broker's, which holds the users and their password hashes: not with --all-vhosts). Also the rows' reason where
    they cannot be looked for (None: they were). A queue declared between the listing and this GET would be taken for
    one on the down node (said in the reason's words: "not in the API's listing")."""
    if vhost is None:
        return [], ("with --all-vhosts the queues the API's listing may leave out while a node is down are not looked "
                    "for (give --vhost for that)")
    try:
        defined = client.request("GET", f"definitions/{quote(vhost, safe='')}", timeout=timeout)
    except ManagementMismatch:
        raise
    except DlxtoolError as exc:
        return [], (f"the vhost's definitions could not be read ({exc.message}): a queue on the down node that the "
                    "API's listing leaves out would not be shown")
    listed = {(r.vhost, r.queue) for r in rows}
    found: list[QueueRow] = []
    queues: list[Any] = defined.get("queues", []) if is_object(defined) else []
    for q in queues:
        if not is_object(q) or not q.get("durable", True) or is_probe_queue(q):
            continue
        name = q.get("name")
        if not isinstance(name, str) or (vhost, name) in listed:
            continue
        given = q.get("arguments")
        arguments: dict[str, Any] = given if is_object(given) else {}
        kind = q.get("type") or arguments.get("x-queue-type") or "classic"
        row = row_from_api(broker, {"name": name, "vhost": vhost, "arguments": arguments, "type": kind,
                                    "node": down[0] if len(down) == 1 else None, "state": "down"},
                           broker_version=version)
        row.figures_known = False  # its depth: unknown, not 0
        row.node_down = True
        row.unlisted = True
        found.append(row)
    return found, None


ConsumerLists = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def _consumer_lists(client: ManagementClient, vhost: str | None) -> ConsumerLists | None:
    """The API's consumer list (queue and connection of each) and the connections' names, or None where they cannot
    be read (metrics collection denied: 400)."""
    (consumers, by_queue), (connections, by_name) = _consumers_query(vhost), _connections_query(vhost)
    try:
        listed = client.get(consumers, **by_queue)
        named = client.get(connections, **by_name)
    except DlxtoolError:
        return None
    return ([c for c in listed or () if is_object(c)], [c for c in named or () if is_object(c)])


def _consumers_query(vhost: str | None) -> tuple[str, dict[str, str]]:
    return (f"consumers/{quote(vhost, safe='')}" if vhost else "consumers",
            {"columns": "queue.name,queue.vhost,channel_details.connection_name"})


def _connections_query(vhost: str | None) -> tuple[str, dict[str, str]]:
    return (f"vhosts/{quote(vhost, safe='')}/connections" if vhost else "connections",
            {"columns": "name,user_provided_name"})


def _count_real_consumers(lists: ConsumerLists | None, rows: Sequence[QueueRow]) -> None:
    """The consumer counts of the rows as the API's consumer list has them, without dlxtool's own connections.

    A queue row's `consumers` is the queue's own count in its last statistics sample: on a quorum queue it counts
    every basic.get held unacked as a consumer (measured on 3.10.8 and 4.3.6: a peek holding 50 read "50
    consumers", none of them in /api/consumers), so a peek made the DLQ look consumed and lose its `dlq` role
    (issue 35). The consumer list has basic.consume consumers only, and a consumer that goes leaves it at once.
    Where the list cannot be read (metrics collection denied: 400), the sampled counts stay."""
    if lists is None:
        return
    listed, named = lists
    ours = {str(c.get("name")) for c in named if str(c.get("user_provided_name") or "").startswith("dlxtool ")}
    counts: Counter[tuple[str, str]] = Counter()
    for consumer in listed:
        queue = consumer.get("queue")
        channel = consumer.get("channel_details")
        if not is_object(queue) or (is_object(channel) and channel.get("connection_name") in ours):
            continue
        counts[(str(queue.get("vhost")), str(queue.get("name")))] += 1
    for row in rows:
        if row.figures_known:
            row.consumers = counts[(row.vhost, row.queue)]


def _nodes(client: ManagementClient) -> dict[str, bool] | None:
    """node name -> running, from /api/nodes (one short request); None where the user may not read it (it needs the
    monitoring tag): a queue's own `state` still says when its node is down."""
    try:
        rows = client.get("nodes", columns="name,running")
    except ManagementMismatch:
        raise
    except DlxtoolError:
        return None
    return {str(r.get("name")): bool(r.get("running")) for r in rows or () if is_object(r)}


def _listing_timeout(profile: BrokerProfile) -> float:
    return max(profile.timeout, LISTING_TIMEOUT)


def _columns(vhost: str | None) -> list[str]:
    return QUEUE_COLUMNS if vhost else QUEUE_COLUMNS_ALL_VHOSTS


def _queues(client: ManagementClient, profile: BrokerProfile, vhost: str | None) -> list[dict[str, Any]]:
    try:
        try:
            listed = client.queues(vhost, columns=_columns(vhost), timeout=_listing_timeout(profile), unsorted=True)
        except DlxtoolError as exc:
            if type(exc) is not DlxtoolError:  # unreachable, not allowed, not found…: the same sorted
                raise
            # an HTTP error status: a management plugin that takes no empty `sort` (none seen); sorted, then
            listed = client.queues(vhost, columns=_columns(vhost), timeout=_listing_timeout(profile))
        # not the identity proofs' probe queues (this command's, exclusive to its connection and gone with it,
        # or another dlxtool's running meanwhile)
        kept = [q for q in listed if not is_probe_queue(q) and q.get("name") != client.probe_queue]
        if vhost:  # the vhost asked for (not a column: see the module's docstring)
            for q in kept:
                q["vhost"] = vhost
        return kept
    except NotFoundError:
        # The API's 404 names a path; the same fault over AMQP says "vhost … not found": say it one way.
        from dlxtool.broker.connection import vhost_not_found

        raise vhost_not_found(replace(profile, vhost=vhost or profile.vhost)) from None


# -- the listing without the statistics database's per-queue work (issue 40) ------------------------------------

# The settings, type, node and depth of every queue: one listing with `totals` (ManagementClient.queues), which costs
# the management plugin no statistics lookup per queue. Where the full listing's `vhost` column is asked (all vhosts),
# so is it here.
TOTALS_COLUMNS = ["name", "type", "messages_ready", "messages_unacknowledged", "arguments", "policy", "node", "leader",
                  "state", "members", "online"]
TOTALS_COLUMNS_ALL_VHOSTS = ["vhost", *TOTALS_COLUMNS]
# What the statistics add, asked queue by queue for the queues whose flags or role read it (_needs_statistics)
# (with where it lives as the statistics say it, as the full listing shows it: 3.10.8's listing without statistics
# gave a stream no node, members or counts)
STATS_COLUMNS = ("name,messages_ready,messages_unacknowledged,consumers,message_stats,effective_policy_definition,"
                 "node,leader,state,members,online")
PLACE_COLUMNS = ("node", "leader", "state", "members", "online")
# Past this many queues to ask one by one, the full listing instead: a queue's own GET cost 3.10.8 about 2-4 ms of
# CPU (10,001 queues, 100 asked), the full listing of 10,001 about 0.75-1.6 s against 0.9-1.0 s for the totals. Not
# one page of the listing filtered by name (`page=1&name=^(a|b…)$&use_regex=true`: the plugin then looks up the
# statistics of the matching queues only, but matches the regex against every queue, compiling it each time: 100
# names cost it 1.5 s, their 100 GETs 0.15-0.4 s).
MAX_STATS_ASKS = 200


def _prefetch_fast(client: ManagementClient, profile: BrokerProfile, vhost: str | None) -> None:
    """Send ahead what _fast_queues and _count_real_consumers read first, to travel while the identity is proven."""
    for path, query in (_consumers_query(vhost), _connections_query(vhost), (_policies_path("operator-policies", vhost),
                        {}), (_policies_path("policies", vhost), {})):
        client.prefetch(path, **query)
    client.prefetch_queues(vhost, columns=_totals_columns(vhost), timeout=_listing_timeout(profile), unsorted=True,
                           totals=True)


def _fast_queues(client: ManagementClient, profile: BrokerProfile, vhost: str | None,
                 consumers: ConsumerLists | None) -> list[dict[str, Any]] | None:
    """Every queue as the full listing (_queues) gives it, from the cheaper listing without statistics and, for the
    queues that need them (_needs_statistics), their own GET each, sent together. The full listing's per-queue
    statistics were most of what `queues` cost the broker on a vhost of 10,001 idle queues (issue 40).

    A queue needs the statistics where its flags or its role read them: it holds messages (rates: clogged,
    at-limit, and its rates as shown), has consumers (no-dlx, clogged), or dead-letters (a retry stage is one no
    consumer ever took a message from: message_stats). The others hold no message and have no consumer: no flag can
    read their rates, and they are shown with the depth they counted (0), no consumer and no rates, as the full
    listing shows an idle queue. None (the full listing then) where this cannot be told from what was read: the
    statistics are off or the consumer list unreadable (management_metrics_collection denied: the listing says what
    the API keeps), an operator policy exists (the effective settings would merge it), or more than
    MAX_STATS_ASKS queues need statistics."""
    if consumers is None:
        return None
    try:
        operator = client.get(_policies_path("operator-policies", vhost))
        policies = client.get(_policies_path("policies", vhost))
    except DlxtoolError:
        return None
    if operator or not is_array(policies):
        return None
    try:
        listed = client.queues(vhost, columns=_totals_columns(vhost), timeout=_listing_timeout(profile),
                               unsorted=True, totals=True)
    except NotFoundError:
        from dlxtool.broker.connection import vhost_not_found

        raise vhost_not_found(replace(profile, vhost=vhost or profile.vhost)) from None
    except DlxtoolError as exc:
        if type(exc) is not DlxtoolError:  # unreachable, not allowed…: the same for the full listing
            raise
        return None  # an HTTP error status: a plugin that takes no `enable_queue_totals`
    definitions = {(str(p.get("vhost")), str(p.get("name"))): p.get("definition")
                   for p in policies if is_object(p)}
    consumed = {(str(q.get("vhost")), str(q.get("name"))) for c in consumers[0]
                if is_object(q := c.get("queue"))}
    kept: list[dict[str, Any]] = []
    wanted: list[dict[str, Any]] = []
    for q in listed:
        if not is_object(q) or is_probe_queue(q) or q.get("name") == client.probe_queue:
            continue
        if vhost:
            q["vhost"] = vhost
        key = (str(q.get("vhost")), str(q.get("name")))
        q["consumers"] = 0  # the consumer list's count is set on the rows (_count_real_consumers)
        policy = q.get("policy")
        definition: Any = definitions.get((key[0], str(policy))) if policy else {}  # JSON (None: a policy not read)
        if is_object(definition):
            q["effective_policy_definition"] = definition
        if _needs_statistics(q, key in consumed) or not is_object(definition):
            wanted.append(q)  # (a policy not in the list read: changed meanwhile; the queue's GET says)
        kept.append(q)
    if len(wanted) > MAX_STATS_ASKS:
        return None
    paths = [queue_path(str(q["vhost"]), str(q["name"])) for q in wanted]
    for path in paths:
        client.prefetch(path, columns=STATS_COLUMNS)
    gone: set[int] = set()
    for q, path in zip(wanted, paths, strict=True):
        try:
            stats = client.get(path, columns=STATS_COLUMNS)
        except NotFoundError:  # deleted since the listing
            gone.add(id(q))
            continue
        if is_object(stats):
            _with_statistics(q, stats)
    return [q for q in kept if id(q) not in gone] if gone else kept


def _needs_statistics(q: dict[str, Any], consumed: bool) -> bool:
    """Whether a queue's flags or role read its statistics (_fast_queues)."""
    if consumed or q.get("messages_ready") or q.get("messages_unacknowledged"):
        return True
    if "messages_unacknowledged" not in q:  # no depth counted: its node down (nothing more to ask), or a stream
        return q.get("state") != "down"
    arguments = q.get("arguments")
    definition = q.get("effective_policy_definition")
    return ((isinstance(arguments, dict) and "x-dead-letter-exchange" in arguments)
            or (isinstance(definition, dict) and "dead-letter-exchange" in definition))


def _with_statistics(q: dict[str, Any], stats: dict[str, Any]) -> None:
    """A listed queue with its own GET's statistics: its depth, consumers and rates from the statistics sample (as the
    full listing has them), and no depth where it has no sample yet (its figures unknown, as there)."""
    for key in ("messages_ready", "messages_unacknowledged", "consumers", "message_stats"):
        if key in stats:
            q[key] = stats[key]
        else:
            q.pop(key, None)
    if isinstance(stats.get("effective_policy_definition"), dict):
        q["effective_policy_definition"] = stats["effective_policy_definition"]
    for key in PLACE_COLUMNS:
        if key in stats:
            q[key] = stats[key]


def _totals_columns(vhost: str | None) -> list[str]:
    return TOTALS_COLUMNS if vhost else TOTALS_COLUMNS_ALL_VHOSTS


def _policies_path(which: str, vhost: str | None) -> str:
    return f"{which}/{quote(vhost, safe='')}" if vhost else which


def dead_letter_listings(client: ManagementClient, rows: Sequence[QueueRow], vhost: str | None
                         ) -> dict[str, Listings]:
    """What dead_letter_roles follows, per vhost: the exchanges (one listing), the bindings of every exchange a queue
    dead-letters to and of those they lead to (bound exchanges, alternate exchanges), level by level, each level's
    GETs sent together, and the bindings into each queue whose dead letters keep their own routing key through an
    exchange that routes on it (dead_letter_roles.needs_keys). Past MAX_EXCHANGE_ASKS asks, the whole binding
    listing of `vhost` (of every vhost when None) instead."""
    sources = [r for r in rows if r.dead_letter_exchange is not None and r.type != "stream"]
    if not sources:
        return {}
    out: dict[str, Listings] = {}
    for ex in client.get(*_exchanges_path(vhost), columns=",".join(EXCHANGE_COLUMNS if vhost else
                                                                    ["vhost", *EXCHANGE_COLUMNS])) or ():
        out.setdefault(vhost or str(ex.get("vhost", "")), Listings()).exchanges[str(ex.get("name", ""))] = ex
    for v in {r.vhost for r in sources}:
        out.setdefault(v, Listings())
    try:
        _read_bindings(client, sources, out)
    except _TooMany:
        for listing in out.values():
            listing.bindings.clear()
            listing.into.clear()
        for binding in client.bindings(vhost, columns=BINDING_COLUMNS):
            out.setdefault(vhost or str(binding.get("vhost", "")), Listings()).add_binding(binding)
    return out


class _TooMany(Exception):
    """More exchanges and queues to ask for bindings than MAX_EXCHANGE_ASKS."""


def _read_bindings(client: ManagementClient, sources: Sequence[QueueRow], out: dict[str, Listings]) -> None:
    """Bindings exchange by exchange, level by level, then into the queues that need them (needs_keys); _TooMany
    past MAX_EXCHANGE_ASKS."""
    columns = BINDING_COLUMNS[1:]  # the vhost is the one asked for
    todo = sorted({(r.vhost, r.dead_letter_exchange) for r in sources if r.dead_letter_exchange})  # "": no bindings
    seen = set(todo)
    asked = 0
    while todo:
        asked += len(todo)
        if asked > MAX_EXCHANGE_ASKS:
            raise _TooMany
        for v, exchange in todo:
            client.prefetch_exchange_bindings(v, exchange, columns=columns)
        after: set[tuple[str, str]] = set()
        for v, exchange in todo:
            listing = out[v]
            for binding in client.exchange_bindings(v, exchange, columns=columns):
                listing.bindings.setdefault(exchange, []).append(binding)
                if binding.get("destination_type") == "exchange":
                    after.add((v, str(binding.get("destination", ""))))
            arguments: dict[str, Any] = (listing.exchanges.get(exchange) or {}).get("arguments") or {}
            alternate = arguments.get("alternate-exchange")
            if alternate:
                after.add((v, str(alternate)))
        todo = sorted(after - seen)
        seen |= after
    keyed = sorted({(r.vhost, r.queue) for r in sources if needs_keys(r, out[r.vhost])})
    if asked + len(keyed) > MAX_EXCHANGE_ASKS:
        raise _TooMany
    for v, queue in keyed:
        client.prefetch(_queue_bindings_path(v, queue), columns=",".join(columns))
    for v, queue in keyed:
        try:
            into: Any = client.get(_queue_bindings_path(v, queue), columns=",".join(columns)) or []  # JSON
        except NotFoundError:  # deleted since the listing
            into = []
        out[v].into[queue] = [b for b in into if is_object(b) and b.get("source")]


def _exchanges_path(vhost: str | None) -> tuple[str]:
    return (f"exchanges/{quote(vhost, safe='')}" if vhost else "exchanges",)


def _queue_bindings_path(vhost: str, queue: str) -> str:
    return f"queues/{quote(vhost, safe='')}/{quote(queue, safe='')}/bindings"


def survey(profiles: Sequence[BrokerProfile], *, all_vhosts: bool = False,
           client_factory: Callable[[BrokerProfile], ManagementClient] = ManagementClient.for_profile,
           verify: Verify | None = None) -> list[BrokerResult]:
    """Every broker asked in parallel: a dead one costs its own timeout, not the sum of them."""
    if not profiles:
        return []

    def one(profile: BrokerProfile) -> BrokerResult:
        return survey_broker(profile, None if all_vhosts else profile.vhost, client_factory, verify)

    if len(profiles) == 1:
        return [one(profiles[0])]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(16, len(profiles))) as pool:
        return list(pool.map(one, profiles))


def with_vhost(profiles: Sequence[BrokerProfile], vhost: str | None) -> list[BrokerProfile]:
    return [replace(p, vhost=vhost) if vhost else p for p in profiles]


# -- watch: snapshots and what changed between them ------------------------------------------------------


@dataclass
class Snapshot:
    taken_at: datetime
    results: list[BrokerResult]

    @property
    def rows(self) -> list[QueueRow]:
        return [row for r in self.results for row in r.rows]

    @property
    def failures(self) -> list[BrokerResult]:
        return [r for r in self.results if r.error is not None]


DELTA_FIELDS = ("ready", "unacked", "consumers")


def deltas(previous: Snapshot | None, current: Snapshot) -> dict[tuple[str, str, str], dict[str, int | None]]:
    """Per queue, how ready/unacked/consumers changed since the previous snapshot (new queues: from 0; None where
    either snapshot has no figures for it)."""
    if previous is None:
        return {}
    before = {row.key: row for row in previous.rows}
    out: dict[tuple[str, str, str], dict[str, int | None]] = {}
    for row in current.rows:
        old = before.get(row.key)
        known = row.figures_known and (old is None or old.figures_known)
        out[row.key] = {f: getattr(row, f) - (getattr(old, f) if old else 0) if known else None for f in DELTA_FIELDS}
    return out


def pause(seconds: float) -> None:
    """The wait between snapshots (Ctrl-C lands here; tests replace it)."""
    time.sleep(seconds)


def snapshots(take: Callable[[], list[BrokerResult]], interval: float, count: int | None = None,
              sleep: Callable[[float], None] | None = None) -> Iterator[Snapshot]:
    """Take a snapshot every `interval` seconds (measured start to start), `count` times or forever."""
    sleep = sleep or pause
    taken = 0
    while count is None or taken < count:
        started = time.monotonic()
        yield Snapshot(taken_at=datetime.now(UTC), results=take())
        taken += 1
        if count is None or taken < count:
            sleep(max(0.0, interval - (time.monotonic() - started)))


__all__ = ["FLAGS", "SORT_KEYS", "BrokerResult", "IdentityCheck", "QueueFilter", "Snapshot", "deltas", "snapshots",
           "survey", "survey_broker", "with_vhost", "name_matches"]
