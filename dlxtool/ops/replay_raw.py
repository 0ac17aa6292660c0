"""Replay's fast path on a dead letter's encoded properties: the transfer engine's, on the `c` codec.

It decides nothing. ReplayDecider (dlxtool.ops.replay_decision) decides per *shape*: a delivery routing key
and the headers replay's rules read — x-death's entries (but `time`), an earlier provenance's fields, the
retry counters a reset removes. Here the C extension (dlxtool.broker.wire._hotpath) hands those over from the
bytes (`scan_headers`), they are decoded by the Python codec into a message of that shape, and
`ReplayDecider.shape` answers once per distinct shape; its answer — with its provenance entries encoded by
dlxtool.ops.provenance.ProvenanceWriter — is cached and applied to every message of the shape:
`splice_headers` copies the properties without the removed headers and with the provenance appended.

A message then costs the three C calls (scan, fingerprint, splice), one look-up of its shape, and the
decider's own per-message steps: the loop guard, the route (once per shape), the provenance's id and time.

It answers None, and the engine asks ReplayDecider.__call__, where the shape cannot be applied to the bytes:
properties the scan would not copy exactly, a header another convention reads or a Celery task's (the scan's
slow names), a body --reset-body-retries may rewrite, a shape the decider did not decide from x-death and
the picked headers alone (Shape.exact: an origin from x-first-death-*, a wait queue's route), a message that
stays for its shape (no origin), a TTL to restore (a property, not a header), a name or value that does not
decode.
"""

from __future__ import annotations

import struct
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from dlxtool.amqp_values import decode_field_value
from dlxtool.broker.wire import codec
from dlxtool.deaths import CELERY_HEADER, HISTORY_HEADERS, death_routing_keys
from dlxtool.ops.actions import Action, Decision, RawDecide
from dlxtool.ops.provenance import PROVENANCE_HEADER, ProvenanceWriter, picked_copy_origin, source_fingerprint
from dlxtool.ops.replay_settings import fast_path_declines
from dlxtool.ops.replay_shape import Shape
from dlxtool.ops.stay import Why
from dlxtool.record import MessageRecord

if TYPE_CHECKING:
    from datetime import datetime

    from dlxtool.ops.provenance import CopySource
    from dlxtool.ops.replay_settings import ReplaySettings


class ShapeDecider(Protocol):
    """What the fast path uses of replay's decider (dlxtool.ops.replay_decision.ReplayDecider is one): its
    settings, its reading of a shape, its per-message steps (loop guard, route, ids) and its provenance writer."""

    s: ReplaySettings
    triggers: tuple[tuple[str, ...], tuple[str, ...]] | None
    reset_names: tuple[str, ...]
    provenance: ProvenanceWriter
    now: datetime | None

    def shape(self, record: MessageRecord) -> Shape: ...

    def guard(self, fingerprint: str | None, src: CopySource | None, count: int) -> Why | None: ...

    def way(self, shape: Shape, *, celery: bool = False) -> tuple[str, str | None] | Why: ...

    def next_id(self) -> str: ...

# What the decision reads of each x-death entry (dlxtool.deaths.Death but `time`, which differs from one dead
# letter of a failure to the next and decides nothing, and `routing-keys`: the decision names the entry whose first
# key a message keeps, Shape.key_death, read apart so that messages that differ only by their keys share a shape),
# of an earlier provenance (replay_count, first_address), and apart what provenance_src reads (unique per message).
X_DEATH_FIELDS = ("queue", "reason", "count", "exchange", "original-expiration")
ROUTING_KEYS = ("routing-keys",)
PROVENANCE_FIELDS = ("count", "exchange", "routing-key", "expiration")
PROVENANCE_SRC = ("src", "id")

_CACHE_MAX = 4096
_UNSEEN: Any = object()  # a shape not planned yet (None: planned, and left to __call__)


def _name(name: str) -> bytes:
    # surrogatepass: a name from argv bytes that are not UTF-8 ('\udcff') matches no header in Python; a header
    # these bytes match is reported, and declined by _shape_of (its name does not decode)
    return name.encode("utf-8", "surrogatepass")


def _decoded(table: bytes) -> dict[str, Any]:
    """A picked table (with its size), decoded as the Python path decodes the header it is from; ValueError
    where it does not."""
    decoded: dict[str, Any] = decode_field_value(b"F" + table)
    return decoded


def _first_key(entry: bytes) -> str | None | bool:
    """The first routing key of a picked x-death entry's routing-keys, as DeathHistory reads it (dlxtool.deaths:
    None without one); False where it does not decode."""
    try:
        keys = death_routing_keys(_decoded(entry).get("routing-keys"))
    except ValueError:
        return False
    return keys[0] if keys else None


class _Planned:
    """A shape as the fast path applies it: the decision, its route (asked when the first message of the shape
    passes the loop guard) and its provenance entries, encoded, per routing key kept."""

    __slots__ = ("middles", "shape", "way")

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.way: tuple[str, str | None] | str | None = None
        self.middles: dict[str, bytes | None] = {}

    def middle(self, key: str) -> bytes | None:
        """The provenance's shared entries for a message that keeps `key`, encoded (ProvenanceWriter.middle); None
        where they cannot be (a count past 64 bits: __call__ says what becomes of it)."""
        middles = self.middles
        if len(middles) >= _CACHE_MAX:
            middles.clear()
        try:
            middle: bytes | None = ProvenanceWriter.middle(self.shape.entries(key))
        except struct.error:
            middle = None
        middles[key] = middle
        return middle


