"""The one document `replay --edit` opens in an editor: every message shown, read back, checked and diffed.

    # comment lines (what to do); everything before the first section marker is ignored
    ### message 1 of 2: position 0, message_id 'm-0', routing key 'orders', 120 bytes
    ### body: protobuf shop.orders.v1.OrderPlaced as its JSON mapping
    { …the body, as dlxtool.editing.bodies shows it… }
    ### properties
    { "content_type": "application/x-protobuf", … }
    ### headers
    { "tenant": "acme", "x-death": [ … ] }

Properties and headers are JSON objects in the message record's form (dlxtool.record: non-JSON values tagged, e.g.
{"$timestamp": …}). A body's text is the lines between its marker and the next one, as they are. Reading it
back (`Document.read`) checks every message — a body that does not parse or that its schema rejects, a property
that is not one, a header value that does not decode — and reports each problem with its message and line. A
message whose section was deleted is left out (it stays in the queue); an empty document or one with no message
left changes nothing.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dlxtool.amqp_values import encode_field_value, raw_with_value
from dlxtool.editing.bodies import (
    MARKER,
    BodyError,
    BodyView,
    RegistryLoader,
    SchemaError,
    json_text,
    parse_json,
    same_json,
    view_body,
)
from dlxtool.editing.edits import Edited
from dlxtool.errors import UsageError
from dlxtool.record import PROPERTY_NAMES, MessageRecord, decode_value, tag_name, tag_table, untag_name, untag_table
from dlxtool.render import safe_text

_SECTION = re.compile(r"^### (message|body|properties|headers)\b\s*(\d+)?")
_INT_PROPERTIES = {"delivery_mode": (1, 2), "priority": (0, 255), "timestamp": (0, 2**64 - 1)}

HELP = """\
# {title}
#
# Edit the bodies, properties and headers below, then save and quit. dlxtool checks every message, shows
# what changed and asks once before replaying them, as `dlxtool replay` does (to their origins, counts
# reset, the provenance header saying they were edited). Messages you leave unchanged are replayed byte
# for byte as they are.
#   - Quit without saving, or empty this file: nothing changes.
#   - Delete a message's whole section: that message stays in the queue.
#   - Lines starting with "### " divide the sections: keep them. A body is the lines between its marker
#     and the next, exactly; properties and headers are JSON objects in the message-record form.
#   - A protobuf body is re-encoded from the original with only the fields you changed (unknown fields
#     kept; fields come out in field-number order); JSON and text bodies are published as you save them.
"""


@dataclass
class Shown:
    """A message as the document shows it."""

    number: int
    record: MessageRecord
    fingerprint: str
    view: BodyView
    properties: dict[str, Any]  # the record form (tag_name), as shown
    headers: dict[str, Any]     # the record form (tag_table), as shown

    def section(self, total: int) -> str:
        r = self.record
        about = [f"position {r.position}"]
        if r.properties.get("message_id") is not None:
            about.append(f"message_id {_shown(r.properties['message_id'])}")
        about.append(f"routing key {_shown(r.routing_key)}")
        about.append(f"{len(r.body):,} bytes")
        body, properties, headers = self.markers()
        return (f"{MARKER}message {self.number} of {total}: {', '.join(about)}\n"
                f"{body}\n{self.view.text}\n{properties}\n{json_text(self.properties)}\n"
                f"{headers}\n{json_text(self.headers)}\n")

    def markers(self) -> tuple[str, str, str]:
        """The marker lines of the body, properties and headers sections."""
        return (f"{MARKER}body: {self.view.describe()}", f"{MARKER}properties",
                f"{MARKER}headers{_history_note(self.record.headers)}")


def _history_note(headers: Mapping[Any, Any] | None) -> str:
    """What the replay does to the death history, said where it is shown."""
    if not any(isinstance(name, str) and (name == "x-death" or name.startswith(("x-first-death-", "x-last-death-")))
               for name in headers or {}):
        return ""
    return " (the death history, x-death and x-first/last-death-*, is removed when replayed, unless --keep-history)"


def _shown(value: Any) -> str:
    text = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes | bytearray) else str(value)
    return repr(safe_text(text))


@dataclass
class Reading:
    """The document as saved: every message still in it (changed or not), the ones whose section was deleted,
    and the problems found (nothing may go ahead while there is one)."""

    edited: list[Edited] = field(default_factory=list)
    left_out: list[Shown] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    empty: bool = False  # nothing but comments and blank lines: change nothing

    @property
    def nothing(self) -> bool:
        """Nothing to replay: an empty document, or every section deleted."""
        return self.empty or (not self.errors and not self.edited)


@dataclass
class Document:
    title: str
    shown: list[Shown]

    def text(self) -> str:
        total = len(self.shown)
        return HELP.format(title=self.title) + "".join("\n" + s.section(total) for s in self.shown)

    def read(self, text: str, registry: RegistryLoader) -> Reading:
        """The saved document checked (the module docstring)."""
        lines = text.replace("\r\n", "\n").split("\n")
        if not any(line.strip() and not line.startswith("#") for line in lines):
            return Reading(empty=True)
        parts, errors = _sections(lines, len(self.shown))
        out = Reading(errors=errors)
        for shown in self.shown:
            found = parts.get(shown.number)
            if found is None:
                out.left_out.append(shown)
                continue
            edited = _read_message(shown, found, registry, out.errors)
            if edited is not None:
                edited.diff = _diff(shown, found, len(self.shown))
                out.edited.append(edited)
        return out


@dataclass
class _Part:
    line: int  # the marker's line (1-based)
    text: str


def _sections(lines: list[str], total: int) -> tuple[dict[int, dict[str, _Part]], list[str]]:
    """message number -> {"message", "body", "properties", "headers"} parts; problems with the markers."""
    found: dict[int, dict[str, _Part]] = {}
    errors: list[str] = []
    current: dict[str, _Part] | None = None
    name, start, number = "", 0, 0
    body: list[str] = []

    def close() -> None:
        if current is not None and name:
            current[name] = _Part(start, "\n".join(body))

    for at, line in enumerate(lines, 1):
        if not line.startswith(MARKER.rstrip()):
            body.append(line)
            continue
        matched = _SECTION.match(line)
        if matched is None:
            errors.append(f"line {at}: {line[:60]!r} is not a section marker dlxtool writes (### message, ### body, "
                          "### properties, ### headers): a body line may not start with ###")
            body.append(line)
            continue
        close()
        kind, body = matched.group(1), []
        if kind == "message":
            number = int(matched.group(2) or 0)
            if not 1 <= number <= total:
                errors.append(f"line {at}: there is no message {number} in this document (1 to {total})")
                current, name = None, ""
                continue
            if number in found:
                errors.append(f"line {at}: message {number} appears twice")
                current, name = None, ""
                continue
            current = found[number] = {}
            name, start = "message", at
            continue
        if current is None:
            errors.append(f"line {at}: a {kind} section outside any message")
            name = ""
            continue
        if kind in current:
            errors.append(f"line {at}: message {number} has two {kind} sections")
        name, start = kind, at
    close()
    for number, parts in sorted(found.items()):
        missing = [k for k in ("body", "properties", "headers") if k not in parts]
        if missing:
            errors.append(f"message {number} (line {parts['message'].line}): no {' or '.join(missing)} section")
        elif parts["message"].text.strip():
            errors.append(f"message {number} (line {parts['message'].line + 1}): text before its body section")
    return {n: p for n, p in found.items() if all(k in p for k in ("body", "properties", "headers"))}, errors


def _read_message(shown: Shown, parts: dict[str, _Part], registry: RegistryLoader,
                  errors: list[str]) -> Edited | None:
    """The message as saved, or None (its problems appended to `errors`)."""
    record, before = shown.record, len(errors)
    where = f"message {shown.number}"
    out = Edited(shown.number, record.position, shown.fingerprint, record.body,
                 message_id=record.properties.get("message_id"))
    body = parts["body"]
    try:
        out.body = shown.view.read(body.text, registry)
    except BodyError as exc:
        line = body.line + (_line_of(body.text, exc.field) if isinstance(exc, SchemaError) else exc.line)
        errors.append(f"{where}, body (line {line}): {exc.message}")
    if out.body is not None:
        out.how = shown.view.how_edited()
    _read_properties(out, shown, parts["properties"], errors)
    _read_headers(out, shown, parts["headers"], errors)
    return out if len(errors) == before else None


def _line_of(text: str, name: str | None) -> int:
    """The line (1-based, within `text`) of the first key `name`; 0 when not found."""
    if not name:
        return 0
    key = re.compile(r'"' + re.escape(name) + r'"\s*:')
    for at, line in enumerate(text.split("\n"), 1):
        if key.search(line):
            return at
    return 0


def _object(part: _Part, where: str, errors: list[str]) -> dict[str, Any] | None:
    try:
        value = parse_json(part.text)
    except BodyError as exc:
        errors.append(f"{where} (line {part.line + exc.line}): {exc.message}")
        return None
    if not isinstance(value, dict):
        errors.append(f"{where} (line {part.line + 1}): must be a JSON object")
        return None
    return value


def _changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(names set or changed, names removed): compared in the record form, so an untouched value stays the
    delivery's own (whatever JSON can or cannot say of it)."""
    changed = [k for k, v in after.items() if k not in before or not same_json(before[k], v)]
    return changed, [k for k in before if k not in after]


