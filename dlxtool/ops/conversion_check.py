"""Before replay, move, purge (--move-to, --backup) or dump --remove takes messages over AMQP 0.9.1 from RabbitMQ
4.x: which of them were published over AMQP 1.0 and would not survive the broker's conversion (issue 39: "the
difference is said where it matters").

RabbitMQ 4.x keeps an AMQP 1.0 message as it was published and converts it for each 0.9.1 reader (mc_amqpl): several
data sections merged, subject/to/absolute-expiry-time/group-sequence/reply-to-group-id dropped, milliseconds lost,
symbols as strings, ulong 2^64-1 as -1, ulong ids as text, binary ids moved to headers (dlxtool.amqp10_view.
loss_kinds). A move over 0.9.1 publishes that conversion: the origin (or DST) holds the loss for good; a backup over
0.9.1 (purge --backup, dump --remove) writes only the conversion to its file and then removes the message, so the
file's copy (and a `load` of it) is all that is left, with the loss. Over 0.9.1
most of it cannot be seen (a message whose subject was dropped shows no sign of it: measured on 4.3.6), so the head
is read once more over AMQP 1.0 — as `peek --protocol 1.0` reads it, under the same rules, given back without a
delivery attempt where the version allows (4.3; classic queues on any 4.x) — and each message judged whole. Where
that read cannot be made (no python-qpid-proton, a give-back that would spend an attempt, the broker refusing), what
0.9.1 shows is judged instead (dlxtool.amqp10_view.came_from_amqp10's signs) and the check says it is partial.

The other way round, a move over AMQP 1.0 (`--protocol 1.0`) of a message published over 0.9.1: RabbitMQ gives a 1.0
reader its headers as application properties, which hold no table or array, so those headers (not x-) are dropped
and the move (or the backup) writes the message without them (dlxtool.amqp10_view.loss_kinds_over_amqp10). A 1.0
read shows no sign of them, so the head is read over 0.9.1 (peek's rules) and each message the move would take
judged by its headers.

A loss is data written into the destination (or the backup) for good: the default refuses (exit 6, nothing
changed), the CLI's --accept-conversion-loss takes them anyway (CONVERSION_FLAG)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from dlxtool.errors import DlxtoolError, RefusedError, UndeliverableError
from dlxtool.json_shapes import is_list_or_tuple, is_object

if TYPE_CHECKING:
    from dlxtool.broker.protocols import WireProtocol
    from dlxtool.ops.peek import QueueFacts, ReadOptions
    from dlxtool.ops.session import Reporter, Session
    from dlxtool.poison_memo import QueueMemo, Sighting
    from dlxtool.record import MessageRecord

CONVERSION_FLAG = "--accept-conversion-loss"

# Kinds only a 0.9.1 read gives (signs), where the 1.0 read could not be made
UNSEEN = "unseen"
UNSEEN_WORDS = ("published over AMQP 1.0 (its signs, as 0.9.1 shows it): what the conversion dropped (subject, to, "
                "milliseconds, types …) cannot be seen over 0.9.1")

EXAMPLES = 3  # message positions kept per kind


# what a check is for: a move, a backup (purge --backup, dump --remove) or a load of records from a file
Taking = Literal["move", "backup", "load"]


@dataclass
class LossCount:
    """One kind of loss: how many of the messages judged have it, and the first ones (position, phrase)."""

    kind: str
    words: str
    messages: int = 0
    examples: list[tuple[int, str]] = field(default_factory=list[tuple[int, str]])

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "what": self.words, "messages": self.messages,
                "positions": [p for p, _ in self.examples], "example": self.examples[0][1] if self.examples else None}


@dataclass
class ConversionCheck:
    """What the conversion to 0.9.1 would change of the messages a move would take (of the first `judged`)."""

    queue: str
    exact: bool = False             # read over AMQP 1.0: every loss known
    unchecked: str | None = None    # why it was not read over 1.0 (then only what 0.9.1 shows was judged)
    judged: int = 0                 # messages looked at that the move would take (or republish: `staying`)
    losing: int = 0                 # of those, how many lose something
    # of `losing`, those the run leaves in the queue but republishes to its tail over 0.9.1 (a selective run, or one
    # that leaves what it cannot route): the same conversion, written into the queue itself (over 1.0 what stays is
    # given back in place, untouched)
    staying: int = 0
    kinds: dict[str, LossCount] = field(default_factory=dict[str, LossCount])
    accepted: bool = False          # --accept-conversion-loss
    sampled: bool = False           # the queue holds more than was read: the rest is not judged
    amqp10_path: str | None = None  # the flag of the command's AMQP 1.0 path, where it has one (it moves them whole)
    over: WireProtocol = "0-9-1"    # the protocol the move publishes over: "1.0" judges the other direction
    # --protocol auto (dlxtool.ops.protocol_choice): the other direction's check, judged too. Where this check's
    # protocol was chosen, `other` is what it avoided (`chosen`); where the run was refused, what 1.0 would lose too
    other: ConversionCheck | None = None
    chosen: bool = False
    chosen_because: str | None = None  # why auto chose it where no check of the other protocol could be made
    amqp10_blocked: str | None = None  # auto: why the move over 1.0 that keeps them cannot be made here
    decimal_at: int | None = None  # the first 0.9.1 message with a decimal header, which ends a 1.0 session
    # auto: why a move over 1.0 was not chosen although nothing it judged would lose anything there: what it could
    # not judge (--protocol 1.0 takes that risk knowingly)
    amqp10_unjudged: str | None = None
    auto: bool = False  # --protocol auto judged (and chose) the protocol, not --protocol
    # the head as read over 0.9.1, kept (keep_read) for --protocol auto's check over 1.0, which judges them by their
    # headers instead of reading again; protocol_choice lets go of them
    records_091: list[MessageRecord] | None = field(default=None, repr=False, compare=False)
    records_10: list[MessageRecord] | None = field(default=None, repr=False, compare=False)  # its 1.0 read, likewise

    @property
    def _published(self) -> str:
        return "0.9.1" if self.over == "1.0" else "1.0"

    @property
    def _converted(self) -> str:
        return "1.0" if self.over == "1.0" else "0.9.1"
    # what the command does with them over 0.9.1: "move" (publishes the conversion for good: replay, move, purge
    # --move-to), "backup" (writes only the conversion to its file, then removes the message: purge --backup,
    # dump --remove — a `load` of that file brings back the conversion, not the message) or "load" (publishes the
    # conversion of the records a file holds; `queue` is then the file, positions its record numbers)
    taking: Taking = "move"

    @property
    def undeliverable(self) -> bool:
        """A message RabbitMQ cannot give a 0.9.1 reader at all is in the way: a run over 0.9.1 would lose its
        connection there, so --accept-conversion-loss cannot make one possible."""
        return self.over == "0-9-1" and "unconvertible" in self.kinds

    @property
    def refuses(self) -> bool:
        return bool(self.losing) and (not self.accepted or self.undeliverable)

    def add(self, position: int, losses: Iterable[tuple[str, str]], words: Callable[[str], str], *,
            stays: bool = False) -> None:
        self.judged += 1
        seen: set[str] = set()
        for kind, phrase in losses:
            if kind in seen:
                continue
            seen.add(kind)
            count = self.kinds.setdefault(kind, LossCount(kind, words(kind)))
            count.messages += 1
            if len(count.examples) < EXAMPLES:
                count.examples.append((position, phrase))
        self.losing += bool(seen)
        self.staying += bool(seen) and stays

    def lines(self) -> list[str]:
        """The plan's words: one line per kind (how many, which positions), then what to do."""
        if not self.losing:
            return []
        how = ("read over AMQP 0.9.1" if self.over == "1.0" else "read over AMQP 1.0") if self.exact \
            else "as AMQP 0.9.1 shows them"
        if self.taking == "load":  # the records of a file (dump --protocol 1.0 wrote them), not a queue's head
            out = [f"{self.losing} of the {self.judged} record(s) of {self.queue} that hold a whole AMQP 1.0 message "
                   "(dump --protocol 1.0 wrote them) would not be published whole over AMQP 0.9.1, which this load "
                   "publishes (each record's 0.9.1 view, as RabbitMQ converts such a message):"]
        elif self.taking == "backup":
            out = [f"{self.losing} of the {self.judged} message(s) {self._read_words('remove')} were published over "
                   f"AMQP {self._published} and would not be backed up whole: RabbitMQ converts each for AMQP "
                   f"{self._converted}, and the backup keeps only that conversion of a message that is then removed"
                   f"{self._staying_words} ({how}):"]
        else:
            out = [f"{self.losing} of the {self.judged} message(s) {self._read_words('move')} were published over "
                   f"AMQP {self._published} and would not come back whole: RabbitMQ converts each for AMQP "
                   f"{self._converted}, and the move publishes that conversion for good{self._staying_words} "
                   f"({how}):"]
        for count in sorted(self.kinds.values(), key=lambda c: (-c.messages, c.kind)):
            where = ", ".join(f"#{p}" for p, _ in count.examples)
            more = "…" if count.messages > len(count.examples) else ""
            said = count.examples[0][1]
            example = f" ({said})" if said != count.words else ""
            out.append(f"  {count.words}: {count.messages} {self._things}, e.g. {where}{more}{example}")
        if self.unchecked:
            out.append(f"  (not read over AMQP {'0.9.1' if self.over == '1.0' else '1.0'}: {self.unchecked})")
        if self.sampled:
            out.append("  (the messages after those read were not judged)")
        if self.amqp10_blocked:
            out.append(f"  (not moved over AMQP 1.0 instead, which keeps them whole: {self.amqp10_blocked})")
        if self.amqp10_unjudged:
            out.append(f"  (not moved over AMQP 1.0 instead by default: a message published over AMQP 0.9.1 loses "
                       f"its table and array headers there, and not every message could be judged: "
                       f"{self.amqp10_unjudged})")
        if self.other is not None and self.other.losing and not self.chosen:
            out.append("and over AMQP 1.0 instead (--protocol auto looked):")
            out.extend(f"  {line}" for line in self.other.lines())
        return out

    def _read_words(self, verb: str) -> str:
        if not self.staying:
            return f"to {verb} from {self.queue!r}"
        return f"the run reads from {self.queue!r} ({self.staying} of them stay in it)"

    @property
    def _staying_words(self) -> str:
        """What happens to the losing messages that stay: over 0.9.1 the run republishes them to the queue's tail."""
        if not self.staying:
            return ""
        return (f"; the {self.staying} that stay are republished to the tail of {self.queue!r} over AMQP "
                f"{self._converted} (a quorum queue's always, a classic queue's once something has moved), the same "
                "conversion written into the queue")

    @property
    def verb(self) -> str:
        """What the command does to them: "move", "take" (a backup) or "publish" (a load)."""
        return {"backup": "take", "load": "publish"}.get(self.taking, "move")

    @property
    def _things(self) -> str:
        return "record(s)" if self.taking == "load" else "message(s)"

    def advice(self) -> str:
        if self.amqp10_blocked and self.taking == "load":
            return (f"the load over AMQP 1.0 that keeps them cannot be made here (said above); {CONVERSION_FLAG} "
                    "publishes them over 0.9.1 anyway, with these losses")
        anyway = "" if self.undeliverable else \
            f"; {CONVERSION_FLAG} {self.verb}s them over 0.9.1 anyway, with these losses"
        if self.amqp10_unjudged:
            return ("--protocol 1.0 moves them over AMQP 1.0, each whole, knowing that what could not be judged "
                    f"(said above) loses its table headers if it has any{anyway}")
        if self.undeliverable and not self.amqp10_blocked and not (self.other is not None and self.other.losing):
            return (f"{self.amqp10_path or '--protocol 1.0'} {self.verb}s them as published (over AMQP 0.9.1 the "
                    "broker cannot deliver the unconvertible one at all)")
        if self.other is not None and self.other.losing and not self.chosen:
            return (f"neither protocol {self.verb}s every one of them whole: {self.verb} the messages of each "
                    "protocol in a run of its own with --protocol 0-9-1 or --protocol 1.0 and a selection, or "
                    f"accept one protocol's losses with its --protocol and {CONVERSION_FLAG}")
        if self.taking == "load":
            return (f"{self.amqp10_path} (RabbitMQ 4.x) publishes them as dumped; {CONVERSION_FLAG} publishes them "
                    "over 0.9.1 anyway, with these losses")
        if self.over == "1.0":
            return (f"--protocol 0-9-1 {'backs them up' if self.taking == 'backup' else 'moves them'} as published; "
                    f"{CONVERSION_FLAG} {self.verb}s them over 1.0 anyway, with these losses")
        done = "backs them up" if self.taking == "backup" else "moves them"
        if self.amqp10_blocked:
            return (f"the move over AMQP 1.0 that keeps them cannot be made here (said above); {CONVERSION_FLAG} "
                    f"{self.verb}s them over 0.9.1 anyway, with these losses")
        avoid = (f"{self.amqp10_path} {done} as published" if self.amqp10_path
                 else "this command moves over AMQP 0.9.1 only: `dump --protocol 1.0` keeps a whole copy of each, and "
                      "an AMQP 1.0 client moves them as published")
        return f"{avoid}; {CONVERSION_FLAG} {self.verb}s them anyway, with these losses"

    def refusal(self, what: str) -> RefusedError:
        kinds = ", ".join(c.kind for c in sorted(self.kinds.values(), key=lambda c: (-c.messages, c.kind)))
        if self.taking == "load":
            return RefusedError(f"{what} refused: {self.losing} record(s) of {self.queue} hold AMQP 1.0 messages that "
                                f"would lose data over AMQP 0.9.1 ({kinds}: said above); nothing was published",
                                hint=self.advice())
        which = f"which is all a backup over {self._converted} keeps of them" if self.taking == "backup" else \
            f"which a move over {self._converted} publishes"
        if self.staying:
            which += f" ({self.staying} of them stay, republished to the queue's tail)"
        if self.other is not None and self.other.losing and not self.chosen:
            # `other` judged a move over 1.0: what 0.9.1 messages lose there
            which += (f", and {self.other.losing} message(s) published over AMQP 0.9.1 would lose their table and "
                      "array headers over AMQP 1.0")
        return RefusedError(f"{what} refused: {self.losing} message(s) of {self.queue!r} published over AMQP "
                            f"{self._published} would lose data in RabbitMQ's conversion to AMQP {self._converted}, "
                            f"{which} ({kinds}: said above); nothing was changed", hint=self.advice())

    def to_json(self) -> dict[str, Any]:
        # read_over_amqp10 / not_read_over_amqp10: the forward check's 1.0 read; judged_whole / not_judged: either's
        return {"messages_judged": self.judged, "messages_losing": self.losing,
                "messages_staying_losing": self.staying,
                "read_over_amqp10": self.exact and self.over != "1.0",
                "not_read_over_amqp10": self.unchecked if self.over != "1.0" else None,
                "judged_whole": self.exact, "not_judged": self.unchecked, "sampled": self.sampled,
                "kinds": [c.to_json() for c in sorted(self.kinds.values(), key=lambda c: (-c.messages, c.kind))],
                "refused": self.refuses, "accepted": self.accepted, "flag": CONVERSION_FLAG,
                "amqp10_path": self.amqp10_path, "taking": self.taking, "moved_over": self.over,
                # --protocol auto: whether it chose `moved_over`, and the other protocol's check it judged
                "chosen_by_auto": self.chosen, "chosen_because": self.chosen_because,
                "other_protocol": self.other.to_json() if self.other else None,
                "amqp10_blocked": self.amqp10_blocked, "amqp10_unjudged": self.amqp10_unjudged,
                "protocol_by": "auto" if self.auto else "option"}


