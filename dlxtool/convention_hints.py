"""A dead letter no convention explains: the headers it carries, and the [conventions] entry that would read them.

A framework dlxtool does not know (@moleculer/channels writes x-original-channel and x-original-group, nothing
else) leaves "no origin" and nothing to go on. Its own headers are what to go on: `own_headers` names them
(not RabbitMQ's, not dlxtool's), and `snippet` writes an example config entry naming them, each put where its
name suggests (a guess, said as one); the person decides what each header means.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dlxtool.deaths import HISTORY_HEADERS

# What RabbitMQ and dlxtool write, and tracing headers any message may carry: never a framework's origin.
_NOT_ORIGINS = frozenset(n.lower() for n in (
    *HISTORY_HEADERS, "dlxtool-replay", "x-delivery-count", "traceparent", "tracestate", "baggage", "b3",
    "uber-trace-id", "sentry-trace", "x-request-id", "x-correlation-id", "x-cloud-trace-context"))
_NOT_ORIGIN_PREFIXES = ("x-first-death-", "x-last-death-", "x-b3-", "uberctx-", "ot-baggage-")
# Names dead-letter queues go by (a DLQ, an error or parking-lot queue, Dramatiq's .XQ, moleculer's DEAD_LETTER)
_DEAD_LETTER_NAME = re.compile(r"dl[qx]|dead|error|park|fail|fault|poison|quarantine|\.xq$", re.I)

# Name fragments → the key that header most likely fills, in the order a header is tried against them.
_GUESSES = (
    ("origin_queue_header", re.compile(r"queue")),
    ("origin_routing_key_header", re.compile(r"routing|route|key")),
    ("origin_exchange_header", re.compile(r"exchange|channel|topic")),
    ("error_headers", re.compile(r"error|exception|fault|reason|stack|trace")),
    ("attempts_header", re.compile(r"retr|attempt|redeliver|count")),
)
MAX_NAMES = 8  # a message with dozens of headers: the first ones are enough to start from


def own_headers(headers: Mapping[str, Any] | Any) -> tuple[str, ...]:
    """The names of the headers a message carries beyond RabbitMQ's dead-lettering and dlxtool's own."""
    if not isinstance(headers, Mapping):
        return ()
    return tuple(str(k) for k in headers
                 if str(k).lower() not in _NOT_ORIGINS and not str(k).lower().startswith(_NOT_ORIGIN_PREFIXES))


def dead_letter_name(queue: str | None) -> bool:
    """Whether a queue's name says it holds dead letters: a message there without an origin is worth a hint,
    one in a work queue is not (it never failed)."""
    return bool(queue) and _DEAD_LETTER_NAME.search(queue or "") is not None


def names_text(names: Sequence[str], width: int = 50) -> str:
    """"x-original-channel, x-original-group" for a table cell, cut with "…" past `width`."""
    text = ", ".join(names)
    return text if len(text) <= width else text[:width - 1] + "…"


def snippet(names: Iterable[str]) -> list[str]:
    """An example [conventions.NAME] entry reading these headers (lines of TOML): each name where its words
    suggest; one origin only (a queue wins over an exchange, a routing key needs an exchange); the rest listed
    in a comment."""
    chosen: dict[str, list[str]] = {}
    rest: list[str] = []
    for name in list(dict.fromkeys(names))[:MAX_NAMES]:
        key = next((k for k, pattern in _GUESSES if pattern.search(name.lower())), None)
        many = key == "error_headers"
        if key is None or (key in chosen and not many):
            rest.append(name)
            continue
        chosen.setdefault(key, []).append(name)
    if "origin_queue_header" in chosen:  # one origin: the queue, the exchange headers then only mentioned
        rest += chosen.pop("origin_exchange_header", []) + chosen.pop("origin_routing_key_header", [])
    elif "origin_routing_key_header" in chosen and "origin_exchange_header" not in chosen:
        rest += chosen.pop("origin_routing_key_header")
    lines = ["[conventions.my-framework]"]
    for key, _pattern in _GUESSES:
        found = chosen.get(key)
        if found:
            value = "[" + ", ".join(f'"{n}"' for n in found) + "]" if key == "error_headers" else f'"{found[0]}"'
            lines.append(f"{key} = {value}")
    if not any(k.startswith("origin_") for k in chosen):
        lines.append('# origin_queue_header = "…"           # the header naming the queue it failed in, or')
        lines.append('# origin_exchange_header = "…"        # the exchange it was published to')
    if rest:
        lines.append(f"# also present: {', '.join(rest)}")
    return lines
