"""How a run over messages ends (dlxtool.ops.outcomes): one status and one wording per end, for every command
that moves or removes messages. Pure logic on engine results; the commands' own ends are in tests/cli."""

from __future__ import annotations

from collections import Counter

from dlxtool.ops.capacity import Capacity, full_reason
from dlxtool.ops.engine import TransferResult
from dlxtool.ops.outcomes import refusal, transfer_outcome
from dlxtool.ops.replay_decision import NO_ORIGIN
from dlxtool.ops.stay import Stay, Why
from dlxtool.outcome import Status

UNSAFE = Why("q.o: its dead-letter exchange 'dlx' routes 'k' to no queue", Stay.DEAD_LETTER_UNSAFE)


def test_a_local_error_is_not_reported_as_a_lost_connection() -> None:
    result = TransferResult("q.dlq", 10, error="[Errno 28] No space left on device", possible_duplicates=2)
    outcome = transfer_outcome(result, "replay")
    assert outcome.status is Status.PARTIAL
    assert "connection" not in outcome.message and "nothing was lost" not in outcome.message
    assert "2 message(s) may now exist twice" in outcome.message


def test_a_lost_connection_says_so() -> None:
    outcome = transfer_outcome(TransferResult("q.dlq", 10, error="StreamLostError", connection_lost=True), "replay")
    assert outcome.status is Status.CONNECT and "still in q.dlq" in outcome.message


def test_a_lost_connection_says_what_the_broker_may_still_hold_for_it_including_deliveries_on_their_way() -> None:
    # The fault campaign (issue 35, scripts/chaos seed 1025: replay --to, a stall for good): the words said "still in
    # the DLQ" with 0 held while the broker held 16 deliveries it had sent into the stalled path until its heartbeat.
    lost = {"error": "no reply within 3s", "connection_lost": True, "given_back_by": 0.0}
    only_on_the_way = transfer_outcome(TransferResult("q.dlq", 200, held_on_the_way=16, **lost), "replay").message
    assert "up to 16 of them may be held by the lost connection" in only_on_the_way
    assert "a rerun before then does not see them" in only_on_the_way
    both = transfer_outcome(TransferResult("q.dlq", 200, held_when_lost=5, held_on_the_way=16, **lost), "replay")
    assert "5 of them were held unacked by the lost connection, and up to 16 more may be held by it" in both.message
    assert "once they are back" in (both.hint or "")
    none = transfer_outcome(TransferResult("q.dlq", 200, **lost), "replay").message
    assert "held" not in none


def test_nothing_moved_because_no_route_is_safe_is_a_refusal_saying_where_the_messages_are() -> None:
    result = TransferResult("q.dlq", 3, left=Counter({UNSAFE: 3}))
    outcome = transfer_outcome(result, "replay", nothing="nothing replayed")
    assert outcome.status is Status.REFUSED
    assert outcome.message.startswith("nothing replayed, no route is safe") and "still in q.dlq" in outcome.message
    assert "--allow-dlx-drop" in (outcome.hint or "")


def test_a_stop_is_not_a_refusal_even_when_nothing_moved() -> None:
    result = TransferResult("q.dlq", 3, left=Counter({UNSAFE: 1}), interrupted=True)
    assert transfer_outcome(result, "replay").status is Status.INTERRUPTED


def test_something_moved_is_partial_not_refused() -> None:
    result = TransferResult("q.dlq", 3, moved=Counter({"q.o": 1}), left=Counter({UNSAFE: 2}))
    assert transfer_outcome(result, "replay").status is Status.PARTIAL


def test_a_full_destination_refuses_only_when_it_took_nothing() -> None:
    full = full_reason("origin", Capacity("q.o", max_length=1))
    assert refusal(0, Counter({full: 2})) is not None
    assert refusal(1, Counter({full: 2})) is None
    assert refusal(0, Counter({full: 2, NO_ORIGIN: 1})) is None


