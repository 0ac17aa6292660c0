import contextlib
import json
import socket
import threading
from pathlib import Path

PASSWORD = "guest"


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "dlxtool.toml"
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def test_check_local_broker_answers_on_both_halves(run, broker) -> None:
    result = run("brokers", "check", "--url", broker.url, "--format", "json")
    assert result.exit_code == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert row["amqp_ok"] and row["management_ok"]
    assert row["version"].count(".") == 2
    assert row["latency_ms"] > 0
    assert "guest:guest" not in result.output


def test_list_masks_passwords_and_warns_about_literals(run, broker, tmp_path) -> None:
    cfg = config(tmp_path, broker.config_toml("envpw") + broker.config_toml("literal").replace(
        'password_env = "DLXTOOL_TEST_PASSWORD"', 'password = "Very-Secret-99"')
        + '[brokers.inurl]\nurl = "amqp://u:Also-Secret-77@h:5672/"\n')
    result = run("brokers", "list", "--config", cfg, "--format", "json")
    assert result.exit_code == 0
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["envpw"]["password"] == "env:DLXTOOL_TEST_PASSWORD"
    assert rows["literal"]["password"] == "literal"
    assert rows["inurl"]["urls"] == ["amqp://u:****@h:5672/"]
    assert "literal password" in result.stderr
    table = run("brokers", "list", "--config", cfg, "--format", "table")
    for text in (result.output, table.output):
        assert "Very-Secret-99" not in text and "Also-Secret-77" not in text


def test_check_all_in_parallel_with_one_dead_broker(run, broker, tmp_path) -> None:
    cfg = config(tmp_path, broker.config_toml("good") + '[brokers.dead]\nurl = "amqp://guest@127.0.0.1:1/"\n'
                 'management_url = "http://127.0.0.1:1/"\n')
    result = run("brokers", "check", "--all", "--config", cfg, "--format", "json",
                 env={"DLXTOOL_TEST_PASSWORD": PASSWORD})
    assert result.exit_code == 3
    rows = {r["broker"]: r for r in json.loads(result.stdout)}
    assert rows["good"]["ok"] is True
    assert rows["dead"]["amqp_ok"] is False and "refused" in rows["dead"]["amqp_error"]


def test_management_down_says_which_half_failed(run, broker, tmp_path) -> None:
    cfg = config(tmp_path, broker.config_toml("nomgmt").replace(broker.management_url, "http://127.0.0.1:1/"))
    result = run("brokers", "check", "--config", cfg, "--broker", "nomgmt", "--format", "table",
                 env={"DLXTOOL_TEST_PASSWORD": PASSWORD})
    assert result.exit_code == 5
    assert "management API" in result.stderr and "not reachable" in result.stderr
    assert "nomgmt" in result.stdout and "yes" in result.stdout  # AMQP half still works


def test_wrong_password_is_exit_3_and_never_printed(run, broker, tmp_path) -> None:
    cfg = config(tmp_path, broker.config_toml("test"))
    result = run("brokers", "check", "--config", cfg, "--broker", "test", "--format", "json",
                 env={"DLXTOOL_TEST_PASSWORD": "Wrong-Pass-4242"})
    assert result.exit_code == 3
    row = json.loads(result.stdout)[0]
    assert "authentication failed" in row["amqp_error"]
    assert "authentication failed" in row["management_error"]
    assert "Wrong-Pass-4242" not in result.output


def test_silent_host_times_out_with_a_clear_message(run) -> None:
    # A listener that accepts and then says nothing: without a timeout pika would hang.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    port = server.getsockname()[1]
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        result = run("brokers", "check", "--url", f"amqp://guest:guest@127.0.0.1:{port}/", "--timeout", "0.5",
                     "--format", "json")
    finally:
        stop.set()
        thread.join()
        server.close()
    assert result.exit_code == 3
    assert "timed out after 0.5s" in json.loads(result.stdout)[0]["amqp_error"]


def test_check_two_brokers(run, broker, second_broker, tmp_path) -> None:
    cfg = config(tmp_path, broker.config_toml("one") + second_broker.config_toml("two"))
    result = run("brokers", "check", "one", "two", "--config", cfg, "--format", "json",
                 env={"DLXTOOL_TEST_PASSWORD": PASSWORD})
    assert result.exit_code == 0, result.stderr
    rows = {r["broker"]: r for r in json.loads(result.stdout)}
    assert rows["one"]["url"].endswith(f":{broker.amqp_port}/") or str(broker.amqp_port) in rows["one"]["url"]
    assert str(second_broker.amqp_port) in rows["two"]["url"]
