"""The one place that opens AMQP connections: pika parameters from a profile, TLS, failover, timeouts.

pika is imported inside the functions so that `dlxtool --help` does not pay for it.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from dlxtool import secrets
from dlxtool.amqp_values import allow_deep_headers
from dlxtool.broker import pika_import
from dlxtool.broker.naming import connection_name
from dlxtool.broker.tls import tls_context
from dlxtool.config import BrokerProfile
from dlxtool.errors import AccessRefused, ConnectError, DlxtoolError, NotFoundError, UnavailableError, VhostNotFound
from dlxtool.urls import AmqpUrl, host_port

if TYPE_CHECKING:
    import pika
    import pika.credentials
    from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
    from pika.connection import ConnectionParameters


class AmqpConnection(Protocol):
    """An open AMQP connection as the operations (dlxtool.ops) hold it: what `connect` returns (pika's
    BlockingConnection). They use a blocking channel for a few synchronous calls and ask whether it is still
    open; everything else goes through dlxtool.broker (AsyncChannel, Publisher, queues), which alone knows
    pika's internals."""

    @property
    def is_open(self) -> bool: ...

    def channel(self) -> BlockingChannel: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ServerInfo:
    """What a broker says of itself in connection.start's server properties."""

    version: str
    cluster_name: str
    product: str
    node_url: str  # masked
    latency_ms: float


def connection_parameters(profile: BrokerProfile) -> list[pika.ConnectionParameters]:
    pika = pika_import.load()

    credentials = _credentials(profile)
    params: list[ConnectionParameters] = []
    for node in profile.nodes:
        ssl_options = None
        if node.tls:
            ssl_options = pika.SSLOptions(tls_context(profile), profile.tls.server_name or node.host)
        params.append(
            pika.ConnectionParameters(
                host=node.host,
                port=node.port,
                virtual_host=profile.vhost,
                credentials=credentials,
                ssl_options=ssl_options,
                connection_attempts=1,
                retry_delay=0,
                socket_timeout=profile.timeout,
                stack_timeout=profile.timeout,
                blocked_connection_timeout=max(profile.timeout, 30.0),
                heartbeat=heartbeat_for(profile.timeout),
                # A random name: the management API's connection list can then find this very connection
                # (dlxtool.broker.identity proves which broker the API answers for by it).
                client_properties={"connection_name": connection_name(), "product": "dlxtool"},
            )
        )
    return params


# The heartbeat asked for, from the command's --timeout: a connection that went silent (a half-open one, a stalled
# network) is given up by pika within heartbeat + 5 s, and by the broker within two heartbeats — who then returns
# what it held to its queues. 60 s (pika's and RabbitMQ's default) kept a lost run's deliveries unacked up to two
# minutes (issue 35). Not below MIN_HEARTBEAT: the client must answer between its own CPU work.
MIN_HEARTBEAT = 10


def heartbeat_for(timeout: float) -> int:
    return max(MIN_HEARTBEAT, int(2 * timeout + 0.999))


def node_refuses(conn: AmqpConnection) -> str | None:
    """Whether the node a lost pika connection was on refuses connections now (`refuses`), from its parameters."""
    params = getattr(getattr(conn, "_impl", conn), "params", None)
    host, port = getattr(params, "host", None), getattr(params, "port", None)
    return refuses(host, port) if isinstance(host, str) and isinstance(port, int) else None


def refuses(host: str, port: int, within: float = 1.5, tries: int = 3) -> str | None:
    """"HOST:PORT refuses connections now" when a TCP connect there is refused: nothing listens, so that node (or
    the tunnel or port-forward to it) is down. None when it answers, or when it cannot be told within `within`
    seconds (a timeout, a name that does not resolve: a silent network says nothing of the node). Asked where a
    connection was lost holding messages: where they come back depends on it.

    Tried up to `tries` times, 0.25 s apart: a node killed with `kill -9` may reset its connections before its
    listener is closed (once in eight runs on a 3.10.8 cluster, a single connect right after the loss did not see
    the refusal). In a daemon thread given `within` in all: name resolution has no timeout of its own."""
    said: list[str | None] = [None]

    def probe() -> None:
        for attempt in range(tries):
            if attempt:
                time.sleep(0.25)
            try:
                socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic())).close()
            except ConnectionRefusedError:
                said[0] = f"{host_port(host, port)} refuses connections now"
                return
            except OSError:
                return

    deadline = time.monotonic() + within
    thread = threading.Thread(target=probe, name="dlxtool-node-probe", daemon=True)
    thread.start()
    thread.join(within)
    return said[0]


