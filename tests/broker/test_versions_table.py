"""The version table's lookups, without a broker (what each row says is measured in tests/broker/test_versions.py)."""

from __future__ import annotations

import pytest

from dlxtool.broker import versions
from dlxtool.broker.versions import Version


def test_versions_parse_as_brokers_give_them() -> None:
    assert Version.parse("4.3.6") == Version(4, 3, 6)
    assert Version.parse(b"3.10.8") == Version(3, 10, 8)
    assert Version.parse("4.1.0-rc.1") == Version(4, 1, 0)
    assert Version.parse("4.2") == Version(4, 2, 0)
    assert Version.parse("") is None and Version.parse(None) is None and Version.parse("rabbit") is None
    assert str(Version(4, 3, 6)) == "4.3.6" and Version(3, 13, 7) < Version(4, 0, 0) < Version(4, 3, 0)


@pytest.mark.parametrize("version, row", [
    ("3.10.8", "3.10.8"), ("3.12.1", "3.10.8"), ("4.0.5", "4.0.5"), ("4.2.3", "4.0.5"), ("4.3.0", "4.3.6"),
    ("4.3.6", "4.3.6"), ("5.0.0", "4.3.6"), (None, "3.10.8"), ("garbage", "3.10.8")])
def test_each_version_finds_its_row(version, row) -> None:
    assert versions.behaviour(version).measured == row


def test_only_the_measured_rows_count_as_measured() -> None:
    assert versions.measured_versions() == ("3.10.8", "4.0.5", "4.3.6")


def test_a_peeks_nacks_count_before_43_only() -> None:
    assert [versions.quorum_give_back_counts(v, "nack") for v in ("3.10.8", "4.0.5", "4.2.0", "4.3.6", None)] == [
        True, True, True, False, True]
    assert all(versions.quorum_give_back_counts("4.3.6", how) for how in ("close", "cancel", "reject"))


@pytest.mark.parametrize("version, argument, policy, limit", [
    ("3.10.8", None, None, None), ("4.0.5", None, None, 20), ("4.3.6", None, None, 20),
    ("3.10.8", -1, None, 0), ("4.0.5", -1, None, None), (None, -1, None, 0),
    ("3.10.8", 10, 2, 2), ("4.0.5", 10, 2, 2), ("3.10.8", -1, 7, 0), ("4.0.5", -1, 7, 7), ("4.3.6", 5, -1, 5),
    ("4.3.6", -1, -1, None), ("4.0.5", 3, 7, 3), ("4.0.5", 0, None, 0)])
def test_effective_delivery_limit(version, argument, policy, limit) -> None:
    assert versions.effective_delivery_limit(version, argument, policy) == limit


def test_the_api_s_own_limit() -> None:
    assert versions.api_delivery_limit("4.3.6", {"delivery_limit": 7}) == (True, 7)
    assert versions.api_delivery_limit("4.0.5", {"delivery_limit": "unlimited"}) == (True, None)
    assert versions.api_delivery_limit("4.0.5", {}) == (False, None)
    assert versions.api_delivery_limit("3.10.8", {"delivery_limit": 7}) == (False, None)


def test_the_type_probes_refusals() -> None:
    text = ("PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue 'q' in vhost 'v' "
            "of queue type rabbit_quorum_queue")
    assert versions.type_from_refusal(text) == "quorum"
    assert versions.type_from_refusal(text.replace("quorum", "classic")) == "classic"
    assert versions.type_from_refusal(text.replace("rabbit_quorum_queue", "rabbit_mqtt_qos0_queue")) is None
    assert versions.type_from_refusal("ACCESS_REFUSED - access to queue 'q' refused") is None


def test_what_the_broker_says_of_a_feature() -> None:
    listed = [{"name": "global_qos", "state": "denied"}, {"name": "transient_nonexcl_queues", "state": "permitted"},
              {"name": "ram_node_type"}]
    assert versions.feature_denied(listed, "global_qos") is True
    assert versions.feature_denied(listed, "transient_nonexcl_queues") is False
    assert versions.feature_denied(listed, "ram_node_type") is None  # 4.0: listed without a state
    assert versions.feature_denied(listed, "not_a_feature") is False
    assert versions.feature_denied(None, "global_qos") is None  # 3.10: no such endpoint
    assert versions.stats_disabled({"disable_stats": True}) and not versions.stats_disabled({"disable_stats": False})