def check_conversion(source: Session, queue: str, read: ReadOptions, *, include: Callable[[MessageRecord], bool],
                     report: Reporter, read_091: Iterable[MessageRecord] | None = None, accepted: bool = False,
                     amqp10_path: str | None = None, taking: Taking = "move", over: WireProtocol = "0-9-1",
                     read_10: Iterable[MessageRecord] | None = None,
                     limit: int | None = None, keep_read: bool = False) -> ConversionCheck | None:
    """The check for the head of `queue` on `source` (None: the broker does not speak AMQP 1.0 — 3.x, where nothing
    of this applies) of a move over `over` ("0-9-1", or "1.0": the other direction, the module docstring).
    `include`: whether the move would take a message (of the 1.0 read's records, positioned as the 0.9.1 read's).
    `read_091`: the records a plan already read over 0.9.1 (without them, move and replay --yes read the head over
    0.9.1 first where the 1.0 read could cost attempts: _needs_091_first); `read_10`: those it read over 1.0 (a move
    over 1.0). Over 0.9.1, what the run reads and does not take is republished to the queue's tail (the 0.9.1 engine:
    dlxtool.ops.engine.Transfer._keep), so it is judged too, as staying, where the engine would republish it
    (roles: not a classic queue's stays before anything moved; past `limit` taken only once something was
    republished). Over 1.0 what stays is given back in place, untouched; there `read_091` (the 0.9.1 read of a check
    made first, `keep_read`) is judged without reading again."""
    from dlxtool.broker import versions

    version = versions.server_version(source.conn)
    if not versions.speaks_amqp10(version):
        return None
    check = ConversionCheck(queue, accepted=accepted, amqp10_path=amqp10_path, taking=taking, over=over)
    if over == "1.0":  # what stays is given back in place over 1.0: only what the run takes is judged
        return _check_over_amqp10(check, source, queue, read, _up_to_limit(include, limit), report, read_10, read_091)
    facts, why = _facts(source, queue)
    role = roles(include, limit, classic=facts is not None and facts.type == "classic")
    records_091 = list(read_091) if read_091 is not None else None
    # auto (keep_read: the run's protocol is auto's to choose) consults this machine's memo; an explicit
    # --protocol 0-9-1 reads as asked
    sighting = _remembered_poison(source, facts) if keep_read and facts is not None and records_091 is None else None
    if sighting is not None:  # a read from this machine paid for it once: no 0.9.1 read pays again
        from dlxtool.ops.peek_past_poison import remembered_words

        why = (f"not read over AMQP 0.9.1: {remembered_words(sighting, queue)}, and on RabbitMQ {version} the close "
               "of a 0.9.1 read there counts a delivery attempt of it and of every message held before it")
        check.add(sighting.position, [("unconvertible", "RabbitMQ cannot convert it for AMQP 0.9.1: a read from "
                                                        f"this machine met it there ({sighting.at})")],
                  _kind_words, stays=False)
    elif facts is not None and records_091 is None and _needs_091_first(facts):
        records_091, why, _, undeliverable = _read_091(source, queue, read, report)
        if undeliverable is not None:  # a message 0.9.1 cannot be given at all: the 0.9.1 run would stop there too
            _remember_poison(source, facts, undeliverable)
            check.add(undeliverable, [("unconvertible", "RabbitMQ cannot convert it for AMQP 0.9.1: it closed the "
                                                        "connection the check read it on")],
                      _kind_words, stays=False)
    # A 0.9.1 message with a decimal header ends the 1.0 session it is delivered to (and on 4.3 a lost session counts
    # an attempt of each message held on a quorum queue): the 1.0 read stops before the first one
    stop = check.decimal_at = next((r.position for r in records_091 or () if _holds_decimal(r.headers)), None)
    if keep_read and why is None:  # a read that ended early (a message 0.9.1 cannot be given) is not all there
        check.records_091 = records_091
    records: list[MessageRecord] | None = None
    if facts is not None and why is None:
        records, why, check.sampled = _read_amqp10(source, facts, read, report, stop)
    if records is not None:
        judge_whole(check, records, role, poison=versions.char_uuid_poison_091(version))
        if keep_read and why is None and stop is None:
            check.records_10 = records
    check.unchecked = why
    if stop is not None and why is None:
        check.unchecked = (f"the messages from #{stop} on: a message published over AMQP 0.9.1 with a decimal header "
                           f"(#{stop}) ends the AMQP 1.0 session it is delivered to")
    if records is not None and stop is None:
        return check
    from dlxtool.amqp10_view import came_from_amqp10

    first = stop if records is not None and stop is not None else 0  # past the 1.0 read's stop, or all of them
    for record in records_091 or ():
        took = role(record) if record.position >= first else None
        if took is not None:
            signs = came_from_amqp10(record.properties, record.headers if is_object(record.headers) else {})
            check.add(record.position, sign_kinds(signs), _sign_words, stays=not took)
    return check