def heartbeat_of(conn: Any) -> int:
    """The heartbeat a connection agreed with the broker (its parameters after connection.tune), in seconds."""
    params = getattr(getattr(conn, "_impl", conn), "params", None)
    value = getattr(params, "heartbeat", None)
    return value if isinstance(value, int) and value > 0 else MIN_HEARTBEAT


def _credentials(profile: BrokerProfile) -> pika.credentials.PlainCredentials | pika.credentials.ExternalCredentials:
    import pika.credentials

    if profile.auth == "external":
        # The broker takes the user name from the client certificate; no password goes over the wire.
        return pika.credentials.ExternalCredentials()
    return pika.credentials.PlainCredentials(profile.username, profile.password())


def connect(profile: BrokerProfile) -> BlockingConnection:
    """Connect to the first node that answers, in the order the profile lists them."""
    pika = pika_import.load()
    import pika.exceptions as pe

    from dlxtool.broker.wire import codec

    # First: a DLXTOOL_CODEC that names no codec is refused before any connection. A profile a command made
    # carries the command's environment; one made bare (a library caller, a test) leaves the codec as it is.
    wire = codec.configure(profile.env) if profile.env else codec.current()
    quiet_pika_logging()
    allow_deep_headers()  # deep header tables decode on this connection's deliveries
    params = connection_parameters(profile)
    errors: list[str] = []
    hints: list[str] = []
    for node, param in zip(profile.nodes, params, strict=True):
        try:
            conn = pika.BlockingConnection(param)
        except (pe.ProbableAuthenticationError, pe.ProbableAccessDeniedError, pe.AuthenticationError) as exc:
            if not isinstance(exc, pe.AuthenticationError) and not _broker_refused(exc):
                # pika's "probable" is its guess from the handshake stage where the connection ended: without the
                # broker's own close (403 ACCESS_REFUSED, 530 NOT_ALLOWED) the network cut it (a reset mid-handshake
                # was reported as wrong credentials: issue 35's fault campaign). Not this node, as any lost connection.
                text, hint = _describe_connect_failure(exc, node, profile)
                errors.append(f"{node.masked()}: the connection was lost during the AMQP handshake ({text})")
                if hint not in hints:
                    hints.append(hint)
                continue
            if isinstance(exc, pe.ProbableAccessDeniedError):
                said = broker_said(exc)
                if _VHOST_NOT_FOUND.search(said):
                    raise vhost_not_found(profile, node) from None
                raise AccessRefused(
                    f"access to vhost {profile.vhost!r} on broker {profile.describe(node)} refused for "
                    + ("the client certificate's user" if profile.auth == "external"
                       else f"user {profile.username!r}") + f" ({said})",
                    hint="the user needs permissions on the vhost (rabbitmqctl set_permissions -p VHOST USER …)",
                ) from None
            raise _authentication_failed(exc, profile, node) from None
        except Exception as exc:  # noqa: BLE001
            # pika's connection workflow raises exceptions outside its own hierarchy
            # (AMQPConnectorStackTimeout, AMQPConnectorSocketConnectError…); all mean "not this node".
            text, hint = _describe_connect_failure(exc, node, profile)
            errors.append(f"{node.masked()}: {text}")
            if hint not in hints:
                hints.append(hint)
            continue
        wire.install(conn)  # dlxtool's frame reader, or pika's own on the `pika` setting
        _watch_blocked(conn)
        conn._dlxtool_reached = Reached(node, tuple(errors))  # noqa: SLF001 - ours: reached(conn) reads it
        return conn
    raise ConnectError(
        f"broker {profile.name!r}: cannot connect: " + "; ".join(errors),
        hint="; ".join(hints),
    )


