"""What an operation needs from the broker it runs on, and how it talks back to the user.

The CLI builds a Session (the connection it opened, the management client of the same profile) and passes
a Reporter (notes and warnings on stderr); the operation decides, the CLI renders what it returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dlxtool.broker.management import ManagementClient

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection


@dataclass
class Session:
    conn: AmqpConnection                  # the open AMQP connection (dlxtool.broker.connection.connect)
    vhost: str
    broker: str                           # the profile's name, for messages
    timeout: float = 30.0
    management: ManagementClient | None = None


class Reporter(Protocol):
    def info(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...
