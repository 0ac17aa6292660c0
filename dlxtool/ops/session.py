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
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.config import BrokerProfile
    from dlxtool.ops.capacity import Rooms


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


@dataclass
class MoveSession:
    """What a run that moves messages talks to: the source queue's broker (`source`) and the destinations'
    (`target`: another broker, e.g. replay's --target-broker, else the same Session). A Session's `management` is
    None when its API cannot be reached (its `management_error` says why)."""

    source: Session
    target: Session | None = None
    plan_limit: int = 10_000  # messages a plan may hold unacked
    rooms: Rooms | None = None  # the destinations' capacity guard (dlxtool.ops.capacity)
    protocol: WireProtocol = "0-9-1"  # what the messages move over: "1.0" reads and sends over AMQP 1.0 (RabbitMQ 4.x)

    @property
    def to(self) -> Session:
        return self.target or self.source

    @property
    def target_conn(self) -> AmqpConnection | None:
        """The destinations' connection when it is another broker's (the engine's target_conn), else None."""
        return self.target.conn if self.target is not None else None