def raw_decider(decider: ShapeDecider) -> RawDecide:
    """decide(routing_key, encoded properties, body) -> Decision | None for one ReplayDecider (its settings,
    routes, loop guard, ids and clock), with the `c` codec's scan, splice and fingerprint."""
    accelerator = codec.current().header_splice
    assert accelerator is not None and decider.triggers is not None
    scan, splice, fingerprint_of = accelerator
    s = decider.s
    names, prefixes = decider.triggers
    # a header `lang` (maybe a Celery task: its `retries` is reset and its route chosen in Python) is __call__'s
    slow_names = tuple(_name(n) for n in (*names, CELERY_HEADER))
    slow_prefixes = tuple(_name(p) for p in prefixes)
    removed = () if s.keep_history else decider.reset_names
    drop = tuple(dict.fromkeys(_name(n) for n in (*removed, PROVENANCE_HEADER)))
    report = tuple(_name(n) for n in removed if n not in HISTORY_HEADERS)  # what the provenance's "reset" names
    picks = ((_name("x-death"), tuple(_name(f) for f in X_DEATH_FIELDS)),
             (_name("x-death"), tuple(_name(f) for f in ROUTING_KEYS)),
             (_name(PROVENANCE_HEADER), tuple(_name(f) for f in PROVENANCE_FIELDS)),
             (_name(PROVENANCE_HEADER), tuple(_name(f) for f in PROVENANCE_SRC)))
    writer, source, fixed_now = decider.provenance, s.source, decider.now
    head, head_second = writer.head(fixed_now) if fixed_now is not None else b"", -1
    # what the settings leave to __call__ message by message (a body to rewrite, a user_id to check): each setting
    # declares it (dlxtool.ops.replay_settings)
    declines = fast_path_declines(s)
    guard, way_of, next_id = decider.guard, decider.way, decider.next_id
    # (earlier provenance, x-death's entries, None, retry counters) -> _Planned, or None (__call__'s)
    plans: dict[tuple[Any, ...], _Planned | None] = {}
    first_keys: dict[bytes, str | None | bool] = {}  # a picked routing-keys -> its first key (_first_key)
    clock = time.time

    def decide(routing_key: str | bytes, props: bytes, body: bytes) -> Decision | None:
        nonlocal head, head_second
        if type(routing_key) is not str:  # not UTF-8: __call__ knows what to do with it
            return None
        if declines and any(test(props, body) for test in declines):  # a setting's per-message test: __call__
            return None
        scanned = scan(props, drop, report, picks, slow_names, slow_prefixes)
        if scanned is None:
            return None
        (deaths, keys, prov, prov_src), reported = scanned
        if type(deaths) is not list:  # no x-death, or not an array of tables
            return None
        # scan (the C codec) answers Any; the check above makes it x-death's list, of the tables scan cut out
        entries: list[bytes] = deaths  # pyright: ignore[reportUnknownVariableType]  # (pyright: a list of Unknown)
        if type(prov) is not bytes:  # an earlier replay's provenance is a table; anything else is none, as in Python
            prov = None
        # x-death's entries are tables: the None after them ends them
        key = (prov, *entries, None, reported)
        planned = plans.get(key, _UNSEEN)
        if planned is _UNSEEN:
            if len(plans) >= _CACHE_MAX:
                plans.clear()
            planned = plans[key] = _plan(prov, entries, reported)
        if planned is None:
            return None
        shape = planned.shape
        first = None
        if shape.key_death is not None:
            entry = keys[shape.key_death]
            first = first_keys.get(entry, _UNSEEN)
            if first is _UNSEEN:
                if len(first_keys) >= _CACHE_MAX:
                    first_keys.clear()
                first = first_keys[entry] = _first_key(entry)
            if first is False or first is True:  # True: never (_first_key gives a key, None or False)
                return None
        kept = shape.kept_key(first, routing_key)
        middle = planned.middles.get(kept) or planned.middle(kept)
        if middle is None:
            return None
        fingerprint = fingerprint_of(props, body) or source_fingerprint(props, body)
        src = None
        if type(prov_src) is bytes:
            try:
                src = picked_copy_origin(prov_src)
            except ValueError:
                return None
        why = guard(fingerprint, src, shape.count)
        if why is not None:
            return Decision.leave(why)
        way = planned.way
        if way is None:  # the first of the shape to go: its route, asked after the loop guard as __call__ asks
            way = planned.way = way_of(shape)
        if isinstance(way, Why):
            return Decision.leave(way)
        if fixed_now is None:  # "from" and "at" (now, to the second), encoded once a second
            second = int(clock())
            if second != head_second:
                head, head_second = writer.head(datetime.fromtimestamp(second, UTC)), second
        properties = splice(props, drop, writer.header(head, next_id().encode(), middle, fingerprint.encode()))
        if properties is None:  # not after a scan that answered
            return None
        return Decision(Action.MOVE, shape.target, way[0], way[1] if way[1] is not None else kept, properties)

    def _plan(prov: bytes | None, deaths: list[bytes], reported: Any) -> _Planned | None:
        """The decider's answer for this shape, where the fast path can apply it (the module docstring)."""
        try:
            headers: dict[str, Any] = {"x-death": [_decoded(entry) for entry in deaths]}
            if prov is not None:
                headers[PROVENANCE_HEADER] = _decoded(prov)
            for name, value in reported:
                headers[name.decode("utf-8")] = decode_field_value(value)
        except ValueError:  # UnicodeDecodeError included: a name Python does not remove (it is not that str)
            return None
        shape = decider.shape(MessageRecord(queue=source, body=b"", headers=headers))
        if not shape.fast:  # said by __call__
            return None
        return _Planned(shape)

    return decide
