"""Helpers for integration tests: a vhost of our own, channels, publishing and reading back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pika

from dlxtool.broker.management import ManagementClient
from dlxtool.config import BrokerProfile

# What a test allows a broker to take to answer (dlxtool's default is 5 s): scripts/test runs 4 workers against
# Erlang nodes on 2 cores, with a cluster's three nodes starting beside them, and an AMQP 1.0 open has taken more
# than 5 s then (the 4.0 and 4.3 passes of one CI run, 3 of ~1,240 tests). Load, not what a test is about: tests of
# time-outs set their own.
TEST_TIMEOUT = 20.0


@dataclass
class BrokerEnv:
    host: str
    amqp_port: int
    http_port: int
    vhost: str
    mgmt: ManagementClient
    version: str = ""  # RabbitMQ's, e.g. "3.10.8" or "4.0.5"

    def routes(self, default_exchange: bool = False) -> Any:
        """replay()'s routes as the CLI builds them (dlxtool.ops.routes.Routes): each destination's dead-letter
        exchange checked through this broker's management API, for tests that call the ops layer directly."""
        from dlxtool.ops.routes import Router, Routes

        return Routes(default_exchange, exchanges=None, router=Router(self.mgmt, self.vhost))

    @property
    def major(self) -> int:
        """RabbitMQ's major version: tests assert what that version really does where versions differ."""
        return int(self.version.split(".")[0])

    @property
    def url(self) -> str:
        """amqp URL with this run's vhost, as a user would pass to --url."""
        return f"amqp://guest:guest@{self.host}:{self.amqp_port}/{quote(self.vhost, safe='')}"

    @property
    def management_url(self) -> str:
        return f"http://{self.host}:{self.http_port}/"

    def profile(self, name: str = "t") -> BrokerProfile:
        """A broker profile for this run's vhost (as --url gives), with the tests' patience (TEST_TIMEOUT)."""
        return BrokerProfile(name=name, urls=(self.url,), vhost=self.vhost, timeout=TEST_TIMEOUT)

    def quorum_without_limit(self) -> dict[str, Any]:
        """Arguments of a quorum queue with no delivery limit on this broker: 3.x has none unless one is
        set; 4.x has 20 unless x-delivery-limit -1 switches it off (on 3.x, -1 drops at the first return)."""
        return {"x-queue-type": "quorum", **({"x-delivery-limit": -1} if self.major >= 4 else {})}

    def config_toml(self, name: str = "test", **extra: str) -> str:
        lines = [f"[brokers.{name}]", f'url = "amqp://guest@{self.host}:{self.amqp_port}/"',
                 f'vhost = "{self.vhost}"', 'password_env = "DLXTOOL_TEST_PASSWORD"',
                 f'management_url = "{self.management_url}"']
        lines += [f"{k} = {v}" for k, v in extra.items()]
        return "\n".join(lines) + "\n"

    @contextmanager
    def channel(self) -> Iterator[Any]:
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            host=self.host, port=self.amqp_port, virtual_host=self.vhost,
            credentials=pika.PlainCredentials("guest", "guest")))
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            yield ch
        finally:
            if conn.is_open:
                conn.close()

    def publish(self, queue: str, bodies: list[bytes], *, exchange: str = "", routing_key: str | None = None,
                properties: pika.BasicProperties | None = None) -> None:
        with self.channel() as ch:
            for body in bodies:
                ch.basic_publish(exchange, queue if routing_key is None else routing_key, body,
                                 properties=properties, mandatory=True)

    def drain(self, queue: str) -> list[tuple[Any, Any, bytes]]:
        """Take every message out of a queue (acked): [(method, properties, body)]."""
        out = []
        with self.channel() as ch:
            while True:
                method, props, body = ch.basic_get(queue, auto_ack=True)
                if method is None:
                    return out
                out.append((method, props, body))

    def snapshot(self, queue: str) -> list[tuple[bytes, dict[str, Any]]]:
        """Bodies and headers in queue order, without removing them (get all, then nack all).

        Only for classic queues in tests: the thing under test must not be used to check itself.
        """
        out = []
        with self.channel() as ch:
            last = None
            while True:
                method, props, body = ch.basic_get(queue, auto_ack=False)
                if method is None:
                    break
                last = method.delivery_tag
                out.append((body, dict(props.headers or {})))
            if last is not None:
                ch.basic_nack(last, multiple=True, requeue=True)
        return out

    def queue_depth(self, queue: str) -> int:
        with self.channel() as ch:
            return ch.queue_declare(queue, passive=True).method.message_count

    def wait_depth(self, queue: str, expected: int, timeout: float = 15.0) -> int:
        deadline = time.monotonic() + timeout
        depth = self.queue_depth(queue)
        while depth != expected and time.monotonic() < deadline:
            time.sleep(0.05)
            depth = self.queue_depth(queue)
        return depth


@contextmanager
def open_vhost(host: str, amqp_port: int, http_port: int, vhost: str) -> Iterator[BrokerEnv]:
    mgmt = ManagementClient(f"http://{host}:{http_port}/", "guest", "guest", timeout=30)
    version = str(mgmt.overview().get("rabbitmq_version") or "0")
    mgmt.request("PUT", f"vhosts/{quote(vhost, safe='')}", {})
    mgmt.request("PUT", f"permissions/{quote(vhost, safe='')}/guest",
                 {"configure": ".*", "write": ".*", "read": ".*"})
    try:
        yield BrokerEnv(host=host, amqp_port=amqp_port, http_port=http_port, vhost=vhost, mgmt=mgmt,
                        version=version)
    finally:
        mgmt.request("DELETE", f"vhosts/{quote(vhost, safe='')}")
