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
- a restored per-message TTL (the view's `expiration`) is the header's ttl; a dropped user_id leaves the property out;
- the body goes as it came (every data section, or the amqp-value / amqp-sequence), unless the decision rewrote a
  single data section's bytes (--reset-body-retries).

Any other change a decision makes (an edited property, an added header) has no faithful AMQP 1.0 form here: the
message stays where it is, with the reason (`Why`, Stay.NOT_SENT), rather than going out half-changed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dlxtool.amqp10_message import Amqp10Message, Body, Typed, encode_message
from dlxtool.amqp10_view import PROVENANCE_ANNOTATION, annotation_header, header_value
from dlxtool.amqp_values import RawValue
from dlxtool.json_shapes import is_list_or_tuple, is_object
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
    changed = _unsupported(source, published)
    if changed is not None:
        return Why(f"the move changes its {changed}, which a move over AMQP 1.0 cannot carry yet (leave --protocol "
                   "out to move it over 0.9.1)", Stay.NOT_SENT)
    kept_headers = published.headers if is_object(published.headers) else {}
    out = replace(msg)
    out.header = _header(msg, published)
    out.delivery_annotations = None  # for the next hop only (AMQP 1.0 §3.2.2): never forwarded
    out.message_annotations = _annotations(msg, kept_headers)
    out.application_properties = [(k, v) for k, v in msg.application_properties or ()
                                  if _name(k) in kept_headers] if msg.application_properties is not None else None
    if out.properties and "user_id" in out.properties and "user_id" not in published.properties:
        out.properties = {k: v for k, v in out.properties.items() if k != "user_id"}
    if published.body != source.body:
        if msg.body.kind != "data" or len(msg.body.sections) != 1:
            return Why(f"the move rewrites its body, which is {_body_words(msg.body)}: a move over AMQP 1.0 rewrites "
                       "a single data section only", Stay.NOT_SENT)
        out.body = Body("data", [published.body])
    return encode_message(out)


def _unsupported(source: MessageRecord, published: MessageRecord) -> str | None:
    """What the decision changed that outgoing() does not carry over (None: nothing)."""
    before, after = dict(source.properties), dict(published.properties)
    if "expiration" not in before:
        after.pop("expiration", None)  # a restored TTL: the header's ttl
    if "user_id" not in after:
        before.pop("user_id", None)  # --drop-user-id
    if before != after:
        names = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        return f"properties ({', '.join(names)})"
    old = source.headers if is_object(source.headers) else {}
    new = published.headers if is_object(published.headers) else {}
    added = sorted(str(k) for k in new if k != PROVENANCE_HEADER and (k not in old or new[k] != old[k]))
    return f"headers ({', '.join(added)})" if added else None


def _header(msg: Amqp10Message, published: MessageRecord) -> dict[str, Typed] | None:
    header = {k: v for k, v in (msg.header or {}).items() if k not in DELIVERY_HEADER_FIELDS}
    expiration = published.properties.get("expiration")
    if expiration is not None and "ttl" not in header:
        header["ttl"] = Typed("uint", int(expiration))  # the sender's TTL, which dead-lettering took off
    return header or None


def _annotations(msg: Amqp10Message, headers: dict[Any, Any]) -> list[tuple[Typed, Typed]] | None:
    out: list[tuple[Typed, Typed]] = []
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
        out.append((key, value))
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


def typed(value: Any) -> Typed:
    """A header value as dlxtool writes it (the provenance: text, whole numbers, times, tables, lists) as an AMQP 1.0
    value; the 1.0 view reads it back as the same header value (header_value)."""
    if isinstance(value, RawValue):
        value = value.value
    if value is None:
        return Typed("null", None)
    if isinstance(value, bool):
        return Typed("boolean", value)
    if isinstance(value, int):
        return Typed("long", int(value))
    if isinstance(value, float):
        return Typed("double", value)
    if isinstance(value, datetime):
        return Typed("timestamp", int(value.timestamp() * 1000))
    if isinstance(value, bytes | bytearray):
        return Typed("binary", bytes(value))
    if is_object(value):
        return Typed("map", [(Typed("string", str(k)), typed(v)) for k, v in value.items()])
    if is_list_or_tuple(value):
        return Typed("list", [typed(v) for v in value])
    return Typed("string", str(value))


__all__ = ["DELIVERY_ANNOTATIONS", "header_value", "outgoing", "typed"]
