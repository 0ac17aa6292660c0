"""Replay's decision on a dead letter's encoded properties: the transfer engine's fast path on the `c` codec.

ReplayDecider.__call__ decodes a dead letter's properties, reads them and encodes the replayed properties
again: tens of µs of Python per message. Here the C extension (dlxtool.broker.wire._hotpath) does the
byte work only: `scan_headers` hands over the encoded values of the headers and fields named here
(x-death's entries, an earlier provenance, the retry counters a reset removes) and `splice_headers`
copies the properties without the removed headers, with the provenance entry built here appended.
Every rule is applied here, by the Python path's own functions (dlxtool.deaths, dlxtool.ops.replay) on
the values the Python codec decodes from those bytes, so the two paths cannot disagree on one.

What repeats is cached per run: the reading of each distinct x-death (origin, address, the deaths
summary; `time` is not read, so the dead letters of one failure share one reading), of each distinct
earlier provenance and retry counters, and the encoded parts of the provenance header; and what all of these
make of one message, its plan (target, routing key, route, the provenance's entries), per distinct combination.
A message then costs the three C calls (scan, fingerprint, splice), one look-up of its plan, the loop guard and
the provenance's id.

It answers None for what it leaves to __call__: properties the scan would not copy exactly, no x-death
or no failure in it (an origin from x-first-death-*, a wait queue's route), a TTL to restore, a header
another convention reads, a Celery task, a body --reset-body-retries may rewrite, a retry counter whose
name is not UTF-8.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from dlxtool.amqp_values import decode_field_value, encode_field_table
from dlxtool.deaths import (
    CELERY_HEADER,
    DEFAULT_RETRY_HEADERS,
    HISTORY_HEADERS,
    death_routing_keys,
    failed_in,
    parse_history,
    summarize,
)
from dlxtool.ops.engine import Action, Decision
from dlxtool.ops.provenance import (
    _SRC_ENTRY,
    COPY_LEFT,
    PROVENANCE_HEADER,
    Origin,
    copy_origin,
    provenance_src,
    source_fingerprint,
)
from dlxtool.ops.replay import Address, first_address, origin_death, original_address, replay_count, short_value

if TYPE_CHECKING:
    from dlxtool.ops.replay import ReplayDecider

# What is read of each x-death entry: dlxtool.deaths.Death but `time` and `routing-keys` (read apart: the messages of
# a DLQ that differ only by their routing keys share one reading); of an earlier provenance, what replay_count and
# first_address read, and apart what provenance_src reads (unique per message).
X_DEATH_FIELDS = ("queue", "reason", "count", "exchange", "original-expiration")
ROUTING_KEYS = ("routing-keys",)
PROVENANCE_FIELDS = ("count", "exchange", "routing-key", "expiration")
PROVENANCE_SRC = ("src", "id")

# A picked table as scan_headers hands it over: only the fields asked for, encoded with its size
Table = bytes
Scan = Callable[..., Any]
Splice = Callable[[bytes, tuple[bytes, ...], bytes], bytes | None]
Fingerprint = Callable[[bytes, bytes], str | None]
Decide = Callable[[str, bytes, bytes], Decision | None]
# A dead letter's plan (raw_decider's _plan): [target, routing key, way, provenance entries, count], or False
Plan = list[Any] | Literal[False]

_CACHE_MAX = 4096
_SIZE = struct.Struct(">I")


def _entries(fields: dict[str, Any]) -> bytes:
    """Table entries (name + value each) as the Python codec writes them (text, integers, times: never pika's
    fallback): a table without its size."""
    return encode_field_table(fields)[4:]


def _name(name: str) -> bytes:
    # surrogatepass: a name from argv bytes that are not UTF-8 ('\udcff') matches no header in Python; a header
    # these bytes match is reported, and declined by _reset (not UTF-8)
    return name.encode("utf-8", "surrogatepass")


def _decoded(table: Table) -> dict[str, Any]:
    """A picked table, decoded as the Python path decodes the header it is from. ValueError where it does not."""
    decoded: dict[str, Any] = decode_field_value(b"F" + table)
    return decoded


class _Reading(NamedTuple):
    """What a dead letter's x-death says for its replay, routing keys aside."""

    origin: str
    at: int                # the index of the entry the original address is read from (origin_death)
    exchange: str          # the address's exchange
    deaths: bytes          # the provenance's "deaths" entry, encoded


def _read(deaths: tuple[Table, ...]) -> _Reading | None:
    """x-death's origin, the entry its address is read from and the deaths summary, as __call__ finds them
    (dlxtool.deaths, original_address); None where __call__ has more to do."""
    try:
        history = parse_history({"x-death": [_decoded(entry) for entry in deaths]})
    except ValueError:
        return None
    failed = failed_in(history)
    if failed is None or not failed.queue:  # an origin from x-first-death-*, a wait queue's route: __call__
        return None
    death = origin_death(history, failed.queue)
    if death is None or death.original_expiration is not None:  # a TTL to restore: __call__
        return None
    address = original_address(history, failed.queue)
    at = next(i for i, d in enumerate(history.deaths) if d is death)
    return _Reading(failed.queue, at, address.exchange, _entries({"deaths": summarize(history.deaths, limit=3)}))