def judge_whole(check: ConversionCheck, records: Iterable[MessageRecord], role: Callable[[MessageRecord], bool | None],
                *, poison: bool) -> None:
    """A move over 0.9.1, judged from the head read over AMQP 1.0 (each message whole): what the conversion loses
    of each message the run would take (`role` True) or republish (False), in order. `poison`: this version closes
    the 0.9.1 connection a char/uuid application property is delivered to."""
    from dlxtool.amqp10_view import LOSS_KINDS, loss_kinds

    check.exact = True
    for record in records:
        took = role(record)  # in order: include counts each (a --limit)
        if record.amqp10 is None:
            continue
        losses = loss_kinds(record.amqp10, poison_091=poison)
        if took is None:  # left untouched — but a message 0.9.1 cannot be given ends the run that reads it anyway
            losses = [(kind, words) for kind, words in losses if kind == "unconvertible"]
            if not losses:
                continue
        check.add(record.position, losses, LOSS_KINDS.__getitem__, stays=not took)


def roles(include: Callable[[MessageRecord], bool], limit: int | None, *,
           classic: bool) -> Callable[[MessageRecord], bool | None]:
    """For the head read in order, as the 0.9.1 engine treats it (dlxtool.ops.engine.Transfer): True, the run takes
    the message; False, it reads it and republishes it to the tail; None, the run leaves it untouched.
    Untouched: on a `classic` queue a stay before anything moved (held, given back in place: approximate, as the
    engine holds until the first move is confirmed and at most half its window), and past `limit` taken — unless
    something was republished by then: the engine then reads on to the end and republishes the rest too."""
    taken = 0
    kept = False

    def role(record: MessageRecord) -> bool | None:
        nonlocal taken, kept
        if limit is not None and taken >= limit:
            return False if kept else None
        if include(record):
            taken += 1
            return True
        if classic and not taken:
            return None
        kept = True
        return False

    return role


