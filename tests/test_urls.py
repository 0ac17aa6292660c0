import pytest

from dlxtool.errors import UsageError
from dlxtool.secrets import scrub
from dlxtool.urls import derive_management_url, mask_any_url, parse_amqp_url


@pytest.mark.parametrize(
    "url, host, port, vhost, tls",
    [
        ("amqp://localhost", "localhost", 5672, None, False),
        ("amqp://localhost/", "localhost", 5672, None, False),
        ("amqp://localhost/%2F", "localhost", 5672, "/", False),
        ("amqps://rabbit.example/orders", "rabbit.example", 5671, "orders", True),
        ("amqp://u:p@[::1]:5673/a%2Fb", "::1", 5673, "a/b", False),
    ],
)
def test_parse(url: str, host: str, port: int, vhost: str | None, tls: bool) -> None:
    parsed = parse_amqp_url(url)
    assert (parsed.host, parsed.port, parsed.vhost, parsed.tls) == (host, port, vhost, tls)


def test_masked_never_contains_password() -> None:
    parsed = parse_amqp_url("amqp://bob:p%40ss%3Aword@h:5672/v")
    assert parsed.password == "p@ss:word"
    assert parsed.masked() == "amqp://bob:****@h:5672/v"
    assert "ss" not in parsed.masked().split("@")[0].split(":", 2)[-1]


@pytest.mark.parametrize("bad", ["http://h/", "amqp://", "amqp://h:notaport/", "h:5672"])
def test_bad_urls_are_usage_errors_without_the_password(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_amqp_url(bad.replace("//", "//u:topsecret@", 1) if "//" in bad else bad)


def test_bad_url_error_is_masked() -> None:
    with pytest.raises(UsageError) as err:
        parse_amqp_url("amqp://u:topsecret@h:notaport/")
    assert "topsecret" not in str(err.value)


def test_mask_any_url_and_scrub() -> None:
    assert mask_any_url("https://admin:pw123@m.example:15671/") == "https://admin:****@m.example:15671/"
    assert scrub("failed for amqp://x:abc@h/ and http://y:def@k/") == "failed for amqp://x:****@h/ and http://y:****@k/"


def test_management_url_derivation() -> None:
    assert derive_management_url(parse_amqp_url("amqp://h")) == "http://h:15672/"
    assert derive_management_url(parse_amqp_url("amqps://h:5671")) == "https://h:15671/"
