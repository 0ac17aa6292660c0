import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only


def complete(words: str, env: dict[str, str]) -> list[str]:
    parts = words.split(" ")
    proc = subprocess.run(
        [sys.executable, "-m", "dlxtool"], capture_output=True, text=True, timeout=30,
        env={**env, "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1), "_DLXTOOL_COMPLETE": "bash_complete"},
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [line.split(",", 1)[1] for line in proc.stdout.splitlines() if line]


def test_command_and_broker_names_complete(cli_env, tmp_path) -> None:
    (tmp_path / "c.toml").write_text('[brokers.prod-eu]\nurl = "amqp://h/"\n[brokers.prod-us]\nurl = "amqp://h/"\n')
    env = {**cli_env, "DLXTOOL_CONFIG": str(tmp_path / "c.toml")}
    assert "brokers" in complete("dlxtool bro", env)
    assert complete("dlxtool brokers check --broker prod-", env) == ["prod-eu", "prod-us"]


def test_queue_names_complete_from_the_broker(cli_env, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname + "-alpha", durable=True)
        ch.queue_declare(qname + "-beta", durable=True)
    env = {**cli_env, "DLXTOOL_URL": broker.url}
    assert complete(f"dlxtool purge {qname}-a", env) == [qname + "-alpha"]


def test_queue_completion_is_silent_when_the_broker_is_down(cli_env) -> None:
    env = {**cli_env, "DLXTOOL_URL": "amqp://guest:guest@127.0.0.1:1/"}
    assert complete("dlxtool purge orders", env) == []
    assert os.environ.get("_DLXTOOL_COMPLETE") is None


def test_completion_scripts_for_each_shell(run) -> None:
    for shell, needle in (("bash", "complete -o"), ("zsh", "compdef"), ("fish", "complete --no-files")):
        result = run("completion", shell)
        assert result.exit_code == 0 and needle in result.stdout


def test_replay_target_broker_and_to_queue_complete(cli_env, broker, qname, tmp_path) -> None:
    (tmp_path / "c.toml").write_text('[brokers.prod-eu]\nurl = "amqp://h/"\n[brokers.prod-us]\nurl = "amqp://h/"\n')
    env = {**cli_env, "DLXTOOL_CONFIG": str(tmp_path / "c.toml")}
    assert complete("dlxtool replay q --target-broker prod-e", env) == ["prod-eu"]
    with broker.channel() as ch:
        ch.queue_declare(qname + "-parking", durable=True)
    env = {**cli_env, "DLXTOOL_URL": broker.url}
    assert complete(f"dlxtool replay q --to {qname}-p", env) == [qname + "-parking"]
