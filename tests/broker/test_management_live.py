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


def test_the_overview_is_asked_without_statistics_unless_they_are_wanted(broker) -> None:
    """Every command's first question (the identity proof's overview) skips the API's statistics database, which
    held the answer 4-5 s now and then on a busy 4.3.6 node; the identity fields are there all the same."""
    from dlxtool.broker.management import OVERVIEW_COLUMNS, ManagementClient

    client = ManagementClient(broker.management_url, "guest", "guest")
    lean = client.overview()
    assert lean["disable_stats"] is True and "queue_totals" not in lean and "message_stats" not in lean
    assert set(client.overview(columns=OVERVIEW_COLUMNS)) == set(OVERVIEW_COLUMNS)
    assert client.overview(columns=OVERVIEW_COLUMNS)["rabbitmq_version"] == broker.version
    full = client.overview(stats=True)
    assert "disable_stats" in full
    if full["disable_stats"] is not True:  # a broker that keeps statistics (not 4.3 with metrics collection denied)
        assert "queue_totals" in full
