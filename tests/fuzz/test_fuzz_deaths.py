"""Fuzz x-death parsing: any header value in any place parses (with warnings), never raises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dlxtool.deaths import message_history, reset_history, summarize
from tests.fuzz.strategies import FUZZ, amqp_tables, amqp_values, keys

DEATH_KEYS = st.sampled_from(["queue", "reason", "count", "exchange", "routing-keys", "time",
                              "original-expiration"])
death_entries = st.one_of(st.dictionaries(st.one_of(DEATH_KEYS, keys), amqp_values, max_size=8), amqp_values)
x_death = st.one_of(st.lists(death_entries, max_size=5), amqp_values)


@FUZZ
@given(x_death, amqp_tables, st.dictionaries(st.sampled_from([
    "x-first-death-queue", "x-first-death-reason", "x-last-death-queue", "x-delivery-count",
    "x-retry-count", "count", "x-exception-message"]), amqp_values))
def test_any_x_death_parses(raw: object, other: dict, companions: dict) -> None:
    headers = {**other, **companions, "x-death": raw}
    item = message_history(headers, error_headers=["x-error"])
    item.to_json()
    summarize(item.history.deaths)
    assert item.history.total == sum(d.count for d in item.history.deaths)
    kept, removed = reset_history(headers, ["count"])
    assert "x-death" in removed and "x-death" not in kept
