from pathlib import Path

import pytest

from dlxtool import secrets
from dlxtool.config import literal_password_warnings, load_config, select_profile
from dlxtool.errors import ConfigError, NotFoundError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    path.chmod(0o600)
    return path


BASIC = """
default = "staging"
timeout = 7

[brokers.staging]
url = "amqp://oncall@stage.example:5672/orders"
password_env = "STAGE_PW"

[brokers.prod-eu]
urls = ["amqps://r1.eu.example", "amqps://r2.eu.example:5671"]
user = "oncall"
password_file = "{pwfile}"
vhost = "/"
reset_headers = ["count"]

[brokers.prod-eu.tls]
ca = "/etc/ssl/ca.pem"
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    pwfile = tmp_path / "pw"
    pwfile.write_text("s3cret-from-file\n")
    return write(tmp_path, BASIC.replace("{pwfile}", str(pwfile)))


def test_explicit_file_wins_over_env_and_xdg(tmp_path: Path, config_file: Path) -> None:
    other = tmp_path / "other.toml"
    other.write_text('[brokers.other]\nurl = "amqp://h/"\n')
    xdg = tmp_path / "xdg" / "dlxtool"
    xdg.mkdir(parents=True)
    (xdg / "config.toml").write_text('[brokers.xdg]\nurl = "amqp://h/"\n')
    env = {"DLXTOOL_CONFIG": str(other), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    assert "staging" in load_config(str(config_file), env).brokers
    assert "other" in load_config(None, env).brokers
    assert "xdg" in load_config(None, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}).brokers


def test_no_config_means_local_default(tmp_path: Path) -> None:
    config = load_config(None, {"HOME": str(tmp_path)})
    profile = select_profile(config)
    assert profile.name == "local"
    assert profile.masked_urls() == ["amqp://guest:****@localhost:5672/"]
    assert profile.password() == "guest"
    assert profile.management_url == "http://localhost:15672/"


def test_named_config_that_is_missing_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="does not exist"):
        load_config(str(tmp_path / "nope.toml"), {})


def test_default_broker_and_broker_override(config_file: Path) -> None:
    config = load_config(str(config_file), {"STAGE_PW": "pw"})
    assert select_profile(config).name == "staging"
    assert select_profile(config).vhost == "orders"
    assert select_profile(config).timeout == 7
    prod = select_profile(config, broker="prod-eu")
    assert [n.port for n in prod.nodes] == [5671, 5671]
    assert prod.password() == "s3cret-from-file"
    assert prod.tls.ca == "/etc/ssl/ca.pem"
    assert prod.reset_headers == ("count",)
    assert prod.management_url == "https://r1.eu.example:15671/"


def test_url_overrides_profile_nodes_and_vhost(config_file: Path) -> None:
    config = load_config(str(config_file), {})
    profile = select_profile(config, broker="prod-eu", url="amqp://other.example:5673/%2F")
    assert [n.host for n in profile.nodes] == ["other.example"]
    assert profile.vhost == "/"
    assert profile.management_url == "http://other.example:15672/"
    assert profile.tls.ca == "/etc/ssl/ca.pem"  # the profile's TLS settings stay


def test_url_alone_does_not_inherit_default_secrets(config_file: Path) -> None:
    config = load_config(str(config_file), {"STAGE_PW": "stage-secret"})
    profile = select_profile(config, url="amqp://bob:hunter22@h:5672/v")
    assert profile.username == "bob"
    assert profile.password() == "hunter22"
    assert profile.vhost == "v"
    assert profile.password_env is None


def test_vhost_option_wins(config_file: Path) -> None:
    config = load_config(str(config_file), {})
    assert select_profile(config, broker="staging", vhost="billing").vhost == "billing"


def test_password_env_unset_is_a_clear_error(config_file: Path) -> None:
    config = load_config(str(config_file), {})
    with pytest.raises(ConfigError) as err:
        select_profile(config).password()
    assert "STAGE_PW" in str(err.value) and "not set" in str(err.value)


def test_unknown_broker_lists_known(config_file: Path) -> None:
    config = load_config(str(config_file), {})
    with pytest.raises(NotFoundError) as err:
        select_profile(config, broker="prod-asia")
    assert "prod-asia" in str(err.value) and "prod-eu" in str(err.value)


def test_malformed_toml_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[brokers.a]\nurl = "amqp://h/"\nvhost = \n')
    with pytest.raises(ConfigError) as err:
        load_config(str(path), {})
    assert str(path) in str(err.value) and "line 3" in str(err.value)


@pytest.mark.parametrize("text, needle", [
    ('[brokers.a]\nurl = "amqp://h/"\npasword = "x"\n', "unknown key 'pasword'"),
    ('[brokers.a]\nvhost = "x"\n', "no url"),
    ('[brokers.a]\nurl = "http://h/"\n', "scheme must be amqp or amqps"),
    ('default = "b"\n[brokers.a]\nurl = "amqp://h/"\n', "names no [brokers.b]"),
    ('[brokers.a]\nurl = "amqp://h/"\npassword = "x"\npassword_env = "Y"\n', "only one of"),
    ('timeout = -1\n', "above 0"),
    ('timeout = 1e308\n', "at most 3600"),
    ('dump_unacked_limit = 0.5\n', "whole number"),
    ('[brokers.a]\nurl = "amqp://h/"\nmanagement_url = 5\n', "management_url must be a string"),
    ('[brokers.a]\nurl = "amqp://h/"\npassword_env = 5\n', "password_env must be a string"),
    ('[brokers.a]\nurl = "amqp://h/"\npassword_file = 5\n', "password_file must be a string"),
    ('[brokers.a]\nurl = "amqp://h/"\nuser = 123\n', "user must be a string"),
    ('[brokers.a]\nurl = "amqp://h/"\nvhost = ["x"]\n', "vhost must be a string"),
    ('[brokers.a]\nurl = "amqp://h/"\n[brokers.a.tls]\nverify = "false"\n', "verify must be true or false"),
    ('[brokers.a]\nurl = "amqp://h/"\nmanagement_url = "localhost:15672"\n', "http:// or https://"),
    ('[brokers.a]\nurls = ["amqp://u:p1@h1/", "amqp://u:p2@h2/"]\n', "different users or passwords"),
    # the key the user wrote, not the one it is turned into
    ('[brokers.a]\nurl = 5\n', "[brokers.a]: url must be a string"),
    ('[brokers.a]\nurl = ["amqp://h/"]\n', "[brokers.a]: url must be a string"),
    ('[brokers.a]\nurls = 5\n', "[brokers.a]: urls must be a string or a list"),
])
def test_config_mistakes_are_named(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(str(write(tmp_path, text)), {})
    assert needle in str(err.value)


def test_literal_password_warns_and_never_shows(tmp_path: Path) -> None:
    path = write(tmp_path, '[brokers.a]\nurl = "amqp://u@h/"\npassword = "Literal-Pw-123"\n')
    config = load_config(str(path), {})
    assert any("literal password" in w for w in literal_password_warnings(config))
    assert "Literal-Pw-123" not in repr(config.brokers["a"])
    path.chmod(0o644)
    assert any("readable by others" in w for w in literal_password_warnings(config))
    assert secrets.scrub("oops Literal-Pw-123 leaked") == "oops **** leaked"


def test_external_auth_needs_amqps_and_a_client_certificate(tmp_path: Path) -> None:
    good = write(tmp_path, '[brokers.x]\nurl = "amqps://h"\nauth = "external"\n[brokers.x.tls]\ncert = "/c.pem"\n')
    assert load_config(str(good), {}).profile("x").auth == "external"
    for text, needle in [
        ('[brokers.x]\nurl = "amqp://h"\nauth = "external"\n[brokers.x.tls]\ncert = "/c.pem"\n', "amqps"),
        ('[brokers.x]\nurl = "amqps://h"\nauth = "external"\n', "client certificate"),
        ('[brokers.x]\nurl = "amqps://h"\nauth = "kerberos"\n', "auth must be one of"),
    ]:
        with pytest.raises(ConfigError, match=needle):
            load_config(str(write(tmp_path, text)), {})


@pytest.mark.parametrize("url", ["amqp://guest:pa/ss3cret@localhost:5672/", "amqp://u:pa#ss3cret@h/",
                                 "amqp://u:pa?ss3cret@h/", "amqp://u:p@ss3cret@h:notaport/"])
def test_passwords_with_url_characters_never_leak(tmp_path: Path, url: str) -> None:
    path = write(tmp_path, f'[brokers.a]\nurl = "{url}"\n')
    with pytest.raises(ConfigError) as err:
        load_config(str(path), {})
    assert "ss3cret" not in str(err.value)
    assert "bad host or port" in str(err.value) or "scheme" in str(err.value)


def test_management_url_with_a_password_is_validated_and_masked(tmp_path: Path) -> None:
    path = write(tmp_path, '[brokers.a]\nurl = "amqp://h/"\nmanagement_url = "http://guest:wr/ong@localhost:15672/"\n')
    with pytest.raises(ConfigError) as err:
        load_config(str(path), {})
    assert "wr/ong" not in str(err.value) and "ong" not in str(err.value)


def test_profile_repr_holds_no_password(config_file: Path) -> None:
    config = load_config(str(config_file), {})
    profile = select_profile(config, url="amqp://bob:Repr-Secret-1@h/")
    assert "Repr-Secret-1" not in repr(profile) and "Repr-Secret-1" not in repr(profile.nodes)


def test_per_broker_timeout_is_kept_and_top_level_applies_to_local_and_url(tmp_path: Path) -> None:
    path = write(tmp_path, 'timeout = 9\n[brokers.a]\nurl = "amqp://h/"\ntimeout = 1\n')
    config = load_config(str(path), {})
    assert select_profile(config, broker="a").timeout == 1
    assert select_profile(config).timeout == 9
    assert select_profile(config, url="amqp://x/").timeout == 9
    assert select_profile(config, broker="a", timeout=3).timeout == 3


def test_url_with_profile_takes_the_management_api_of_the_url(config_file: Path) -> None:
    config = load_config(str(config_file), {})
    profile = select_profile(config, broker="staging", url="amqp://node-2.example/")
    assert profile.management_url == "http://node-2.example:15672/"
