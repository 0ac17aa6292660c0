"""`replay --protocol 1.0` under the canary and the brake (RabbitMQ 4.x): the same guard as over 0.9.1.

The 1.0 mover takes the guard's pass control (the canary's pick and read limit, the brake's stop), and the tap — a
0.9.1 reader of the DLQ's exchanges — knows this run's messages by the provenance a 1.0 replay sends as the message
annotation x-opt-dlxtool-replay (a table header of that name to a 0.9.1 reader). Real consumers on the origin still
fail SEK orders by a real reject (tests/cli/test_replay_canary.py's shop and consumer); nothing is lost.
"""

from __future__ import annotations

import json
import threading
import time
from urllib.parse import quote

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


class _Rejecter:
    """An AMQP 1.0 consumer of `queue` that rejects every message (the broker dead-letters it), in a thread of its
    own: the application a message with a char application property can only reach over 1.0."""

    def __init__(self, broker, queue: str) -> None:
        self.broker, self.queue, self.rejected = broker, queue, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Rejecter:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        from dlxtool.broker.amqp10 import outcomes
        from dlxtool.broker.amqp10.addresses import queue_address
        from dlxtool.broker.amqp10.connection import open_connection
        from dlxtool.broker.amqp10.links import HeadReader

        conn = open_connection(self.broker.profile())
        try:
            reader = HeadReader(conn, queue_address(self.queue), give_back=outcomes.RELEASE)
            while not self._stop.is_set():
                for delivery in reader.read(10):
                    reader.settle(delivery, outcomes.REJECT)
                    self.rejected += 1
                time.sleep(0.05)
            reader.close()
        finally:
            conn.close()


def test_a_message_0_9_1_cannot_be_given_dies_again_and_the_canary_over_10_sees_it(run, v4, qname) -> None:
    """A replayed message with a char application property that fails again: RabbitMQ cannot give it to a 0.9.1
    consumer (it closes that connection), so a 0.9.1 tap would stop watching; the tap of a 1.0 replay reads over 1.0
    and the canary stops the run (exit 8), nothing lost, its queue gone afterwards."""
    from dlxtool.amqp10_message import Amqp10Message, Body, Typed
    from tests.ops.test_engine_amqp10 import _dead_letter

    work, dlx, dlq = f"{qname}.work", f"{qname}.dlx", f"{qname}.dlq"
    with v4.channel() as ch:
        ch.exchange_declare(dlx, "fanout")
        ch.queue_declare(dlq, durable=True)
        ch.queue_bind(dlq, dlx)
        ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": dlx})
    sent = [Amqp10Message(properties={"message_id": Typed("string", f"c-{i}")},
                          application_properties=[(Typed("string", "grade"), Typed("char", "A"))],
                          body=Body("data", [b"order %d" % i])) for i in range(5)]
    _dead_letter(v4, work, sent)
    assert v4.wait_depth(dlq, 5) == 5
    with _Rejecter(v4, work) as app:
        result = _replay(run, v4, dlq, "--protocol", "1.0", "--canary", "1", "--canary-wait", "20")
    assert result.exit_code == 8, result.stderr
    guard = json.loads(result.stdout)["guard"]
    assert guard["stopped"] == "canary" and guard["canary"]["verdict"] == "failed", guard
    assert [m["message"] for m in guard["canary"]["failed_messages"]] == ["c-0"]
    assert "stopped watching" not in result.stderr and app.rejected == 1
    assert v4.wait_depth(dlq, 5) == 5 and v4.queue_depth(work) == 0  # the 4 never moved, the canary back
    queues = v4.mgmt.get(f"queues/{quote(v4.vhost, safe='')}", columns="name")  # the tap's went with its receiver
    assert not [q for q in queues if q["name"].startswith("dlxtool.tap.")], queues