def _authentication_failed(exc: BaseException, profile: BrokerProfile, node: AmqpUrl) -> ConnectError:
    if profile.auth == "external":
        return ConnectError(
            f"broker {profile.name!r}: the broker refused the client certificate as credentials "
            f"(EXTERNAL) at {node.masked()} ({broker_said(exc)})",
            hint="the certificate's common name must be a user on the broker, and the broker needs "
                 "the rabbitmq_auth_mechanism_ssl plugin with EXTERNAL in auth_mechanisms")
    return ConnectError(
        f"authentication failed for user {profile.username!r} on broker {profile.describe(node)} "
        f"({broker_said(exc)})",
        hint=f"check the password ({profile.password_source}) and the user")


_BROKER_CLOSE = re.compile(r"ConnectionClosedByBroker: \((\d+)\)")


def _broker_refused(exc: BaseException) -> bool:
    """Whether the broker itself closed the connection in the handshake (its 403/530: a refusal), as opposed to the
    connection ending there without a word (a reset: pika still calls it a 'probable' refusal)."""
    return any(isinstance(getattr(inner, "reply_code", None), int)
               or any(_BROKER_CLOSE.search(str(arg)) for arg in inner.args) for inner in _causes(exc))


def vhost_not_found(profile: BrokerProfile, node: AmqpUrl | None = None) -> VhostNotFound:
    """The one diagnosis of a missing vhost, whichever path (AMQP or management API) finds it."""
    return VhostNotFound(profile.vhost, f"vhost {profile.vhost!r} not found on broker {profile.describe(node)}",
                         hint="--vhost (or $DLXTOOL_VHOST, or the URL's path) names it (%2F for /); the broker's "
                              "vhosts: rabbitmqctl list_vhosts, or the management UI", profile=profile)


# RabbitMQ 3.x and 4.x: connection.close 530 "NOT_ALLOWED - vhost NAME not found" (rabbit_reader);
# no permission on an existing vhost is "access to vhost 'NAME' refused for user 'USER'".
_VHOST_NOT_FOUND = re.compile(r"\bvhost .* not found\b")
_CLOSED_BY_BROKER = re.compile(r"^\w+: \((\d+)\) ['\"](.*)['\"]$", re.DOTALL)


def broker_said(exc: BaseException) -> str:
    """What the broker said when it closed the connection or channel ("403 ACCESS_REFUSED - …"), without
    pika's exception names; else the plain text of the failure."""
    for inner in _causes(exc):
        code, text = getattr(inner, "reply_code", None), getattr(inner, "reply_text", None)
        if isinstance(code, int) and text:
            return secrets.scrub(f"{code} {text}")
        for arg in inner.args:
            match = _CLOSED_BY_BROKER.match(str(arg))
            if match:
                return secrets.scrub(f"{match.group(1)} {match.group(2)}")
    return _reason(exc)


def amqp_failure(exc: BaseException) -> DlxtoolError:
    """A pika exception that reached the command line, as one line a person can act on: what the broker
    said, or that the connection is gone — never pika's class names or its "Transport indicated EOF"."""
    import pika.exceptions as pe

    lost_hint = ("messages this command held unacked go back to their queue when the connection ends; "
                 "run it again once the broker answers")
    said = broker_said(exc) if isinstance(exc, pe.ChannelClosedByBroker | pe.ConnectionClosedByBroker) else ""
    from dlxtool.broker.majority import METADATA_TIMEOUT, lost_majority

    if METADATA_TIMEOUT in said:  # Khepri without a majority (RabbitMQ 4.x): not a lost connection, exit 7
        return lost_majority(said=said)
    if "nodedown" in said or "is down or inaccessible" in said or said.endswith(": noproc") \
            or (said.startswith("541 ") and "{timeout," in said):
        # a quorum queue whose leader is down (541 "... nodedown"; "... noproc" while the cluster has not yet
        # noticed the leader's node stopped; "... {timeout, …}" from a quorum queue without a majority of its members
        # online), a classic queue whose home node is: not gone
        return UnavailableError(f"a node the queue lives on is down (the broker said: {said}): its messages are not "
                                "lost, but cannot be reached now",
                                hint="run it again in a moment (a quorum queue elects a new leader within seconds "
                                     "while a majority of its members is up); `dlxtool queues` shows the nodes")
    if isinstance(exc, pe.ChannelClosedByBroker):
        said = broker_said(exc)
        if exc.reply_code == 404:
            return NotFoundError(f"the broker said: {said}")
        if exc.reply_code == 403:
            return ConnectError(f"the broker refused: {said}", hint="the user needs permissions for this")
        return DlxtoolError(f"the broker refused: {said}")
    if isinstance(exc, pe.ConnectionClosedByBroker):
        return ConnectError(f"the broker closed the connection: {broker_said(exc)}", hint=lost_hint)
    if isinstance(exc, pe.AMQPConnectionError | pe.ConnectionWrongStateError | pe.ChannelWrongStateError
                  | pe.ConnectionClosed | pe.ChannelClosed) or torn_down(exc):
        return ConnectError("the connection to the broker was lost (the broker or the network closed it)",
                            hint=lost_hint)
    return DlxtoolError(f"the broker refused: {broker_said(exc)}")


