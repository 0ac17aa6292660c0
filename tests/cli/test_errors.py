"""Errors: one clear line, the documented exit code, no traceback, no password."""

import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest

from dlxtool.cli.output import ExitStatus, exit_status
from dlxtool.errors import ConfigError, ConnectError, NotFoundError, PartialError, RefusedError
from dlxtool.outcome import Status


def code(error: Exception) -> int:
    return int(exit_status(error.status))  # type: ignore[attr-defined]


def test_each_error_has_its_exit_code() -> None:
    """(The tables people read are checked against the map in tests/test_structure.py.)"""
    assert [int(s) for s in ExitStatus] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 129, 130, 143]
    assert code(ConfigError("x")) == 2 and code(ConnectError("x")) == 3
    assert code(NotFoundError("x")) == 4 and code(PartialError("x")) == 5
    assert code(RefusedError("x")) == 6


def test_every_status_has_one_exit_code() -> None:
    """The core says how a command ended (Status); the CLI maps each status to its code in one place."""
    assert {s: int(exit_status(s)) for s in Status} == {
        Status.OK: 0, Status.ERROR: 1, Status.USAGE: 2, Status.CONNECT: 3, Status.NOT_FOUND: 4, Status.PARTIAL: 5,
        Status.REFUSED: 6, Status.UNAVAILABLE: 7, Status.STOPPED: 8, Status.INTERRUPTED: 130}


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


# -- one fault, one diagnosis (issue 19.4): every command × every fault, against the real broker -------------

FAULT_COMMANDS = {
    "peek": ["peek", "{q}"],
    "history": ["history", "{q}"],
    "dump": ["dump", "{q}"],
    "dump --remove": ["dump", "{q}", "--remove", "--yes", "-o", "{tmp}/drained.jsonl"],
    "purge --dry-run": ["purge", "{q}", "--dry-run"],
    "purge": ["purge", "{q}", "--yes"],
    "purge --move-to": ["purge", "{q}", "--move-to", "{q}.park", "--yes"],
    "replay --dry-run": ["replay", "{q}", "--dry-run"],
    "replay": ["replay", "{q}", "--yes"],
    "queues": ["queues"],
    "load": ["load", "{tmp}/records.jsonl", "--dry-run"],
    "brokers check": ["brokers", "check"],
}
NO_QUEUE_ARGUMENT = ("queues", "brokers check")
LIBRARY_NAMES = re.compile(r"\b\w+(?:Error|Exception)\b|ClosedBy|Errno|Transport indicated|pika")


def _expected(fault: str, command: str, ctx: dict[str, str]) -> tuple[int, str | None]:
    """(exit status, the diagnosis stderr must contain) of `command` under `fault`."""
    if fault == "no-vhost":
        return 4, f"vhost '{ctx['vhost']}' not found on broker localhost:{ctx['port']}"
    if fault == "wrong-password":
        return 3, "authentication failed for user 'guest'"
    if fault == "no-queue":
        if command == "load":  # a target of records, not the subject: warned, and a real load says exit 5
            return 0, f"queue '{ctx['q']}' not found in vhost '{ctx['vhost']}'"
        return 4, f"queue '{ctx['q']}' not found in vhost '{ctx['vhost']}'"
    # api-down: the AMQP-only path where there is one; queues has none (3); brokers check reports the half (5);
    # purge --move-to cannot check the limits and dead-letter routes it would rely on: refused (6)
    phrase = "management API at http://127.0.0.1:9/ not reachable: connection refused"
    return ({"queues": 3, "brokers check": 5, "purge --move-to": 6}.get(command, 0),
            None if command == "load" else phrase)


