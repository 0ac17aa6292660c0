"""Client for RabbitMQ's management HTTP API (queue type, arguments, policies, listing).

Plain urllib: the API is a handful of JSON GETs, and the standard library keeps `--help` fast.
"""

from __future__ import annotations

import base64
import socket
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit, urlunsplit

import orjson

from dlxtool import secrets
from dlxtool.config import BrokerProfile
from dlxtool.errors import ConnectError, DlxtoolError, NotFoundError
from dlxtool.urls import mask_any_url


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

        A negative limit switches the limit off on 4.x only. 3.x has no such switch: it dead-letters (or
        drops) a message at its first return, as a limit of 0 would (seen on 3.10.8 with -1: every message
        a peek gave back was gone). So it reads as 0 there, and when the version is not known."""
        if self.type != "quorum":
            return None
        value = _number(self.setting("delivery-limit"))
        if value is None:
            return default_delivery_limit(self.broker_version)
        if value < 0:
            return None if _major(self.broker_version) >= 4 else 0
        return int(value)

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
        return self.setting("dead-letter-exchange")

    @property
    def dead_letter_routing_key(self) -> str | None:
        return self.setting("dead-letter-routing-key")


# RabbitMQ resolves these with min(argument, policy) (rabbit_queue_type_util:args_policy_lookup with
# fun min/2); seen on 3.10: x-delivery-limit 10 with a policy delivery-limit 2 dead-letters after 2.
_STRICTER_WINS = ("delivery-limit", "max-length", "max-length-bytes")
DEFAULT_DELIVERY_LIMIT_4X = 20  # quorum queues without a limit get 20 from RabbitMQ 4.0


def default_delivery_limit(version: str | None) -> int | None:
    """The delivery limit a quorum queue gets when none is set, for this RabbitMQ version."""
    major = _major(version)
    return DEFAULT_DELIVERY_LIMIT_4X if major >= 4 else None


def _major(version: str | None) -> int:
    """RabbitMQ's major version, 0 when not known."""
    try:
        return int((version or "").split(".")[0])
    except ValueError:
        return 0


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


class ManagementClient:
    def __init__(self, base_url: str, user: str, password: str, *, timeout: float = 5.0,
                 context: ssl.SSLContext | None = None) -> None:
        base_url, url_user, url_password = _split_userinfo(base_url)
        if url_user is not None:  # credentials written into management_url win over the profile's
            user, password = url_user, url_password if url_password is not None else password
        self.base_url = base_url.rstrip("/") + "/"
        self.user = user
        self._auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.timeout = timeout
        self._context = context
        self._version: str | None = None
        self.identity: Any = None  # set by dlxtool.broker.identity once proven to be the AMQP broker's API
        secrets.register(password)

    @classmethod
    def for_profile(cls, profile: BrokerProfile) -> ManagementClient:
        url = profile.management_url or ""
        context = None
        if url.startswith("https"):
            from dlxtool.broker.connection import tls_context  # the AMQP side's module: only for TLS

            context = tls_context(profile)
        return cls(url, profile.username, profile.password(), timeout=profile.timeout, context=context)

    @property
    def masked_url(self) -> str:
        return mask_any_url(self.base_url)

    # -- raw access -------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, *, query: dict[str, Any] | None = None) -> Any:
        url = self.base_url + "api/" + path.lstrip("/")
        if query:
            url += "?" + urlencode(query)
        data = orjson.dumps(body) if body is not None else None
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", self._auth)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._context) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, method, path) from None
        except (TimeoutError, urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError | socket.timeout):
                reason = f"timed out after {self.timeout:g}s"
            elif isinstance(reason, OSError) and reason.strerror:
                reason = reason.strerror.lower()  # "connection refused", not "[Errno 111] Connection refused"
            raise ConnectError(
                f"management API at {self.masked_url} not reachable: {secrets.scrub(str(reason))}",
                hint="is the rabbitmq_management plugin enabled, and the URL right (--management-url or "
                     "management_url in the broker profile)?",
            ) from None
        return orjson.loads(payload) if payload else None

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query or None)

    def _http_error(self, exc: urllib.error.HTTPError, method: str, path: str) -> DlxtoolError:
        try:
            detail = orjson.loads(exc.read()).get("reason", "")
        except (orjson.JSONDecodeError, AttributeError, OSError):
            detail = ""
        if exc.code == 401:
            return ConnectError(f"authentication failed for user {self.user!r} at the management API "
                                f"{self.masked_url}",
                                hint="check the password (and user) of the broker profile or --management-url")
        if exc.code == 403:
            return ConnectError(f"management API at {self.masked_url}: {method} {path} not allowed "
                                f"({detail or 'forbidden'})",
                                hint="the user needs the 'monitoring' or 'management' tag")
        if exc.code == 404:
            return NotFoundError(f"management API: {path} not found")
        return DlxtoolError(f"management API at {self.masked_url}: {method} {path} failed with "
                            f"HTTP {exc.code} {secrets.scrub(str(detail))}")

    # -- what commands need ------------------------------------------------------------------------

    def overview(self, columns: list[str] | None = None) -> dict[str, Any]:
        return self.get("overview", **({"columns": ",".join(columns)} if columns else {}))

    def queue(self, vhost: str, name: str) -> QueueInfo:
        try:
            raw = self.get(f"queues/{_q(vhost)}/{_q(name)}")
        except NotFoundError:
            raise NotFoundError(f"queue {name!r} not found in vhost {vhost!r}",
                                hint="list queues with `dlxtool queues`") from None
        # Only a quorum queue's delivery limit depends on the version: spare classic reads the request.
        return queue_info(raw, self.version() if raw.get("type") == "quorum" else None)

    def version(self) -> str | None:
        if self._version is None:
            self._version = self.overview(columns=["rabbitmq_version"]).get("rabbitmq_version") or ""
        return self._version or None

    def queues(self, vhost: str | None = None, *, columns: list[str] | None = None,
               page_size: int = 500) -> list[dict[str, Any]]:
        """All queues (of one vhost), fetched page by page with only the columns asked for."""
        path = f"queues/{_q(vhost)}" if vhost else "queues"
        out: list[dict[str, Any]] = []
        page = 1
        while True:
            query: dict[str, Any] = {"page": page, "page_size": page_size, "disable_stats": "false"}
            if columns:
                query["columns"] = ",".join(columns)
            result = self.get(path, **query)
            out.extend(result.get("items", []))
            if page >= int(result.get("page_count", 1) or 1):
                return out
            page += 1

    def bindings(self, vhost: str | None = None, *, columns: list[str] | None = None) -> list[dict[str, Any]]:
        """All bindings (of one vhost). The API does not paginate bindings; accept a page anyway."""
        path = f"bindings/{_q(vhost)}" if vhost else "bindings"
        result = self.get(path, **({"columns": ",".join(columns)} if columns else {}))
        return result.get("items", []) if isinstance(result, dict) else list(result or [])


def queue_info(raw: dict[str, Any], broker_version: str | None = None) -> QueueInfo:
    policy_def = raw.get("effective_policy_definition") or {}
    if not isinstance(policy_def, dict):  # older brokers return [] when there is none
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
    )


def _split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """urllib would take `user:pass@host` for a host name: move the credentials out of the URL."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None, None
    host = parts.hostname or ""
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    return (urlunsplit(parts._replace(netloc=netloc)), unquote(parts.username or ""),
            unquote(parts.password) if parts.password is not None else None)


def _q(segment: str) -> str:
    return quote(segment, safe="")
