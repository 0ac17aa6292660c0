"""A Celery 5 app whose task retries, then rejects (requeue=False): RabbitMQ dead-letters it to QUEUE.dlq.

Env: CELERY_TEST_URL (amqp URL with the vhost), CELERY_TEST_QUEUE, CELERY_TEST_N; FRAMEWORK_TEST_LOG: a file
each attempt appends "attempt I retries R" to; CELERY_TEST_FIXED=1: the task succeeds.
Run the worker with `celery -A celery_fail worker --pool=solo`; `python celery_fail.py` sends the tasks.
"""

import os

from celery import Celery
from celery.exceptions import Reject
from kombu import Queue

queue = os.environ["CELERY_TEST_QUEUE"]
app = Celery("celery_fail", broker=os.environ["CELERY_TEST_URL"])
app.conf.update(
    task_acks_late=True,
    task_queues=[Queue(queue, routing_key=queue, queue_arguments={
        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{queue}.dlq"})],
    task_default_queue=queue, task_default_routing_key=queue, worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
)


@app.task(bind=True, max_retries=2, name="shop.charge")
def charge(self, i: int) -> None:
    if log := os.environ.get("FRAMEWORK_TEST_LOG"):
        with open(log, "a") as f:
            f.write(f"attempt {i} retries {self.request.retries}\n")
    if os.environ.get("CELERY_TEST_FIXED") == "1":
        return
    if self.request.retries < self.max_retries:
        raise self.retry(countdown=0)
    raise Reject(f"card declined for order {i}", requeue=False)


if __name__ == "__main__":
    for i in range(int(os.environ["CELERY_TEST_N"])):
        charge.delay(i)
