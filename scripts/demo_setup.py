"""Build the demo topology in vhost dlxtool-demo and let the broker dead-letter some messages.

orders (topic) → orders.work (DLX orders.dlx) ; a consumer rejects payment events it cannot handle,
RabbitMQ dead-letters them via orders.dlx (fanout) into orders.dlq.
"""

from __future__ import annotations

import json
import time
import urllib.request
from base64 import b64encode

import pika

VHOST = "dlxtool-demo"
API = "http://localhost:15672/api"
AUTH = "Basic " + b64encode(b"guest:guest").decode()


def api(method: str, path: str, body: dict | None = None) -> None:
    req = urllib.request.Request(f"{API}/{path}", method=method,
                                 data=json.dumps(body).encode() if body is not None else None)
    req.add_header("Authorization", AUTH)
    req.add_header("Content-Type", "application/json")
    try:
        urllib.request.urlopen(req, timeout=10).close()
    except urllib.error.HTTPError as exc:
        if not (method == "DELETE" and exc.code == 404):
            raise


def main() -> None:
    api("DELETE", f"vhosts/{VHOST}")
    api("PUT", f"vhosts/{VHOST}", {})
    api("PUT", f"permissions/{VHOST}/guest", {"configure": ".*", "write": ".*", "read": ".*"})
    conn = pika.BlockingConnection(pika.ConnectionParameters(
        "localhost", virtual_host=VHOST, credentials=pika.PlainCredentials("guest", "guest")))
    ch = conn.channel()
    ch.exchange_declare("orders", "topic", durable=True)
    ch.exchange_declare("orders.dlx", "fanout", durable=True)
    ch.queue_declare("orders.dlq", durable=True)
    ch.queue_bind("orders.dlq", "orders.dlx")
    ch.queue_declare("orders.work", durable=True, arguments={"x-dead-letter-exchange": "orders.dlx"})
    ch.queue_bind("orders.work", "orders", "order.#")
    ch.queue_bind("orders.work", "orders", "payment.#")
    ch.confirm_delivery()
    for i in range(20):
        kind = "payment.failed" if i % 4 == 0 else "order.placed"
        body = json.dumps({"id": f"ord-{1000 + i}", "event": kind}).encode()
        ch.basic_publish("orders", kind, body, pika.BasicProperties(
            content_type="application/json", type=kind, message_id=f"m-{i}", delivery_mode=2,
            timestamp=int(time.time())))

    # The buggy consumer: acks orders, rejects payment events (no requeue) → RabbitMQ dead-letters them.
    while True:
        method, props, _body = ch.basic_get("orders.work")
        if method is None:
            break
        if props.type == "payment.failed":
            ch.basic_reject(method.delivery_tag, requeue=False)
        else:
            ch.basic_ack(method.delivery_tag)
    depth = ch.queue_declare("orders.dlq", passive=True).method.message_count
    print(f"orders.dlq now holds {depth} dead letters (reason: rejected, origin: orders.work)")
    conn.close()


if __name__ == "__main__":
    main()
