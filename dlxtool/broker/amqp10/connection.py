"""An AMQP 1.0 connection from a broker profile: the same URLs (first node that answers), credentials (PLAIN, or
EXTERNAL with the client certificate), TLS files and vhost as the 0.9.1 path (dlxtool.broker.connection).

RabbitMQ 4.x takes the vhost from the open frame's hostname as "vhost:NAME"; TLS then names the server by the
URL's host (SNI and the certificate check), not by that hostname. Errors come out as DlxtoolError with what the
broker said (an AMQP error condition and its description), never proton's class names.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlxtool import secrets
from dlxtool.broker.amqp10 import INSTALL_HINT, available
from dlxtool.broker.connection import heartbeat_for
from dlxtool.broker.naming import connection_name
from dlxtool.broker.versions import Version
from dlxtool.config import BrokerProfile
from dlxtool.errors import ConnectError, DlxtoolError, NotFoundError, UsageError
from dlxtool.urls import AmqpUrl

if TYPE_CHECKING:
    from proton.utils import BlockingConnection


class Amqp10Unavailable(UsageError):
    """python-qpid-proton is not installed (the `amqp10` extra), or was built without what the profile needs."""


@dataclass
class Amqp10Connection:
    """An open AMQP 1.0 connection: proton's blocking connection, the node it reached and what the broker said of
    itself. Links (dlxtool.broker.amqp10.links) are made on it; close() ends it (what its links hold unsettled goes
    back to the queues: on 4.3 that counts a delivery attempt on quorum queues, see dlxtool.broker.versions)."""

    blocking: BlockingConnection
    node: AmqpUrl
    profile: BrokerProfile
    name: str  # the connection_name the management API lists it by

    @property
    def server_properties(self) -> dict[str, Any]:
        conn = self.blocking.conn
        props: dict[Any, Any] = (conn.remote_properties if conn is not None else None) or {}
        return {str(k): v for k, v in props.items()}

    @property
    def version(self) -> Version | None:
        return Version.parse(self.server_properties.get("version"))

    @property
    def proton_connection(self) -> Any:
        """proton's Connection (links are made on it)."""
        return self.blocking.conn

    @property
    def container(self) -> Any:
        """proton's Container of the connection (links are made and events run on it); None once it is closed."""
        container = self.blocking.container
        if container is None:
            raise DlxtoolError("the AMQP 1.0 connection is closed")
        return container

    @property
    def is_open(self) -> bool:
        from proton import Endpoint

        states: Any = Endpoint  # its state flags come from proton's C module (cproton), which has no types
        conn = self.blocking.conn
        return conn is not None and not self.blocking.disconnected and \
            bool(conn.state & states.REMOTE_ACTIVE) and bool(conn.state & states.LOCAL_ACTIVE)

    def pump(self, seconds: float = 0.0) -> None:
        """Let proton write what is pending (settlements) and read what came, for about `seconds`."""
        from proton import ProtonException

        deadline = time.monotonic() + seconds
        transport = self.blocking.conn.transport if self.blocking.conn is not None else None
        while True:
            try:
                self.container.process()
            except ProtonException as exc:  # the broker closed the connection (proton raises from its handler)
                raise failure(exc, self) from None
            if time.monotonic() >= deadline and (transport is None or transport.pending() <= 0):
                return

    def wait(self, condition: Any, what: str, timeout: float | None = None) -> None:
        """Process events until condition() is true; ConnectError when the broker closes the connection or goes
        silent for `timeout` (the profile's) — with what it said."""
        if not self.waited(condition, what, timeout):
            raise ConnectError(f"the broker did not answer within {timeout or self.profile.timeout:g} s while "
                               f"{what} (AMQP 1.0)", hint="--timeout allows longer; the connection was closed")

    def waited(self, condition: Any, what: str, timeout: float | None = None) -> bool:
        """Process events until condition() is true (True) or `timeout` seconds pass (False: silence, which a
        stream's end is); ConnectError when the broker closes the connection, with what it said."""
        from proton import ProtonException, Timeout

        try:
            self.blocking.wait(condition, timeout=timeout or self.profile.timeout, msg=what)
        except Timeout:
            return False
        except ProtonException as exc:  # the broker closed the connection (tests/cli/test_streams_amqp10.py)
            raise failure(exc, self) from None
        return True

    def close(self) -> None:
        # closing a connection the broker already closed: nothing left to do
        with contextlib.suppress(Exception):
            self.blocking.close()


def load_proton() -> Any:
    """proton, or Amqp10Unavailable saying how to install it."""
    if not available():
        raise Amqp10Unavailable("AMQP 1.0 needs python-qpid-proton, which is not installed", hint=INSTALL_HINT)
    import proton

    return proton


