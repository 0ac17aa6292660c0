"""What dlxtool says of a dead letter no convention explains: its own headers and an example config entry."""

from __future__ import annotations

import tomllib

from dlxtool.config import parse_conventions
from dlxtool.convention_hints import dead_letter_name, own_headers, snippet


def test_own_headers_leave_out_the_brokers_dlxtools_and_tracing_ones() -> None:
    headers = {"x-original-channel": "c", "x-death": [], "x-first-death-queue": "q", "x-last-death-reason": "r",
               "x-delivery-count": 2, "dlxtool-replay": {}, "traceparent": "00-…", "x-b3-traceid": "1", "tenant": "a"}
    assert own_headers(headers) == ("x-original-channel", "tenant")
    assert own_headers(None) == () and own_headers([1]) == ()


def test_the_snippet_for_moleculer_names_the_channel_as_the_exchange_and_parses() -> None:
    lines = snippet(("x-original-channel", "x-original-group"))
    assert lines == ["[conventions.my-framework]", 'origin_exchange_header = "x-original-channel"',
                     "# also present: x-original-group"]
    [convention] = parse_conventions(tomllib.loads("\n".join(lines))["conventions"], "test: [conventions")
    assert convention.origin_exchange_header == "x-original-channel"


def test_the_snippet_keeps_one_origin_and_guesses_the_rest_from_their_names() -> None:
    lines = snippet(("acme-failed-queue", "acme-exchange", "acme-error", "acme-stack", "acme-retries", "tenant"))
    assert lines == ["[conventions.my-framework]", 'origin_queue_header = "acme-failed-queue"',
                     'error_headers = ["acme-error", "acme-stack"]', 'attempts_header = "acme-retries"',
                     "# also present: tenant, acme-exchange"]
    parse_conventions(tomllib.loads("\n".join(lines))["conventions"], "test: [conventions")
    # nothing that names an origin: the keys to fill in, as comments (the entry still parses once one is set)
    bare = snippet(("tenant",))
    assert bare[1].startswith("# origin_queue_header") and bare[-1] == "# also present: tenant"
    assert snippet(("x-routing-key",))[-1] == "# also present: x-routing-key"  # a key alone is no origin


def test_dead_letter_queue_names() -> None:
    assert all(dead_letter_name(q) for q in ("orders.dlq", "DEAD_LETTER", "orders_error", "parking-lot", "q.XQ"))
    assert not any(dead_letter_name(q) for q in ("orders", "payments.work", None, ""))
