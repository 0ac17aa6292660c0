"""kombu publishes a JSON body with its compression (KOMBU_TEST_COMPRESSION: zlib, gzip, ...) to KOMBU_TEST_QUEUE
(declared by the test, with a dead-letter exchange), then takes it back and rejects it (requeue=False): RabbitMQ
dead-letters it. Prints the body as kombu hands it to a consumer (inflated: kombu's Message inflates it) in hex,
and the headers, for the test to compare.

Env: KOMBU_TEST_URL (amqp URL with the vhost), KOMBU_TEST_QUEUE, KOMBU_TEST_COMPRESSION.
"""

import json
import os
import time

from kombu import Connection, Producer, Queue

queue = os.environ["KOMBU_TEST_QUEUE"]
payload = {"order": "o-42", "lines": [{"sku": f"A-{i}", "qty": 2} for i in range(200)]}
with Connection(os.environ["KOMBU_TEST_URL"]) as conn:
    channel = conn.channel()
    Producer(channel).publish(payload, exchange="", routing_key=queue, serializer="json",
                              compression=os.environ["KOMBU_TEST_COMPRESSION"])
    taken = Queue(queue, channel=channel, no_declare=True)
    deadline = time.monotonic() + 30
    message = None
    while message is None and time.monotonic() < deadline:
        message = taken.get(no_ack=False)
        if message is None:
            time.sleep(0.05)
    assert message is not None, f"nothing came back from {queue}"
    print(json.dumps({"body": bytes(message.body).hex(), "headers": message.headers,
                      "content_type": message.content_type, "content_encoding": message.content_encoding}))
    message.reject(requeue=False)