@pytest.mark.parametrize("command", list(FAULT_COMMANDS))
@pytest.mark.parametrize("fault", ["no-vhost", "no-queue", "wrong-password", "api-down"])
def test_one_fault_one_diagnosis_across_commands(run, broker, qname, tmp_path: Path, fault: str,
                                                 command: str) -> None:
    if fault == "no-queue" and command in NO_QUEUE_ARGUMENT:
        pytest.skip("no queue named")
    queue = qname if fault != "no-queue" else f"nosuch-{qname}"
    vhost = broker.vhost if fault != "no-vhost" else f"nosuch-{qname}"
    with broker.channel() as ch:
        if fault != "no-queue":
            ch.queue_declare(qname, durable=True)  # empty: the fault, not the messages, decides
        ch.queue_declare(f"{queue}.park", durable=True)  # purge --move-to's destination, so that the fault decides
    (tmp_path / "records.jsonl").write_text(json.dumps(
        {"queue": queue, "position": 0, "exchange": "", "routing_key": queue, "redelivered": False,
         "properties": {}, "headers": {}, "deaths": [], "body": "eA=="}) + "\n")
    password = "Wrong-Pw-8128" if fault == "wrong-password" else "guest"
    args = ["--url", f"amqp://guest:{password}@localhost:{broker.amqp_port}/{quote(vhost, safe='')}",
            "--management-url", "http://127.0.0.1:9/" if fault == "api-down" else broker.management_url,
            "--format", "json", "--timeout", "15"]  # 4.x answered a wrong password in > 3 s under load
    args += [a.format(q=queue, tmp=tmp_path) for a in FAULT_COMMANDS[command]]
    result = run(*args)
    status, diagnosis = _expected(fault, command, {"vhost": vhost, "q": queue, "port": str(broker.amqp_port)})
    assert result.exit_code == status, result.output
    if diagnosis:
        assert diagnosis in result.stderr, result.stderr
    assert not LIBRARY_NAMES.search(result.stderr), result.stderr
    assert "Wrong-Pw-8128" not in result.output
    if status not in (0, 5, 6) and command != "brokers check":
        assert diagnosis in one_line_error(result)
    elif status == 6:  # refused after what it could find out (the queue's counts): the refusal is the last word
        assert diagnosis in result.stderr.split("dlxtool: error: ")[-1]


@pytest.mark.parametrize("command", [["peek", "{q}", "-n", "300"], ["history", "{q}", "-n", "300"],
                                     ["dump", "{q}"]])
def test_connection_lost_mid_read_says_so_in_plain_words(run, broker, qname, command: list[str]) -> None:
    """The proxy drops the connection during the read (after the handshake and the identity check): one
    line, exit 3, no pika names ("StreamLostError: ('Transport indicated EOF',)"), every message still there."""
    from tests.support.proxy import CuttingProxy

    bodies = [b"m-%d" % i for i in range(300)]
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, bodies)
    with CuttingProxy("127.0.0.1", broker.amqp_port, cut_after_bytes=4000) as proxy:
        url = broker.url.replace(f":{broker.amqp_port}/", f":{proxy.port}/")
        result = run("--url", url, "--management-url", broker.management_url, "--format", "json",
                     *[a.format(q=qname) for a in command])
        assert proxy.cuts == 1
    assert result.exit_code == 3, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("dlxtool: ")]
    assert errors == ["dlxtool: error: the connection to the broker was lost (the broker or the network closed it)"]
    assert not LIBRARY_NAMES.search(result.stderr), result.stderr
    assert broker.wait_depth(qname, len(bodies)) == len(bodies)
    assert [body for body, _ in broker.snapshot(qname)] == bodies


