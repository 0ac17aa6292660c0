"""An application-managed TTL retry ladder with a real consumer loop (issue 20's seed posts).

Topology, in the test's vhost (prefix P):
  * direct exchange P.x; the work queue P.work bound to it by `order.created` and `order.updated`;
  * headers exchange P.retry routing on header `retry-tier` ("1".."3") to the wait queues P.wait.N, each
    with a TTL and P.x as its dead-letter exchange (no dead-letter routing key: the key is kept);
  * the parking lot P.parking. Form "a": the application publishes a message there itself after its last
    retry. Form "b": it nacks it (requeue=False) and P.work's dead-letter exchange (fanout P.park) puts it
    there.

The consumer (a thread with its own connection) handles each delivery as the application would: while
`broken`, it republishes to P.retry with the DELIVERY'S routing key and `x-retry-count` + 1 (and acks),
until 3 retries; then it parks the message (form a or b). When fixed, it records (routing key, body) in
`processed` and acks. Nothing here touches x-death: every death in the parking lot is the broker's.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pika

RETRIES = 3
KEYS = ("order.created", "order.updated")


@dataclass
class Ladder:
    prefix: str
    form: str  # "a" (the app parks) or "b" (nack; the DLX parks)
    url: str
    ttl_ms: int = 60
    broken: threading.Event = field(default_factory=threading.Event)
    processed: list[tuple[str, bytes]] = field(default_factory=list)
    keys_seen: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def work(self) -> str:
        return f"{self.prefix}.work"

    @property
    def parking(self) -> str:
        return f"{self.prefix}.parking"

    @property
    def exchange(self) -> str:
        return f"{self.prefix}.x"

    def wait_queue(self, tier: int) -> str:
        return f"{self.prefix}.wait.{tier}"

    def declare(self, ch: Any) -> None:
        p = self.prefix
        ch.exchange_declare(self.exchange, "direct")
        ch.exchange_declare(f"{p}.retry", "headers")
        ch.queue_declare(self.parking, durable=True)
        work_args = {}
        if self.form == "b":
            ch.exchange_declare(f"{p}.park", "fanout")
            ch.queue_bind(self.parking, f"{p}.park")
            work_args = {"x-dead-letter-exchange": f"{p}.park"}
        ch.queue_declare(self.work, arguments=work_args, durable=True)
        for key in KEYS:
            ch.queue_bind(self.work, self.exchange, key)
        for tier in range(1, RETRIES + 1):
            ch.queue_declare(self.wait_queue(tier), arguments={"x-message-ttl": self.ttl_ms,
                                                               "x-dead-letter-exchange": self.exchange}, durable=True)
            ch.queue_bind(self.wait_queue(tier), f"{p}.retry",
                          arguments={"x-match": "all", "retry-tier": str(tier)})

    def publish(self, ch: Any, bodies: dict[str, bytes]) -> None:
        """One message per routing key, as the producer sends them."""
        for key, body in bodies.items():
            ch.basic_publish(self.exchange, key, body, pika.BasicProperties(delivery_mode=2,
                                                                            headers={"tenant": "acme"}),
                             mandatory=True)

    # -- the consumer loop ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"ladder-{self.prefix}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        assert not self.errors, self.errors

    def _run(self) -> None:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.url))
            ch = conn.channel()
            ch.confirm_delivery()
            ch.basic_qos(prefetch_count=10)
            ch.basic_consume(self.work, lambda c, m, p, b: self._handle(c, m, p, b))
            while not self._stop.is_set():
                conn.process_data_events(time_limit=0.05)
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.errors.append(exc)

    def _handle(self, ch: Any, method: Any, props: Any, body: bytes) -> None:
        self.keys_seen.append(method.routing_key)
        if not self.broken.is_set():
            self.processed.append((method.routing_key, body))
            ch.basic_ack(method.delivery_tag)
            return
        headers = dict(props.headers or {})
        retries = int(headers.get("x-retry-count", 0))
        if retries < RETRIES:
            headers["x-retry-count"] = retries + 1
            headers["retry-tier"] = str(retries + 1)
            ch.basic_publish(f"{self.prefix}.retry", method.routing_key, body,
                             pika.BasicProperties(delivery_mode=2, headers=headers), mandatory=True)
            ch.basic_ack(method.delivery_tag)
        elif self.form == "a":
            ch.basic_publish("", self.parking, body, pika.BasicProperties(delivery_mode=2, headers=headers),
                             mandatory=True)
            ch.basic_ack(method.delivery_tag)
        else:
            ch.basic_nack(method.delivery_tag, requeue=False)


def wait_until(check: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
