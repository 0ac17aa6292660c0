"""Remember every secret dlxtool has seen so that no output can ever contain one.

Passwords are registered here when a profile resolves them; `scrub` is applied to every error
message and debug traceback before it is printed.
"""

from __future__ import annotations

import re
from urllib.parse import quote

_SECRETS: set[str] = set()
MASK = "****"

# user:password@ in any URL-ish text, whether or not we knew the password. The password runs to the
# LAST "@" before white space or a quote: an unencoded "/", "#", "?" or "@" in it must not end it early.
_URL_PASSWORD = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s'\"]*):(?P<pw>[^\s'\"]*)@(?=[^@\s'\"]*(?:[\s'\"]|$))"
)
# Passwords too common to be secret; masking them would hide user and queue names in messages.
_NOT_SECRET = {"guest"}


def register(secret: str | None) -> None:
    if secret and len(secret) >= 4 and secret not in _NOT_SECRET:
        _SECRETS.add(secret)
        _SECRETS.add(quote(secret, safe=""))


def clear() -> None:
    """Forget registered secrets (tests: so one test's secrets cannot mask another's leak)."""
    _SECRETS.clear()


def scrub(text: str) -> str:
    """Mask passwords in URLs and every registered secret, longest first."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
