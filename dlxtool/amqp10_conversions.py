"""What peek and history say about the AMQP 1.0 messages among those a read showed: what RabbitMQ's conversion to
0.9.1 does to them (dlxtool.amqp10_view says what, message by message). Apart from the view, which the record model
uses to build a record from a 1.0 delivery: this module reads records, and the two would need each other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from dlxtool.amqp10_view import came_from_amqp10, conversion_losses

if TYPE_CHECKING:
    from dlxtool.record import MessageRecord


def conversion_notes(records: Sequence[MessageRecord], *, read_over_amqp10: bool, speaks_amqp10: bool,
                     poison_091: bool, examples: int = 3) -> list[str]:
    """What peek and history say about the AMQP 1.0 messages among `records` (empty: nothing to say); see
    ConversionTally, which takes them batch by batch."""
    tally = ConversionTally(read_over_amqp10=read_over_amqp10, speaks_amqp10=speaks_amqp10, poison_091=poison_091,
                            examples=examples)
    tally.add(records)
    return tally.notes()


class ConversionTally:
    """The AMQP 1.0 messages among those a read showed, counted batch by batch (a jsonl read keeps no records), and
    the note that says what RabbitMQ's conversion to 0.9.1 does to them.

    Read over AMQP 1.0 (each record holds the whole message): which of them would not come back whole from a move
    over AMQP 0.9.1 — the way replay, purge --move-to/--backup and load move messages today — and what changes,
    for up to `examples` of them. Read over 0.9.1: which of them were published over AMQP 1.0 (came_from_amqp10's
    signs), so that what is shown is already the broker's conversion; where the broker speaks AMQP 1.0
    (`speaks_amqp10`), --protocol 1.0 shows them as published."""

    def __init__(self, *, read_over_amqp10: bool, speaks_amqp10: bool, poison_091: bool, examples: int = 3) -> None:
        self.read_over_amqp10, self.speaks_amqp10, self.poison_091 = read_over_amqp10, speaks_amqp10, poison_091
        self.examples = examples
        self.shown = 0
        self.found = 0
        self.first: list[str] = []  # up to `examples` lines naming a message and what concerns it

    def add(self, records: Sequence[MessageRecord]) -> None:
        self.shown += len(records)
        for r in records:
            if r.amqp10 is not None:  # read over 1.0 (a 0.9.1 read that went on over 1.0 shows only such records)
                self.read_over_amqp10 = True
            if self.read_over_amqp10:
                what = conversion_losses(r.amqp10, poison_091=self.poison_091) if r.amqp10 is not None else []
            else:
                what = came_from_amqp10(r.properties, r.headers if isinstance(r.headers, dict) else {})
            if what:
                self.found += 1
                if len(self.first) < self.examples:
                    self.first.append(f"#{r.position} ({_label(r)}): {'; '.join(what)}" if self.read_over_amqp10
                                      else f"#{r.position}: {', '.join(what)}")

    def notes(self) -> list[str]:
        if not self.found:
            return []
        if not self.read_over_amqp10:
            hint = ("; --protocol 1.0 shows them as published and names what a move over 0.9.1 would change"
                    if self.speaks_amqp10 else "")
            return [f"note: {self.found} of the {self.shown} message(s) shown were published over AMQP 1.0 "
                    f"({self.first[0]}): read over AMQP 0.9.1, they are RabbitMQ's conversion of them (several data "
                    "sections merged, subject and to dropped, timestamps in whole seconds, symbols as strings)"
                    f"{hint}"]
        lines = [f"note: {self.found} of the {self.shown} message(s) shown would not come back whole from a move "
                 "over AMQP 0.9.1 (RabbitMQ converts each message; replay, move, purge and load --protocol 1.0 take "
                 "them whole):"]
        lines += [f"  {line}" for line in self.first]
        if self.found > len(self.first):
            lines.append(f"  … and {self.found - len(self.first)} more (--format json: each record's amqp10 field "
                         "holds the whole message)")
        return ["\n".join(lines)]


def _label(record: MessageRecord) -> str:
    """A message's id as the table shows it (message_id, else its fingerprint)."""
    from dlxtool.message_ids import message_name

    return message_name(record)