def is_connection_failure(exc: BaseException) -> bool:
    """The error came from the broker connection (pika's, ours, the socket's), not from local work."""
    import pika.exceptions

    return isinstance(exc, pika.exceptions.AMQPError | ConnectError | ConnectionError | TimeoutError) \
        or torn_down(exc)


def torn_down(exc: BaseException) -> bool:
    """A plain Python error raised inside pika's own I/O because the connection under it was already torn down
    (its ioloop closed: pika's `ValueError("Timeout closed before call")`, seen after a reset mid-run): a lost
    connection, not a local error to fix."""
    if not isinstance(exc, ValueError | AttributeError | TypeError | AssertionError):
        return False
    frame = exc.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    where = frame.tb_frame.f_globals.get("__name__", "") if frame is not None else ""
    return isinstance(where, str) and where.startswith("pika.")


def describe_failure(exc: BaseException) -> str:
    """One line: a pika exception as amqp_failure words it (what the broker said, or that the connection was
    lost), anything else by its own text; secrets scrubbed."""
    if type(exc).__module__.startswith("pika") or torn_down(exc):
        return amqp_failure(exc).message
    return secrets.scrub(str(exc) or type(exc).__name__)


def quiet_pika_logging() -> None:
    """pika logs every failed attempt at ERROR with a traceback; dlxtool reports failures itself."""
    import logging

    logger = logging.getLogger("pika")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.CRITICAL)


def describe_connection(conn: BlockingConnection, profile: BrokerProfile, latency_ms: float) -> ServerInfo:
    """What the broker said about itself in connection.start, and which node of the profile answered."""
    # pika keeps connection.start's server-properties on the underlying connection only.
    impl: Any = cast("Any", conn)._impl  # noqa: SLF001 - pika's underlying connection (untyped)
    props: dict[str, Any] = impl.server_properties or {}
    node = next((n for n in profile.nodes if n.host == impl.params.host and n.port == impl.params.port),
                profile.nodes[0])
    return ServerInfo(
        version=_text(props.get("version")),
        cluster_name=_text(props.get("cluster_name")),
        product=_text(props.get("product")),
        node_url=node.masked(),
        latency_ms=round(latency_ms, 1),
    )


def close_quietly(conn: Any) -> None:
    """Close a connection that may already be dead; closing must never raise over the real error, nor wait on a
    broker that stopped reading it (blocked: its close-ok would come only when the alarm clears)."""
    try:
        if conn is not None and conn.is_open:
            if blocked(conn) is not None:
                abort(conn)
            else:
                conn.close()
    except Exception:  # noqa: BLE001 - the connection is gone either way
        pass


_SPARE = "_dlxtool_spare_channel"  # the connection's parked channel (park_channel)


def park_channel(conn: Any, channel: Any) -> None:
    """Keep `channel` for the next `take_channel(conn)`: an open channel with nothing on it (no consumer, nothing
    unacked, no confirms, no prefetch set). Opening a channel costs a round trip, and pika's close of the connection
    closes each channel still open first, one round trip each: a channel opened for one question (the management
    API's identity proof) and used again for the read saves two before the first message (40 ms on a broker 20 ms
    away)."""
    setattr(conn, _SPARE, channel)


def take_channel(conn: Any) -> Any:
    """A channel of `conn` with nothing on it: the one parked on it (park_channel) while it is still open, else a new
    one."""
    spare = getattr(conn, _SPARE, None)
    if spare is not None:
        setattr(conn, _SPARE, None)
        if spare.is_open:
            return spare
    return conn.channel()


