"""What dlxtool's AMQP connections call themselves (the client-provided connection name): "dlxtool", who and
what (the OS user and the command), and a random token the identity proof finds this very connection by in the
management API's connection list (dlxtool.broker.identity). Apart from connection.py so that a command that
opens no connection sets the label without importing it."""

from __future__ import annotations

import os

_LABEL: list[str] = []  # who and what (set_connection_label): in every connection's name


def set_connection_label(label: str) -> None:
    """What every connection of this command says of itself in its name, after "dlxtool": the OS user and the
    command ("oncall replay"), so that the broker's own view (management UI, rabbitmqctl list_connections) says
    who is moving messages."""
    _LABEL[:] = [" ".join(label.split())[:80]] if label.strip() else []


def connection_name() -> str:
    """The client-provided connection name: "dlxtool", the label (set_connection_label) and a random token this
    connection can be found by (the management API's connection list: dlxtool.broker.identity)."""
    # os.urandom is what secrets.token_hex reads; the secrets module would bring hmac and hashlib (OpenSSL)
    # into every command's start-up for this one line.
    return " ".join(["dlxtool", *_LABEL, os.urandom(8).hex()])
