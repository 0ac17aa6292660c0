"""Client for RabbitMQ's management HTTP API (queue type, arguments, policies, listing).

The API is a handful of JSON GETs over one kept-alive connection (dlxtool.broker.http): a GET the command
will need can be sent ahead (`prefetch`) and its answer read when asked for.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode, urlsplit, urlunsplit

import orjson

from dlxtool import secrets, waits
from dlxtool.broker.http import HttpConnection, Pending, Response, done, proxied, urllib_exchange
from dlxtool.config import BrokerProfile
from dlxtool.errors import AccessRefused, ConnectError, DlxtoolError, ManagementMismatch, NotFoundError, QueueNotFound
from dlxtool.json_shapes import is_array, is_object
from dlxtool.urls import bracketed, mask_any_url

if TYPE_CHECKING:
    import ssl

# What every overview this client asks for carries: the identity proof's fields and the version, so that one
# answer serves both (dlxtool.broker.identity sends it ahead, before the AMQP connection is open).
OVERVIEW_COLUMNS = ("cluster_name", "node", "rabbitmq_version")

# The argument every identity proof's probe queue is declared with (dlxtool.broker.identity): a queue listing
# leaves those out, this run's and any other dlxtool's (is_probe_queue). Not an x- argument: none of the broker's.
PROBE_ARGUMENT = "dlxtool-probe"


def is_probe_queue(item: Any) -> bool:
    """Whether an item of a queue listing (with its `arguments`) is a dlxtool identity proof's probe queue."""
    arguments = item.get("arguments") if is_object(item) else None
    return is_object(arguments) and PROBE_ARGUMENT in arguments


@dataclass(frozen=True)
class QueueInfo:
    """What the management API says about one queue, with the effective settings resolved."""

    name: str
    vhost: str
    type: str  # classic | quorum | stream
    messages_ready: int
    messages_unacked: int
    consumers: int
    arguments: dict[str, Any]
    policy: str | None
    effective_policy_definition: dict[str, Any]
    raw: dict[str, Any]

    broker_version: str | None = None  # from /api/overview when known: 4.x has a default delivery limit
    # False while the API has no figures for the queue yet (declared moments ago: until its first stats
    # sample, up to 5 s, the answer lacks effective_policy_definition): a policy's settings (dead-letter
    # exchange, limits) are then unknown, not absent. Seen on 3.10 for about 4 s, on 4.0 for about 1 s.
    policies_known: bool = True

    @property
    def figures_known(self) -> bool:
        """Whether the row has the queue's message and consumer counts. Not when the broker keeps no statistics
        (metrics collection denied: 4.3 rows have settings only), nor until a new queue's first sample (3.10
        and 4.0, quorum queues: some seconds): messages_ready, messages_unacked and consumers then read 0 but
        are not known."""
        return "messages_unacknowledged" in self.raw

    def setting(self, name: str) -> Any:
        """The value in effect: queue arguments win over policy (x-dead-letter-exchange ~
        dead-letter-exchange), except numeric limits, where the broker applies the stricter of the two."""
        arg = self.arguments.get(f"x-{name}")
        pol = self.effective_policy_definition.get(name)
        a, p = _number(arg), _number(pol)
        if name in _STRICTER_WINS and a is not None and p is not None:
            return min(a, p)
        return arg if f"x-{name}" in self.arguments else pol

    def setting_source(self, name: str) -> str | None:
        """Where `setting(name)` comes from: "arguments", "policy", or None when unset."""
        if f"x-{name}" in self.arguments:
            if name in _STRICTER_WINS and self.setting(name) != self.arguments[f"x-{name}"]:
                return "policy"
            return "arguments"
        return "policy" if name in self.effective_policy_definition else None

    @property
    def delivery_limit(self) -> int | None:
        """Quorum queues only: the limit in effect, None when unlimited (3.x without one; -1 on 4.x).

        The broker's own answer where the API gives it (4.3: `delivery_limit`), else resolved from the argument and
        the policy by the version's rules (dlxtool.broker.versions.effective_delivery_limit): 4.x gives a queue
        without one 20 and reads a negative limit as none unless the other of argument and policy is set; 3.x has
        no "off" switch and dead-letters (or drops) a message at its first return with a negative one (seen on
        3.10.8 with -1: every message a peek gave back was gone), so that reads as 0 there, and when the version
        is not known."""
        from dlxtool.broker import versions

        if self.type != "quorum":
            return None
        reported, limit = versions.api_delivery_limit(self.broker_version, self.raw)
        if reported:
            return limit
        return versions.effective_delivery_limit(self.broker_version, self.arguments.get("x-delivery-limit"),
                                                 self.effective_policy_definition.get("delivery-limit"))

    @property
    def tail_republish_risk(self) -> str | None:
        """Why republishing kept messages to this queue's tail could push unread ones out, or None.

        Tools that keep messages by republishing them to the tail (replay, selective purge) must not
        run on a queue with a length limit whose overflow drops (or dead-letters) the head."""
        limits = [f"{n} {self.setting(n)}" for n in ("max-length", "max-length-bytes")
                  if _number(self.setting(n)) is not None]
        overflow = self.setting("overflow") or "drop-head"
        if not limits or overflow not in ("drop-head", "reject-publish-dlx"):
            return None
        effect = ("push unread ones off its head" if overflow == "drop-head" else
                  "be refused and dead-lettered as well (a copy back in the dead-letter queue)")
        return (f"{self.name!r} has {' and '.join(limits)} with overflow {overflow}: messages kept by "
                f"republishing them to its tail could {effect}")

    @property
    def dead_letter_exchange(self) -> str | None:
        value = self.setting("dead-letter-exchange")
        return value if value is None else str(value)

    @property
    def dead_letter_routing_key(self) -> str | None:
        value = self.setting("dead-letter-routing-key")
        return value if value is None else str(value)


