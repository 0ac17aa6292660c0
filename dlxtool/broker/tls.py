"""The client TLS context of a broker profile: the AMQP connection's and the management API's (one place, so
that both sides verify the same way)."""

from __future__ import annotations

import ssl

from dlxtool.config import BrokerProfile
from dlxtool.errors import ConfigError


def tls_context(profile: BrokerProfile) -> ssl.SSLContext:
    """A client TLS context; verification is on unless the profile turns it off."""
    try:
        ctx = ssl.create_default_context(cafile=profile.tls.ca)
        if not profile.tls.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if profile.tls.cert:
            ctx.load_cert_chain(profile.tls.cert, profile.tls.key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"broker {profile.name!r}: cannot load TLS files: {exc}",
            hint="check tls.ca / tls.cert / tls.key in the profile",
        ) from None
    return ctx
