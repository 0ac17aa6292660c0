"""Why a selected message stays where it is, as a value: a `Stay` kind decided where the reason arises, carried
with its words in a `Why`.

The run's end (dlxtool.ops.outcomes) is derived from the kinds, never from the words: a run that moved nothing
because of where its messages were to go (a full destination, a route that is not safe, an exchange the broker
refused) is refused (exit 6, nothing changed), any other reason is a partial run (exit 5). Rewording a reason
changes no exit code.

A `Why` is the reason's text (a str: the summary, the JSON output and the journal show and count it as before) that
also knows its kind. Reasons are typed `Why` wherever they are counted (TransferResult.left, Decision.leave), so
mypy rejects a sentence made up without a kind."""

from __future__ import annotations

import enum
import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the publisher (and what it imports) only once a publish was answered
    from dlxtool.broker.publisher import PublishAnswer


class Stay(enum.Enum):
    """The kinds of reason a message stays for."""

    NOT_SELECTED = "not_selected"            # the selection (KEEP): not a failure
    NO_ORIGIN = "no_origin"                  # nothing says where it came from
    LOOP_GUARD = "loop_guard"                # --max-replays, a copy a kill -9 left, a replay count not trusted
    MESSAGE_REFUSED = "message_refused"      # the broker refuses the message itself (user_id, expiration, size)
    NOT_SENT = "not_sent"                    # it could not be encoded or published: never left this process
    DESTINATION_CHANGED = "destination_changed"  # replay --edit: it would now go elsewhere than its question said
    DESTINATION_FULL = "destination_full"    # a length limit (or limits that cannot be read)
    QUEUE_MISSING = "queue_missing"          # the destination queue does not exist
    ROUTE_REFUSED = "route_refused"          # the broker refused a temporary exchange (configure permission)
    DEAD_LETTER_UNSAFE = "dead_letter_unsafe"  # its next dead-lettering there would be dropped, or cannot be checked
    EXCHANGE_UNSAFE = "exchange_unsafe"      # an exchange origin reaches no queue, several, or unknown ones
    EXCHANGE_REFUSED = "exchange_refused"    # the broker refused publishing to that exchange (write permission)
    UNROUTABLE = "unroutable"                # returned (basic.return): routed to no queue
    NACKED = "nacked"                        # the broker nacked it
    DESTINATION_DOWN = "destination_down"    # nacked where no length limit explains it: the queue cannot take it now
    UNCONFIRMED = "unconfirmed"              # no confirm: maybe published
    UNPROVEN = "unproven"                    # its ack was not proven before the end
    GUARD_STOPPED = "guard_stopped"          # a guarded replay stopped before it (the canary, the brake)
    DEAD_REPLY = "dead_reply"                # a request whose reply cannot arrive (dlxtool.ops.replay_replies)

    @property
    def destinations(self) -> bool:
        """Where the message was to go is the reason, not the message: a run whose every message stayed so
        changed nothing on purpose (refused, exit 6)."""
        return self in _DESTINATIONS

    @property
    def not_now(self) -> bool:
        """The destination cannot take messages now (no leader, its node down): the run ends "not now" (exit 7),
        to be run again."""
        return self is Stay.DESTINATION_DOWN

    @property
    def route(self) -> bool:
        """The route to the destination is not safe (dlxtool.ops.routes)."""
        return self in _ROUTES


_ROUTES = frozenset({Stay.QUEUE_MISSING, Stay.ROUTE_REFUSED, Stay.DEAD_LETTER_UNSAFE, Stay.EXCHANGE_UNSAFE})
_DESTINATIONS = _ROUTES | {Stay.DESTINATION_FULL, Stay.EXCHANGE_REFUSED}


class Why(str):
    """A reason a message stays: its words (this str) and its `kind`."""

    kind: Stay

    def __new__(cls, text: str, kind: Stay) -> Why:
        made = super().__new__(cls, text)
        made.kind = kind
        return made

    def prefixed(self, prefix: str) -> Why:
        """The same reason said after `prefix` ("orders: …"), unless it starts so already."""
        return self if self.startswith(prefix) else Why(prefix + self, self.kind)

    def __reduce__(self) -> tuple[type[Why], tuple[str, Stay]]:  # str's own would drop the kind
        return Why, (str(self), self.kind)


NOT_SELECTED = Why("not selected", Stay.NOT_SELECTED)

@functools.cache
def answers() -> dict[PublishAnswer, Stay]:
    """The kind of reason a publish the broker did not confirm stays for."""
    from dlxtool.broker.publisher import PublishAnswer

    return {PublishAnswer.RETURNED: Stay.UNROUTABLE, PublishAnswer.NACKED: Stay.NACKED,
            PublishAnswer.LOST: Stay.UNCONFIRMED, PublishAnswer.REFUSED: Stay.NOT_SENT,
            PublishAnswer.BROKER_REFUSED: Stay.MESSAGE_REFUSED, PublishAnswer.UNSENT: Stay.NOT_SENT}


def answered(outcome: PublishAnswer, detail: str | None) -> Why:
    """Why a publish the broker answered so stays: "returned: NO_ROUTE" …"""
    return Why(f"{outcome.value}: {detail}", answers().get(outcome, Stay.NOT_SENT))
