"""render.simple_table writes what tabulate's "simple" format writes, for the tables it takes on (issue 28: tabulate
took 1-2 s for a table of 10,000 queues); it hands anything else back to tabulate."""

from __future__ import annotations

import io

from hypothesis import given
from hypothesis import strategies as st
from tabulate import tabulate

from dlxtool.render import safe_text, simple_table, write_table
from tests.fuzz.strategies import FUZZ

ascii_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
# What tabulate treats apart: surrounding spaces (stripped), "True"/"False" (a bool column), number-like text (numbers
# when parsed: not here), empty cells (no type).
cells = st.one_of(ascii_text, st.sampled_from(["", " ", "True", "False", " x ", "1.50", "-3", "1e5", "0x1f", "None"]))
colour = st.sampled_from(["\x1b[31m", "\x1b[1m\x1b[33m", "\x1b[32;1m"])
styled = st.builds(lambda c, text: f"{c}{text}\x1b[0m" if text else text, colour, cells)


@st.composite
def tables(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    n = draw(st.integers(1, 6))
    headers = draw(st.lists(ascii_text, min_size=n, max_size=n))
    cell = st.one_of(cells, styled) if draw(st.booleans()) else cells
    rows = draw(st.lists(st.lists(cell, min_size=n, max_size=n), min_size=1, max_size=8))
    return headers, rows


def reference(rows: list[list[str]], headers: list[str]) -> str:
    return tabulate(rows, headers=list(headers), tablefmt="simple", disable_numparse=True)


@FUZZ
@given(tables())
def test_the_same_text_as_tabulate(table: tuple[list[str], list[list[str]]]) -> None:
    headers, rows = table
    assert simple_table(rows, headers) == reference(rows, headers)


def test_a_queue_table() -> None:
    headers = ["vhost", "queue", "type", "ready", "flags"]
    rows = [["/", "orders", "classic", "3", "\x1b[33mno-consumer\x1b[0m"], ["/", "orders.dlq", "quorum", "0", ""]]
    assert simple_table(rows, headers) == reference(rows, headers)
    assert simple_table(rows, headers) == (
        "vhost    queue       type     ready    flags\n"
        "-------  ----------  -------  -------  -----------\n"
        "/        orders      classic  3        \x1b[33mno-consumer\x1b[0m\n"
        "/        orders.dlq  quorum   0")


def test_what_it_leaves_to_tabulate() -> None:
    assert simple_table([], ["a"]) is None  # no rows
    assert simple_table([["日本"]], ["a"]) is None  # wide characters (wcwidth, where installed)
    assert simple_table([["é"]], ["a"]) is None
    assert simple_table([["a", "b"]], ["a"]) is None  # ragged
    assert simple_table([["\x1b]8;;x\x1b\\"]], ["a"]) is None  # an escape that is no colour


@given(st.lists(st.lists(st.one_of(st.text(max_size=8), st.integers(), st.none()), min_size=2, max_size=2),
                max_size=5))
@FUZZ
def test_write_table_matches_tabulate_whatever_the_cells(rows: list[list[object]]) -> None:
    out = io.StringIO()
    write_table(rows, ["one", "two"], out)
    cleaned = [["" if c is None else safe_text(c) for c in row] for row in rows]
    assert out.getvalue() == reference(cleaned, ["one", "two"]) + "\n"


def test_shorten_keeps_a_reason_whole_when_it_fits_and_cuts_it_at_a_clause() -> None:
    from dlxtool.render import shorten

    assert shorten("origin full", 100) == "origin full"
    long = ("exchange 'x.ex', routing key 'k': the queues it reaches cannot be told (no management API to read its "
            "bindings), nor their limits checked; --allow-displace publishes anyway")
    assert shorten(long, 100) == "exchange 'x.ex', routing key 'k': the queues it reaches cannot be told…"
    assert shorten(long, None) == long  # -v
    words = "word " * 80
    cut = shorten(words, 100)
    assert len(cut) <= 100 and cut.endswith("word…")
    assert shorten("x" * 300, 100) == "x" * 99 + "…"


wide_text = st.text(st.sampled_from("abcXYZ 01.-_日本é…"), max_size=30)


@st.composite
def fitted(draw: st.DrawFn) -> tuple[list[str], list[list[str]], int]:
    n = draw(st.integers(1, 7))
    headers = draw(st.lists(st.text(st.sampled_from("abcdef #/"), min_size=1, max_size=10), min_size=n, max_size=n))
    rows = draw(st.lists(st.lists(wide_text, min_size=n, max_size=n), min_size=1, max_size=6))
    return headers, rows, draw(st.integers(20, 160))


@FUZZ
@given(fitted())
def test_a_table_fits_the_width_it_is_given(table: tuple[list[str], list[list[str]], int]) -> None:
    """issue 37: tables fit the terminal. Every line fits `width` whenever the columns' floors do; a cell is either
    whole or a prefix of itself ending in "…"; what fits as simple_table lays it out is left to it."""
    from dlxtool.render import MIN_COLUMN, display_width, write_table

    headers, rows, width = table
    out = io.StringIO()
    cut = write_table([list(r) for r in rows], headers, out, width=width)
    lines = out.getvalue().rstrip("\n").split("\n")
    natural = [max(len(h), *(display_width(r[i].strip()) for r in rows)) for i, h in enumerate(headers)]
    floors = sum(min(w, max(len(h), MIN_COLUMN)) for w, h in zip(natural, headers, strict=True))
    if floors + 2 * (len(headers) - 1) <= width:
        assert max(display_width(line) for line in lines) <= width
    whole = io.StringIO()
    write_table([list(r) for r in rows], headers, whole)
    narrow = all(display_width(c) == len(c) for row in rows for c in row)  # (tabulate counts 日 as one column)
    if narrow and max(map(len, whole.getvalue().rstrip("\n").split("\n"))) <= width:
        assert out.getvalue() == whole.getvalue() and not cut  # fits: the table as always
    if cut:
        assert any("…" in line for line in lines[2:])


def test_the_widest_columns_are_cut_and_the_narrow_ones_stay() -> None:
    from dlxtool.render import write_table

    rows = [["0", "orders.created", "yes", "ValueError: order o-00013 has no lines " * 3, "a" * 70],
            ["1", "orders.cancelled", "", "KeyError: 'currency'", "b" * 10]]
    out = io.StringIO()
    assert write_table(rows, ["#", "routing key", "redeliv", "error", "body"], out, width=80)
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) <= 80
    assert lines[0].split() == ["#", "routing", "key", "redeliv", "error", "body"]
    assert lines[2].startswith("0  orders.created    yes      ValueError: order o-000") and lines[2].endswith("…")
    assert "orders.cancelled" in lines[3] and "KeyError: 'currency'" in lines[3]  # narrow enough: whole


def test_a_cut_cell_keeps_simple_table_and_tabulate_in_step() -> None:
    rows = [["orders.dl…", "3"], ["x", "…"]]
    assert simple_table(rows, ["queue", "n"]) == reference(rows, ["queue", "n"])


def test_optional_columns_go_first_where_even_cut_the_table_would_not_fit() -> None:
    """Ten columns whose headers alone pass 40 terminal columns: the optional ones are left out, in their order,
    until what stays fits; a table that fits keeps them all."""
    import io

    from dlxtool.render import write_table

    headers = ["#", "message id", "routing key", "exchange", "redeliv", "type", "deaths", "origin", "error", "body"]
    row = ["0", "m-1", "orders.work", "orders", "yes", "shop.Order", "rejected", "orders.work", "boom", "{}"]
    out = io.StringIO()
    assert write_table([row], headers, out, width=60, optional=(3, 4, 2))
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) <= 60
    assert "exchange" not in lines[0] and "redeliv" not in lines[0] and "message id" in lines[0]
    roomy = io.StringIO()
    assert not write_table([row], headers, roomy, width=200, optional=(3, 4, 2))
    assert "exchange" in roomy.getvalue().splitlines()[0]