def _up_to_limit(include: Callable[[MessageRecord], bool],
                 limit: int | None) -> Callable[[MessageRecord], bool]:
    """`include`, no more than `limit` times (in order)."""
    taken = 0

    def bounded(record: MessageRecord) -> bool:
        nonlocal taken
        if limit is not None and taken >= limit:
            return False
        if include(record):
            taken += 1
            return True
        return False

    return bounded


def _check_over_amqp10(check: ConversionCheck, source: Session, queue: str, read: ReadOptions,
                       include: Callable[[MessageRecord], bool], report: Reporter,
                       read_10: Iterable[MessageRecord] | None,
                       read_091: Iterable[MessageRecord] | None = None) -> ConversionCheck:
    """A move over AMQP 1.0: the head read over 0.9.1 (which shows the headers a 1.0 reader would not get), each
    message the move would take judged by its headers. Neither read may cost what the move would not:

      * an AMQP 1.0 message with a char or uuid application property closes the 0.9.1 connection it is delivered to
        (4.0.5, 4.3.6; on 4.3 that counts a delivery attempt of it on a quorum queue): the head is read over 1.0
        first (the plan's read, `read_10`, where it made one) and the 0.9.1 read stops before it, on a connection of
        its own — on a classic queue only: a quorum queue's given-back messages form a block served first, and a
        read that stops inside it would change the head's order. A classic queue without the plan's 1.0 read is
        read over 0.9.1 straight away: it counts no attempt and gives the messages back in place, so where the
        broker closes the connection at such a message the read ends there, the messages before it judged;
      * a 0.9.1 message with a decimal header ends the 1.0 session it is delivered to, which on 4.3 counts an attempt
        of each message a quorum queue's session held (_needs_091_first): there no 1.0 read is made here that the
        plan has not made already.

    What could not be read is said (`unchecked`): the run goes on, as the forward check's does."""
    from dlxtool.amqp10_view import loss_kinds, published_over_amqp10
    from dlxtool.broker import versions

    if read_091 is not None:  # read over 0.9.1 already, by the other direction's check: its headers judged
        check.exact = True
        _judge_over_amqp10(check, list(read_091), include)
        return check
    facts, why = _facts(source, queue)
    if facts is None:
        check.unchecked = why
        return check
    records_10 = list(read_10) if read_10 is not None else None
    if records_10 is None and facts.type == "classic":
        # A classic queue gives a message back in place whatever the outcome, and counts no attempt: the 0.9.1 read
        # goes first, and where the broker closes its connection at a char/uuid message it ends there, the messages
        # before it judged (no 1.0 read just to find that message first: as long again as the move's own read)
        records, why, check.sampled, _ = _read_091(source, queue, read, report)
        check.exact = records is not None and why is None
        check.unchecked = why
        _judge_over_amqp10(check, records, include)
        return check
    if records_10 is None:
        if _needs_091_first(facts):
            check.unchecked = (f"on RabbitMQ {facts.version} a second read of this quorum queue over AMQP 1.0 could "
                               "spend a delivery attempt of each message it holds")
            return check
        records_10, why, _ = _read_amqp10(source, facts, read, report, None)
        if records_10 is None:
            check.unchecked = f"the head could not be read over AMQP 1.0 first: {why}"
            return check
    stop = None
    if versions.char_uuid_poison_091(facts.version):
        stop = next((r.position for r in records_10 if r.amqp10 is not None
                     and any(kind == "unconvertible" for kind, _ in loss_kinds(r.amqp10, poison_091=True))), None)
    # A message the 1.0 read shows something only AMQP 1.0 has (a subject, a symbol, a char …: loss_kinds) was
    # published over 1.0: it has no 0.9.1 headers to lose, so it needs no 0.9.1 read
    published_10 = {r.position for r in records_10 if r.amqp10 is not None and published_over_amqp10(r.amqp10)}
    rest_known = stop is not None and all(r.position in published_10 for r in records_10 if r.position >= stop)
    if stop is not None and (stop == 0 or facts.reads_as_quorum):
        if rest_known and all(r.position in published_10 for r in records_10):
            check.exact = True  # every message was published over 1.0: nothing a move over 1.0 could lose
            return check
        check.unchecked = (f"an AMQP 1.0 message with a char or uuid application property (#{stop}) closes the AMQP "
                           "0.9.1 connection it is delivered to" + ("" if stop == 0 else
                                                                    ", and a read of this quorum queue that stops "
                                                                    "before it would change the head's order"))
        return check
    # Where this machine's memo says such a message lies somewhere in the queue, the 0.9.1 read goes no further than
    # the 1.0 read looked (none there), so it cannot be the read that meets it
    bound = stop if stop is not None or _remembered_poison(source, facts) is None else len(records_10)
    records, why, check.sampled, _ = _read_091(source, queue, read, report, stop=bound)
    if rest_known:
        check.sampled = False  # the read stopped at `stop` by design; what lies past the 1.0 read is the other's say
    check.exact = records is not None and why is None and (stop is None or rest_known)
    check.unchecked = why
    if stop is not None and why is None and not rest_known:
        check.unchecked = (f"the messages from #{stop} on: an AMQP 1.0 message with a char or uuid application "
                           f"property (#{stop}) closes the AMQP 0.9.1 connection it is delivered to")
    _judge_over_amqp10(check, records, include)
    return check


