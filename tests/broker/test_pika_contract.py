"""The private pika names dlxtool uses are the listed ones, and the installed pika still defines each
(dlxtool/broker/pika_private.py). A pika release that renames one fails here, by name, before any codec test
has to find out from a wrong frame."""

from __future__ import annotations

import re
from pathlib import Path

import pika

from dlxtool.broker.pika_private import PRIVATE_NAMES

ROOT = Path(__file__).resolve().parents[2]
PIKA = Path(pika.__file__).parent
PRIVATE = re.compile(r"\.(_[A-Za-z]\w*)")


def _defined_in(source: str, name: str) -> bool:
    return re.search(rf"(def {name}\b|self\.{name}\s*[:=]|^\s*{name}\s*[:=])", source, re.M) is not None


def _dlxtool_sources() -> dict[Path, str]:
    return {p: p.read_text() for p in (ROOT / "dlxtool").rglob("*.py")}


def used_private_names() -> set[str]:
    """Private names on lines marked `noqa: SLF001` that dlxtool itself does not define (its own helpers and
    the `_dlxtool_*` attributes it sets on pika objects are not pika's)."""
    sources = _dlxtool_sources()
    everything = "\n".join(sources.values())
    used: set[str] = set()
    for text in sources.values():
        for line in text.splitlines():
            if "SLF001" in line:
                used.update(PRIVATE.findall(line.split("#", 1)[0]))
    return {n for n in used if not n.startswith("_dlxtool_") and not _defined_in(everything, n)}


def test_every_private_name_used_is_listed() -> None:
    missing = used_private_names() - set(PRIVATE_NAMES)
    assert not missing, f"private pika names used but not in dlxtool/broker/pika_private.py: {sorted(missing)}"


def test_every_listed_name_is_still_defined_by_the_installed_pika() -> None:
    gone = []
    for name, (module, _why) in PRIVATE_NAMES.items():
        path = PIKA / module
        if not path.exists() or not _defined_in(path.read_text(), name):
            gone.append(f"{name} (expected in pika/{module})")
    assert not gone, f"pika {pika.__version__} no longer defines: {', '.join(gone)}"


def test_the_list_names_nothing_unused() -> None:
    """A name no longer used leaves the list, so the list stays the truth."""
    used = used_private_names()
    everything = "\n".join(_dlxtool_sources().values())
    unused = [n for n in PRIVATE_NAMES if n not in used and f".{n}" not in everything]
    assert not unused, f"listed but not used: {unused}"
