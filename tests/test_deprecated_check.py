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
    """dlxtool sends neither feature any more (its type probe used global QoS until 4.3 made it unreliable), so the
    check is shown a dlxtool frame that does: code compiled as dlxtool/broker/queues.py's, as a regression there
    would look. Caught, with its line; the frame is still sent (here: accepted by the broker)."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    source = ("def probe_global(conn):\n"
              "    ch = conn.channel()\n"
              "    ch.basic_qos(prefetch_count=1, global_qos=True)\n"
              "    ch.close()\n")
    namespace: dict = {}
    exec(compile(source, str(deprecated.DLXTOOL_DIR / "broker" / "queues.py"), "exec"), namespace)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        with deprecated.watch() as found:
            namespace["probe_global"](conn)
    finally:
        conn.close()
    assert [(v.feature, v.site) for v in found] == [("global_qos", "dlxtool/broker/queues.py:3 in probe_global")]
    assert "basic.qos(prefetch_count=1, global=true)" in str(found[0])


def test_dlxtools_type_probe_uses_no_deprecated_feature(broker: BrokerEnv, qname: str) -> None:
    """probe_type, the one known violation until now, on each queue type."""
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.queue_declare(qname + ".q", durable=True, arguments={"x-queue-type": "quorum"})
        ch.queue_declare(qname + ".s", durable=True, arguments={"x-queue-type": "stream"})
    url = f"amqp://guest:guest@{broker.host}:{broker.amqp_port}/{quote(broker.vhost, safe='')}"
    profile = BrokerProfile(name="t", urls=(url,), vhost=broker.vhost)
    with deprecated.watch() as found:
        types = [probe_type(profile, name) for name in (qname, qname + ".q", qname + ".s")]
    assert types == ["classic", "quorum", "stream"]
    assert found == []


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
