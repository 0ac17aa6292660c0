"""dlxtool.ops.history: how a temporary exchange of dlxtool's reads in peek and history."""

from __future__ import annotations

from datetime import UTC, datetime

from dlxtool.conventions import Route
from dlxtool.ops.history import shown_exchange
from dlxtool.ops.provenance import PROVENANCE_HEADER, replayed
from dlxtool.ops.replay_decision import _through_temporary
from dlxtool.ops.routes import TemporaryExchanges, temporary_exchange

PROV = {PROVENANCE_HEADER: {"from": "orders.dlq", "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "id": "r-1",
                            "count": 2, "exchange": "orders", "routing-key": "order.created", "deaths": "…"}}


def names(purpose: str, queue: str) -> str:
    exchanges = TemporaryExchanges(None, purpose=purpose)
    return exchanges._name(queue)  # noqa: SLF001 - the names the run declares


def test_a_temporary_exchange_reads_as_the_exchange_it_stood_for() -> None:
    replay = names("replay", "orders.q")
    assert temporary_exchange(replay) is not None and temporary_exchange("orders") is None
    assert shown_exchange(replay, PROV) == "orders (dlxtool replay)"
    assert shown_exchange(replay, {}) == "? (dlxtool replay)"  # no provenance: not known, and said so
    assert shown_exchange(names("load", "q"), {PROVENANCE_HEADER: {**PROV[PROVENANCE_HEADER], "exchange": ""}}) == \
        "(default) (dlxtool load)"
    assert shown_exchange(names("keep", "orders.dlq"), {}) == "(dlxtool: kept in orders.dlq)"
    assert shown_exchange("orders", PROV) == "orders" and shown_exchange("", {}) == "(default)"


def test_a_name_cut_at_255_bytes_names_no_queue() -> None:
    long = names("replay", "q" * 300)
    assert len(long.encode()) == 255 and temporary_exchange(long).queue is None  # type: ignore[union-attr]
    assert _through_temporary(Route(exchange=long, routing_key="k")) == Route(exchange=long, routing_key="k")
    assert _through_temporary(Route(exchange=names("replay", "orders.q"), routing_key="k")) == Route(queue="orders.q")


def test_replayed_says_what_the_provenance_recorded() -> None:
    assert replayed(PROV) == {"from": "orders.dlq", "at": "2026-01-02T03:04:05Z", "count": 2, "exchange": "orders",
                              "routing_key": "order.created"}
    assert replayed({}) is None and replayed(None) is None and replayed({PROVENANCE_HEADER: "x"}) is None
