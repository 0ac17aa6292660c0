"""Messages the rewrite cannot put on the wire stay in the DLQ with a reason; the run goes on (real broker)."""

from __future__ import annotations

import json

import pika

from dlxtool.broker.wire import frames

FRAME_MAX = 131072  # RabbitMQ's default, negotiated by pika


def _dead_letter(ch, origin: str, body: bytes, props: pika.BasicProperties) -> None:
    ch.basic_publish("", origin, body, props)
    method, _p, _b = next(ch.consume(origin, inactivity_timeout=10))
    ch.cancel()
    ch.basic_reject(method.delivery_tag, requeue=False)


def _dlq_props_size(ch, dlq: str) -> int:
    """The dead letter's encoded properties (waiting for the broker to dead-letter it)."""
    method, props, _b = next(ch.consume(dlq, auto_ack=True, inactivity_timeout=10))
    ch.cancel()
    assert method is not None
    return len(frames.encode_properties(props))


def test_headers_grown_past_frame_max_stay_and_the_run_goes_on(run, broker, qname) -> None:
    origin, dlq = f"{qname}.o", f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(origin, durable=True,
                         arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        # Calibrate what dead-lettering adds (x-death …), then size a header so the DLQ copy just fits a frame.
        small = pika.BasicProperties(message_id="big", headers={"big": "h"})
        _dead_letter(ch, origin, b"calibrate", small)
        grown = _dlq_props_size(ch, dlq) - len(frames.encode_properties(small))
        fill = FRAME_MAX - frames.FRAME_OVERHEAD - 12 - len(frames.encode_properties(small)) - grown - 20
        _dead_letter(ch, origin, b"big", pika.BasicProperties(message_id="big", headers={"big": "h" * (1 + fill)}))
        _dead_letter(ch, origin, b"small", pika.BasicProperties(message_id="small", headers={"big": "h"}))
    assert broker.wait_depth(dlq, 2) == 2

    # --keep-history keeps x-death and adds the provenance header: the big one no longer fits a frame
    result = run("replay", dlq, "--yes", "--keep-history", "--url", broker.url, "--format", "json")
    assert result.exit_code == 5, result.stderr
    summary = json.loads(result.stdout)
    assert summary["moved"] == {origin: 1}
    [(why, n)] = summary["left"].items()
    assert n == 1 and "too large" in why
    assert [b for _m, _p, b in broker.drain(origin)] == [b"small"]
    [(_m, props, body)] = broker.drain(dlq)
    assert body == b"big" and "dlxtool-replay" not in props.headers