def _first_key(entry: Table) -> str | None | bool:
    """The address's routing key from the origin entry's routing-keys (original_address); False where it does
    not decode."""
    try:
        keys = death_routing_keys(_decoded(entry).get("routing-keys"))
    except ValueError:
        return False
    return keys[0] if keys else None


def _provenance(table: Table) -> tuple[int, dict[str, Any]] | None:
    """(how many times replayed before, the recorded fields) of an earlier provenance."""
    try:
        recorded = _decoded(table)
    except ValueError:
        return None
    return replay_count({PROVENANCE_HEADER: recorded}), recorded


_ID_ENTRY = b"\x02idS"  # "id", a long string (its size and text follow)


def _origin(table: Table) -> Origin | None:
    """provenance_src of an earlier provenance's `id` and `src` (as picked); ValueError where they do not decode.
    On every replayed copy's path: the layout replay writes (id, then src, ASCII) is sliced, any other decoded."""
    if table[4:8] == _ID_ENTRY:
        end = 12 + int.from_bytes(table[8:12], "big")
        if len(table) == end + 25 and table[end:end + 9] == _SRC_ENTRY:
            publish_id, src = table[12:end], table[end + 9:]
            if publish_id.isascii() and src.isascii():  # decoded, they are these bytes as text
                return copy_origin(src.decode(), publish_id.decode())
    return provenance_src({PROVENANCE_HEADER: _decoded(table)})


def _reset(reported: tuple[tuple[bytes, bytes], ...]) -> bytes | None:
    """The provenance's "reset" entry for the retry counters removed, as replay_headers writes it."""
    try:
        removed = sorted(((name.decode("utf-8"), decode_field_value(raw)) for name, raw in reported),
                         key=lambda item: item[0])
    except ValueError:  # UnicodeDecodeError included: a name Python does not remove (it is not that str)
        return None
    return _entries({"reset": ", ".join(f"{name}={short_value(value)}" for name, value in removed)})


class _Cache(dict[Any, Any]):
    """One reading per distinct value, computed by `read` on first sight (bounded: cleared when full)."""

    def __init__(self, read: Callable[[Any], Any]) -> None:
        super().__init__()
        self.read = read

    def __missing__(self, key: Any) -> Any:
        if len(self) >= _CACHE_MAX:
            self.clear()
        value = self[key] = self.read(key)
        return value


