"""How a run over messages ended (dlxtool.outcome.Outcome), decided here for every command that moves or
removes messages — replay, purge's reading modes, dump --remove, load — so that the same end gets the same
status and words everywhere (the CLI maps the status to an exit code: dlxtool.cli.output).

A run is refused (REFUSED, exit 6) when it moved nothing and everything selected stayed for a reason that is
the destination's, not the message's: a full destination (dlxtool.ops.capacity) or a route that is not
safe (dlxtool.ops.routes); then nothing changed for those messages but where the summary says so."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from dlxtool.ops.capacity import ALLOW_HINT, is_full_reason
from dlxtool.ops.engine import TransferResult
from dlxtool.ops.routes import nothing_routed, route_hint
from dlxtool.outcome import OK, Outcome, Status


def counted(left: Mapping[str, int]) -> str:
    """'origin full … (2), no origin in the death history (1)': reasons with their counts, sorted."""
    return ", ".join(f"{why} ({n})" for why, n in sorted(left.items()))


def refusal(moved: int, left: Mapping[str, int], unsafe: Collection[str] = (), *, nothing: str = "nothing moved",
            still: str = "") -> Outcome | None:
    """REFUSED when nothing moved and every message left stayed because its destination is full, or (at least
    some) because its route is not safe (`unsafe`: Routes.unsafe); None otherwise. `nothing` says what did not
    happen ("nothing replayed"), `still` where the messages are."""
    if moved or not left:
        return None
    where = f"; {still}" if still else ""
    if unsafe and nothing_routed(moved, left, set(unsafe)):
        return Outcome(Status.REFUSED, f"{nothing}, no route is safe: {counted(left)}{where}", route_hint(left))
    if all(is_full_reason(why) for why in left):
        return Outcome(Status.REFUSED, f"nothing moved: {sum(left.values())} message(s) stayed because their "
                       f"destination is full: {counted(left)}{where}", ALLOW_HINT)
    return None


def transfer_outcome(result: TransferResult, what: str, *, saved: str | None = None, unsafe: Collection[str] = (),
                     nothing: str = "nothing moved") -> Outcome:
    """The end of an engine run (dlxtool.ops.engine.TransferResult) of `what` ("replay", "purge" …): stopped by
    a local error (PARTIAL: what was settled is done), by the connection (CONNECT), by a stop signal
    (INTERRUPTED); refused (`refusal`); PARTIAL when messages were left for a reason other than the selection;
    else OK. `saved` names the file that holds the records written so far."""
    dups = f"; {result.possible_duplicates} message(s) may now exist twice" if result.possible_duplicates else ""
    kept = f"; records written so far are in {saved}" if saved else ""
    if result.error and not result.connection_lost:
        return Outcome(Status.PARTIAL, f"{what} stopped by an error: {result.error}; messages not yet settled are "
                       f"still in {result.source}{kept}{dups}",
                       "fix the cause (disk space, file permissions …) and run the same command again")
    if result.error:
        return Outcome(Status.CONNECT, f"{what} stopped: {result.error}; nothing was lost — unfinished messages are "
                       f"still in {result.source}{kept}{dups}", "run the same command again to continue")
    if result.interrupted:
        return Outcome(Status.INTERRUPTED, f"{what} interrupted; the rest is still in {result.source}{kept}{dups}")
    refused = refusal(result.moved_total, result.left, unsafe, nothing=nothing,
                      still=f"every message is still in {result.source}")
    if refused is not None:
        return refused
    if result.left_total:
        return Outcome(Status.PARTIAL,
                       f"{result.left_total} message(s) left in {result.source}: {counted(result.left)}")
    return OK
