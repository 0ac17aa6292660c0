"""The demo shop's `orders` service for scripts/demo: its topology, its traffic and a consumer with a bug.

    orders (topic) --order.# / payment.#--> orders.work --(reject)--> orders.dlx (fanout) --> orders.dlq
                                              |    ^
               (consumer: retry later) --> orders.retry (direct) --> orders.retry.wait (TTL 1 s, DLX "")

The `fulfilment` consumer on orders.work acks the order events it knows. PaymentFailed events (the
payments team started publishing them on `payment.failed` tonight) it cannot handle: it logs the
payload, sends a copy through the TTL wait queue (x-retry-count + 1) and acks; on the third failed
attempt it rejects the message and RabbitMQ dead-letters it into orders.dlq. A body it cannot even
parse (two of the burst were cut in half in transit) hits its generic error handler, which nacks with
requeue: the message comes straight back, again and again, and orders.work is clogged.

The fix (`serve --fixed`) handles PaymentFailed and rejects unparseable bodies without requeue (so
RabbitMQ dead-letters them into orders.dlq, where they wait for a human).

Subcommands (scripts/demo drives them):
    setup                      delete and rebuild the demo vhost and its topology
    serve [--fixed] [--burst]  producer + consumer until SIGTERM / SIGINT
    wait-incident              until the burst's dead letters are in orders.dlq and the clog shows
    wait-drained QUEUE         until QUEUE has no ready message

Environment: DLXTOOL_DEMO_VHOST (dlxtool-demo), DLXTOOL_DEMO_DIR (.demo: the service's log),
DLXTOOL_DEMO_AMQP_PORT (5672), DLXTOOL_DEMO_HTTP_PORT (15672); broker user guest/guest on localhost.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import random
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pika

VHOST = os.environ.get("DLXTOOL_DEMO_VHOST", "dlxtool-demo")
DEMO_DIR = Path(os.environ.get("DLXTOOL_DEMO_DIR", ".demo"))
AMQP_PORT = int(os.environ.get("DLXTOOL_DEMO_AMQP_PORT", "5672"))
HTTP_PORT = int(os.environ.get("DLXTOOL_DEMO_HTTP_PORT", "15672"))
API = f"http://localhost:{HTTP_PORT}/api"
AUTH = "Basic " + base64.b64encode(b"guest:guest").decode()

BAD_TYPE = "shop.orders.v1.PaymentFailed"
ATTEMPTS = 3          # the consumer's retry budget: the third failure dead-letters the message
RETRY_DELAY_MS = 1000  # the wait queue's TTL
BURST = 60            # events published at once when the service starts with --burst
TRICKLE_PER_S = 3.0   # then live traffic, so `dlxtool queues` shows rates
CORRUPT_AT = (17, 34)  # burst positions (never a PaymentFailed) whose bodies are cut in half in transit
POISON_DELAY_S = 0.01  # the failing handler's cost: bounds the requeue loop (and the demo's CPU use)

# routing key, message type, share of the traffic
EVENTS = [
    ("order.placed", "shop.orders.v1.OrderPlaced", 40),
    ("payment.captured", "shop.orders.v1.PaymentCaptured", 20),
    ("order.shipped", "shop.orders.v1.OrderShipped", 15),
    ("order.cancelled", "shop.orders.v1.OrderCancelled", 10),
    ("payment.failed", BAD_TYPE, 15),
]


# -- broker plumbing ----------------------------------------------------------------------------------


def api(method: str, path: str, body: dict | None = None) -> Any:
    req = urllib.request.Request(f"{API}/{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    req.add_header("Authorization", AUTH)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            data = resp.read()
            return json.loads(data) if data else None
    except urllib.error.HTTPError as exc:
        if method == "DELETE" and exc.code == 404:
            return None
        raise


def connect() -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        "localhost", AMQP_PORT, VHOST, pika.PlainCredentials("guest", "guest"), client_properties={
            "connection_name": "dlxtool-demo orders service"}))


def setup() -> None:
    """Start from scratch: a deleted vhost takes every queue, message and binding with it."""
    api("DELETE", f"vhosts/{quote(VHOST, safe='')}")
    api("PUT", f"vhosts/{quote(VHOST, safe='')}", {})
    api("PUT", f"permissions/{quote(VHOST, safe='')}/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    conn = connect()
    ch = conn.channel()
    ch.exchange_declare("orders", "topic", durable=True)
    ch.exchange_declare("orders.dlx", "fanout", durable=True)
    ch.exchange_declare("orders.retry", "direct", durable=True)
    ch.queue_declare("orders.dlq", durable=True)
    ch.queue_bind("orders.dlq", "orders.dlx")
    ch.queue_declare("orders.work", durable=True, arguments={"x-dead-letter-exchange": "orders.dlx"})
    ch.queue_bind("orders.work", "orders", "order.#")
    ch.queue_bind("orders.work", "orders", "payment.#")
    # Expired messages go back through the default exchange with their routing key, "orders.work".
    ch.queue_declare("orders.retry.wait", durable=True, arguments={
        "x-message-ttl": RETRY_DELAY_MS, "x-dead-letter-exchange": ""})
    ch.queue_bind("orders.retry.wait", "orders.retry", "orders.work")
    conn.close()
    print(f"vhost {VHOST}: exchanges orders (topic), orders.dlx, orders.retry; queues orders.work "
          f"(DLX orders.dlx), orders.retry.wait (TTL {RETRY_DELAY_MS} ms), orders.dlq")


# -- the events ---------------------------------------------------------------------------------------


def registry() -> Any:
    from proto_registry import DEMO_PROTOS, Registry

    return Registry.load([DEMO_PROTOS])


def events(reg: Any, rng: random.Random, start: int) -> Iterator[tuple[str, str, bytes]]:
    """(routing key, type, body) of realistic shop events, order numbers counting up from `start`."""
    keys, types, weights = zip(*((k, t, w) for k, t, w in EVENTS), strict=True)
    n = start
    while True:
        i = rng.choices(range(len(keys)), weights)[0]
        yield keys[i], types[i], build(reg, types[i], n, rng)
        n += 1


def build(reg: Any, type_name: str, n: int, rng: random.Random) -> bytes:
    msg = reg.message_class(type_name)()
    msg.order_id = f"o-{n}"
    when = datetime(2026, 11, 21, 2, 40, tzinfo=UTC) + timedelta(seconds=7 * n)
    cents = rng.randrange(1500, 25000)
    if type_name.endswith("OrderPlaced"):
        msg.customer_id = f"c-{rng.randrange(100, 999)}"
        item = msg.items.add(sku=f"SKU-{rng.randrange(1000, 9999)}", title="Espresso beans 1kg", quantity=1)
        item.unit_price.currency_code, item.unit_price.units = "EUR", cents // 100
        msg.total.currency_code, msg.total.units = "EUR", cents // 100
        msg.shipping_address.city, msg.shipping_address.country_code = "Lyon", "FR"
        msg.placed_at.FromDatetime(when)
        msg.channel = 1
    elif type_name.endswith("PaymentCaptured"):
        msg.payment_id = f"pay-{n}"
        msg.amount.currency_code, msg.amount.units = "EUR", cents // 100
        msg.captured_at.FromDatetime(when)
    elif type_name.endswith("OrderShipped"):
        msg.shipment_id, msg.carrier, msg.tracking_number = f"s-{n}", "colissimo", f"6A{n:09d}"
        msg.shipped_at.FromDatetime(when)
    elif type_name.endswith("OrderCancelled"):
        msg.customer_id, msg.reason = f"c-{rng.randrange(100, 999)}", 1
        msg.cancelled_at.FromDatetime(when)
    else:  # PaymentFailed
        msg.payment_id = f"pay-{n}"
        msg.amount.currency_code, msg.amount.units = "EUR", cents // 100
        msg.error_code, msg.error_message = "card_declined", "Do not honor"
        msg.failed_at.FromDatetime(when)
        msg.attempt = 1
        msg.decline.issuer, msg.decline.decline_code, msg.decline.retryable = "visa", "05", False
    return msg.SerializeToString()


def corrupt(position: int, type_name: str) -> bool:
    return position in CORRUPT_AT and type_name != BAD_TYPE


def burst_dead_letters() -> int:
    """How many PaymentFailed the start-up burst has (the same seed as serve --burst)."""
    gen = events(registry(), random.Random(2026), 1000)
    return sum(1 for _i, (_k, t, _b) in zip(range(BURST), gen, strict=False) if t == BAD_TYPE)


# -- the service --------------------------------------------------------------------------------------


def produce(stop: threading.Event, burst: bool) -> None:
    reg, rng = registry(), random.Random(2026 if burst else int(time.time()))
    conn = connect()
    ch = conn.channel()
    ch.confirm_delivery()
    gen = events(reg, rng, 1000 if burst else 2000)
    sent = 0
    try:
        while not stop.is_set():
            key, type_name, body = next(gen)
            if burst and corrupt(sent, type_name):
                body = body[: len(body) // 2]  # a proxy cut it: half a protobuf
            props = pika.BasicProperties(content_type="application/x-protobuf", type=type_name, delivery_mode=2,
                                         message_id=f"m-{sent:05d}-{key}", app_id="checkout",
                                         timestamp=int(time.time()))
            ch.basic_publish("orders", key, body, props)
            sent += 1
            if not burst or sent >= BURST:
                burst = False
                stop.wait(1 / TRICKLE_PER_S)
    finally:
        conn.close()


class Fulfilment:
    """The consumer; `fixed` is the build deployed after the incident."""

    def __init__(self, fixed: bool, log: logging.Logger) -> None:
        self.reg = registry()
        self.accept = {t for _k, t, _w in EVENTS if fixed or t != BAD_TYPE}
        self.fixed = fixed
        self.log = log

    def on_message(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        type_name = props.type or ""
        headers = dict(props.headers or {})
        payload = base64.b64encode(body).decode()
        try:
            msg = self.reg.decode(body, type_name)
        except Exception:  # noqa: BLE001 - the real service logs and rejects unparseable bodies too
            self.log.error("cannot parse event rk=%s msg_id=%s payload=%s", method.routing_key, props.message_id,
                           payload)
            if self.fixed:
                ch.basic_reject(method.delivery_tag, requeue=False)
            else:  # the bug: "maybe it works next time" — it never does
                time.sleep(POISON_DELAY_S)
                ch.basic_nack(method.delivery_tag, requeue=True)
            return
        if type_name in self.accept:
            how = " (replayed by dlxtool)" if "dlxtool-replay" in headers else ""
            self.log.info("handled %s order=%s%s", type_name.rsplit(".", 1)[-1], msg.order_id, how)
            ch.basic_ack(method.delivery_tag)
            return
        attempt = int(headers.get("x-retry-count", 0)) + 1
        self.log.warning("cannot handle event rk=%s attempt=%d/%d payload=%s", method.routing_key, attempt,
                         ATTEMPTS, payload)
        if attempt >= ATTEMPTS:
            ch.basic_reject(method.delivery_tag, requeue=False)  # RabbitMQ dead-letters it to orders.dlq
            return
        headers["x-retry-count"] = attempt
        retry = pika.BasicProperties(**{**props.__dict__, "headers": headers})
        ch.basic_publish("orders.retry", "orders.work", body, retry)
        ch.basic_ack(method.delivery_tag)

    def run(self, stop: threading.Event) -> None:
        conn = connect()
        ch = conn.channel()
        ch.basic_qos(prefetch_count=20)
        ch.basic_consume("orders.work", self.on_message)
        try:
            while not stop.is_set():
                conn.process_data_events(time_limit=0.2)
        finally:
            conn.close()


def serve(fixed: bool, burst: bool) -> None:
    DEMO_DIR.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(DEMO_DIR / "fulfilment.log")
    handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03dZ %(levelname)s fulfilment: %(message)s",
                                           "%Y-%m-%dT%H:%M:%S"))
    logging.Formatter.converter = time.gmtime
    log = logging.getLogger("fulfilment")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    consumer = Fulfilment(fixed, log)
    threads = [threading.Thread(target=consumer.run, args=(stop,), daemon=True),
               threading.Thread(target=produce, args=(stop, burst), daemon=True)]
    for t in threads:
        t.start()
    while not stop.is_set() and all(t.is_alive() for t in threads):
        stop.wait(0.2)
    stop.set()
    for t in threads:
        t.join(timeout=5)


# -- waiting for the broker ---------------------------------------------------------------------------


def ready_messages(queue: str) -> int:
    """Exact and current (a passive declare; the management API's figures lag by a stats interval)."""
    conn = connect()
    try:
        return conn.channel().queue_declare(queue, passive=True).method.message_count
    finally:
        conn.close()


def until(what: str, check: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"demo_shop: timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.3)


def wait_incident() -> None:
    want = burst_dead_letters()

    def ready() -> bool:
        info = api("GET", f"queues/{quote(VHOST, safe='')}/orders.work")
        stats = info.get("message_stats") or {}
        redeliver, ack = ((stats.get(f"{k}_details") or {}).get("rate", 0) for k in ("redeliver", "ack"))
        # What `dlxtool queues` calls clogged (acks under a tenth of the redeliveries), with a margin so the
        # next stats sample, which `dlxtool queues` may see, still shows it on a busy machine.
        return (ready_messages("orders.dlq") >= want and info.get("consumers", 0) > 0 and redeliver >= 1
                and ack <= 0.05 * redeliver and (info.get("messages") or 0) > 0)

    until(f"{want} dead letters in orders.dlq and the requeue loop in orders.work's rates", ready)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup")
    p = sub.add_parser("serve")
    p.add_argument("--fixed", action="store_true", help="the build that handles PaymentFailed")
    p.add_argument("--burst", action="store_true", help=f"publish {BURST} events at once first")
    sub.add_parser("wait-incident")
    p = sub.add_parser("wait-drained")
    p.add_argument("queue")
    args = parser.parse_args(argv)
    if args.cmd == "setup":
        setup()
    elif args.cmd == "serve":
        serve(args.fixed, args.burst)
    elif args.cmd == "wait-incident":
        wait_incident()
    else:
        until(f"{args.queue} to drain", lambda: ready_messages(args.queue) == 0)


if __name__ == "__main__":
    main()
