"""How a run over messages ended (dlxtool.outcome.Outcome), decided here for every command that moves or
removes messages — replay, purge's reading modes, dump --remove, load — so that the same end gets the same
status and words everywhere (the CLI maps the status to an exit code: dlxtool.cli.output).

A run is refused (REFUSED, exit 6) when it moved nothing and everything selected stayed for a reason that is
the destination's, not the message's: a full destination (dlxtool.ops.capacity), a route that is not
safe (dlxtool.ops.routes), an exchange the broker refused; then nothing changed for those messages but where the
summary says so. Which reason is which is its kind (dlxtool.ops.stay.Stay), decided where it arose: never its
words."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from dlxtool.errors import UnavailableError
from dlxtool.ops.capacity import ALLOW_HINT
from dlxtool.ops.routes import route_hint
from dlxtool.ops.stay import Stay, Why
from dlxtool.ops.transfer_result import TransferResult
from dlxtool.outcome import OK, Outcome, Status

if TYPE_CHECKING:
    from dlxtool.broker.connection import AmqpConnection


def counted(left: Mapping[Why, int] | Mapping[str, int]) -> str:
    """'origin full … (2), no origin in the death history (1)': reasons with their counts, sorted."""
    return ", ".join(f"{why} ({n})" for why, n in sorted(left.items()))


def refusal(moved: int, left: Mapping[Why, int], *, nothing: str = "nothing moved", still: str = "",
            republished: int = 0) -> Outcome | None:
    """REFUSED when nothing moved and every message left stayed because of where it was to go (Stay.destinations):
    its destination is full, its route is not safe, the broker refused its exchange (no write permission …); None
    otherwise. `nothing` says what did not happen ("nothing replayed"), `still` where the messages are. A run that
    republished messages to the source's tail (`republished`) changed the source: it is PARTIAL, saying so, never
    REFUSED (a refusal changes nothing)."""
    kinds = {why.kind for why in left}
    if moved or not left or not all(kind.destinations for kind in kinds):
        return None
    where = f"; {still}" if still else ""
    status = Status.PARTIAL if republished else Status.REFUSED
    if Stay.EXCHANGE_REFUSED in kinds:
        return Outcome(status, f"{nothing}: {counted(left)}{where}",
                       "the user needs write permission on that exchange (and configure permission for dlxtool's "
                       "temporary exchanges, dlxtool.*)")
    if any(kind.route for kind in kinds):
        return Outcome(status, f"{nothing}, no route is safe: {counted(left)}{where}", route_hint(kinds))
    return Outcome(status, f"nothing moved: {sum(left.values())} message(s) stayed because their "
                   f"destination is full: {counted(left)}{where}", ALLOW_HINT)


def transfer_outcome(result: TransferResult, what: str, *, saved: str | None = None,
                     nothing: str = "nothing moved") -> Outcome:
    """The end of an engine run (dlxtool.ops.engine.TransferResult) of `what` ("replay", "purge" …): stopped by
    a local error (PARTIAL: what was settled is done), by the connection (CONNECT), by a stop signal
    (INTERRUPTED); refused (`refusal`); PARTIAL when messages were left for a reason other than the selection;
    else OK. `saved` names the file that holds the records written so far."""
    dups = f"; {result.possible_duplicates} message(s) may now exist twice" if result.possible_duplicates else ""
    kept = f"; records written so far are in {saved}" if saved else ""
    if result.source_deleted:
        return Outcome(Status.PARTIAL, f"{what} stopped: {result.source} was deleted during the run: the messages "
                       f"still in it were deleted with it ({_done(result)} before that){kept}{dups}")
    if result.unavailable:
        return Outcome(Status.UNAVAILABLE, f"{what} stopped: {result.unavailable}; {_done(result)}, the rest is still "
                       f"in {result.source}{_republished(result)}{kept}{dups}",
                       result.unavailable_hint or
                       "run it again once the alarm clears (the broker's node list says which: `dlxtool queues`); "
                       "consuming is not blocked: a purge or dump --remove of a big queue frees memory")
    if result.refused_by_broker:
        return Outcome(Status.PARTIAL if result.changed else Status.REFUSED,
                       f"{what} stopped: the broker refused ({result.refused_by_broker}); {_done(result)}, the rest "
                       f"is still in {result.source}{_republished(result)}{kept}{dups}")
    if result.error and not result.connection_lost:
        return Outcome(Status.PARTIAL, f"{what} stopped by an error: {result.error}; messages not yet settled are "
                       f"still in {result.source}{kept}{dups}",
                       "fix the cause (disk space, file permissions …) and run the same command again")
    if result.error:
        return Outcome(Status.CONNECT, f"{what} stopped: {result.error}; nothing was lost — unfinished messages are "
                       f"still in {result.source}{kept}{dups}{_held_when_lost(result)}",
                       "run the same command again to continue" + (
                           " once they are back (`dlxtool peek` counts them ready again)"
                           if result.held_when_lost or result.held_on_the_way else ""))
    if result.interrupted:
        return Outcome(Status.INTERRUPTED, f"{what} interrupted; the rest is still in {result.source}{kept}{dups}")
    if any(why.kind.not_now for why in result.left):  # the broker said no for now, not for good: run it again
        return Outcome(Status.UNAVAILABLE, f"{_done(result)}; {result.left_total} message(s) left in {result.source}: "
                       f"{counted(result.left)}{_republished(result)}{dups}",
                       "run it again in a few seconds, once the queue has its leader (or its node is back); "
                       "`dlxtool queues` shows its state")
    still = f"every message is still in {result.source}" if not result.republished else _republished(result)[2:]
    refused = refusal(result.moved_total, result.left, nothing=nothing, still=still, republished=result.republished)
    if refused is not None:
        return refused
    if result.left_total:
        return Outcome(Status.PARTIAL, f"{result.left_total} message(s) left in {result.source}: "
                       f"{counted(result.left)}{_republished(result)}")
    return OK


def _held_when_lost(result: TransferResult) -> str:
    """What the broker still holds for a lost connection, and until when (TransferResult.held_when_lost)."""
    if not result.held_when_lost and not result.held_on_the_way:
        return ""
    by = datetime.fromtimestamp(result.given_back_by).strftime("%H:%M:%S") if result.given_back_by else "?"
    more = result.held_on_the_way
    held = (f"{result.held_when_lost} of them were held unacked by the lost connection"
            + (f", and up to {more} more may be held by it (deliveries on their way, acks it never confirmed)"
               if more else "")
            if result.held_when_lost else
            f"up to {more} of them may be held by the lost connection (deliveries on their way, acks it never "
            "confirmed)")
    if result.node_down:  # the node itself, or the path to it, is gone: a heartbeat may not end the holding
        return (f"; {held}: {result.node_down}, so the node it was on, or a tunnel or port-forward to it, is "
                "down. If only the path went, the broker saw the connection close and has put them back already. If "
                "the node went, they come back when the cluster notices it is gone, or when it is back, and a quorum "
                "queue may keep them until its leader moves (seen on RabbitMQ 3.10, even with the node back: "
                "rabbitmq-queues transfer_leadership, or the leader's node in maintenance mode); a rerun before then "
                "does not see them")
    return (f"; {held}: the broker puts them back "
            "when it notices the connection is gone — at once if it saw it close, else (a half-open connection) "
            f"when its heartbeat gives up on it, by {by} at the latest; a rerun before then does not see them")


def _done(result: TransferResult) -> str:
    """'3 moved, 2 removed' / 'nothing moved': what the run did before it stopped."""
    parts = [f"{n} {what}" for n, what in ((result.moved_total, "moved"), (result.removed, "removed")) if n]
    return ", ".join(parts) or "nothing moved"


def _republished(result: TransferResult) -> str:
    if not result.republished:
        return ""
    return (f"; {result.republished} message(s) that stay were republished to the tail of {result.source} (behind "
            "any that arrived during the run)")


def depths_now(where: Iterable[tuple[AmqpConnection, Iterable[str]]], timeout: float) -> dict[str, dict[str, int]]:
    """queue -> {"ready", "consumers"} counted by the broker now (a passive declare on each (connection, queues)):
    the depths a command that moved messages prints after its run. Never the management API's, whose sample can be
    a statistics interval old (5 s by default): right after a replay it still showed the DLQ full. A queue that
    cannot be counted (deleted meanwhile, not a queue, the connection gone or blocked by an alarm) is left out."""
    from dlxtool.broker.connection import is_connection_failure
    from dlxtool.broker.queues import now

    out: dict[str, dict[str, int]] = {}
    for conn, queues in where:
        for queue in dict.fromkeys(queues):
            try:
                counted = now(conn, queue, timeout)
            except Exception as exc:
                if not is_connection_failure(exc) and not isinstance(exc, UnavailableError):
                    raise
                break  # the connection is gone or blocked (the run's outcome says so): nothing more to count on it
            if counted is not None:
                out[queue] = {"ready": counted.ready, "consumers": counted.consumers}
    return out


def depths_text(depths: Mapping[str, Mapping[str, int]]) -> str | None:
    """One line for people: 'now (counted by the broker after the run): dlq 0 ready; work 5 ready, 1 consumer(s)'."""
    if not depths:
        return None
    parts = [f"{q} {d['ready']} ready" + (f", {d['consumers']} consumer(s)" if d["consumers"] else "")
             for q, d in depths.items()]
    return "now (counted by the broker after the run): " + "; ".join(parts)