def _read_properties(out: Edited, shown: Shown, part: _Part, errors: list[str]) -> None:
    where = f"message {shown.number}, properties"
    after = _object(part, where, errors)
    if after is None:
        return
    changed, removed = _changes(shown.properties, after)
    for name in changed:
        line = part.line + _line_of(part.text, name)
        if name not in PROPERTY_NAMES:
            errors.append(f"{where} (line {line}): {name!r} is not an AMQP property "
                          f"(known: {', '.join(PROPERTY_NAMES)})")
            continue
        try:
            out.set_properties[name] = _property(name, untag_name(after[name], name, keep=True))
        except UsageError as exc:
            errors.append(f"{where} (line {line}): {exc.message}")
    out.unset_properties = tuple(removed)


def _property(name: str, value: Any) -> Any:
    """A property value as AMQP carries it: a whole number in range, or a short string (255 bytes at most)."""
    if name in _INT_PROPERTIES:
        low, high = _INT_PROPERTIES[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise UsageError(f"{name} must be a whole number from {low} to {high}, not {value!r}")
        return value
    if not isinstance(value, str | bytes):
        raise UsageError(f"{name} must be a string, not {value!r}")
    if len(value.encode("utf-8") if isinstance(value, str) else value) > 255:
        raise UsageError(f"{name} is longer than 255 bytes (an AMQP short string)")
    return value


def _read_headers(out: Edited, shown: Shown, part: _Part, errors: list[str]) -> None:
    where = f"message {shown.number}, headers"
    after = _object(part, where, errors)
    if after is None:
        return
    whole = "$pairs" in shown.headers or "$pairs" in after  # names that are not text: the table as a whole
    if whole:
        if after != shown.headers:
            try:
                out.headers = untag_table(after, "headers")
            except (UsageError, RecursionError) as exc:
                errors.append(f"{where} (line {part.line + 1}): {getattr(exc, 'message', 'nested too deeply')}")
        return
    changed, removed = _changes(shown.headers, after)
    for name in changed:
        value, before = after[name], shown.headers.get(name)
        try:
            if _raw(value) and isinstance(before, dict) and _raw(before) and value["$amqp"] == before["$amqp"]:
                # kept as its AMQP bytes (a float …), its readable $value edited: that value, in the same kind
                out.set_headers[name] = raw_with_value(decode_value(before), value["$value"])
                continue
            out.set_headers[name] = decode_value(value, f"header {name!r}")
            encode_field_value(out.set_headers[name])  # what AMQP cannot carry (a JSON float) is said now
        except ValueError as exc:
            errors.append(f"{where} (line {part.line + _line_of(part.text, name)}): header {name!r}: {exc}")
            continue
        except (UsageError, RecursionError) as exc:
            errors.append(f"{where} (line {part.line + _line_of(part.text, name)}): "
                          f"{getattr(exc, 'message', 'nested too deeply')}")
    out.unset_headers = tuple(removed)


def _raw(value: Any) -> bool:
    """A header value the record keeps as its AMQP bytes: {"$amqp": base64, "$value": readable}."""
    return isinstance(value, dict) and set(value) == {"$amqp", "$value"}


def _diff(shown: Shown, parts: dict[str, _Part], total: int) -> list[str]:
    """The section's changes, as unified diff lines (a line of context)."""
    before = shown.section(total).rstrip("\n").split("\n")[1:]
    body, properties, headers = shown.markers()
    after = [body, *parts["body"].text.split("\n"), properties, *parts["properties"].text.rstrip("\n").split("\n"),
             headers, *parts["headers"].text.rstrip("\n").split("\n")]
    return [line.rstrip("\n") for line in difflib.unified_diff(before, after, "before", "after", lineterm="", n=1)]


def build(records: Iterable[tuple[MessageRecord, str]], title: str, registry: RegistryLoader) -> Document:
    """The document of `records` (each with its fingerprint), in their order."""
    shown = [Shown(n, record, fingerprint, view_body(record.body, record.properties, record.headers, registry),
                   {k: tag_name(v) for k, v in record.properties.items()}, tag_table(record.headers or {}))
             for n, (record, fingerprint) in enumerate(records, 1)]
    return Document(title, shown)


PROBLEM = "#! "  # the comment lines `with_problems` puts at the top of a saved document


def with_problems(saved: str, problems: Iterable[str]) -> str:
    """A saved document to edit again, the problems of its last save listed at its top (as comments, which reading
    ignores: they stand before the first section), those of an earlier save taken out."""
    kept = [line for line in saved.split("\n") if not line.startswith(PROBLEM)]
    head = [f"{PROBLEM}The last save had these problems: fix them and save, or quit without saving to change "
            "nothing."] + [f"{PROBLEM}  {line}" for p in problems for line in p.splitlines()]
    return "\n".join([*head, *kept])
