"""Issue 15.0: two brokers crossed the way two port-forwards on one host cross them — the AMQP URL of one,
the management API of the other. Every command that reads management data must refuse (exit 3, one line
naming both) before it decides anything, and leave every message of both queues where it was.

The scenario of the issue: vhost V on both nodes; on the second node `q` is a quorum queue with
x-delivery-limit 2 holding two messages, on the main node `q` is a classic queue. A peek that took "classic"
from the main node's API dropped both quorum messages in three runs, each exiting 0.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support.broker import BrokerEnv, open_vhost
from tests.support.http_switch import http_switch

pytestmark = pytest.mark.second_broker

CLASSIC = [b"classic-0", b"classic-1"]
QUORUM = [b"quorum-0", b"quorum-1"]


@dataclass
class Crossed:
    main: BrokerEnv  # the classic q
    second: BrokerEnv  # the quorum q with delivery limit 2
    queue: str


@pytest.fixture(scope="module")
def shared_vhost(broker: BrokerEnv, second_broker: BrokerEnv) -> Iterator[tuple[BrokerEnv, BrokerEnv]]:
    """One vhost name on both nodes (as prod and staging both have vhost `v`)."""
    name = f"dlxtool-cross-{uuid.uuid4().hex[:8]}"
    with open_vhost(broker.host, broker.amqp_port, broker.http_port, name) as main, \
            open_vhost(second_broker.host, second_broker.amqp_port, second_broker.http_port, name) as second:
        yield main, second


@pytest.fixture
def crossed(shared_vhost: tuple[BrokerEnv, BrokerEnv], qname: str) -> Iterator[Crossed]:
    main, second = shared_vhost
    with main.channel() as ch:
        ch.queue_declare(qname, durable=True)
    main.publish(qname, CLASSIC)
    with second.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 2})
    second.publish(qname, QUORUM)
    yield Crossed(main, second, qname)


def cluster_name(env: BrokerEnv) -> str:
    """The node's cluster name as its API says it (the suite runs against 3.x and 4.x nodes alike)."""
    return str(env.mgmt.get("cluster-name")["name"])


def amqp_url(env: BrokerEnv) -> str:
    return env.url


def assert_untouched(c: Crossed) -> None:
    """Both queues hold their messages; the quorum ones were never given back (no x-delivery-count)."""
    assert [body for body, _ in c.main.snapshot(c.queue)] == CLASSIC
    assert c.second.queue_depth(c.queue) == len(QUORUM)
    drained = c.second.drain(c.queue)  # auto-ack: the end of this test's queue, and the proof of no return
    assert [body for _, _, body in drained] == QUORUM
    # 3.10 sends x-delivery-count 0 on a first delivery; a message given back once says 1
    assert [(props.headers or {}).get("x-delivery-count") or 0 for _, props, _ in drained] == [0, 0]


def commands(queue: str, tmp: Path) -> dict[str, list[str]]:
    return {
        "peek": ["peek", queue, "-n", "2"],
        "peek --spend-attempts": ["peek", queue, "-n", "2", "--spend-attempts", "--allow-reorder"],
        "history": ["history", queue, "-n", "2", "--spend-attempts"],
        "dump": ["dump", queue, "--spend-attempts", "-o", str(tmp / "dump.jsonl")],
        "dump --remove": ["dump", queue, "--remove", "--yes", "-o", str(tmp / "drain.jsonl")],
        "purge": ["purge", queue, "--yes"],
        "purge --dry-run": ["purge", queue, "--dry-run"],
        "purge --min-deaths": ["purge", queue, "--min-deaths", "1", "--yes", "--backup", str(tmp / "b.jsonl")],
        "replay": ["replay", queue, "--yes"],
        "replay --dry-run": ["replay", queue, "--dry-run"],
        "brokers check": ["brokers", "check"],
        "queues": ["queues"],
        "load": ["load", str(tmp / "records.in"), "--yes"],
        "load --dry-run": ["load", str(tmp / "records.in"), "--dry-run"],
    }


COMMANDS = list(commands("q", Path("/")))


def write_records(c: Crossed, tmp: Path) -> None:
    """What `load` would publish into q (it reads q's limits from the management API first)."""
    record = {"queue": c.queue, "position": 0, "exchange": "", "routing_key": c.queue, "redelivered": False,
              "properties": {}, "headers": {}, "deaths": [], "body": "eA=="}
    (tmp / "records.in").write_text(json.dumps(record) + "\n")


