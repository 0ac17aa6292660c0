"""QueueInfo resolves settings the way the broker does (pure logic on API rows)."""

from dlxtool.broker.management import queue_info


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
    assert queue_info(row(type_="classic", args={"x-delivery-limit": 3})).delivery_limit is None
    assert queue_info(row(policy=[]), "3.10.8").delivery_limit is None  # old brokers send [] for "none"
