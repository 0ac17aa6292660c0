"""What dlxtool's AMQP connections call themselves (the client-provided connection name): "dlxtool", who and
what (the OS user and the command), and a random token the identity proof finds this very connection by in the
management API's connection list (dlxtool.broker.identity). Apart from connection.py so that a command that
opens no connection sets the label without importing it."""

from __future__ import annotations

import os
import re

_LABEL: list[str] = []  # who and what (set_connection_label): in every connection's name


def set_connection_label(label: str) -> None:
    """What every connection of this command says of itself in its name, after "dlxtool": the OS user and the
    command ("oncall replay"), so that the broker's own view (management UI, rabbitmqctl list_connections) says
    who is moving messages."""
    _LABEL[:] = [" ".join(label.split())[:80]] if label.strip() else []


def connection_name() -> str:
    """The client-provided connection name: "dlxtool", the label (set_connection_label), where it runs (host:pid:
    a later run on the same host can tell that the process holding a connection is gone, `process_gone`) and a
    random token this connection can be found by (the management API's connection list: dlxtool.broker.identity)."""
    # os.urandom is what secrets.token_hex reads; the secrets module would bring hmac and hashlib (OpenSSL)
    # into every command's start-up for this one line.
    return " ".join(["dlxtool", *_LABEL, f"{_host()}:{os.getpid()}", os.urandom(8).hex()])


_NAMED = re.compile(r"^dlxtool .*?(\S+):(\d+) [0-9a-f]{16}$")


def process_gone(name: str) -> bool | None:
    """For a connection `name` (connection_name's): True when it was opened by a dlxtool process of this host that
    is no longer running (a run killed, or cut off by the network: the broker may still hold what it took);
    False when that process runs; None when it is not dlxtool's, or of another host (nothing can be told)."""
    match = _NAMED.match(name or "")
    if match is None or match.group(1) != _host():
        return None
    try:
        os.kill(int(match.group(2)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False  # there, another user's (or not a pid): not ours to judge
    return False


def _host() -> str:
    return (os.uname().nodename or "?").split(".")[0].replace(" ", "_")
