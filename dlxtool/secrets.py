"""Remember every secret dlxtool has seen so that no output can ever contain one.

Passwords are registered here when a profile resolves them; `scrub` is applied to every error
message and debug traceback before it is printed.
"""

from __future__ import annotations

import re
from urllib.parse import quote

_SECRETS: set[str] = set()
MASK = "****"

# user:password@ in any URL-ish text, whether or not we knew the password.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]*)@")


def register(secret: str | None) -> None:
    if secret and len(secret) >= 3:
        _SECRETS.add(secret)
        _SECRETS.add(quote(secret, safe=""))


def scrub(text: str) -> str:
    """Mask passwords in URLs and every registered secret, longest first."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
