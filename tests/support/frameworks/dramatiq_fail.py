"""A Dramatiq 2.x worker whose actor always fails: its RabbitMQ broker dead-letters to <queue>.XQ.

Run with a Python that has dramatiq[rabbitmq] (tests/cli/test_real_frameworks.py): URL QUEUE N [fixed].
With `fixed` the actor succeeds and prints one line per message it processed. With N=0 it sends nothing
(a worker for replayed messages). Env FRAMEWORK_TEST_LOG: a file each attempt appends "attempt I" to.
"""

import os
import sys
import time

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

url, queue, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
fixed = sys.argv[4:] == ["fixed"]
broker = RabbitmqBroker(url=url)
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=queue, max_retries=1, min_backoff=10, max_backoff=20)
def charge(i: int) -> None:
    if log := os.environ.get("FRAMEWORK_TEST_LOG"):
        with open(log, "a") as f:
            f.write(f"attempt {i}\n")
    if not fixed:
        raise ValueError(f"card declined for order {i % 2}")
    print(f"processed {i}", flush=True)


if not fixed:
    for i in range(n):
        charge.send(i)
worker = dramatiq.Worker(broker, worker_threads=1, worker_timeout=100)
worker.start()
try:
    time.sleep(120)  # the test stops us once it has seen what it waits for
finally:
    worker.stop()
