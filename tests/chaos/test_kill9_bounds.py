"""How many messages a kill -9 can leave twice, against what docs/stop-signals.md promises (issue 35).

Without --limit the campaign checks "never more than twice --window" on every replay trial (tests/support/chaos.py,
kill9_bound). With --limit the engine used to keep the last --prefetch deliveries of the run unacked after their
confirm until the limit was reached (an ack would free a slot the broker fills with a message past it): a kill -9
in that tail left up to --prefetch twice (measured: 484 with --window 10 --prefetch 2000). A classic queue takes
such a delivery back in place without an attempt, so there every confirmed message is acked at once now
(dlxtool.ops.engine.Transfer._ack_budget), and the bound is twice --window, with --limit too (a quorum queue keeps
the old rule: its give-back costs an attempt)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest

from tests.support.chaos import Trial, _dead_letters, _items
from tests.support.faults import ROOT, FaultNode, Probe, cli_env, drain, write_config

pytestmark = [pytest.mark.faults, pytest.mark.chaos]
MESSAGES, LIMIT, PREFETCH, WINDOW = 1200, 1100, 400, 10


@pytest.fixture(scope="module")
def killed_near_the_limit(broker, tmp_path_factory) -> int:
    """Copies left twice by a kill -9 of `replay --limit` once 97% of the limit has arrived at the origins."""
    tmp = tmp_path_factory.mktemp("kill9")
    trial = Trial(seed=880100, command="replay", fault="kill9", messages=MESSAGES, at=0.97, prefetch=PREFETCH,
                  window=WINDOW)
    dlq, origins = _dead_letters(broker, trial, _items(trial))
    node = FaultNode(broker, "")
    probe = Probe(node)
    config = tmp / "config.toml"
    write_config(node, broker.amqp_port, config)
    proc = subprocess.Popen([sys.executable, "-m", "dlxtool", "--config", str(config), "--broker", "faults", "replay",
                             dlq, "--yes", "--limit", str(LIMIT), "--prefetch", str(PREFETCH), "--window", str(WINDOW)],
                            env=cli_env(tmp), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(ROOT))
    try:
        while proc.poll() is None and probe.depth(*origins) < int(LIMIT * trial.at):
            time.sleep(0.002)
        assert proc.poll() is None, "the run ended before the moment: no kill"
        proc.kill()
        proc.wait()
    finally:
        probe.close()
    found = drain(node, [dlq, *origins], at_least=MESSAGES)  # the connection died with the process: all back
    ids = Counter(mid for (_body, mid), n in found.items() for _ in range(n))
    assert len(ids) == MESSAGES, "lost messages"
    return sum(n - 1 for n in ids.values() if n > 1)


def test_kill9_of_a_replay_with_limit_leaves_at_most_prefetch_twice(killed_near_the_limit: int) -> None:
    assert killed_near_the_limit <= PREFETCH


def test_kill9_of_a_replay_with_limit_leaves_at_most_twice_the_window(killed_near_the_limit: int) -> None:
    assert killed_near_the_limit <= 2 * WINDOW
