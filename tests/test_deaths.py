from datetime import UTC, datetime

from dlxtool.deaths import find_origin, parse_history, reset_history, summarize

T1 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
T2 = datetime(2026, 11, 1, 12, 5, tzinfo=UTC)


def entry(queue: str, reason: str, count: int, **extra):
    return {"queue": queue, "reason": reason, "count": count, "exchange": "orders", "routing-keys": ["order.placed"],
            "time": T1, **extra}


def test_wait_queue_loop_origin_is_where_it_failed_not_where_it_waited() -> None:
    headers = {
        "x-death": [entry("orders.wait", "expired", 3, **{"original-expiration": "5000"}),
                    entry("orders.work", "rejected", 3)],
        "x-first-death-queue": "orders.work", "x-first-death-reason": "rejected",
    }
    origin = find_origin(headers)
    assert origin.queue == "orders.work"
    assert "rejected" in origin.why
    history = parse_history(headers)
    assert history.total == 6
    assert history.deaths[0].original_expiration == "5000"
    assert summarize(history.deaths) == "expired×3 from orders.wait, rejected×3 from orders.work"


def test_most_recent_failure_wins_over_first_death() -> None:
    headers = {"x-death": [entry("b", "delivery_limit", 1), entry("a", "rejected", 2)],
               "x-first-death-queue": "a"}
    assert find_origin(headers).queue == "b"


def test_only_expired_deaths_fall_back_to_first_death_queue() -> None:
    headers = {"x-death": [entry("ttl.q", "expired", 1)], "x-first-death-queue": "ttl.q"}
    assert find_origin(headers).queue == "ttl.q"
    assert find_origin({}).queue is None


def test_malformed_x_death_warns_and_reads_what_it_can() -> None:
    assert parse_history({"x-death": "garbage"}).warnings
    history = parse_history({"x-death": [42, {"queue": b"q\xff", "count": "7", "time": "yesterday",
                                               "routing-keys": "single"}]})
    assert len(history.deaths) == 1
    death = history.deaths[0]
    assert death.queue == "q\ufffd" and death.count == 7 and death.time is None
    assert death.routing_keys == ("single",)
    assert any("not a table" in w for w in history.warnings)
    assert any("lacks reason" in w for w in history.warnings)
    single = parse_history({"x-death": entry("q", "rejected", 1)})
    assert single.deaths[0].queue == "q" and single.warnings


def test_last_death_headers_are_read() -> None:
    history = parse_history({"x-last-death-queue": "q", "x-last-death-reason": "rejected", "x-death": []})
    assert history.last == {"queue": "q", "reason": "rejected"}


def test_reset_history_removes_counts_and_keeps_the_rest() -> None:
    headers = {"x-death": [entry("q", "rejected", 2)], "x-first-death-queue": "q", "x-last-death-reason": "r",
               "CC": ["a"], "x-delivery-count": 3, "x-retry-count": 4, "count": 9, "trace-id": "abc"}
    kept, removed = reset_history(headers)
    assert kept == {"count": 9, "trace-id": "abc"}
    assert set(removed) == {"x-death", "x-first-death-queue", "x-last-death-reason", "CC", "x-delivery-count",
                            "x-retry-count"}
    kept, _ = reset_history(headers, extra=["count"])
    assert kept == {"trace-id": "abc"}
    assert T2 > T1  # times are timezone-aware and comparable


def test_message_history_collects_companions_counters_and_error_text() -> None:
    from dlxtool.deaths import message_history

    headers = {"x-death": [entry("orders.work", "rejected", 2)], "x-first-death-queue": "orders.work",
               "x-last-death-reason": b"rejected", "x-delivery-count": 4, "x-retry-count": 2,
               "MT-Fault-Message": "boom\n  at line 3", "x-error": "other"}
    h = message_history(headers)
    assert h.origin.queue == "orders.work" and h.failure.reason == "rejected"
    assert h.history.last == {"reason": "rejected"}
    assert (h.delivery_count, h.retry, h.error) == (4, {"x-retry-count": 2}, "other")
    assert message_history(headers, error_headers=["mt-fault-message"]).error == "boom at line 3"
    assert message_history(None).origin.queue is None


def test_death_count_is_x_death_where_the_broker_keeps_counting() -> None:
    from dlxtool.deaths import death_count

    # No x-last-death-*: dead-lettered by RabbitMQ < 3.13, which counts a republished message on.
    count = death_count({"x-death": [entry("q", "rejected", 3)], "x-retry-count": 9})
    assert (count.recorded, count.at_least, count.may_be_low, count.note) == (3, 3, False, None)
    assert death_count(None).at_least == 0 and not death_count("not a table").may_be_low  # type: ignore[arg-type]


def test_death_count_may_be_low_where_the_broker_restarts_x_death() -> None:
    from dlxtool.deaths import death_count

    restarted = {"x-death": [entry("q", "rejected", 1)], "x-last-death-queue": "q"}
    count = death_count(restarted)
    assert (count.recorded, count.at_least, count.may_be_low) == (1, 1, True)
    assert "may have died more often" in (count.note or "")
    assert not death_count({"x-last-death-queue": "q"}).may_be_low  # no death at all: nothing to be low


def test_death_count_takes_an_app_retry_counter_where_it_says_more() -> None:
    from dlxtool.deaths import death_count

    restarted = {"x-death": [entry("q", "rejected", 1)], "x-last-death-queue": "q"}
    count = death_count({**restarted, "x-retry-count": 4, "x-delivery-attempts": 2})
    assert (count.recorded, count.at_least, count.evidence, count.may_be_low) == (1, 4, "x-retry-count says 4", False)
    assert "x-death says 1, x-retry-count says 4" in (count.note or "")
    # A counter that says no more than x-death: the app counts, so the count is not low either.
    assert death_count({**restarted, "x-retry-count": 0}).note is None
    # Not numbers (or booleans, or the too-generic "count") prove nothing.
    for junk in ({"x-retry-count": "4"}, {"x-retry-count": True}, {"count": 7}, {"x-retry-count": -3}):
        assert death_count({**restarted, **junk}).at_least == 1