def open_connection(profile: BrokerProfile) -> Amqp10Connection:
    """Connect over AMQP 1.0 to the first node of the profile that answers."""
    proton = load_proton()
    from proton.utils import BlockingConnection

    errors: list[str] = []
    name = connection_name()
    for node in profile.nodes:
        kwargs: dict[str, Any] = {
            "virtual_host": f"vhost:{profile.vhost}",
            "sni": profile.tls.server_name or node.host,
            "properties": {proton.symbol("connection_name"): name, proton.symbol("product"): "dlxtool"},
            "container_id": name,
        }
        ssl_domain = _ssl_domain(profile, proton) if node.tls else None
        if profile.auth == "external":
            kwargs["allowed_mechs"] = "EXTERNAL"
        else:
            kwargs.update(user=profile.username, password=profile.password(), allowed_mechs="PLAIN",
                          allow_insecure_mechs=True)
        scheme = "amqps" if node.tls else "amqp"
        try:
            blocking = BlockingConnection(f"{scheme}://{node.host}:{node.port}", timeout=profile.timeout,
                                          ssl_domain=ssl_domain, heartbeat=heartbeat_for(profile.timeout),
                                          container=without_ssl_contexts(name), **kwargs)
        except proton.Timeout:
            errors.append(f"{node.masked()}: no answer within {profile.timeout:g} s")
            continue
        except proton.ProtonException as exc:
            said = condition_text(exc)
            if "unauthorized-access" in said or "Authentication failed" in said:
                raise ConnectError(f"authentication failed for user {profile.username!r} on broker "
                                   f"{profile.describe(node)} over AMQP 1.0 ({said})",
                                   hint=f"check the password ({profile.password_source}) and the user") from None
            if "vhost" in said and ("not found" in said or "does not exist" in said):
                from dlxtool.broker.connection import vhost_not_found

                raise vhost_not_found(profile, node) from None
            errors.append(f"{node.masked()}: {said}")
            continue
        return Amqp10Connection(blocking=blocking, node=node, profile=profile, name=name)
    raise ConnectError(f"broker {profile.name!r}: cannot connect over AMQP 1.0: " + "; ".join(errors),
                       hint="RabbitMQ speaks AMQP 1.0 on its AMQP port from 4.0 on; --protocol 0-9-1 uses 0.9.1")


def without_ssl_contexts(container_id: str) -> Any:
    """A proton Container as `Container()` makes it, but without the client and server SSL contexts its constructor
    makes for every connection (proton's SSLConfig, reading the CA store: 37 ms of CPU per connection, median of 20,
    against 0.01 ms). Neither is used here: a plain amqp:// connection has no TLS, and an amqps:// one is
    given its own domain (_ssl_domain); with none, proton refuses amqps:// (SSLUnavailable) rather than guess.
    The settings below are Container.__init__'s in python-qpid-proton 0.40 (pinned < 0.41);
    tests/broker/test_amqp10_connection.py checks they are still all of them."""
    from proton._reactor import GlobalOverrides  # Container.__init__ wraps the global handler in it
    from proton.reactor import Container

    container: Any = Container(impl=None)  # with "impl", __init__ leaves out its settings, SSLConfig too
    container.ssl = None
    container.global_handler = GlobalOverrides(container.global_handler)
    container.trigger = None
    container.container_id = container_id
    container.allow_insecure_mechs = True
    container.allowed_mechs = None
    container.sasl_enabled = True
    container.user = None
    container.password = None
    return container


def _ssl_domain(profile: BrokerProfile, proton: Any) -> Any:
    if not proton.SSL.present():
        raise Amqp10Unavailable("this python-qpid-proton was built without TLS (OpenSSL was not found when it "
                                "was compiled)", hint="install pkg-config and libssl-dev, then "
                                "pip install --force-reinstall --no-binary python-qpid-proton python-qpid-proton")
    domain = proton.SSLDomain(proton.SSLDomain.MODE_CLIENT)
    try:
        if profile.tls.ca:
            domain.set_trusted_ca_db(profile.tls.ca)
        if profile.tls.cert:
            domain.set_credentials(profile.tls.cert, profile.tls.key or profile.tls.cert, None)
        domain.set_peer_authentication(proton.SSLDomain.VERIFY_PEER_NAME if profile.tls.verify
                                       else proton.SSLDomain.ANONYMOUS_PEER)
    except proton.SSLException as exc:
        from dlxtool.errors import ConfigError

        raise ConfigError(f"broker {profile.name!r}: cannot load TLS files for AMQP 1.0: {exc}",
                          hint="check tls.ca / tls.cert / tls.key in the profile") from None
    return domain


def condition_text(exc: BaseException) -> str:
    """What the broker said in an AMQP 1.0 error (its condition name and description), from proton's exception;
    secrets scrubbed."""
    for attr in ("link", "connection"):
        endpoint = getattr(exc, attr, None)
        cond = getattr(endpoint, "remote_condition", None) if endpoint is not None else None
        if cond is not None:
            return secrets.scrub(describe_condition(cond))
    return secrets.scrub(str(exc) or type(exc).__name__)


def describe_condition(cond: Any) -> str:
    name = str(getattr(cond, "name", "") or "")
    text = str(getattr(cond, "description", "") or "")
    return f"{name}: {text}" if name and text else name or text


def failure(exc: BaseException, conn: Amqp10Connection | None = None) -> DlxtoolError:
    """A proton failure as dlxtool's error: a link the broker detached (amqp:not-found: NotFoundError; access:
    ConnectError) or a connection it closed or lost (ConnectError), with what it said."""
    said = condition_text(exc)
    if "amqp:not-found" in said:
        return NotFoundError(f"the broker said: {said}")
    if "unauthorized-access" in said:
        return ConnectError(f"the broker refused: {said}", hint="the user needs permissions for this")
    lost = "connection" in type(exc).__name__.lower() or "disconnected" in said
    if lost:
        return ConnectError(f"the AMQP 1.0 connection was closed or lost: {said}",
                            hint="what it held unsettled went back to its queue (on 4.3 a lost connection counts a "
                                 "delivery attempt on quorum queues)")
    return DlxtoolError(f"the broker refused: {said}")
