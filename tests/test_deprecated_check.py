"""The suite's check of what dlxtool sends against hosted RabbitMQ 4.3's denied features
(tests/support/deprecated.py), on the broker under test: it catches dlxtool, and only dlxtool."""

from __future__ import annotations

from urllib.parse import quote

import pika
from pika import spec

from dlxtool.broker.channel import AsyncChannel
from dlxtool.broker.queues import probe_type
from dlxtool.config import BrokerProfile
from tests.support import deprecated
from tests.support.broker import BrokerEnv


def test_what_is_denied() -> None:
    assert deprecated.denied_feature(spec.Basic.Qos(prefetch_count=1, global_qos=True))[0] == "global_qos"
    assert deprecated.denied_feature(spec.Basic.Qos(prefetch_count=1)) is None
    assert deprecated.denied_feature(spec.Queue.Declare("q"))[0] == "transient_nonexcl_queues"
    assert deprecated.denied_feature(spec.Queue.Declare("q", auto_delete=True))[0] == "transient_nonexcl_queues"
    for allowed in (spec.Queue.Declare("q", durable=True), spec.Queue.Declare("", exclusive=True),
                    spec.Queue.Declare("q", passive=True)):
        assert deprecated.denied_feature(allowed) is None


def test_dlxtool_asking_for_global_qos_is_caught_with_its_line(broker: BrokerEnv, qname: str) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    url = f"amqp://guest:guest@{broker.host}:{broker.amqp_port}/{quote(broker.vhost, safe='')}"
    with deprecated.watch() as found:
        assert probe_type(BrokerProfile(name="t", urls=(url,), vhost=broker.vhost), qname) == "classic"
    assert [(v.feature, v.site.split(":")[0], v.site.split(" in ")[1]) for v in found] == [
        ("global_qos", "dlxtool/broker/queues.py", "probe_type")]
    assert "basic.qos(prefetch_count=1, global=true)" in str(found[0])


def test_what_a_test_sends_itself_is_not_dlxtools(broker: BrokerEnv, qname: str) -> None:
    with deprecated.watch() as found:
        with broker.channel() as ch:
            ch.basic_qos(prefetch_count=1, global_qos=True)
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        try:
            AsyncChannel(conn).call("queue_declare", qname, durable=True)  # through dlxtool's pass-through
            AsyncChannel(conn).call("basic_qos", prefetch_count=1, global_qos=True)
        finally:
            conn.close()
    assert found == []