def _judge_over_amqp10(check: ConversionCheck, records: list[MessageRecord] | None,
                       include: Callable[[MessageRecord], bool]) -> None:
    """Each message (read over 0.9.1) the move over 1.0 would take, judged by its headers."""
    from dlxtool.amqp10_view import LOSS_KINDS_OVER_AMQP10, loss_kinds_over_amqp10

    for record in records or ():
        if include(record) and is_object(record.headers):
            losses = loss_kinds_over_amqp10(record.headers)
            if _holds_decimal(record.headers):
                losses.append(("decimal-header", "its decimal header ends the AMQP 1.0 session it is delivered to"))
            check.add(record.position, losses, LOSS_KINDS_OVER_AMQP10.__getitem__)


def _kind_words(kind: str) -> str:
    """A kind's words (dlxtool.amqp10_view.LOSS_KINDS), for a loss found without a 1.0 read."""
    from dlxtool.amqp10_view import LOSS_KINDS

    return LOSS_KINDS[kind]


def sign_kinds(signs: list[str]) -> list[tuple[str, str]]:
    """The losses a 0.9.1 read shows by themselves (came_from_amqp10's signs), each with its kind, and UNSEEN for
    any message with a sign: published over 1.0, what else it lost (a subject …) cannot be told over 0.9.1."""
    out: list[tuple[str, str]] = []
    for sign in signs:
        if sign == "type=amqp-1.0":
            out.append(("encoded-body", "type=amqp-1.0: its amqp-value or amqp-sequence body arrives AMQP-encoded"))
        elif sign in ("header x-message-id", "header x-correlation-id"):
            out.append(("id-moved", f"a binary id, moved to the {sign}"))
        elif sign == "a urn:uuid message-id":
            out.append(("id-as-text", "its uuid message-id became text (urn:uuid:…)"))
    if signs:
        out.append((UNSEEN, f"signs of AMQP 1.0: {', '.join(signs)}"))
    return out


