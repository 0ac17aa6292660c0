"""AMQP and management URL handling: parsing, vhost extraction, masking, deriving the HTTP API URL."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit

from dlxtool.errors import UsageError
from dlxtool.secrets import MASK

AMQP_SCHEMES = {"amqp": 5672, "amqps": 5671}


@dataclass(frozen=True)
class AmqpUrl:
    """An AMQP URL taken apart (parse_amqp_url)."""

    scheme: str
    host: str
    port: int
    user: str | None
    password: str | None = field(repr=False)
    vhost: str | None  # None when the URL names none (then the profile's, or "/")

    @property
    def tls(self) -> bool:
        return self.scheme == "amqps"

    def masked(self) -> str:
        return self.render(mask=True)

    def render(self, *, mask: bool = True) -> str:
        auth = ""
        if self.user is not None:
            auth = quote(self.user, safe="")
            if self.password is not None:
                auth += ":" + (MASK if mask else quote(self.password, safe=""))
            auth += "@"
        host = bracketed(self.host)
        path = "/" if self.vhost in (None, "/") else "/" + quote(self.vhost, safe="")
        return f"{self.scheme}://{auth}{host}:{self.port}{path}"


def bracketed(host: str) -> str:
    """A host as a URL or an address names it: an IPv6 literal in brackets."""
    return f"[{host}]" if ":" in host else host


def host_port(host: str, port: int) -> str:
    """"host:port", "[::1]:5672"."""
    return f"{bracketed(host)}:{port}"


def parse_amqp_url(url: str) -> AmqpUrl:
    """Parse amqp(s)://user:pass@host:port/vhost; the vhost path is percent-decoded (%2F is "/")."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        # urllib's message quotes the part it choked on, which can be a piece of the password.
        raise UsageError(f"invalid broker URL {mask_any_url(url)!r}: bad host or port",
                         hint="use amqp://user@host:5672/vhost; percent-encode / # ? @ : in the password "
                              "(e.g. / as %2F)") from None
    if parts.scheme not in AMQP_SCHEMES:
        raise UsageError(f"invalid broker URL {mask_any_url(url)!r}: scheme must be amqp or amqps",
                         hint="for example amqp://guest@localhost:5672/")
    if not parts.hostname:
        raise UsageError(f"invalid broker URL {mask_any_url(url)!r}: no host",
                         hint="for example amqp://guest@localhost:5672/")
    path = parts.path
    # "amqp://host" and "amqp://host/" name no vhost (the default "/" applies); "/%2F" names "/".
    vhost = None if path in ("", "/") else unquote(path[1:])
    return AmqpUrl(
        scheme=parts.scheme,
        host=parts.hostname,
        port=port or AMQP_SCHEMES[parts.scheme],
        user=unquote(parts.username) if parts.username is not None else None,
        password=unquote(parts.password) if parts.password is not None else None,
        vhost=vhost,
    )


def mask_any_url(url: str) -> str:
    """Mask the password of any URL, even one that does not parse (an unencoded "/" or "@" in it)."""
    match = re.match(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>.*)@(?P<rest>[^@]*)$", url.strip())
    if not match:
        # A mistyped scheme ("amqp//", "amqp:/", none at all): which part is the user and which the password
        # cannot be told, so everything before the last "@" but what looks like a scheme is masked.
        loose = re.match(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*:?/*)?(?P<userinfo>.*)@(?P<rest>[^@]*)$", url.strip())
        if not loose or not loose["userinfo"]:
            return url
        return f"{loose['scheme'] or ''}{MASK}@{loose['rest']}"
    user, sep, _password = match["userinfo"].partition(":")
    return f"{match['scheme']}{user}{':' + MASK if sep else ''}@{match['rest']}"


def derive_management_url(url: AmqpUrl) -> str:
    """The management API normally listens on the AMQP host: 15672 (http) or 15671 (https)."""
    host = bracketed(url.host)
    return f"https://{host}:15671/" if url.tls else f"http://{host}:15672/"