def test_the_status_is_the_reasons_kind_never_its_words() -> None:
    """Rewording a reason changes no exit code: the same words as a full destination's but of another kind are no
    refusal, and a destination's reason in any words is."""
    looks_full = Why("origin full (drop-head would push out its head): q.o", Stay.NO_ORIGIN)
    assert refusal(0, Counter({looks_full: 1})) is None
    assert transfer_outcome(TransferResult("q.dlq", 1, left=Counter({looks_full: 1})), "replay").status \
        is Status.PARTIAL
    for kind in Stay:
        outcome = refusal(0, Counter({Why("anything at all", kind): 1}))
        assert (outcome is not None) is kind.destinations, kind
    refused = refusal(0, Counter({Why("words", Stay.EXCHANGE_REFUSED): 1}))
    assert refused is not None and "write permission" in (refused.hint or "")
    assert TransferResult("q", 2, left=Counter({looks_full: 1, UNSAFE: 1})).to_json()["left_by_kind"] == {
        "no_origin": 1, "dead_letter_unsafe": 1}


def test_a_clean_run_is_ok() -> None:
    assert transfer_outcome(TransferResult("q.dlq", 3, moved=Counter({"q.o": 3})), "replay").ok


def test_depths_after_a_run_read_as_one_line() -> None:
    from dlxtool.ops.outcomes import depths_text

    assert depths_text({}) is None
    assert depths_text({"dlq": {"ready": 0, "consumers": 0}, "work": {"ready": 5, "consumers": 2}}) == (
        "now (counted by the broker after the run): dlq 0 ready; work 5 ready, 2 consumer(s)")


def test_messages_a_destination_could_not_take_now_end_the_run_not_now() -> None:
    """Exit 7, not 5: the broker nacked them where no limit explains it (dlxtool.ops.capacity.Rooms.nack_cause);
    what moved and what was republished to the source's tail are said."""
    down = Why("nacked by q.work, which no limit of its own explains (no length limit): it cannot take messages "
               "now (…)", Stay.DESTINATION_DOWN)
    result = TransferResult("q.dlq", 10, moved=Counter({"q.work": 4}), left=Counter({down: 5, NO_ORIGIN: 1}),
                            republished=6)
    outcome = transfer_outcome(result, "replay")
    assert outcome.status is Status.UNAVAILABLE
    assert outcome.message.startswith("4 moved; 6 message(s) left in q.dlq: ")
    assert f"{down} (5)" in outcome.message and "republished to the tail of q.dlq" in outcome.message
    assert "run it again in a few seconds" in (outcome.hint or "")
    nacked = Why("nacked: rejected by the broker (basic.nack, e.g. queue full)", Stay.NACKED)
    assert transfer_outcome(TransferResult("q.dlq", 5, left=Counter({nacked: 5})), "replay").status is Status.PARTIAL


def test_messages_held_on_a_node_that_is_down_are_not_promised_back_by_a_heartbeat() -> None:
    """The node the lost connection was on refuses connections (dlxtool.broker.connection.node_refuses): no
    heartbeat of that connection ends the holding, and a 3.10 quorum queue kept them until its leader moved."""
    lost = {"error": "connection lost", "connection_lost": True, "given_back_by": 0.0, "held_when_lost": 106}
    said = transfer_outcome(TransferResult("q.dlq", 600, node_down="localhost:5702 refuses connections now", **lost),
                            "replay").message
    assert ("106 of them were held unacked by the lost connection: localhost:5702 refuses connections now, so the "
            "node it was on, or a tunnel or port-forward to it, is down") in said
    assert "until its leader moves" in said and "at the latest" not in said
    assert "If only the path went, the broker saw the connection close and has put them back already" in said
    alive = transfer_outcome(TransferResult("q.dlq", 600, **lost), "replay").message
    assert "at the latest" in alive and "refuses connections" not in alive