@dataclass(frozen=True)
class Reached:
    """The node of its profile a connection reached, and what the nodes before it answered (a failover)."""

    node: AmqpUrl
    skipped: tuple[str, ...] = ()  # "host:port: connection refused", one per node tried before


def reached(conn: Any) -> Reached | None:
    """Which node `conn` reached (connect), or None for a connection opened elsewhere."""
    found = getattr(conn, "_dlxtool_reached", None)
    return found if isinstance(found, Reached) else None


def _watch_blocked(conn: Any) -> None:
    """Keep what the broker says of blocking this connection (connection.blocked, unblocked): `blocked(conn)`."""

    def on_blocked(_conn: Any, frame: Any) -> None:
        conn._dlxtool_blocked = _text(getattr(frame.method, "reason", "")) or "blocked"  # noqa: SLF001

    def on_unblocked(_conn: Any, _frame: Any) -> None:
        conn._dlxtool_blocked = None  # noqa: SLF001

    conn.add_on_connection_blocked_callback(on_blocked)
    conn.add_on_connection_unblocked_callback(on_unblocked)


def blocked(conn: Any) -> str | None:
    """Why the broker blocked `conn` ("low on memory", "low on disk": a resource alarm; it reads nothing more from
    it until the alarm clears), or None."""
    reason = getattr(conn, "_dlxtool_blocked", None)
    return reason if isinstance(reason, str) else None


def abort(conn: Any) -> None:
    """Drop the connection at once, without the close handshake a blocked broker would not read: whatever it held
    goes back when the broker next reads the socket (a blocked connection holds no delivery of ours: dlxtool
    consumes on a connection that never publishes)."""
    import pika.exceptions

    # pika's own way down on a lost stream (it records why, aborts the socket, and closes the connection object:
    # is_open is False after it). The transport's abort() alone left pika "OPEN" without a transport, and a later
    # close() then waited ~30 s (measured) before it failed.
    with contextlib.suppress(Exception):
        conn._impl._terminate_stream(  # noqa: SLF001 - pika has no public abort
            pika.exceptions.StreamLostError("dropped by dlxtool: the broker stopped reading or answering it"))
    with contextlib.suppress(Exception):
        conn.process_data_events(time_limit=0)  # pika learns the socket is gone


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _reason(exc: BaseException) -> str:
    return secrets.scrub(str(exc) or type(exc).__name__)


NOT_RUNNING_HINT = "is the broker running and the URL right? (a local one: scripts/dev-broker)"

# OpenSSL verify codes (X509_V_ERR_*) → what it means for the person at the terminal, and what to do.
_UNTRUSTED = ("the broker's certificate is not signed by a CA dlxtool trusts",
              "set tls.ca in the broker profile to the CA that signed the broker's certificate")
_VERIFY_CODES = {
    2: _UNTRUSTED, 18: _UNTRUSTED, 19: _UNTRUSTED, 20: _UNTRUSTED, 21: _UNTRUSTED,
    9: ("the broker's certificate is not valid yet (or this machine's clock is wrong)",
        "check the clock here and the certificate's dates (openssl x509 -noout -dates)"),
    10: ("the broker's certificate has expired (or this machine's clock is wrong)",
         "the broker needs a renewed certificate; check the clock here too"),
    62: ("the broker's certificate is not valid for the host name dlxtool connected to",
         "connect by a name the certificate holds (see its subjectAltName), or set tls.server_name"),
    64: ("the broker's certificate is not valid for the IP address dlxtool connected to",
         "connect by a name the certificate holds (see its subjectAltName), or set tls.server_name"),
}


