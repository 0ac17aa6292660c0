"""ManagementClient pieces that need no broker."""

from dlxtool.broker.management import ManagementClient, queue_info


def test_credentials_in_the_management_url_leave_the_url() -> None:
    client = ManagementClient("http://oncall:S3cret%40x@rabbit.example:15672/base", "guest", "guest")
    assert client.base_url == "http://rabbit.example:15672/base/"
    assert client.masked_url == "http://rabbit.example:15672/base/"
    plain = ManagementClient("https://[::1]:15671", "u", "p")
    assert plain.base_url == "https://[::1]:15671/"


def test_setting_source_says_where_a_setting_comes_from() -> None:
    info = queue_info({"name": "q", "arguments": {"x-dead-letter-exchange": "a"},
                       "effective_policy_definition": {"dead-letter-exchange": "b", "delivery-limit": 3}})
    assert info.setting_source("dead-letter-exchange") == "arguments"
    assert info.setting_source("delivery-limit") == "policy"
    assert info.setting_source("message-ttl") is None


def row(type_: str = "quorum", args: dict | None = None, policy: dict | None = None) -> dict:
    return {"name": "q", "vhost": "/", "type": type_, "arguments": args or {},
            "effective_policy_definition": policy or {}}


def test_numeric_limits_take_the_stricter_of_argument_and_policy() -> None:
    info = queue_info(row(args={"x-delivery-limit": 10, "x-max-length": 5}, policy={"delivery-limit": 2,
                                                                                      "max-length": 50}))
    assert info.delivery_limit == 2
    assert info.setting("max-length") == 5
    assert info.setting_source("delivery-limit") == "policy"
    assert info.setting_source("max-length") == "arguments"


def test_other_settings_arguments_win() -> None:
    info = queue_info(row(args={"x-dead-letter-exchange": ""}, policy={"dead-letter-exchange": "dlx"}))
    assert info.dead_letter_exchange == ""
    assert queue_info(row(policy={"dead-letter-exchange": "dlx"})).dead_letter_exchange == "dlx"


def test_delivery_limit_defaults_by_version_and_type() -> None:
    assert queue_info(row(), "3.10.8").delivery_limit is None
    assert queue_info(row(), "4.1.0").delivery_limit == 20
    assert queue_info(row(args={"x-delivery-limit": -1}), "4.1.0").delivery_limit is None
    # 3.x has no "off" switch: a negative limit dead-letters at the first return, like 0 (seen on 3.10.8)
    assert queue_info(row(args={"x-delivery-limit": -1}), "3.10.8").delivery_limit == 0
    assert queue_info(row(args={"x-delivery-limit": -1})).delivery_limit == 0  # version not known: the safe reading
    assert queue_info(row(type_="classic", args={"x-delivery-limit": 3})).delivery_limit is None
    assert queue_info(row(policy=[]), "3.10.8").delivery_limit is None  # old brokers send [] for "none"


def test_tail_republish_risk_only_for_drop_head_length_limits() -> None:
    assert queue_info(row(type_="classic", args={"x-max-length": 100})).tail_republish_risk
    # reject-publish-dlx dead-letters a copy of what it refuses (seen on 3.10): a kept message would come back
    assert "dead-lettered" in queue_info(row(type_="classic", args={
        "x-max-length": 100, "x-overflow": "reject-publish-dlx"})).tail_republish_risk
    assert queue_info(row(type_="classic", policy={"max-length-bytes": 10_000})).tail_republish_risk
    assert queue_info(row(type_="classic", args={"x-max-length": 100, "x-overflow": "reject-publish"})
                      ).tail_republish_risk is None
    assert queue_info(row(type_="classic")).tail_republish_risk is None


def test_a_queue_without_its_first_stats_sample_has_unknown_policies() -> None:
    """A queue declared moments ago: the API's answer has no effective_policy_definition (null) until its first
    stats sample; "no policy" is {} (or [] on old brokers). Unknown is not none."""
    fresh = queue_info({"name": "q", "vhost": "/", "policy": None, "effective_policy_definition": None,
                        "arguments": {}})
    assert not fresh.policies_known and fresh.dead_letter_exchange is None
    assert queue_info(row(type_="classic")).policies_known
    assert queue_info({"name": "q", "arguments": {}, "effective_policy_definition": []}).policies_known
