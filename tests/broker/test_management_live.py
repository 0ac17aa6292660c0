"""The management client against the real broker: effective settings as the broker applies them."""

import time
from urllib.parse import quote


def test_policy_delivery_limit_below_argument_is_the_one_in_effect(broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 10})
    broker.mgmt.request("PUT", f"policies/{quote(broker.vhost, safe='')}/{qname}",
                        {"pattern": f"^{qname}$", "definition": {"delivery-limit": 2}, "apply-to": "queues"})
    try:
        deadline = time.monotonic() + 15
        info = broker.mgmt.queue(broker.vhost, qname)
        while info.policy is None and time.monotonic() < deadline:
            time.sleep(0.1)
            info = broker.mgmt.queue(broker.vhost, qname)
        assert info.type == "quorum"
        assert info.delivery_limit == 2
        assert info.broker_version and info.broker_version.count(".") >= 1
    finally:
        broker.mgmt.request("DELETE", f"policies/{quote(broker.vhost, safe='')}/{qname}")
