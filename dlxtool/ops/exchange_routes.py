"""Replaying to an exchange + routing key: the origin some conventions name instead of a queue (Spring's
x-original-exchange + x-original-routingKey, a team's exchange/routing-key headers; dlxtool.conventions).

The message is published to that exchange with that key, mandatory and confirmed like every replay publish
(returned or nacked: it stays in the DLQ, counted). Before that, once per (exchange, key), the exchange's
bindings (management API, dlxtool.ops.routes.Router) say which queues it reaches, so that the checks a queue
origin gets apply to each of them:

  * the capacity guard (dlxtool.ops.capacity.Rooms): a publish goes only if it fits in every queue it reaches;
  * the dead-letter route (Router.dead_letter_drop): a queue whose dead-letter exchange would route that key
    nowhere would drop the message at its next failure, so it stays (unless `allow_dlx_drop`);
  * the exchange must exist: a publish to a missing exchange closes the channel (404), it is not returned;
  * one queue: a key that reaches several queues would hand each a copy, while the failure happened in one of
    them (the framework did not record which). It stays, unless `allow_fanout`; `--to QUEUE` picks one.

Where the queues cannot be told (no management API, a headers exchange on the way), their limits cannot be
read either: as for a queue origin whose limits are unread, the messages stay unless `allow_displace`
(mandatory still returns what routes nowhere).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dlxtool.conventions import Route
from dlxtool.errors import DlxtoolError, ManagementMismatch
from dlxtool.ops.capacity import Rooms
from dlxtool.ops.routes import Router
from dlxtool.ops.stay import Stay, Why


@dataclass(frozen=True)
class Reach:
    """Where one (exchange, routing key) leads: the queues (None: unknown, accepted with allow_displace), or
    why its messages stay (`stay`)."""

    route: Route
    queues: tuple[str, ...] | None
    note: str = ""            # for the plan: "reaches orders.q"
    stay: Why | None = None


class ExchangeTargets:
    """Per (exchange, routing key), once: a Reach. `exists(exchange)` asks the broker (passive declare; None:
    not checked); `router` reads the bindings (None: the management API is not reachable)."""

    def __init__(self, router: Router | None, exists: Callable[[str], bool] | None = None, *,
                 allow_displace: bool = False, allow_fanout: bool = False, allow_dlx_drop: bool = False) -> None:
        self.router = router
        self.exists = exists
        self.allow_displace = allow_displace
        self.allow_fanout = allow_fanout
        self.allow_dlx_drop = allow_dlx_drop  # as for queue origins (Routes.allow_drop): the operator's call
        self.reaches: dict[str, Reach] = {}  # by Route.key(), the group a decision counts its messages under

    def __call__(self, route: Route) -> Reach:
        group = route.key()
        reach = self.reaches.get(group)
        if reach is None:
            reach = self.reaches[group] = self._decide(route, str(route.exchange), str(route.routing_key))
        return reach

    def stays(self) -> set[Why]:
        """The reasons messages stayed for (a run that moved nothing because of them is refused, exit 6)."""
        return {r.stay for r in self.reaches.values() if r.stay is not None}

    def describe(self, group: str) -> str | None:
        """How an exchange group's messages were published (None: not an exchange group)."""
        reach = self.reaches.get(group)
        if reach is None:
            return None
        return f"{reach.route.describe()}; {reach.note}" if reach.stay is None else reach.stay

    def _decide(self, route: Route, exchange: str, key: str) -> Reach:
        where = f"exchange {exchange!r}, routing key {key!r}"
        if self.exists is not None and not self.exists(exchange):
            return Reach(route, None, stay=Why(f"{where}: the exchange does not exist", Stay.EXCHANGE_UNSAFE))
        unknown, queues = None, None
        if self.router is None:
            unknown = "no management API to read its bindings"
        else:
            try:
                found = self.router.route(exchange, key)
            except ManagementMismatch:
                raise  # the API answers for another broker now: exit 3, not a reason to stay
            except DlxtoolError as exc:
                found, unknown = None, f"cannot read its bindings ({exc.message})"
            if found is None and unknown is None:
                unknown = "it routes on headers"
            queues = tuple(sorted(found)) if found is not None else None
        if queues is None:
            if not self.allow_displace:
                return Reach(route, None, stay=Why(f"{where}: the queues it reaches cannot be told ({unknown}), nor "
                                                   "their limits checked; --allow-displace publishes anyway",
                                                   Stay.EXCHANGE_UNSAFE))
            return Reach(route, None, note=f"queues reached unknown ({unknown}); unroutable messages stay")
        if not queues:
            return Reach(route, queues, stay=Why(f"{where}: routes to no queue", Stay.EXCHANGE_UNSAFE))
        if len(queues) > 1 and not self.allow_fanout:
            return Reach(route, queues, stay=Why(f"{where}: routes to {len(queues)} queues ({', '.join(queues)}), "
                                                 "each would get a copy; --to QUEUE replays to one, --allow-fanout to "
                                                 "all", Stay.EXCHANGE_UNSAFE))
        drop = None if self.allow_dlx_drop else self._dead_letter_drop(queues, key)
        if drop is not None:
            return Reach(route, queues, stay=Why(f"{where}: {drop}", Stay.DEAD_LETTER_UNSAFE))
        return Reach(route, queues, note=f"reaches {', '.join(queues)}")

    def _dead_letter_drop(self, queues: tuple[str, ...], key: str) -> str | None:
        assert self.router is not None  # queues are known only through it
        for queue in queues:
            try:
                drop = self.router.dead_letter_drop(queue, key)
            except ManagementMismatch:
                raise  # the API answers for another broker now: exit 3, not a reason to stay
            except DlxtoolError as exc:
                return f"cannot check the dead-letter exchange of {queue!r} ({exc.message})"
            if drop:
                return f"reaches {queue!r}, whose {drop.removeprefix('its ')}"
        return None

    # -- the capacity guard --------------------------------------------------------------------------------

    def admit(self, rooms: Rooms) -> Callable[[str, int, int], Why | None]:
        """The run's admit hook (RunHooks.admit): a queue group by `rooms.admit`, an exchange group only where it
        fits in every queue the exchange reaches (reaches unknown, accepted with --allow-displace: admitted)."""
        queue_admit, reaches = rooms.admit, self.reaches

        def admit(group: str, size: int, in_flight: int) -> Why | None:
            reach = reaches.get(group)
            if reach is None:
                return queue_admit(group, size, in_flight)
            if reach.queues is None:
                return None
            return rooms.admit_all(reach.queues, size, in_flight)

        return admit
