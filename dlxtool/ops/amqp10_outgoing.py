"""What a move over AMQP 1.0 sends: the message's ORIGINAL sections, re-encoded with every type, with only what the
decision changed (issue 39).

The deciders (replay's, move's) decide on the 0.9.1 view of a message (dlxtool.amqp10_view.view_091) and hand back a
`published` record: its headers as the count reset leaves them, plus the provenance; its properties with a restored
TTL or a dropped user_id. `outgoing` carries those changes over to the AMQP 1.0 message, section by section:

- an application property or an `x-` message annotation stays exactly as it was (name, value, type) while the header
  it reads as in the view stays; one the reset removed is left out (x-opt-deaths is the view's x-death: the death
  history; x-first-death-*, x-last-death-*, x-delivery-count likewise);
- the provenance (the `dlxtool-replay` header) travels as the message annotation `x-opt-dlxtool-replay` (application
  properties hold no maps); dlxtool's 1.0 view reads it back as the header (dlxtool.amqp10_view);
- x-exchange and x-routing-key (where the broker delivered it from) and the header's first-acquirer and
  delivery-count describe a delivery, not the message: the broker sets them again (measured on 4.3.6: a client's
  x-exchange is overwritten), so they are left out;
- a property or header the decision changed (a restored TTL, a dropped user_id, a convention's counter, what
  `replay --edit` changed) goes back to the field the view read it from, of the type it had where the new value fits
  (dlxtool.ops.amqp10_changes); one with no AMQP 1.0 form leaves the message where it is, with the reason (`Why`,
  Stay.NOT_SENT), rather than going out half-changed;
- the body goes as it came (every data section, or the amqp-value / amqp-sequence), unless the decision rewrote a
  single data section's bytes (--reset-body-retries, an edited body).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from dlxtool.amqp10_message import Amqp10Message, Body, Typed, encode_message
from dlxtool.amqp10_view import PROVENANCE_ANNOTATION, annotation_header, header_value
from dlxtool.json_shapes import is_object
from dlxtool.ops.amqp10_changes import changes, typed
from dlxtool.ops.provenance import PROVENANCE_HEADER
from dlxtool.ops.stay import Stay, Why

if TYPE_CHECKING:
    from dlxtool.record import MessageRecord

# Annotations that say how the broker delivered this copy: it writes them again on the next delivery
DELIVERY_ANNOTATIONS = frozenset({"x-exchange", "x-routing-key"})
DELIVERY_HEADER_FIELDS = ("first_acquirer", "delivery_count")


def outgoing(source: MessageRecord, published: MessageRecord | None) -> bytes | Why:
    """The bytes to send for `source` (read over AMQP 1.0: source.amqp10) as the decision's `published` record
    (None: unchanged) says, or why it cannot be sent faithfully."""
    msg = source.amqp10
    if msg is None:
        return Why("not read over AMQP 1.0: nothing to send it as", Stay.NOT_SENT)
    published = published or source
    changed = changes(msg, source, published)
    if isinstance(changed, Why):
        return Why(f"{changed}: a move over AMQP 1.0 cannot carry that (--protocol 0-9-1 moves it over 0.9.1)",
                   changed.kind)
    kept_headers = published.headers if is_object(published.headers) else {}
    out = replace(msg)
    out.header = _updated(msg.header, changed.header, drop=DELIVERY_HEADER_FIELDS)
    out.properties = _updated(msg.properties, changed.properties)
    out.delivery_annotations = None  # for the next hop only (AMQP 1.0 §3.2.2): never forwarded
    out.message_annotations = _annotations(msg, kept_headers, changed.annotations)
    if msg.application_properties is not None or changed.application_properties:
        out.application_properties = _pairs([(k, v) for k, v in msg.application_properties or ()
                                             if _name(k) in kept_headers], changed.application_properties, "string")
    if published.body != source.body:
        if msg.body.kind != "data" or len(msg.body.sections) != 1:
            return Why(f"the move rewrites its body, which is {_body_words(msg.body)}: a move over AMQP 1.0 rewrites "
                       "a single data section only", Stay.NOT_SENT)
        out.body = Body("data", [published.body])
    return encode_message(out)


def _updated(fields: dict[str, Typed] | None, changed: dict[str, Typed | None],
             drop: tuple[str, ...] = ()) -> dict[str, Typed] | None:
    """A header or properties section with the changes (None: removed) and without the `drop` fields."""
    out = {k: v for k, v in (fields or {}).items() if k not in drop}
    for name, value in changed.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out or None


def _pairs(pairs: list[tuple[Typed, Typed]], changed: Mapping[str, Typed | None],
           key_type: str) -> list[tuple[Typed, Typed]]:
    """A map section's pairs with the changes: a value replaced in place (None: removed), a new one at the end."""
    out: list[tuple[Typed, Typed]] = []
    for key, value in pairs:
        name = _name(key)
        if isinstance(name, str) and name in changed:
            new = changed[name]
            if new is not None:
                out.append((key, new))
        else:
            out.append((key, value))
    present = {_name(k) for k, _ in pairs}
    out += [(Typed(key_type, name), value) for name, value in changed.items()
            if name not in present and value is not None]
    return out


def _annotations(msg: Amqp10Message, headers: dict[Any, Any],
                 changed: Mapping[str, Typed | None]) -> list[tuple[Typed, Typed]] | None:
    kept: list[tuple[Typed, Typed]] = []
    # RabbitMQ 4.3 carries a quorum queue's x-acquired-count across dead-lettering, and a client's value survives a
    # send (measured on 4.3.6): where the reset removed the death history, that stale counter goes with it
    reset = any(annotation_header(k, v) == "x-death" for k, v in msg.message_annotations or ()) \
        and "x-death" not in headers
    for key, value in msg.message_annotations or ():
        name = _name(key)
        if name in DELIVERY_ANNOTATIONS or name == PROVENANCE_ANNOTATION:
            continue  # the delivery's; an earlier provenance is replaced below
        if reset and name == "x-acquired-count":
            continue
        view = annotation_header(key, value)
        if view is not None and view not in headers:
            continue  # the reset removed what it reads as (x-opt-deaths: x-death …)
        kept.append((key, value))
    out = _pairs(kept, changed, "symbol")
    provenance = headers.get(PROVENANCE_HEADER)
    if isinstance(provenance, dict):
        out.append((Typed("symbol", PROVENANCE_ANNOTATION), typed(provenance)))
    if not out and msg.message_annotations is None:
        return None
    return out


def _name(key: Typed) -> Any:
    return key.value if isinstance(key.value, bytes) else str(key.value)


def _body_words(body: Body) -> str:
    if body.kind == "data":
        return f"{len(body.sections)} data sections"
    return f"an {body.kind}" if body.kind.startswith("a") else body.kind


__all__ = ["DELIVERY_ANNOTATIONS", "header_value", "outgoing", "typed"]