def _sign_words(kind: str) -> str:
    from dlxtool.amqp10_view import LOSS_KINDS

    return UNSEEN_WORDS if kind == UNSEEN else LOSS_KINDS[kind]


def _facts(source: Session, queue: str) -> tuple[QueueFacts | None, str | None]:
    """The queue's facts (type, limit, counts: dlxtool.ops.peek.queue_facts), or why the 1.0 read cannot be made."""
    from dlxtool.broker import amqp10

    if not amqp10.available():
        return None, "python-qpid-proton is not installed (" + amqp10.INSTALL_HINT + ")"
    if source.profile is None:
        return None, "no broker profile to open an AMQP 1.0 connection with"
    from dlxtool.ops.peek import queue_facts

    channel = source.conn.channel()
    try:
        facts = queue_facts(source.profile, queue, management=_management(source), channel=channel,
                            conn=source.conn)
    finally:
        # pika's stubs leave BlockingChannel.is_open and close() untyped
        if channel.is_open:  # pyright: ignore[reportUnknownMemberType]
            channel.close()  # pyright: ignore[reportUnknownMemberType]
    if facts.type == "stream":
        return None, "a stream is not read over AMQP 1.0"
    return facts, None


def _management(source: Session) -> Callable[[], Any]:
    def management() -> Any:
        if source.management is None:
            raise DlxtoolError(source.management_error or "no management API")
        return source.management

    return management