def raw_decider(decider: ReplayDecider, scan: Scan, splice: Splice, fingerprint_of: Fingerprint,
                triggers: tuple[tuple[str, ...], tuple[str, ...]]) -> Decide:
    """decide(routing_key, encoded properties, body) -> Decision | None for one ReplayDecider (its settings,
    routes, loop guard, ids and clock), with the C extension's scan, splice and fingerprint."""
    s = decider.s
    # a header `lang` (maybe a Celery task: its `retries` is reset and its route chosen in Python) is __call__'s
    slow_names, slow_prefixes = (tuple(_name(t) for t in names) for names in ((*triggers[0], CELERY_HEADER),
                                                                              triggers[1]))
    reset_names = tuple(n for n in (*DEFAULT_RETRY_HEADERS, *s.reset_headers) if n not in HISTORY_HEADERS)
    removed = () if s.keep_history else (*HISTORY_HEADERS, *reset_names)
    drop = tuple(dict.fromkeys(_name(n) for n in (*removed, PROVENANCE_HEADER)))
    report = () if s.keep_history else tuple(dict.fromkeys(_name(n) for n in reset_names))
    x_death = _name("x-death")
    prov_name = _name(PROVENANCE_HEADER)
    picks = tuple((header, tuple(_name(f) for f in fields)) for header, fields in (
        (x_death, X_DEATH_FIELDS), (x_death, ROUTING_KEYS), (prov_name, PROVENANCE_FIELDS),
        (prov_name, PROVENANCE_SRC)))
    readings, provenances, resets = _Cache(_read), _Cache(_provenance), _Cache(_reset)
    first_keys = _Cache(_first_key)
    counts = _Cache(lambda count: _entries({"count": count + 1}))
    addresses = _Cache(lambda address: _entries({"exchange": address[0], "routing-key": address[1]}))
    # (provenance fields, x-death's exchange and routing key) -> the address (first_address)
    recorded_addresses = _Cache(lambda key: first_address(provenances[key[0]][1], Address(key[1], key[2])))
    # The provenance header, in replay_headers' order: from, at | id | count | exchange, routing-key | deaths
    # | reset | filters, src
    prov_key = _entries({PROVENANCE_HEADER: {}})[:-4]  # name + table kind; the table's size follows
    id_key = _entries({"id": ""})[:-4]                  # name + string kind; its size and text follow
    tail = (_entries({"filters": decider.filters_text}) if decider.filters_text else b"") + _SRC_ENTRY
    source, fixed_now = s.source, decider.now
    head, head_second = _entries({"from": source, "at": fixed_now}) if fixed_now is not None else b"", -1
    max_replays, to_queue, body_reset = s.max_replays, s.to_queue, s.reset_body_retries
    routes, lineage, next_id, pack = decider.routes, decider.lineage, decider.next_id, _SIZE.pack
    copies, died_there = decider.copies, decider.died_there
    gone_from: dict[str, str | None] = {}  # died_there's answer per target, asked once
    # (routing key, earlier provenance, x-death's entries, None, their routing keys, retry counters) -> _plan
    plans: dict[tuple[Any, ...], Plan] = {}

    clock = time.time

    def decide(routing_key: str, props: bytes, body: bytes) -> Decision | None:
        if type(routing_key) is not str:  # not UTF-8: __call__ knows what to do with it
            return None
        if body_reset and body[:1] == b"{" and b'"actor_name"' in body:  # maybe Dramatiq: see __call__
            return None
        scanned = scan(props, drop, report, picks, slow_names, slow_prefixes)
        if scanned is None:
            return None
        (deaths, keys, prov, prov_src), reported = scanned
        if type(deaths) is not list:  # no x-death, or not an array of tables
            return None
        if type(prov) is not bytes:  # an earlier replay's provenance is a table; anything else is none, as in Python
            prov = None
        # What repeats is one plan, found with one look-up (x-death's entries are tables: the None after them ends
        # them); per message only the fingerprint, an earlier replay's src, the loop guard and the provenance's id
        key = (routing_key, prov, *deaths, None, *keys, reported)
        planned = plans.get(key)
        if planned is None:
            if len(plans) >= _CACHE_MAX:
                plans.clear()
            planned = plans[key] = _plan(routing_key, prov, tuple(deaths), keys, reported)
        if planned is False:
            return None
        fingerprint = fingerprint_of(props, body) or source_fingerprint(props, body)
        src = None
        if type(prov_src) is bytes:
            try:
                src = _origin(prov_src)
            except ValueError:
                return None
        if max_replays is not None:
            why = lineage.decide(fingerprint, src, planned[4], max_replays)
            if why is not None:
                return Decision.leave(why)
        elif copies.stays(fingerprint, src):
            return Decision.leave(COPY_LEFT)
        way = planned[2]
        if way is None:  # the first of the plan to go: its route, asked after the loop guard as __call__ asks
            way = planned[2] = _way(planned[0], planned[1])
        if isinstance(way, str):
            return Decision.leave(way)
        return move(planned[0], way, planned[3], props, fingerprint)

    def _plan(routing_key: str, prov: Table | None, deaths: tuple[Table, ...], keys: list[Any], reported: Any) -> Plan:
        """A dead letter's plan: [target, routing key, its way (None until the first of the plan goes: _way), the
        provenance's entries from count to reset, how many times replayed before], or False (__call__ decides)."""
        reading = readings[deaths]
        if reading is None:
            return False
        exchange, original_key = reading.exchange, first_keys[keys[reading.at]]
        if original_key is False:
            return False
        count = 0
        if prov is not None:  # an earlier replay's: its count, and the first origin's address it recorded
            known = provenances[prov]
            if known is None:
                return False
            count = known[0]
            address = recorded_addresses[(prov, exchange, original_key)]
            if address.expiration is not None:  # a TTL to restore: __call__
                return False
            exchange, original_key = address.exchange, address.routing_key
        reset = resets[reported] if reported else b""
        if reset is None:
            return False
        original_key = routing_key if original_key is None else original_key
        try:
            entries = b"".join((counts[count], addresses[(exchange, original_key)], reading.deaths, reset))
        except struct.error:  # a count past 64 bits (an odd earlier provenance): __call__ says what becomes of it
            return False
        return [to_queue or reading.origin, original_key, None, entries, count]

    def _way(target: str, original_key: str) -> tuple[str, str] | str:
        """(exchange, routing key) to publish through to `target`, or why the message stays (route, dead-lettering
        gone). Asked after the loop guard, as __call__ asks: each answer is the run's, kept by Routes."""
        route = routes(target)
        if isinstance(route, str):
            return route
        if not to_queue:  # the broker dead-lettered it from its origin (a failure there, in x-death)
            gone = gone_from.get(target, "")
            if gone == "":  # not asked yet ("" is never a reason)
                gone = gone_from[target] = died_there(target)
            if gone is not None:
                return gone
        return route[0], original_key if route[1] else target

    def move(target: str, way: tuple[str, str], middle: bytes, props: bytes, fingerprint: str) -> Decision | None:
        """The MOVE with the provenance header: from, at | id | count … reset (middle) | filters, src."""
        nonlocal head, head_second
        publish_id = next_id().encode()
        if fixed_now is None:  # "from" and "at" (now, to the second), encoded once a second
            second = int(clock())
            if second != head_second:
                head, head_second = _entries({"from": source, "at": datetime.fromtimestamp(second, UTC)}), second
        table = b"".join((head, id_key, pack(len(publish_id)), publish_id, middle, tail, fingerprint.encode()))
        properties = splice(props, drop, b"".join((prov_key, pack(len(table)), table)))
        if properties is None:  # not after a scan that answered
            return None
        return Decision(Action.MOVE, target, way[0], way[1], properties)

    return decide
