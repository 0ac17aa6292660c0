"""The one message selection (dlxtool/cli/options.py: selection_options) in peek, history, dump, replay and purge,
on dead letters the broker made (rejects, TTL expiry) and a Spring recoverer republished (tests/support/mixed_dlq.py).
"""

from __future__ import annotations

import json

import pytest

from tests.support.fill import take_all
from tests.support.mixed_dlq import mixed_dlq

pytestmark = [pytest.mark.broker, pytest.mark.once]  # once: no broker version decides these (3.x pass only)

COMMANDS = ("peek", "history", "dump", "replay", "purge")


@pytest.fixture
def demo_env(tmp_path) -> dict[str, str]:
    """The demo's schemas, so that PaymentFailed bodies (no AMQP type) decode."""
    config = tmp_path / "demo.toml"
    config.write_text("demo_schemas = true\n")
    return {"DLXTOOL_CONFIG": str(config)}


def _positions(result) -> list[int]:
    assert result.exit_code == 0, result.output
    return [r["position"] for r in json.loads(result.stdout)]


def _filters(m) -> list[tuple[list[str], list[int]]]:
    """(selection options, the DLQ positions they select): mixed_dlq's docstring says which is which."""
    return [
        (["--type", "PaymentFailed"], [3, 4]),                        # the decoded protobuf type, its last part
        (["--type", "shop.orders.v1.PaymentFailed"], [3, 4]),
        (["--type", "shop.OrderPlaced"], [0, 1, 2]),                   # the AMQP type property
        (["--header", "tenant=globex"], [3, 4]),
        (["--header", "tenant~^(acme|init)"], [0, 1, 2, 5, 6]),
        (["--error", "(?i)read TIMED out"], [5]),                      # Spring's x-exception-message
        (["--error", "Exception"], [5, 6]),
        (["--reason", "expired"], [3, 4]),
        (["--reason", "rejected"], [0, 1, 2]),
        (["--origin", m.orders], [0, 1, 2]),                           # x-death
        (["--origin", m.payments], [5, 6]),                            # Spring's x-original-* headers
        (["--older-than", "30d"], [0, 1, 2]),                          # the timestamp property (2025-11-21)
        (["--newer-than", "1h"], [3, 4]),                              # no timestamp: the x-death time
        (["--body-contains", '"order": 1'], [1]),
        (["--body-matches", r'^\{"(order|payment)": [26]\}$'], [2, 6]),
        (["--origin", m.orders, "--origin", m.payments, "--header", "tenant=initech"], [5, 6]),  # AND of ORs
    ]


def test_each_filter_selects_in_peek_history_and_dump(run, broker, qname, demo_env) -> None:
    m = mixed_dlq(broker, qname)
    for options, expected in _filters(m):
        peeked = run("peek", m.dlq, *options, "-n", "20", "--url", broker.url, "-f", "json", env=demo_env)
        assert _positions(peeked) == expected, options
        assert f"selected {len(expected)} of the 7 message(s) looked at" in peeked.stderr
    history = run("history", m.dlq, "--error", "Exception", "--url", broker.url, "-f", "json", env=demo_env)
    assert _positions(history) == [5, 6]
    assert [e["error"] for e in json.loads(history.stdout)] == [
        "java.net.SocketTimeoutException: Read timed out", "java.lang.IllegalStateException: bad state"]
    dumped = run("dump", m.dlq, "--type", "PaymentFailed", "--url", broker.url, env=demo_env)
    assert dumped.exit_code == 0, dumped.output
    assert [json.loads(line)["position"] for line in dumped.stdout.splitlines()] == [3, 4]
    assert [b for _p, b in take_all(broker, m.dlq)] == m.bodies  # read, not taken: all there, in order


def test_each_filter_selects_in_a_replay_plan(run, broker, qname, demo_env) -> None:
    m = mixed_dlq(broker, qname)
    for options, expected in _filters(m):
        result = run("replay", m.dlq, *options, "--dry-run", "--url", broker.url, "-f", "json", env=demo_env)
        assert result.exit_code == 0, (options, result.output)
        plan = json.loads(result.stdout)["plan"]
        selected = sum(o["messages"] for o in plan["origins"]) + sum(
            n for why, n in plan["stay"].items() if why != "not selected")
        assert selected == len(expected), (options, plan)
        assert plan["stay"].get("not selected", 0) == 7 - len(expected), (options, plan)
    assert [b for _p, b in take_all(broker, m.dlq)] == m.bodies


def test_filter_then_count(run, broker, qname, demo_env) -> None:
    """-n counts the messages the selection selects, not the messages looked at; a replay's and a purge's -n/--limit
    too."""
    m = mixed_dlq(broker, qname)
    peeked = run("peek", m.dlq, "--header", "tenant~^(globex|initech)$", "-n", "3", "--url", broker.url, "-f", "json")
    assert _positions(peeked) == [3, 4, 5]
    assert "selected 3 of the 6 message(s) looked at" in peeked.stderr  # stopped once it had 3
    history = run("history", m.dlq, "--reason", "rejected", "--limit", "2", "--url", broker.url, "-f", "json")
    assert _positions(history) == [0, 1]
    replayed = run("replay", m.dlq, "--origin", m.payments, "-n", "1", "--yes", "--url", broker.url, "-f", "json")
    assert replayed.exit_code == 0, replayed.output
    assert json.loads(replayed.stdout)["moved"] == {m.payments: 1}, replayed.output
    assert [b for _p, b in take_all(broker, m.payments)] == [m.bodies[5]]
    purged = run("purge", m.dlq, "--body-matches", "order", "--limit", "2", "--yes", "--url", broker.url, "-f", "json")
    assert purged.exit_code == 0, purged.output
    assert json.loads(purged.stdout)["removed"] == 2
    assert [b for _p, b in take_all(broker, m.dlq)] == [m.bodies[i] for i in (2, 3, 4, 6)]