def _needs_091_first(facts: QueueFacts) -> bool:
    """Whether a 1.0 read without a 0.9.1 read before it could spend attempts: a quorum queue on a version where a
    lost AMQP 1.0 session counts one (4.3) — a decimal header (which ends the session) is seen only over 0.9.1."""
    from dlxtool.broker import versions

    return facts.reads_as_quorum and "lost" in (versions.behaviour(facts.version).amqp10_counted or ())


def _remembered_poison(source: Session, facts: QueueFacts) -> Sighting | None:
    """What a read from this machine learnt of a message 0.9.1 cannot be given in this queue, where a 0.9.1 read's
    stop there costs attempts (dlxtool.ops.peek_past_poison.recall_for): no check reads it over 0.9.1 again."""
    recall = _recall(source, facts)
    return recall.seen() if recall is not None else None


def _remember_poison(source: Session, facts: QueueFacts, position: int) -> None:
    recall = _recall(source, facts)
    if recall is not None:
        recall.remember(position)


def _recall(source: Session, facts: QueueFacts) -> QueueMemo | None:
    from dlxtool.ops.peek_past_poison import recall_for

    if source.profile is None:
        return None
    return recall_for(source.profile, facts.vhost, facts.name, quorum=facts.reads_as_quorum, version=facts.version)