# RabbitMQ resolves these with min(argument, policy) (rabbit_queue_type_util:args_policy_lookup with
# fun min/2); seen on 3.10: x-delivery-limit 10 with a policy delivery-limit 2 dead-letters after 2.
_STRICTER_WINS = ("delivery-limit", "max-length", "max-length-bytes")
DEFAULT_DELIVERY_LIMIT_4X = 20  # quorum queues without a limit get 20 from RabbitMQ 4.0 (dlxtool.broker.versions)


def default_delivery_limit(version: str | None) -> int | None:
    """The delivery limit a quorum queue gets when none is set, for this RabbitMQ version."""
    from dlxtool.broker import versions

    return versions.default_delivery_limit(version)


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


class ManagementClient:
    def __init__(self, base_url: str, user: str, password: str, *, timeout: float = 5.0,
                 context: ssl.SSLContext | None = None, env: Mapping[str, str] | None = None) -> None:
        """`env`: the command's environment (BrokerProfile.env), where a proxy for the API may be set: then
        urllib does each request, with its proxy and no_proxy rules. None: no proxy."""
        base_url, url_user, url_password = _split_userinfo(base_url)
        if url_user is not None:  # credentials written into management_url win over the profile's
            user, password = url_user, url_password if url_password is not None else password
        self.base_url = base_url.rstrip("/") + "/"
        self.user = user
        self._auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.timeout = timeout
        self._context = context
        self._answered = False  # a request had a 2xx answer (a later 401 is then about the request, not the login)
        self.via_proxy = proxied(urlsplit(self.base_url).scheme, env or {})  # then urllib does each request
        self._version: str | None = None
        self._no_stats = False  # a settled queue read found no policies after a whole STATS_WAIT
        self._policy_lists: dict[str, list[dict[str, Any]] | None] = {}  # "policies/VHOST" … -> list (None: unreadable)
        self._reread: set[str] = set()  # vhosts whose policy list was read again (once per queue read)
        self.identity: Any = None  # set by dlxtool.broker.identity once proven to be the AMQP broker's API
        # The TCP connection (Response.connection) the identity proof's answer came over: an answer sent ahead
        # of the proof is used only when it came over that same connection (else it is asked for again).
        self.proven_connection: int | None = None
        self.last_connection: int | None = None  # the connection the last answer read came over
        self.last_date: str | None = None  # the server's clock (its Date header) at the last answer read
        # Set by the identity proof: proves the connection open now (dlxtool.broker.identity), for an answer that
        # came over another TCP connection than the proof's (the kept-alive one closed; a load balancer or a
        # port-forward may have sent the new one to another broker). Only reads go to the API: an answer is
        # used once its connection is proven, or asked for again.
        self.reprove: Callable[[], None] | None = None
        self.probe_queue: str | None = None  # the identity proof's exclusive queue (dlxtool.broker.identity)
        self.tried: list[str] = []  # a cluster profile's APIs asked before this one, that did not answer
        self._failed_proof: DlxtoolError | None = None  # a new connection that reached another broker: never used again
        self._reproving = False
        self._http: HttpConnection | None = None
        self._prefetched: dict[tuple[str, str], Pending] = {}
        secrets.register(password)

    @classmethod
    def for_profile(cls, profile: BrokerProfile, url: str | None = None) -> ManagementClient:
        """The profile's management API client (`url`: one of its candidates, else its management_url)."""
        url = url or profile.management_url or ""
        context = None
        if url.startswith("https"):
            from dlxtool.broker.tls import tls_context  # ssl's context: only for an https API

            context = tls_context(profile)
        return cls(url, profile.username, profile.password(), timeout=profile.timeout, context=context,
                   env=profile.env)

    @property
    def masked_url(self) -> str:
        return mask_any_url(self.base_url)

    # -- raw access -------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, *, query: dict[str, Any] | None = None,
                timeout: float | None = None, accept: tuple[int, ...] = ()) -> Any:
        """`timeout`: how long the answer may take to come, when not the client's (send). `accept`: statuses beyond
        2xx whose body is the answer (a health check's 503 says what failed)."""
        if self._failed_proof is not None:  # a caller that took the first failure for "unreachable" gets it again
            raise self._failed_proof
        pending = self._prefetched.pop((method, self._target(path, query)), None) if body is None else None
        if pending is not None:
            try:
                return self._answer(pending, method, path, sent_ahead=True, timeout=timeout, accept=accept)
            except _AskAgain:
                pass
        for _attempt in range(REPROOFS):
            try:
                return self._answer(self.send(method, path, body, query=query, timeout=timeout), method, path,
                                    timeout=timeout, accept=accept)
            except _AskAgain:
                continue
        raise ConnectError(f"management API at {self.masked_url}: its answers came over a new TCP connection each "
                           f"time ({REPROOFS} in a row), each to be proven again; not used",
                           hint="a load balancer or proxy in front of the API may close connections: point "
                                "--management-url at one node")

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query or None)

    def prefetch(self, path: str, **query: Any) -> None:
        """Send GET `path` now; `get(path, **query)` reads its answer later (once: a second get asks again).
        Nothing is sent ahead through a proxy: urllib would fetch it at once, on a connection of its own."""
        self._prefetch(path, query or None)

    def _prefetch(self, path: str, query: dict[str, Any] | None, timeout: float | None = None) -> None:
        key = ("GET", self._target(path, query))
        if key not in self._prefetched and not self.via_proxy:
            self._prefetched[key] = self.send("GET", path, query=query, timeout=timeout)

    def send(self, method: str, path: str, body: Any = None, *, query: dict[str, Any] | None = None,
             timeout: float | None = None) -> Pending:
        """Submit a request; its Pending answer is read by `request` (or `get`). `timeout`: how long its answer
        may take to come, when not the client's (a listing of thousands of queues takes the server seconds)."""
        data = orjson.dumps(body) if body is not None else None
        headers = {"Authorization": self._auth, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        target = self._target(path, query)
        try:
            parts = urlsplit(self.base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise OSError(0, "not an http:// or https:// URL")
            if self.via_proxy:
                url = f"{parts.scheme}://{parts.netloc}{target}"
                return done(urllib_exchange(method, url, headers, data, timeout=timeout or self.timeout,
                                            context=self._context))
            if self._http is None:
                self._http = HttpConnection(parts.scheme, parts.hostname, parts.port or _DEFAULT_PORT[parts.scheme],
                                            timeout=self.timeout, context=self._context)
            return self._http.submit(method, target, headers, data, timeout=timeout)
        except (OSError, ValueError) as exc:  # ValueError: a port that is no number
            return done(error=exc if isinstance(exc, OSError) else OSError(0, str(exc)))

    def _target(self, path: str, query: dict[str, Any] | None) -> str:
        target = (urlsplit(self.base_url).path or "/") + "api/" + path.lstrip("/")
        # Commas as they are (RFC 3986 allows them in a query): 3.10.8's management plugin spent about 0.7 s more
        # of its CPU on a listing of 10,001 queues whose `columns` had them written %2C (1.8 s against 1.0 s).
        return target + "?" + urlencode(query, safe=",") if query else target

    def _answer(self, pending: Pending, method: str, path: str, *, sent_ahead: bool = False,
                timeout: float | None = None, accept: tuple[int, ...] = ()) -> Any:
        began = time.monotonic()
        try:
            response = pending.result()
        except OSError as exc:
            if sent_ahead and self.proven_connection is not None:
                raise _AskAgain from None
            raise self._unreachable(exc, timeout) from None
        finally:  # the time this command stood waiting for the API (an answer sent ahead may have come meanwhile)
            waits.note("the management API's answers", timeout or self.timeout, time.monotonic() - began, "answer")
        if sent_ahead and self.proven_connection not in (None, response.connection):
            raise _AskAgain  # sent before the proof, answered over another connection than the proof's
        self.last_connection = response.connection
        self.last_date = response.headers.get("date")
        if self.proven_connection and response.connection != self.proven_connection and self.reprove is not None \
                and not self._reproving:
            self._reprove(response.connection)
        if not 200 <= response.status < 300 and response.status not in accept:
            raise self._http_error(response, method, path)
        self._answered = True
        return orjson.loads(response.body) if response.body else None

    def _reprove(self, connection: int) -> None:
        """Prove the API again before an answer that came over `connection` is used (raises ManagementMismatch
        when it answers for another broker now); _AskAgain when the proof's answers came over yet another one."""
        assert self.reprove is not None
        self._reproving = True
        try:
            self.reprove()
        except ManagementMismatch as exc:  # another broker now: nothing more from this API (a timeout is no such proof)
            self._failed_proof = exc
            raise
        finally:
            self._reproving = False
        if self.proven_connection != connection:
            raise _AskAgain

    def _unreachable(self, exc: OSError, timeout: float | None = None) -> ConnectError:
        reason: Any = exc
        if isinstance(exc, TimeoutError):
            reason = f"timed out after {timeout or self.timeout:g}s"
        elif exc.strerror:
            reason = exc.strerror.lower()  # "connection refused", not "[Errno 111] Connection refused"
        return ConnectError(
            f"management API at {self.masked_url} not reachable: {secrets.scrub(str(reason))}",
            hint="is the rabbitmq_management plugin enabled, and the URL right (--management-url or "
                 "management_url in the broker profile)?",
        )

    def _http_error(self, response: Response, method: str, path: str) -> DlxtoolError:
        try:
            detail = orjson.loads(response.body).get("reason", "")
        except (orjson.JSONDecodeError, AttributeError):
            detail = ""
        code = response.status
        if code == 401 and "virtual host" in detail:  # the password was right; this vhost is not this user's
            return AccessRefused(f"user {self.user!r} is not authorised for that virtual host at the management API "
                                 f"{self.masked_url} ({method} {path}: {detail})",
                                 hint="an administrator grants it with `rabbitmqctl set_permissions -p VHOST USER ...`")
        if code == 401 and self._answered and "login failed" not in detail.lower():
            # The credentials were taken before: this 401 is about the request, not the login (3.10.8: GET /api/nodes
            # by a user without the monitoring tag is 401 "Not monitor user"; a wrong password, 401 "Login failed").
            return AccessRefused(f"management API at {self.masked_url}: {method} {path} not allowed for user "
                                 f"{self.user!r} ({detail or 'not authorised'})",
                                 hint="the user needs the 'monitoring' tag for it")
        if code == 401:
            return ConnectError(f"authentication failed for user {self.user!r} at the management API "
                                f"{self.masked_url}",
                                hint="check the password (and user) of the broker profile or --management-url")
        if code == 403:
            return AccessRefused(f"management API at {self.masked_url}: {method} {path} not allowed "
                                 f"({detail or 'forbidden'})",
                                 hint="the user needs the 'monitoring' or 'management' tag")
        if code == 404:
            return NotFoundError(f"management API: {path} not found")
        if 300 <= code < 400:
            where = mask_any_url(response.headers.get("location", "")) or "elsewhere"
            return ConnectError(f"management API at {self.masked_url}: {method} {path} answered with a redirect "
                                f"(HTTP {code}) to {secrets.scrub(where)}",
                                hint="give the URL the API answers at as --management-url or management_url")
        return DlxtoolError(f"management API at {self.masked_url}: {method} {path} failed with "
                            f"HTTP {code} {secrets.scrub(str(detail))}")

    # -- what commands need ------------------------------------------------------------------------

    def overview(self, columns: list[str] | tuple[str, ...] | None = None) -> dict[str, Any]:
        result = self.get("overview", **({"columns": ",".join(columns)} if columns else {}))
        if is_object(result) and "rabbitmq_version" in result:
            self._version = result.get("rabbitmq_version") or ""
        return result if is_object(result) else {}

    def prefetch_overview(self) -> None:
        """Send ahead the overview that `overview(OVERVIEW_COLUMNS)` and `version()` read."""
        self.prefetch("overview", columns=",".join(OVERVIEW_COLUMNS))

    def prefetch_queue(self, vhost: str, name: str) -> None:
        """Send ahead what `queue(vhost, name)` reads."""
        self.prefetch(queue_path(vhost, name), **SAMPLE_QUERY)

    def forget_version(self) -> None:
        self._version = None

    def queue(self, vhost: str, name: str, *, settled: bool = False) -> QueueInfo:
        """The queue as the API sees it. `settled`: for a decision on its policies (dead-letter exchange,
        limits), wait up to STATS_WAIT for a queue declared moments ago to get them (QueueInfo.policies_known;
        still False after that: the caller treats them as unknown)."""
        # Once one queue had none after a whole wait (a broker whose stats are off), the next ones are not waited for
        wait = waits.Wait(f"the management API's policy sample of {name!r} (declared moments ago, or a policy "
                          "just set)", STATS_WAIT if settled and not self._no_stats else 0.0, 0.5)
        stale = False
        self._reread.discard(vhost)
        while True:
            try:
                raw: dict[str, Any] = self.get(queue_path(vhost, name), **SAMPLE_QUERY)
            except NotFoundError:
                raise self._queue_not_found(vhost, name) from None
            raw = {**raw, SAMPLED_WITHIN: sample_age(raw, self.last_date)}
            sampled = raw.get("effective_policy_definition") is not None
            if settled and not sampled and self._no_policy_applies(vhost, raw):
                raw = {**raw, "effective_policy_definition": {}}  # declared moments ago, and no policy is for it
                sampled = True
            fresh = sampled and (not settled or self._policy_current(vhost, raw, reread=stale))
            stale = sampled and not fresh  # the list is read again once: it may be the older one
            if fresh:
                break
            if not wait.pause():
                self._no_stats = self._no_stats or (settled and not sampled)
                break
        # Only a quorum queue's delivery limit depends on the version: spare classic reads the request.
        info = queue_info(raw, self.version() if raw.get("type") == "quorum" else None)
        return info if fresh or not info.policies_known else replace(info, policies_known=False)

    def _queue_not_found(self, vhost: str, name: str) -> NotFoundError:
        """The API's 404 for a queue. RabbitMQ 4.3's API answers a user who may not use the vhost with 404 too
        (3.10 and 4.0: 401 "not authorised"; dlxtool.broker.versions): there, say that it may be either."""
        from dlxtool.broker import versions

        try:
            version = self.version()
        except DlxtoolError:
            version = None
        if versions.behaviour(version).api_404_for_a_vhost_not_permitted:
            return QueueNotFound(name, vhost, f"queue {name!r} not found in vhost {vhost!r}, or user {self.user!r} may "
                                 f"not use that vhost: RabbitMQ {version}'s management API answers both with 404",
                                 hint="list queues with `dlxtool queues`; an administrator grants a vhost with "
                                      "`rabbitmqctl set_permissions -p VHOST USER ...`")
        return QueueNotFound(name, vhost)

    def _no_policy_applies(self, vhost: str, raw: dict[str, Any]) -> bool:
        """Whether neither a policy nor an operator policy of the vhost applies to this queue (both lists readable:
        an administrator's); then a queue with no sample yet needs none."""
        from dlxtool.broker import policies

        name, kind = str(raw.get("name", "")), str(raw.get("type") or "classic")
        for kind_of_list in ("policies", "operator-policies"):
            listed = self._listed(kind_of_list, vhost)
            if listed is None or policies.winner(listed, name, kind) is not None:
                return False
        return True

    def _listed(self, which: str, vhost: str) -> list[dict[str, Any]] | None:
        """The vhost's policies or operator-policies, read once per command (None: not readable by this user)."""
        key = f"{which}/{vhost}"
        if key not in self._policy_lists:
            try:
                listed = self.get(f"{which}/" + quote(vhost, safe=""))
            except DlxtoolError:
                listed = None
            self._policy_lists[key] = listed if is_array(listed) else None
        return self._policy_lists[key]

    def _policy_current(self, vhost: str, raw: dict[str, Any], *, reread: bool = False) -> bool:
        """Whether the queue's sampled policy is the one the vhost's policy list applies now (policies.current).
        The list is read once per command, and again (`reread`) when a sample disagrees with it: a policy changed
        while the plan was read. A user who may not read it (policymaker tag) is not checked."""
        from dlxtool.broker import policies

        key = f"policies/{vhost}"
        if reread and self._policy_lists.get(key) is not None and vhost not in self._reread:
            self._reread.add(vhost)
            del self._policy_lists[key]
        listed = self._listed("policies", vhost)
        return listed is None or policies.current(raw, listed)

    def alarms(self) -> tuple[list[str] | None, str | None]:
        """The resource alarms in effect on the cluster's nodes now ("memory alarm on rabbit@c2") — [] for none —,
        or None and why the API does not say. An alarm on any node blocks every publishing connection of the
        cluster. Live: the health check asks the nodes at the moment (GET /api/health/checks/alarms: 200 none, 503
        with the alarms; 3.10 and 4.x). /api/nodes's mem_alarm / disk_free_alarm are a statistics sample, up to 5 s
        old and more under load (issue 35: an alarm raised 2 s before went unseen, and one cleared 4 s before still
        refused); they are read only where the health check cannot be (not allowed, or not there)."""
        try:
            said = self.request("GET", "health/checks/alarms", accept=(503,))
        except ManagementMismatch:
            raise
        except DlxtoolError:
            said = None
        found: list[str] = []
        if is_object(said) and said.get("status") in ("ok", "failed"):
            for alarm in said.get("alarms") or ():
                if is_object(alarm):
                    said_resource = str(alarm.get("resource"))  # "memory", "disk" (3.10 and 4.3 alike)
                    resource = next((r for r in ("memory", "disk") if r in said_resource), said_resource)
                    found.append(f"{resource} alarm on {alarm.get('node')}")
            if said.get("status") == "failed" and not found:
                found.append(f"resource alarm ({said.get('reason') or 'the health check failed'})")
            return found, None
        try:
            rows = self.get("nodes", columns="name,running,mem_alarm,disk_free_alarm")
        except ManagementMismatch:
            raise
        except DlxtoolError as exc:  # not reachable, or not allowed (a user without the monitoring tag)
            return None, exc.message + (f": {exc.hint}" if isinstance(exc, AccessRefused) and exc.hint else "")
        found = []
        for row in rows if is_array(rows) else []:
            if not is_object(row) or row.get("running") is False:
                continue
            for field, what in (("mem_alarm", "memory"), ("disk_free_alarm", "disk")):
                if row.get(field) is True:
                    found.append(f"{what} alarm on {row.get('name')} (API sample)")
        return found, None

    def nodes_running(self) -> tuple[int, int, list[str]] | None:
        """(running, all, the names of those down) of the cluster's nodes, as the API says now (a node's `running`
        is its membership, not a statistics sample); None where it cannot say."""
        try:
            rows = self.get("nodes", columns="name,running")
        except ManagementMismatch:
            raise
        except DlxtoolError:
            return None
        rows = [r for r in rows if is_object(r)] if is_array(rows) else []
        if not rows:
            return None
        down = sorted(str(r.get("name")) for r in rows if r.get("running") is not True)
        return len(rows) - len(down), len(rows), down

    def version(self) -> str | None:
        if self._version is None:
            self._version = self.overview(columns=OVERVIEW_COLUMNS).get("rabbitmq_version") or ""
        return self._version or None

    def queues(self, vhost: str | None = None, *, columns: list[str] | None = None, timeout: float | None = None,
               unsorted: bool = False, totals: bool = False) -> list[dict[str, Any]]:
        """All queues (of one vhost) with only the columns asked for, in one request: one listing, made by the
        server in one pass over its queue table, so every queue that exists while it is made is in it once.
        Pages would each be made from the queues of their own moment: a queue created or deleted between two
        pages shifts the ones after it, and one is skipped or shown twice (issue 28). They cost more too: the
        server lists and sorts every queue for each page (scripts/bench/queues.py). `timeout`: how long the
        answer may take (thousands of queues take the server seconds), when not the client's. `unsorted`: in the
        server's order (`sort=`: the plugin then skips sorting, which looks every sort key up among every queue's
        45 fields: 10,001 queues on 3.10.8 cost it 0.88 s of CPU unsorted, 1.44 s sorted). `totals`: without
        statistics (`disable_stats=true&enable_queue_totals=true`): settings, type, node and state, and the depths as
        each queue counts them, without the statistics database's per-queue work (no consumers, no message_stats,
        no effective_policy_definition; dlxtool.ops.queues reads those for the queues that need them)."""
        result = self.request("GET", _queues_path(vhost), query=_queues_query(columns, unsorted, totals),
                              timeout=timeout)
        return result.get("items", []) if is_object(result) else list(result or [])

    def prefetch_queues(self, vhost: str | None = None, *, columns: list[str] | None = None,
                        timeout: float | None = None, unsorted: bool = False, totals: bool = False) -> None:
        """Send ahead what `queues()` reads."""
        self._prefetch(_queues_path(vhost), _queues_query(columns, unsorted, totals), timeout)

    def bindings(self, vhost: str | None = None, *, columns: list[str] | None = None) -> list[dict[str, Any]]:
        """All bindings (of one vhost). The API does not paginate bindings; accept a page anyway."""
        result = self.get(*_bindings_path(vhost), **_columns(columns))
        return result.get("items", []) if is_object(result) else list(result or [])

    def prefetch_bindings(self, vhost: str | None = None, *, columns: list[str] | None = None) -> None:
        """Send ahead what `bindings()` reads."""
        self.prefetch(*_bindings_path(vhost), **_columns(columns))

    def exchange_bindings(self, vhost: str, exchange: str, *, columns: list[str] | None = None
                          ) -> list[dict[str, Any]]:
        """The bindings whose source is `exchange` ([] when there is no such exchange)."""
        try:
            result = self.get(_exchange_bindings_path(vhost, exchange), **_columns(columns))
        except NotFoundError:
            return []
        return [b for b in result if is_object(b)] if is_array(result) else []

    def prefetch_exchange_bindings(self, vhost: str, exchange: str, *, columns: list[str] | None = None) -> None:
        """Send ahead what `exchange_bindings()` reads."""
        self.prefetch(_exchange_bindings_path(vhost, exchange), **_columns(columns))


# The queue's counts come with the time of their statistics sample (`*_details.samples`, one sample of the last 5 s):
# how old a sampled figure can be is said with it (issue 35: "a management API sample is shown as a sample, with
# its age"). The sample's timestamp is the end of its 5 s slot; the server's Date header is its clock.
SAMPLE_QUERY = {"lengths_age": "5", "lengths_incr": "5"}
SAMPLED_WITHIN = "dlxtool_sampled_within_s"  # added to a queue's raw row: seconds at most since its sample


def sample_age(raw: dict[str, Any], date: str | None) -> float | None:
    """At most how many seconds ago the API sampled the queue's counts (None where it does not say)."""
    details = raw.get("messages_unacknowledged_details") or raw.get("messages_details")
    samples = details.get("samples") if is_object(details) else None
    stamp = samples[0].get("timestamp") if is_array(samples) and samples and is_object(samples[0]) \
        else None
    if not isinstance(stamp, int | float) or not date:
        return None
    now = _http_date(date)
    if now is None:
        return None
    now += 1  # the header's second, rounded up
    slot_start = stamp / 1000 - float(SAMPLE_QUERY["lengths_incr"])
    return max(0.0, round(now - slot_start))


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _http_date(text: str) -> float | None:
    """'Tue, 01 Dec 2026 23:37:23 GMT' (RFC 9110's IMF-fixdate, what cowboy sends) -> epoch seconds, else None.
    By hand: email.utils would cost every command that reads a queue its imports."""
    parts = text.split()
    try:
        day, month, year = int(parts[1]), _MONTHS.index(parts[2]) + 1, int(parts[3])
        hour, minute, second = (int(x) for x in parts[4].split(":"))
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()
    except (IndexError, ValueError):
        return None


def sampled_text(info: QueueInfo) -> str:
    """'API sample, at most 4 s old' (or without the age where the API does not give it)."""
    age = info.raw.get(SAMPLED_WITHIN)
    return f"API sample, at most {age:g} s old" if isinstance(age, int | float) else "API sample"


def queue_path(vhost: str, name: str) -> str:
    return f"queues/{_q(vhost)}/{_q(name)}"


def _queues_path(vhost: str | None) -> str:
    return f"queues/{_q(vhost)}" if vhost else "queues"


def _queues_query(columns: list[str] | None, unsorted: bool, totals: bool = False) -> dict[str, str] | None:
    query = {**({"disable_stats": "true", "enable_queue_totals": "true"} if totals else {}), **_columns(columns),
             **({"sort": ""} if unsorted else {})}
    return query or None


def _exchange_bindings_path(vhost: str, exchange: str) -> str:
    return f"exchanges/{_q(vhost)}/{_q(exchange)}/bindings/source"


def _bindings_path(vhost: str | None) -> tuple[str]:
    return (f"bindings/{_q(vhost)}" if vhost else "bindings",)


def _columns(columns: list[str] | None) -> dict[str, str]:
    return {"columns": ",".join(columns)} if columns else {}


class _AskAgain(Exception):
    """An answer sent ahead that cannot be used (see ManagementClient.proven_connection)."""


_DEFAULT_PORT = {"http": 80, "https": 443}


REPROOFS = 3  # answers over a new TCP connection in a row, each proven again, before the API is given up
STATS_WAIT = 10.0  # the management API samples every 5 s by default; a quorum queue showed its first after 5 s
# Why a queue's policies count as unknown (QueueInfo.policies_known False): the reasons messages stay for
POLICIES_PENDING = (f"its policies are not in the management API yet (a queue declared or a policy changed moments "
                    f"ago: they show within {STATS_WAIT:.0f} s; run again)")


def queue_info(raw: dict[str, Any], broker_version: str | None = None) -> QueueInfo:
    policies_known = raw.get("effective_policy_definition") is not None
    policy_def: object = raw.get("effective_policy_definition") or {}
    if not is_object(policy_def):  # older brokers return [] when there is none
        policy_def = {}
    return QueueInfo(
        name=raw["name"],
        vhost=raw.get("vhost", "/"),
        type=raw.get("type", "classic"),
        messages_ready=int(raw.get("messages_ready") or 0),
        messages_unacked=int(raw.get("messages_unacknowledged") or 0),
        consumers=int(raw.get("consumers") or 0),
        arguments=raw.get("arguments") or {},
        policy=raw.get("policy") or None,
        effective_policy_definition=policy_def,
        raw=raw,
        broker_version=broker_version,
        policies_known=policies_known,
    )


def _split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """urllib would take `user:pass@host` for a host name: move the credentials out of the URL."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    netloc = bracketed(host) + (f":{parts.port}" if parts.port else "")
    return (urlunsplit(parts._replace(netloc=netloc)), unquote(parts.username or ""),
            unquote(parts.password) if parts.password is not None else None)


def _q(segment: str) -> str:
    return quote(segment, safe="")
