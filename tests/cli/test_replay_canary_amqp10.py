"""`replay --protocol 1.0` under the canary and the brake (RabbitMQ 4.x): the same guard as over 0.9.1.

The 1.0 mover takes the guard's pass control (the canary's pick and read limit, the brake's stop), and the tap — a
0.9.1 reader of the DLQ's exchanges — knows this run's messages by the provenance a 1.0 replay sends as the message
annotation x-opt-dlxtool-replay (a table header of that name to a 0.9.1 reader). Real consumers on the origin still
fail SEK orders by a real reject (tests/cli/test_replay_canary.py's shop and consumer); nothing is lost.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.cli.test_replay_canary import Consumer, _fill, _nothing_lost, _replay

pytestmark = pytest.mark.broker



def test_canary_over_amqp10_catches_a_fix_that_did_not_work_and_nothing_else_moves(run, v4, qname) -> None:
    currencies = ["SEK" if i % 3 == 2 else "CHF" for i in range(30)]
    shop = _fill(v4, qname, currencies, origin_type="classic")
    with Consumer(v4, shop, "reject") as consumer:
        result = _replay(run, v4, shop.dlq, "--protocol", "1.0", "--canary", "6", "--canary-wait", "20")
        time.sleep(0.3)
    assert result.exit_code == 8, result.stderr
    out = json.loads(result.stdout)
    guard = out["guard"]
    assert guard["stopped"] == "canary" and guard["canary"]["verdict"] == "failed", guard
    assert guard["canary"]["moved"] == 6 and out["moved_total"] == 6
    failed = sorted(m["message"] for m in guard["canary"]["failed_messages"])
    assert failed and sorted(consumer.failed) == failed
    assert guard["moved_and_died_again"] == len(failed)
    in_origin, in_dlq = _nothing_lost(v4, shop, consumer)
    assert not in_origin and len(in_dlq) == 30 - len(consumer.consumed)


def test_the_brake_over_amqp10_stops_a_run_whose_messages_die_again(run, v4, qname) -> None:
    shop = _fill(v4, qname, ["SEK"] * 200, origin_type="classic")
    with Consumer(v4, shop, "reject") as consumer:
        result = _replay(run, v4, shop.dlq, "--protocol", "1.0", "--rate", "100")
        time.sleep(0.3)
    assert result.exit_code == 8, result.stderr
    out = json.loads(result.stdout)
    guard = out["guard"]
    assert guard["stopped"] == "brake" and "died again" in guard["stop_reason"], guard
    assert 3 <= guard["moved_and_died_again"] <= len(consumer.failed)
    assert out["moved_total"] < 150, "the brake stopped it well before the end"
    assert "stopped by the brake" in result.stderr
    in_origin, in_dlq = _nothing_lost(v4, shop, consumer)
    assert not in_origin and len(in_dlq) == 200 and not consumer.consumed


def test_batches_over_amqp10_pause_between_them_and_move_everything(run, v4, qname) -> None:
    shop = _fill(v4, qname, ["CHF"] * 12, origin_type="classic")
    with Consumer(v4, shop, "ok") as consumer:
        started = time.monotonic()
        result = _replay(run, v4, shop.dlq, "--protocol", "1.0", "--batch", "4", "--pause", "0.5")
        took = time.monotonic() - started
        deadline = time.monotonic() + 10
        while len(consumer.consumed) < 12 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["moved_total"] == 12
    assert took >= 1.0, "two pauses of 0.5 s between three batches of 4"
    in_origin, in_dlq = _nothing_lost(v4, shop, consumer)
    assert not in_origin and not in_dlq and sorted(consumer.consumed) == shop.ids