def _holds_decimal(value: Any) -> bool:
    """A 0.9.1 header value (pika's decoding, or dlxtool's codec) that is or holds a decimal: a Decimal, or a raw
    `D` value (dlxtool.amqp_values.RawValue: a decimal pika would not write back identically, kept as its bytes)."""
    from decimal import Decimal

    from dlxtool.amqp_values import RawValue

    if isinstance(value, Decimal) or (isinstance(value, RawValue) and value.kind == "D"):
        return True
    if is_object(value):
        return any(_holds_decimal(v) for v in value.values())
    if is_list_or_tuple(value):
        return any(_holds_decimal(v) for v in value)
    return False


def _read_091(source: Session, queue: str, read: ReadOptions, report: Reporter,
              stop: int | None = None) -> tuple[list[MessageRecord] | None, str | None, bool, int | None]:
    """The head read over 0.9.1 as a plan reads it (peek's rules: on 4.3 a quorum queue's nack spends no attempt):
    (records, None, whether the queue held more, None); (the records before it, why, True, the position of the
    message the broker could not convert for 0.9.1 where that ended it) where the read ended early; (None, why not,
    False, None) where it could not start. `stop`: read only the messages before this position. On a
    connection of its own: one the broker closes (a message it cannot convert for 0.9.1) is not the session's."""
    from dlxtool.broker.connection import close_quietly, connect
    from dlxtool.ops.peek import prepare_read

    if source.profile is None:
        return None, "no broker profile to read the head with", False, None
    count = read.max_unacked if stop is None else min(read.max_unacked, stop)
    opts = replace(read, protocol="0-9-1", count=count, max_unacked=count, select=None, select_decodes=False)
    try:
        conn = connect(source.profile)
    except DlxtoolError as exc:
        return None, f"no AMQP 0.9.1 connection to read the head with: {exc.message}", False, None
    try:
        reader, notes = prepare_read(conn, source.profile, queue, opts, management=_management(source))
        for note in notes:
            report.detail(f"conversion check: {note}")
        records = list(reader.records())
        outcome = reader.outcome()
    except DlxtoolError as exc:
        return None, f"the head could not be read over AMQP 0.9.1 first: {exc.message}", False, None
    finally:
        close_quietly(conn)
    for note in reader.notes:  # what the read did to the queue (the give-back; a changed order is said out loud)
        if note not in notes:
            (report.warn if reader.order_changed else report.detail)(f"conversion check: {note}")
    if outcome.error is not None:  # what arrived before it is judged; the rest is not
        at = outcome.error.position if isinstance(outcome.error, UndeliverableError) else None
        return records, f"the head could not be read whole over AMQP 0.9.1: {outcome.error.message}", True, at
    return records, None, reader.coverage().sampled, None


def _read_amqp10(source: Session, facts: QueueFacts, read: ReadOptions, report: Reporter,
                 stop: int | None) -> tuple[list[MessageRecord] | None, str | None, bool]:
    """(records read over AMQP 1.0 and given back, None; or None and why not) and whether the queue held more.
    `stop`: read only the messages before this position."""
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.ops.peek import check_read, give_back_counts
    from dlxtool.ops.peek_amqp10 import Amqp10QueueReader

    assert source.profile is not None  # _facts said so
    wanted = read.max_unacked if stop is None else stop
    if not wanted:
        return [], None, True
    opts = replace(read, protocol="1.0", count=wanted, max_unacked=wanted, select=None, select_decodes=False)
    if facts.reads_as_quorum and give_back_counts(facts, opts):
        # 4.0: a plan's 0.9.1 read (--spend-attempts) spent one attempt of each already; not a second one
        return None, (f"on RabbitMQ {facts.version} reading a quorum queue over AMQP 1.0 spends a delivery attempt of "
                      "each message it gives back"), False
    try:
        notes = check_read(facts, opts)
    except DlxtoolError as exc:
        return None, exc.message, False
    for note in notes:
        report.detail(f"conversion check: {note}")
    try:
        conn = open_connection(source.profile)
    except DlxtoolError as exc:
        return None, f"no AMQP 1.0 connection: {exc.message}", False
    try:
        reader = Amqp10QueueReader(conn, facts, opts)
        records = list(reader.records())
        outcome = reader.outcome()
    except DlxtoolError as exc:
        return None, exc.message, False
    finally:
        conn.close()
    if outcome.error is not None:  # e.g. a decimal header no 0.9.1 read saw first (a classic queue: no attempt)
        return None, outcome.error.message, False
    return records, None, reader.coverage().sampled or stop is not None
