"""`--management-url` (DLXTOOL_MANAGEMENT_URL): the management API of the broker `--url` names.

Derived from the URL it is host:15672; on a machine with several nodes (or port forwards) that is
another broker, which is asked about a vhost it does not have.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only


def _peek(run, node, *args: str, **kw):
    return run("peek", *args, "--url", node.url, "-n", "1", "--format", "json", **kw)


def test_url_of_another_node_asks_that_nodes_api_only_with_management_url(run, broker, second_broker,
                                                                         qname) -> None:
    with second_broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    second_broker.publish(qname, [b"on the second node"])

    # The harness points DLXTOOL_MANAGEMENT_URL at the main test broker: the wrong API for this URL,
    # which dlxtool finds out before using any of its data (exit 3).
    wrong = _peek(run, second_broker, qname)
    assert wrong.exit_code == 3, wrong.output
    assert "DLXTOOL_MANAGEMENT_URL names the API of another broker" in wrong.stderr

    typed = _peek(run, second_broker, qname, "--management-url", second_broker.management_url)
    assert typed.exit_code == 0, typed.stderr
    assert [json.loads(typed.stdout)[0]["queue"]] == [qname]

    from_env = _peek(run, second_broker, qname, env={"DLXTOOL_MANAGEMENT_URL": second_broker.management_url})
    assert from_env.exit_code == 0, from_env.stderr
    assert second_broker.queue_depth(qname) == 1


def test_management_url_is_reported_by_brokers_check(run, second_broker) -> None:
    result = run("brokers", "check", "--url", second_broker.url, "--management-url",
                 second_broker.management_url, "--format", "json")
    assert result.exit_code == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert row["management_url"] == second_broker.management_url
    assert row["management_ok"]


def test_a_bad_management_url_is_a_usage_error(run, broker) -> None:
    result = run("brokers", "check", "--url", broker.url, "--management-url", "localhost:15672")
    assert result.exit_code == 2
    assert "--management-url must be an http:// or https:// URL" in result.stderr
    assert "Traceback" not in result.output