def test_typed_broker_beats_management_url_left_in_the_environment(run, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[brokers.a]\nurl = "amqp://guest@127.0.0.1:1/"\nmanagement_url = "http://127.0.0.1:11/"\n')
    left = {"DLXTOOL_MANAGEMENT_URL": "http://127.0.0.1:12/"}
    typed = run("brokers", "check", "--config", str(cfg), "--broker", "a", "--format", "json", "--timeout", "1",
                env=left)
    assert json.loads(typed.stdout)[0]["management_url"] == "http://127.0.0.1:11/"
    both = run("brokers", "check", "--config", str(cfg), "--format", "json", "--timeout", "1",
               env={**left, "DLXTOOL_BROKER": "a"})
    assert json.loads(both.stdout)[0]["management_url"] == "http://127.0.0.1:12/"
    flag = run("brokers", "check", "--config", str(cfg), "--broker", "a", "--management-url", "http://127.0.0.1:13/",
               "--format", "json", "--timeout", "1", env=left)
    assert json.loads(flag.stdout)[0]["management_url"] == "http://127.0.0.1:13/"


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


def test_a_port_that_hangs_up_at_once_is_said_in_plain_words(run) -> None:
    """A port-forward with no broker behind it accepts and closes at once: pika calls that a StreamLostError
    ('Transport indicated EOF'), which told an operator nothing."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    stop = threading.Event()

    def hang_up() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                server.accept()[0].close()
            except OSError:
                continue

    thread = threading.Thread(target=hang_up, daemon=True)
    thread.start()
    try:
        result = run("peek", "q", "--url", f"amqp://guest:guest@127.0.0.1:{port}/", "--timeout", "2")
    finally:
        stop.set()
        thread.join()
        server.close()
    assert result.exit_code == 3, result.stderr
    line = one_line_error(result)
    assert "before the broker answered" in line  # closed or reset, as the kernel tells it
    assert "StreamLostError" not in result.stderr and "Stream connection lost" not in result.stderr


@pytest.mark.parametrize("command", [
    ["peek", "{typo}"], ["history", "{typo}"], ["dump", "{typo}"],
    ["dump", "{typo}", "--remove", "--yes", "-o", "{out}"],
    ["replay", "{typo}", "--yes"], ["replay", "{typo}", "--dry-run"], ["purge", "{typo}", "--yes"],
    ["purge", "{typo}", "--origin", "x", "--dry-run"], ["purge", "{dlq}", "--move-to", "{typo}", "--yes"],
])
def test_an_unknown_queue_gets_a_did_you_mean(run, broker, qname, tmp_path, command) -> None:
    """Every command that names a queue: the closest names of the vhost's queues (management API), in the error."""
    dlq, typo = f"{qname}.invoices.dlq", f"{qname}.invoice.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(f"{qname}.unrelated.work", durable=True)
    broker.publish(dlq, [b"x"])
    args = [a.format(typo=typo, dlq=dlq, out=tmp_path / "out.jsonl") for a in command]
    try:
        result = run(*args, "--url", broker.url)
        assert result.exit_code == 4, result.output
        # this test's other cases left names as close (another suffix): among the closest, this one's
        assert f"not found in vhost '{broker.vhost}'; did you mean '" in result.stderr and f"'{dlq}'" in result.stderr
        assert "unrelated" not in result.stderr
        assert broker.queue_depth(dlq) == 1
    finally:
        with broker.channel() as ch:
            ch.queue_delete(dlq)
            ch.queue_delete(f"{qname}.unrelated.work")


def test_a_load_or_replay_target_not_found_gets_a_did_you_mean(run, broker, qname, tmp_path) -> None:
    dlq, payments = f"{qname}.dlq", f"{qname}.payments"
    with broker.channel() as ch:
        for q in (dlq, payments):
            ch.queue_declare(q, durable=True)
    broker.publish(dlq, [b"x"])
    records = tmp_path / "r.jsonl"
    assert run("dump", dlq, "-o", str(records), "--url", broker.url).exit_code == 0
    loaded = run("load", str(records), "--to", f"{qname}.payment", "--dry-run", "--url", broker.url)
    assert f"queue '{qname}.payment' not found in vhost '{broker.vhost}'" in loaded.stderr
    assert f"(did you mean '{payments}'?)" in loaded.stderr
    # replay --to a queue that is not there: "not found" (exit 4, issue 37; was 6 after a run that moved nothing),
    # before anything is read, dry run or not; the DLQ keeps its message
    for mode in ("--dry-run", "--yes"):
        planned = run("replay", dlq, "--to", f"{qname}.paymnts", mode, "--url", broker.url, "-f", "table")
        assert planned.exit_code == 4, planned.stderr
        assert f"--to queue '{qname}.paymnts' not found in vhost '{broker.vhost}'; did you mean '{payments}'?" in \
            planned.stderr
        assert "nothing was read or changed" in planned.stderr and planned.stdout == ""
    assert broker.queue_depth(dlq) == 1


def test_nothing_close_no_guess() -> None:
    from dlxtool.broker.queues import close_names, did_you_mean

    names = ["orders.dlq", "orders", "invoices.dlq", "Payments.DLQ", "audit.stream"]
    assert did_you_mean("invoice.dlq", names) == "did you mean 'invoices.dlq'?"
    assert close_names("payments.dlq", names) == ["Payments.DLQ"]  # case ignored
    assert close_names("orders.dql", names)[0] == "orders.dlq"
    assert did_you_mean("zzz", names) is None and did_you_mean("orders", names) != "did you mean 'orders'?"


def test_a_stop_signal_python_wraps_is_an_interrupt_not_an_internal_error(run, monkeypatch) -> None:
    """A Ctrl-C landing while Python builds a class (a module being imported) reaches dlxtool as a RuntimeError
    ("Error calling __set_name__ …") whose cause is the KeyboardInterrupt: exit 130 and one line, as any Ctrl-C
    outside a run — not "internal error", exit 1 (the fault campaign, seed 50071: load, SIGINT as it started)."""
    from dlxtool.cli.app import App

    def interrupted_import(*_args: object, **_kwargs: object) -> None:
        class Field:
            def __set_name__(self, _owner: type, _name: str) -> None:
                raise KeyboardInterrupt

        type("MessageHistory", (), {"retry": Field()})  # Python 3.11 wraps it: RuntimeError from KeyboardInterrupt

    monkeypatch.setattr(App, "profile", interrupted_import)
    result = run("queues")
    assert result.exit_code == 130, result.stderr
    assert "internal error" not in result.stderr and "interrupted" in result.stderr, result.stderr