def test_a_replay_by_error_text_sends_only_those_home(run, broker, qname) -> None:
    m = mixed_dlq(broker, qname)
    result = run("replay", m.dlq, "--error", "(?i)timed out", "--yes", "--url", broker.url, "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["moved"] == {m.payments: 1}, result.output
    assert [b for _p, b in take_all(broker, m.payments)] == [m.bodies[5]]
    assert [b for _p, b in take_all(broker, m.dlq)] == [b for i, b in enumerate(m.bodies) if i != 5]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("option", [["--error", "(timed"], ["--header", "x~[a-"], ["--body-matches", "*x"]])
def test_a_bad_regex_is_a_usage_error_before_anything_is_read(run, broker, command, option) -> None:
    result = run(command, "no-such-queue", *option, "--url", broker.url)
    assert result.exit_code == 2, result.output
    assert "not a regular expression" in result.stderr and "Traceback" not in result.output


def test_every_command_takes_the_same_selection_options(run) -> None:
    """One decorator, one help text: the lines of each selection option are the same in all five commands."""
    def option_help(command: str) -> dict[str, str]:
        text = run(command, "--help", env={"COLUMNS": "200"}).stdout
        lines = [line.strip() for line in text.splitlines()]
        return {line.split()[0]: line for line in lines
                if line.split()[:1] and line.split()[0].rstrip(",") in SELECTION_OPTIONS}

    SELECTION_OPTIONS = ("--origin", "--reason", "--min-deaths", "--type", "--header", "--error", "--routing-key",
                         "--older-than", "--newer-than", "--body-contains", "--body-matches",
                         "--redelivered", "--redelivered / --not-redelivered")
    helps = {c: option_help(c) for c in COMMANDS}
    assert len(helps["peek"]) >= 12, helps["peek"]
    for command in COMMANDS[1:]:
        assert helps[command] == helps["peek"], command


@pytest.fixture
def empty_vhost(broker):
    """A vhost of this test with no queue in it."""
    from urllib.parse import quote

    name = f"{broker.vhost}-empty"
    broker.mgmt.request("PUT", f"vhosts/{quote(name, safe='')}", {})
    broker.mgmt.request("PUT", f"permissions/{quote(name, safe='')}/guest", {"configure": ".*", "write": ".*",
                                                                            "read": ".*"})
    yield name
    broker.mgmt.request("DELETE", f"vhosts/{quote(name, safe='')}")


def test_all_vhosts_before_or_after_the_command(run, broker, qname, empty_vhost) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    url = f"amqp://guest:guest@localhost:{broker.amqp_port}/{empty_vhost}"
    before = run("--all-vhosts", "queues", "--url", url, "-f", "json")
    after = run("queues", "--all-vhosts", "--url", url, "-f", "json")
    assert before.exit_code == after.exit_code == 0, before.output + after.output
    for result in (before, after):
        assert (broker.vhost, qname) in {(r["vhost"], r["queue"]) for r in json.loads(result.stdout)}
    misplaced = run("--all-vhosts", "peek", qname, "--url", broker.url)
    assert misplaced.exit_code == 2 and "--all-vhosts is an option of `queues`, not of `peek`" in misplaced.stderr


def test_queues_in_a_vhost_without_any_hints_at_the_vhosts_that_have_some(run, broker, qname, empty_vhost) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    url = f"amqp://guest:guest@localhost:{broker.amqp_port}/{empty_vhost}"
    result = run("queues", "--url", url, "-f", "table")
    assert result.exit_code == 0, result.output
    assert "no queues match" in result.stderr
    hint = next(line for line in result.stderr.splitlines() if line.startswith("hint:"))
    assert f"vhost '{empty_vhost}' has no queues" in hint and f"'{broker.vhost}' (" in hint
    assert "--vhost NAME, or --all-vhosts" in hint
    ours = run("queues", "--url", broker.url, "-f", "table")  # a vhost with queues: no hint
    assert "hint:" not in ours.stderr


def test_dump_remove_takes_only_what_the_selection_selects(run, broker, qname, tmp_path) -> None:
    """dump --remove with a selection: the selected messages into the file (-n counts them), the others stay in
    order, as purge --backup with the same options."""
    m = mixed_dlq(broker, qname)
    out = tmp_path / "taken.jsonl"
    result = run("dump", m.dlq, "--remove", "--header", "tenant~^(globex|initech)$", "-n", "3", "--yes", "-o", str(out),
                 "--url", broker.url, "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["removed"] == 3
    assert [json.loads(line)["position"] for line in out.read_text().splitlines()] == [3, 4, 5]
    assert [b for _p, b in take_all(broker, m.dlq)] == [m.bodies[i] for i in (0, 1, 2, 6)]
