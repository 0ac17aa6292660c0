"""What an operation needs from the broker it runs on, and how it talks back to the user.

The CLI builds a Session (the connection it opened, the management client of the same profile) and passes
a Reporter (notes and warnings on stderr); the operation decides and returns its result, with its Outcome
(dlxtool.outcome); the CLI renders it and asks whatever is to be asked between the steps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from dlxtool.broker.management import ManagementClient

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection
    from dlxtool.config import BrokerProfile


@dataclass
class Session:
    conn: AmqpConnection                  # the open AMQP connection (dlxtool.broker.connection.connect)
    vhost: str
    broker: str                           # the profile's name, for messages
    timeout: float = 30.0
    management: ManagementClient | None = None  # None: not reachable (management_error says why), or not asked
    management_error: str | None = None
    profile: BrokerProfile | None = field(default=None, repr=False)  # to open another connection (a probe)


class Reporter(Protocol):
    def info(self, message: str) -> None: ...

    def warn(self, message: str) -> None: ...

    def detail(self, message: str) -> None:
        """How the run works inside (a prefetch narrowed…): said with -v only."""
