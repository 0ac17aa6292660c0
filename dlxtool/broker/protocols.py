"""The protocols dlxtool reads and moves messages over: a value the type checker knows, not a free string.

"0-9-1" (pika; every RabbitMQ) or "1.0" (python-qpid-proton; RabbitMQ 4.x, docs/amqp10.md). --protocol and
$DLXTOOL_PROTOCOL are checked into one of these at the command line (dlxtool.cli.reading); the core takes only these.
"""

from __future__ import annotations

from typing import Literal, get_args

WireProtocol = Literal["0-9-1", "1.0"]
PROTOCOLS: tuple[WireProtocol, ...] = get_args(WireProtocol)


def wire_protocol(text: str) -> WireProtocol | None:
    """`text` as a protocol, or None where it names none."""
    for protocol in PROTOCOLS:
        if text == protocol:
            return protocol
    return None
