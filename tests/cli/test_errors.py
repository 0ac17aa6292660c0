"""Errors: one clear line, the documented exit code, no traceback, no password."""

from pathlib import Path

import pytest

from dlxtool.errors import ConfigError, ConnectError, ExitStatus, NotFoundError, PartialError, RefusedError


def test_exit_status_table_matches_the_docs() -> None:
    assert [int(s) for s in ExitStatus] == [0, 1, 2, 3, 4, 5, 6, 130]
    assert ConfigError("x").exit_status == 2 and ConnectError("x").exit_status == 3
    assert NotFoundError("x").exit_status == 4 and PartialError("x").exit_status == 5
    assert RefusedError("x").exit_status == 6


def one_line_error(result) -> str:
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("  hint:")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dlxtool: error: ")
    return lines[0]


def test_unknown_broker_is_not_found(run) -> None:
    result = run("brokers", "check", "--broker", "prod-mars")
    assert result.exit_code == 4
    assert "prod-mars" in one_line_error(result)


def test_malformed_toml_is_usage_with_file_and_line(run, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[brokers.a\n")
    result = run("brokers", "list", "--config", str(cfg))
    assert result.exit_code == 2
    line = one_line_error(result)
    assert str(cfg) in line and "line 1" in line


def test_unset_password_env(run, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[brokers.a]\nurl = "amqp://u@127.0.0.1:1/"\npassword_env = "NOPE_PW"\n')
    result = run("brokers", "check", "a", "--config", str(cfg))
    assert result.exit_code == 2
    assert "NOPE_PW" in one_line_error(result)


def test_bad_url_is_usage_and_masked(run) -> None:
    result = run("brokers", "check", "--url", "amqq://u:Sekrit-123@h/")
    assert result.exit_code == 2
    assert "Sekrit-123" not in result.output
    assert "scheme must be amqp" in one_line_error(result)


def test_debug_shows_traceback_but_no_password(run) -> None:
    result = run("--debug", "brokers", "check", "--url", "amqq://u:Sekrit-123@h/")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr
    assert "Sekrit-123" not in result.output


@pytest.mark.parametrize("args", [["brokers", "nosuch"], ["brokers", "check", "--format", "yaml"]])
def test_click_usage_errors_exit_2(run, args: list[str]) -> None:
    assert run(*args).exit_code == 2


def test_management_url_credentials_are_masked_in_brokers_list(run, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[brokers.a]\nurl = "amqp://h/"\nmanagement_url = "http://admin:MgmtS3cret@localhost:15672/"\n')
    for fmt in ("json", "table"):
        result = run("brokers", "list", "--config", str(cfg), "--format", fmt)
        assert result.exit_code == 0
        assert "MgmtS3cret" not in result.output and "admin:****@localhost" in result.output


@pytest.mark.parametrize("password", ["pa/ss3cret", "pa#ss3cret", "pa?ss3cret", "p@ss3cret", "pa%ss3cret"])
def test_url_passwords_with_special_characters_never_leak(run, password: str) -> None:
    for extra in ([], ["--debug"]):
        result = run(*extra, "brokers", "check", "--url", f"amqp://guest:{password}@localhost:1/", "--timeout", "1")
        assert result.exit_code in (2, 3)
        assert "ss3cret" not in result.output


def test_typed_broker_beats_url_left_in_the_environment(run, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[brokers.a]\nurl = "amqp://guest@127.0.0.1:1/"\npassword = "Env-Url-Pw-1"\n')
    result = run("brokers", "check", "--config", str(cfg), "--broker", "a", "--format", "json", "--timeout", "1",
                 env={"DLXTOOL_URL": "amqp://guest:guest@127.0.0.1:2/"})
    assert ":1/" in result.stdout and ":2/" not in result.stdout
    typed_url = run("brokers", "check", "--config", str(cfg), "--url", "amqp://guest:guest@127.0.0.1:3/",
                    "--format", "json", "--timeout", "1", env={"DLXTOOL_BROKER": "a"})
    assert ":3/" in typed_url.stdout


@pytest.mark.parametrize("where", ["before", "after"])
def test_debug_works_before_and_after_the_command_name(run, where: str) -> None:
    args = ["brokers", "check", "--url", "amqq://u:Sekrit-123@h/"]
    result = run(*(["--debug", *args] if where == "before" else [*args, "--debug"]))
    assert result.exit_code == 2
    assert "Traceback" in result.stderr
    assert "Sekrit-123" not in result.output


@pytest.mark.parametrize("args", [["-v", "decode"], ["decode", "-v"], ["decode", "--verbose"]])
def test_verbose_works_before_and_after_the_command_name(run, args: list[str]) -> None:
    result = run(*args, "-f", "json", input="payload=CgRvLTQy\n")
    assert result.exit_code == 0, result.output
    assert "debug: decode:" in result.stderr