def _describe_connect_failure(exc: BaseException, node: AmqpUrl, profile: BrokerProfile) -> tuple[str, str]:
    """pika wraps socket, TLS and timeout failures in layers of its own exceptions; find the useful one.

    Returns (what happened, what to do)."""
    texts: list[str] = []
    for inner in _causes(exc):
        if isinstance(inner, ssl.SSLCertVerificationError):
            what, hint = _VERIFY_CODES.get(inner.verify_code, (
                "", "check tls.ca and tls.server_name in the broker profile (tls.verify = false only to debug)"))
            detail = f"TLS certificate verification failed: {inner.verify_message}"
            return (f"{detail} ({what})" if what else detail), hint
        if isinstance(inner, ssl.SSLError):
            return f"TLS error: {inner.reason or inner}", _tls_error_hint(inner.reason or str(inner), profile)
        if isinstance(inner, ConnectionRefusedError):
            return "connection refused", NOT_RUNNING_HINT
        if isinstance(inner, TimeoutError) or "Timeout" in type(inner).__name__:
            return f"timed out after {profile.timeout:g}s", NOT_RUNNING_HINT
        if isinstance(inner, OSError) and inner.strerror:
            return inner.strerror, NOT_RUNNING_HINT
        texts.append(_reason(inner))
    text = " / ".join(t for t in texts if t)
    alert = _TLS_ALERT.search(text)
    if alert and node.tls:
        # With TLS 1.3 the broker judges our certificate after the handshake: its alert only shows
        # up as the text of a lost stream.
        return f"TLS error: the broker sent {alert.group(0)}", _tls_error_hint(alert.group(0), profile)
    if node.tls and ("SSLEOFError" in text or "EOF occurred in violation of protocol" in text):
        # The same refusal as above when the broker hangs up before its alert reaches us.
        hint = (_tls_error_hint("alert bad certificate", profile) if profile.tls.cert
                else "check the tls settings of the broker profile and the broker's log")
        return "TLS error: the broker closed the connection during the TLS handshake", hint
    if "timed out" in text.lower():
        return f"timed out after {profile.timeout:g}s", NOT_RUNNING_HINT
    # pika's StreamLostError: the other side hung up before AMQP began. Its text names pika's classes.
    reset = "connectionreset" in text.replace(" ", "").lower()
    if reset or "Transport indicated EOF" in text or "Stream connection lost" in text:
        what = ("the connection was reset before the broker answered" if reset
                else "the connection was closed before the broker answered")
        why = " (a proxy or port-forward with no broker behind it, a firewall, or not an AMQP port)"
        hint = NOT_RUNNING_HINT + (" (an amqps port spoken to with amqp:// resets the connection)"
                                   if reset and not node.tls else "")
        return what + why, hint
    return text or type(exc).__name__, NOT_RUNNING_HINT


_TLS_ALERT = re.compile(r"(?:tlsv1|sslv3|tlsv13) alert [a-z ]+?(?= \(|'|\"|$)", re.IGNORECASE)


def _tls_error_hint(reason: str, profile: BrokerProfile) -> str:
    reason = reason.upper().replace(" ", "_")
    if "ALERT" in reason and ("UNKNOWN_CA" in reason or "BAD_CERTIFICATE" in reason
                              or "CERTIFICATE_REQUIRED" in reason or "HANDSHAKE_FAILURE" in reason):
        if profile.tls.cert:
            return "the broker did not accept the client certificate (tls.cert / tls.key): is it signed by a CA " \
                   "the broker trusts, and still valid?"
        return "the broker wants a client certificate: set tls.cert and tls.key in the broker profile"
    if "WRONG_VERSION_NUMBER" in reason or "RECORD_LAYER" in reason:
        return "that port does not speak TLS: use amqp:// or the broker's amqps port (5671 by default)"
    return "check the tls settings of the broker profile"


def _causes(exc: BaseException) -> list[BaseException]:
    """exc and what it wraps: pika nests errors in args[0], .exception and .exceptions."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 20:
        current = todo.pop(0)
        if any(current is s for s in seen):
            continue
        seen.append(current)
        todo += [a for a in current.args if isinstance(a, BaseException)]
        inner = getattr(current, "exception", None)
        if isinstance(inner, BaseException):
            todo.append(inner)
        todo += [e for e in getattr(current, "exceptions", ()) or () if isinstance(e, BaseException)]
        if current.__cause__ is not None:
            todo.append(current.__cause__)
    return seen


def wake(conn: BlockingConnection) -> None:
    """From another thread: make the connection's thread return from process_data_events now, not at the end of
    its time limit (pika's one thread-safe call); nothing where the connection is closed or closing."""
    import pika.exceptions as pe

    with contextlib.suppress(pe.ConnectionWrongStateError):
        # pika's stub leaves the callback's type unknown
        conn.add_callback_threadsafe(lambda: None)  # pyright: ignore[reportUnknownMemberType]