def crossed_args(c: Crossed, amqp_on_second: bool) -> list[str]:
    amqp, api = (c.second, c.main) if amqp_on_second else (c.main, c.second)
    return ["--url", amqp_url(amqp), "--management-url", api.management_url, "--format", "json"]


@pytest.mark.parametrize("amqp_on_second", [True, False], ids=["amqp-second+api-main", "amqp-main+api-second"])
@pytest.mark.parametrize("command", COMMANDS)
def test_crossed_brokers_refuse_with_exit_3_and_touch_nothing(run, crossed: Crossed, tmp_path: Path, command: str,
                                                              amqp_on_second: bool) -> None:
    write_records(crossed, tmp_path)
    args = [*crossed_args(crossed, amqp_on_second), *commands(crossed.queue, tmp_path)[command]]
    for _ in range(3 if command == "peek" else 1):  # the three runs
        result = run(*args)
        assert result.exit_code == 3, result.output
        line = _mismatch_line(result.stderr if command != "brokers check" else
                              json.loads(result.stdout)[0]["management_error"])
        main_cluster, second_cluster = cluster_name(crossed.main), cluster_name(crossed.second)
        api_cluster, amqp_cluster = (main_cluster, second_cluster) if amqp_on_second else (second_cluster, main_cluster)
        assert api_cluster in line.split(" but ")[0] and amqp_cluster in line.split(" but ")[1]
        assert f"localhost:{(crossed.second if amqp_on_second else crossed.main).amqp_port}" in line
    assert_untouched(crossed)
    assert not list(tmp_path.glob("*.jsonl")), "nothing may have been read into a file"


@pytest.mark.parametrize("command", COMMANDS)
def test_same_cluster_name_and_version_still_told_apart(run, crossed: Crossed, tmp_path: Path, command: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two clusters with one name and version (one Helm chart for prod and staging): the AMQP side is made to
    report the API's cluster name, so only the probe queue can tell them apart."""
    from dlxtool.broker import identity

    real = identity.amqp_identity
    api_name = crossed.main.mgmt.overview(columns=["cluster_name"])["cluster_name"]
    monkeypatch.setattr(identity, "amqp_identity", lambda conn: identity.Identity(api_name, real(conn).version))
    write_records(crossed, tmp_path)
    result = run(*crossed_args(crossed, amqp_on_second=True), *commands(crossed.queue, tmp_path)[command])
    assert result.exit_code == 3, result.output
    text = result.stderr if command != "brokers check" else json.loads(result.stdout)[0]["management_error"]
    assert "unknown to that API" in _mismatch_line(text)
    assert_untouched(crossed)
    leftovers = [q["name"] for q in crossed.second.mgmt.get(f"queues/{quote(crossed.second.vhost, safe='')}")
                 if q["name"].startswith("amq.gen-")]
    assert leftovers == [], "the probe queue is deleted after the check"


def test_matching_pair_decides_on_the_right_data(run, crossed: Crossed) -> None:
    """The control: with each broker's own API the quorum queue is recognised (refused without
    --spend-attempts, exit 6) and the classic one is peeked (exit 0)."""
    quorum = run("--url", amqp_url(crossed.second), "--management-url", crossed.second.management_url,
                 "peek", crossed.queue, "-n", "2")
    assert quorum.exit_code == 6, quorum.output
    assert "delivery limit 2" in quorum.stderr
    classic = run("--url", amqp_url(crossed.main), "--management-url", crossed.main.management_url,
                  "peek", crossed.queue, "-n", "2", "--format", "json")
    assert classic.exit_code == 0, classic.output
    assert f"{crossed.queue} (classic)" in classic.stderr
    assert_untouched(crossed)


def test_management_url_from_the_environment_and_masked(run, crossed: Crossed) -> None:
    crossed_env = run("--url", amqp_url(crossed.second), "peek", crossed.queue,
                      env={"DLXTOOL_MANAGEMENT_URL": crossed.main.management_url})
    assert crossed_env.exit_code == 3, crossed_env.output
    # The right API with a wrong password in its URL: not usable, so the AMQP-only path refuses the quorum peek.
    api = crossed.second.management_url.replace("http://", "http://guest:Mgmt-Pw-31415@")
    wrong_pw = run("--url", amqp_url(crossed.second), "peek", crossed.queue, env={"DLXTOOL_MANAGEMENT_URL": api})
    assert wrong_pw.exit_code == 6, wrong_pw.output
    assert "authentication failed" in wrong_pw.stderr
    assert "Mgmt-Pw-31415" not in wrong_pw.output
    assert_untouched(crossed)


def test_bad_management_url_is_a_usage_error(run, crossed: Crossed) -> None:
    result = run("--url", amqp_url(crossed.main), "--management-url", "amqp://x:Pw-27182@h/", "peek", crossed.queue)
    assert result.exit_code == 2
    assert "--management-url must be an http:// or https:// URL" in result.stderr
    assert "Pw-27182" not in result.output


def _mismatch_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if "management API" in ln and " answers for " in ln]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_replay_target_broker_api_is_proven_too(run, crossed: Crossed, tmp_path: Path) -> None:
    """--target-broker: the target's API decides about the origins (dead-letter routing), so it must answer
    for the target's AMQP broker; here it is the source's API. Nothing moves."""
    cfg = tmp_path / "c.toml"
    target = crossed.second.config_toml("target").replace(crossed.second.management_url, crossed.main.management_url)
    cfg.write_text(crossed.main.config_toml("source") + target)
    result = run("--config", str(cfg), "--broker", "source", "replay", crossed.queue, "--target-broker", "target",
                 "--yes", "--format", "json", env={"DLXTOOL_TEST_PASSWORD": "guest"})
    assert result.exit_code == 3, result.output
    line = _mismatch_line(result.stderr)
    assert f"localhost:{crossed.second.amqp_port}" in line and "management_url in" in result.stderr
    assert_untouched(crossed)


