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
