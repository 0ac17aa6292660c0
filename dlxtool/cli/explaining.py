"""What tables say in a few words: a reason or an error shortened to its first clause (whole with -v and in JSON:
`Cells`); and, for `peek` and `history`, a dead letter's origin where no convention names one: the headers it
carries, and the [conventions] entry that would read them (dlxtool.convention_hints)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dlxtool.cli.app import App
from dlxtool.render import REASON_WIDTH, shorten

if TYPE_CHECKING:
    from dlxtool.conventions import Explanation
    from dlxtool.record import MessageRecord

ERROR_WIDTH = 40  # a table's error cell; the whole text is in the JSON output and in `history`
MAX_SNIPPETS = 2  # different header sets shown an example entry for


class Cells:
    """Reasons and errors for one table's cells: shortened (dlxtool.render.shorten), whole with -v; `note()` says
    once, on stderr, that some were cut and where to read them whole."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.cut = False

    def __call__(self, text: str | None, width: int | None = None) -> str:
        if not text:
            return ""
        short = text if self.app.verbose else shorten(text, width or REASON_WIDTH)
        self.cut = self.cut or short != text
        return short

    def note(self) -> None:
        if self.cut:
            self.app.info("(cut to their first words in the table above; -v or --format json shows them whole)")


def origin_cell(x: Explanation, headers: Any, *, dead_letter: bool = True) -> str:
    """"orders.q (x-death)"; a dead letter without an origin: "? headers: x-original-channel, x-original-group"
    (its own headers, where it has any); else "" (a message in a work queue never failed)."""
    from dlxtool.convention_hints import names_text, own_headers

    if x.origin is not None:
        return f"{x.origin.key()} ({x.origin_from})"
    own = own_headers(headers) if dead_letter else ()
    return f"? headers: {names_text(own)}" if own else ""


def dead_letters(records: Sequence[MessageRecord], explained: Sequence[Explanation]) -> bool:
    """Whether these are dead letters: some have a death history or an origin, or their queue's name says so."""
    from dlxtool.convention_hints import dead_letter_name

    return (any(r.deaths or x.origin is not None for r, x in zip(records, explained, strict=True))
            or any(dead_letter_name(r.queue) for r in records))


def hint_conventions(app: App, records: Sequence[MessageRecord], explained: Sequence[Explanation]) -> None:
    """On stderr, once: the dead letters no convention names an origin for, their own headers, and an example
    [conventions.NAME] entry naming them. Not for a work queue's messages (see `dead_letters`)."""
    from dlxtool.convention_hints import own_headers, snippet

    if not dead_letters(records, explained):
        return
    sets: Counter[tuple[str, ...]] = Counter()
    for record, x in zip(records, explained, strict=True):
        own = own_headers(record.headers) if x.origin is None else ()
        if own:
            sets[own] += 1
    if not sets:
        return
    app.info(f"no convention names an origin for {sum(sets.values())} message(s) here; if their headers say where "
             "they failed, a [conventions.NAME] entry in the config file (~/.config/dlxtool/config.toml, or "
             "--config) reads them (README: Dead letters made by frameworks), e.g.:")
    for names, n in sets.most_common(MAX_SNIPPETS):
        if len(sets) > 1:
            app.info(f"  # {n} message(s) with headers {', '.join(names)}")
        for line in snippet(names):
            app.info(f"  {line}")
    if len(sets) > MAX_SNIPPETS:
        app.info(f"  (and {len(sets) - MAX_SNIPPETS} more sets of headers: `peek -f json` shows them)")