@pytest.mark.parametrize("how", ["--management-url", "DLXTOOL_MANAGEMENT_URL"])
def test_queues_proves_an_ad_hoc_api_given_with_a_config_profile(run, crossed: Crossed, tmp_path: Path,
                                                                 how: str) -> None:
    """Profile `a` is the main node (AMQP and API); the API typed for this run is the second node's: its
    queues must not be listed as broker a's (exit 3, as peek does)."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(crossed.main.config_toml("a"))
    if how == "--management-url":
        args, env = ["-b", "a", "--management-url", crossed.second.management_url], {}
    else:  # both from the environment (a typed -b would set DLXTOOL_MANAGEMENT_URL aside)
        args, env = [], {"DLXTOOL_BROKER": "a", "DLXTOOL_MANAGEMENT_URL": crossed.second.management_url}
    result = run("--config", str(cfg), *args, "queues", "--format", "json",
                 env={"DLXTOOL_TEST_PASSWORD": "guest", **env})
    assert result.exit_code == 3, result.output
    line = _mismatch_line(result.stderr)
    assert cluster_name(crossed.second) in line.split(" but ")[0] and f"localhost:{crossed.main.amqp_port}" in line
    own = run("--config", str(cfg), "-b", "a", "queues", "--format", "json", env={"DLXTOOL_TEST_PASSWORD": "guest"})
    assert own.exit_code == 0, own.output  # the control: the profile's own pairing lists its queues
    assert_untouched(crossed)


DERIVED_API_PORT = 15672  # what dlxtool derives from any AMQP URL on localhost without a port of its own


@pytest.fixture
def derived_api_node(crossed: Crossed) -> Iterator[BrokerEnv]:
    """The node whose API answers at localhost:15672, with vhost V too (the issue: both brokers have `v`). On the
    3.x suite that is the main test node (where V exists already); on the 4.x suite the 3.x node still listens
    there, and gets V for this test."""
    if crossed.main.http_port == DERIVED_API_PORT:
        yield crossed.main
        return
    from tests.conftest import _port_open

    if not _port_open(DERIVED_API_PORT):
        pytest.skip(f"no management API on localhost:{DERIVED_API_PORT} to be derived")
    with open_vhost("localhost", 5672, DERIVED_API_PORT, crossed.main.vhost) as env:
        yield env


@pytest.mark.parametrize("command", ["peek", "replay", "purge --min-deaths", "load"])
def test_derived_management_url_of_the_other_node_refuses(run, cli_env: dict[str, str], crossed: Crossed,
                                                         derived_api_node: BrokerEnv, tmp_path: Path,
                                                         command: str) -> None:
    """The issue's literal case: no --management-url, no DLXTOOL_MANAGEMENT_URL, `--url` names the second node
    (AMQP localhost:5673, its API on 15673): dlxtool derives http://localhost:15672/, which is another node's API.
    Exit 3 naming both, nothing read (the quorum messages are never given back), three times for peek."""
    cli_env.pop("DLXTOOL_MANAGEMENT_URL", None)
    assert crossed.second.http_port != DERIVED_API_PORT
    write_records(crossed, tmp_path)
    url = f"amqp://guest:guest@localhost:{crossed.second.amqp_port}/{quote(crossed.second.vhost, safe='')}"
    for _ in range(3 if command == "peek" else 1):
        result = run("--url", url, "--format", "json", *commands(crossed.queue, tmp_path)[command])
        assert result.exit_code == 3, result.output
        line = _mismatch_line(result.stderr)
        api_side, amqp_side = line.split(" but ")[0], line.split(" but ")[1]
        assert cluster_name(derived_api_node) in api_side and f"localhost:{DERIVED_API_PORT}" in line
        assert cluster_name(crossed.second) in amqp_side and f"localhost:{crossed.second.amqp_port}" in line
    assert_untouched(crossed)
    assert not list(tmp_path.glob("*.jsonl")), "nothing may have been read into a file"


@pytest.mark.parametrize("close_after", [2, 3])
@pytest.mark.parametrize("command", ["peek", "history", "replay", "queues"])
def test_an_api_whose_new_connections_reach_another_broker_is_caught(run, crossed: Crossed, command: str,
                                                                     close_after: int) -> None:
    """The proof holds for the HTTP connection it came over. A load balancer (or a port-forward set up again) in
    front of two brokers sends the first connection to the right one and later ones to the other: an answer over
    a new connection is used only once that connection is proven too (the proof's probe queue is found there).
    Whichever request the switch hits, no answer of the other broker is used: exit 3 once one reached it, and
    the quorum messages were never given back (read as classic, they were dropped at their delivery limit)."""
    args = {"peek": ["-n", "2"], "history": ["-n", "2"], "replay": ["--dry-run"], "queues": []}[command]
    with http_switch([crossed.second.http_port, crossed.main.http_port], close_after=close_after) as switch:
        result = run("--url", amqp_url(crossed.second), "--management-url", switch.url, command,
                     *([crossed.queue] if command != "queues" else []), *args)
    reached_other = any(backend == crossed.main.http_port for _n, backend, _r in switch.log)
    if reached_other:
        assert result.exit_code == 3, (result.output, switch.log)
        assert "another broker" in result.stderr, result.stderr
    else:  # every answer came from the right broker: the quorum queue is seen as it is
        assert result.exit_code == (0 if command == "queues" else 6), (result.output, switch.log)
    assert_untouched(crossed)


def test_an_answer_over_a_new_connection_to_another_broker_is_not_used(run, crossed: Crossed) -> None:
    """The case the proof alone missed: the first connection proves the API and closes; the queue's facts are
    answered over the second, by the other broker. The new connection is proven before its answer is used, and
    the proof fails there: exit 3 (before this, the quorum queue was read as classic)."""
    with http_switch([crossed.second.http_port, crossed.main.http_port], close_after=2) as switch:
        result = run("--url", amqp_url(crossed.second), "--management-url", switch.url, "replay", crossed.queue,
                     "--dry-run")
    assert result.exit_code == 3, (result.output, switch.log)
    assert "answered over a new HTTP connection for another broker" in result.stderr, result.stderr
    assert_untouched(crossed)


@pytest.mark.parametrize("command", ["peek", "queues"])
def test_an_api_that_closes_connections_but_stays_on_one_broker_still_serves(run, crossed: Crossed,
                                                                             command: str) -> None:
    """The control: the same proxy with both backends the right broker. Each new connection is proven again
    (for `queues`, whose AMQP connection closes after its proof, over a new one) and the quorum queue is
    recognised: peek refuses without --spend-attempts (exit 6), queues lists it as quorum (exit 0)."""
    args = ["peek", crossed.queue, "-n", "2"] if command == "peek" else ["queues", "--format", "json"]
    with http_switch([crossed.second.http_port], close_after=2) as switch:
        result = run("--url", amqp_url(crossed.second), "--management-url", switch.url, *args)
    assert len({n for n, _b, _r in switch.log}) > 1  # it did answer over several connections
    if command == "peek":
        assert result.exit_code == 6, (result.output, switch.log)
        assert "delivery limit 2" in result.stderr
    else:
        assert result.exit_code == 0, (result.output, switch.log)
        rows = [r for r in json.loads(result.stdout) if r.get("queue") == crossed.queue]
        assert [r.get("type") for r in rows] == ["quorum"], rows
    assert_untouched(crossed)
