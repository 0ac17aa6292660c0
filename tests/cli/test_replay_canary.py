"""`replay --canary` and the brake against the real broker, with real consumers that still fail after the "fix".

The dead letters are made by the broker (real rejects through a dead-letter exchange). After the "fix", a consumer
on the origin still fails a subset (SEK orders): by a real reject (the broker dead-letters it again), or, framework
style, by republishing it with its headers and an x-exception-message to a parking-lot exchange the DLQ is bound to,
then acking. Every case checks that nothing is lost: every message id is in the origin, the DLQ, or was consumed.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pytest

from dlxtool.ops import canary as canary_ops
from tests.support.broker import BrokerEnv

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Shop:
    work: str
    dlq: str
    dlx: str
    parking: str
    ids: list[str]


def _fill(broker: BrokerEnv, prefix: str, currencies: list[str], *, origin_type: str,
          dlq_type: str = "classic") -> Shop:
    """An origin whose dead-letter exchange (fanout) feeds the DLQ, a parking-lot exchange bound to the DLQ too;
    one message per currency in `currencies`, all rejected once by a consumer (the broker dead-letters them)."""
    work, dlq, dlx, parking = f"{prefix}.work", f"{prefix}.dlq", f"{prefix}.dlx", f"{prefix}.parking"
    args: dict[str, Any] = {"x-dead-letter-exchange": dlx}
    if origin_type == "quorum":
        args.update(broker.quorum_without_limit())
    ids = [f"m-{i:04d}" for i in range(len(currencies))]
    with broker.channel() as ch:
        ch.exchange_declare(dlx, "fanout")
        ch.exchange_declare(parking, "direct")
        ch.queue_declare(dlq, durable=True, arguments=broker.quorum_without_limit() if dlq_type == "quorum" else None)
        ch.queue_bind(dlq, dlx)
        ch.queue_bind(dlq, parking, routing_key="parked")
        ch.queue_declare(work, durable=True, arguments=args)
        for mid, cur in zip(ids, currencies, strict=True):
            ch.basic_publish("", work, f'{{"order":"{mid}","currency":"{cur}"}}'.encode(),
                             pika.BasicProperties(message_id=mid, delivery_mode=2, headers={"currency": cur}),
                             mandatory=True)
        rejected = 0
        while rejected < len(ids):
            method, _p, _b = ch.basic_get(work, auto_ack=False)
            if method is None:
                time.sleep(0.02)
                continue
            ch.basic_reject(method.delivery_tag, requeue=False)
            rejected += 1
    assert broker.wait_depth(dlq, len(ids)) == len(ids)
    return Shop(work, dlq, dlx, parking, ids)


@dataclass
class Consumer:
    """The origin's consumer after the "fix": SEK still fails (reject, or park), the rest is processed (acked)."""

    broker: BrokerEnv
    shop: Shop
    mode: str = "reject"           # reject | park | ok
    consumed: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Consumer:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        assert ready.wait(10)
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(10)

    def _run(self, ready: threading.Event) -> None:
        b = self.broker
        conn = pika.BlockingConnection(pika.ConnectionParameters(
            host=b.host, port=b.amqp_port, virtual_host=b.vhost, credentials=pika.PlainCredentials("guest", "guest")))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=10)

        def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
            headers = dict(props.headers or {})
            mid = props.message_id
            if self.mode != "ok" and headers.get("currency") in ("SEK", b"SEK"):
                self.failed.append(mid)
                if self.mode == "park":  # Spring's republish recoverer: the headers it got, plus the exception
                    headers["x-exception-message"] = f"currency SEK not supported (order {mid})"
                    ch.basic_publish(self.shop.parking, "parked", body,
                                     pika.BasicProperties(message_id=mid, delivery_mode=2, headers=headers))
                    ch.basic_ack(method.delivery_tag)
                else:
                    ch.basic_reject(method.delivery_tag, requeue=False)
                return
            self.consumed.append(mid)
            ch.basic_ack(method.delivery_tag)

        ch.basic_consume(self.shop.work, on_message)
        ready.set()
        while not self._stop.is_set():
            conn.process_data_events(time_limit=0.05)
        conn.close()


def _ids_in(broker: BrokerEnv, queue: str) -> list[str]:
    return [p.message_id for _m, p, _b in broker.drain(queue)]


def _nothing_lost(broker: BrokerEnv, shop: Shop, consumer: Consumer) -> tuple[list[str], list[str]]:
    """Every id is in the origin, the DLQ or was consumed (once each, bar a duplicate the summary would count)."""
    in_origin, in_dlq = _ids_in(broker, shop.work), _ids_in(broker, shop.dlq)
    assert sorted(set(in_origin) | set(in_dlq) | set(consumer.consumed)) == sorted(shop.ids)
    assert len(in_origin) + len(in_dlq) + len(consumer.consumed) == len(shop.ids), "a message twice"
    return in_origin, in_dlq


def _replay(run, broker: BrokerEnv, dlq: str, *args: str):
    return run("replay", dlq, "--url", broker.url, "--format", "json", "--yes", *args)


@pytest.fixture(params=["classic", "quorum"])
def origin_type(request) -> str:
    return str(request.param)


@pytest.mark.parametrize("mode", ["reject", "park"])
def test_canary_catches_a_fix_that_did_not_work_and_nothing_else_moves(run, broker, qname, origin_type, mode):
    currencies = ["SEK" if i % 3 == 2 else "CHF" for i in range(30)]
    shop = _fill(broker, qname, currencies, origin_type=origin_type)
    with Consumer(broker, shop, mode) as consumer:
        result = _replay(run, broker, shop.dlq, "--canary", "6", "--canary-wait", "20")
        time.sleep(0.3)
    assert result.exit_code == 8, result.stderr
    out = json.loads(result.stdout)
    guard = out["guard"]
    assert guard["stopped"] == "canary"
    canary = guard["canary"]
    assert canary["verdict"] == "failed" and canary["moved"] == 6
    # the picks: the first one, half the canary from the head, the end of what it read
    assert canary["picked"] == ["m-0000", "m-0001", "m-0002", "m-0003", "m-0028", "m-0029"]
    failed = sorted(m["message"] for m in canary["failed_messages"])
    assert failed == ["m-0002", "m-0029"] and sorted(consumer.failed) == failed
    if mode == "park":
        assert {m["error"] for m in canary["failed_messages"]} == {
            f"currency SEK not supported (order {m})" for m in failed}
        assert guard["died_again_by_failure"][0]["failure"] == "currency SEK not supported (order m-<n>)"
    else:
        assert guard["died_again_by_failure"][0]["failure"].startswith("rejected in ")
    assert guard["moved_and_died_again"] == 2 and guard["moved_and_stayed_out"] == 4
    assert out["moved_total"] == 6
    assert "stopped after the canary" in result.stderr and "nothing more moved" in result.stderr
    in_origin, in_dlq = _nothing_lost(broker, shop, consumer)
    assert sorted(consumer.consumed) == ["m-0000", "m-0001", "m-0003", "m-0028"]
    assert not in_origin and len(in_dlq) == 26  # 24 never replayed + the 2 that died again


def test_canary_on_a_quorum_dlq(run, broker, qname):
    """A quorum DLQ: what the canary pass reads and does not pick goes to the DLQ's tail (a give-back would spend a
    delivery attempt); still nothing else moves, nothing is lost."""
    currencies = ["SEK" if i % 3 == 2 else "CHF" for i in range(30)]
    shop = _fill(broker, qname, currencies, origin_type="quorum", dlq_type="quorum")
    with Consumer(broker, shop, "reject") as consumer:
        result = _replay(run, broker, shop.dlq, "--canary", "6", "--canary-wait", "20")
        time.sleep(0.3)
    assert result.exit_code == 8, result.stderr
    out = json.loads(result.stdout)
    assert out["guard"]["canary"]["verdict"] == "failed" and out["moved_total"] == 6
    assert out["republished_to_tail"] == 24
    in_origin, in_dlq = _nothing_lost(broker, shop, consumer)
    assert not in_origin and len(in_dlq) == 26 and len(consumer.consumed) == 4


def test_brake_stops_a_run_whose_failures_begin_after_the_canary(run, broker, qname, origin_type, monkeypatch):
    monkeypatch.setattr(canary_ops, "CANARY_SCAN", 50)  # the canary reads the first 100 (20 × 5) only
    currencies = ["CHF"] * 150 + ["SEK"] * 150
    shop = _fill(broker, qname, currencies, origin_type=origin_type)
    with Consumer(broker, shop, "reject") as consumer:
        result = _replay(run, broker, shop.dlq, "--canary", "5", "--canary-wait", "20", "--rate", "300",
                         "--batch", "50", "--pause", "0.1")
        time.sleep(0.3)
    assert result.exit_code == 8, result.stderr
    out = json.loads(result.stdout)
    guard = out["guard"]
    assert guard["canary"]["verdict"] == "passed", guard
    assert all(int(m[2:]) < 100 for m in guard["canary"]["picked"])
    assert guard["stopped"] == "brake" and "died again" in guard["stop_reason"]
    assert 3 <= guard["moved_and_died_again"] <= len(consumer.failed)
    assert out["moved_total"] < 300 - 50, "the brake stopped it well before the end"
    assert "stopped by the brake" in result.stderr
    in_origin, in_dlq = _nothing_lost(broker, shop, consumer)
    never = [m for m in in_dlq if m not in consumer.failed]
    assert len(never) >= 50 and all(int(m[2:]) >= 150 for m in never)
    assert sorted(consumer.consumed) == shop.ids[:150]  # every CHF went through
    assert not in_origin
    runs = json.loads(run("journal", "--format", "json").stdout)
    decisions = {d["kind"]: d for d in runs[-1]["decisions"]}
    assert decisions["canary"]["decision"] == "go on" and decisions["brake"]["decision"] == "stopped"
    assert runs[-1]["status"] == "stopped" and runs[-1]["counts"]["stopped_by"] == "brake"


def test_a_fix_that_works_finishes_with_no_stop(run, broker, qname, origin_type):
    shop = _fill(broker, qname, ["SEK" if i % 3 == 2 else "CHF" for i in range(40)], origin_type=origin_type)
    with Consumer(broker, shop, "ok") as consumer:
        result = _replay(run, broker, shop.dlq, "--canary", "10%", "--canary-wait", "20")
        deadline = time.monotonic() + 10
        while len(consumer.consumed) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    guard = out["guard"]
    assert guard["stopped"] is None and guard["canary"]["verdict"] == "passed"
    assert guard["canary"]["moved"] == 4 and out["moved_total"] == 40
    assert guard["moved_and_died_again"] == 0 and guard["moved_and_stayed_out"] == 40
    in_origin, in_dlq = _nothing_lost(broker, shop, consumer)
    assert not in_dlq and not in_origin and len(consumer.consumed) == 40


def test_canary_undecided_when_no_consumer_takes_them(run, broker, qname):
    """No consumer on the origin: the canaries neither die nor leave; after --canary-wait the run stops there."""
    shop = _fill(broker, qname, ["CHF"] * 10, origin_type="classic")
    started = time.monotonic()
    result = _replay(run, broker, shop.dlq, "--canary", "2", "--canary-wait", "1.5")
    assert result.exit_code == 8, result.stderr
    assert time.monotonic() - started < 15
    guard = json.loads(result.stdout)["guard"]
    assert guard["canary"]["verdict"] == "undecided" and guard["canary"]["undecided"] == 2
    assert "not seen to leave their origin" in result.stderr
    assert sorted(_ids_in(broker, shop.work)) == ["m-0000", "m-0001"]
    assert sorted(_ids_in(broker, shop.dlq)) == shop.ids[2:]


def test_an_origin_whose_dead_letters_go_elsewhere_is_said(run, broker, qname):
    """The origin's dead-letter exchange changed (a policy) since its messages died: what dies there now goes to
    another queue, which the tap on this DLQ cannot see; said, and named in the JSON."""
    from urllib.parse import quote

    work, dlq, dlx, other = f"{qname}.work", f"{qname}.dlq", f"{qname}.dlx", f"{qname}.other"
    vhost = quote(broker.vhost, safe="")

    def policy(exchange: str) -> None:
        broker.mgmt.request("PUT", f"policies/{vhost}/{qname}-dlx",
                            {"pattern": f"^{qname}\\.work$", "apply-to": "queues", "priority": 1,
                             "definition": {"dead-letter-exchange": exchange}})

    with broker.channel() as ch:
        for exchange, queue in ((dlx, dlq), (other, f"{other}.q")):
            ch.exchange_declare(exchange, "fanout")
            ch.queue_declare(queue, durable=True)
            ch.queue_bind(queue, exchange)
        ch.queue_declare(work, durable=True)
    policy(dlx)
    time.sleep(0.5)  # a policy applies within moments
    with broker.channel() as ch:
        ch.basic_publish("", work, b"x", pika.BasicProperties(message_id="m-0"))
        method = None
        while method is None:
            method, _p, _b = ch.basic_get(work, auto_ack=False)
        ch.basic_reject(method.delivery_tag, requeue=False)
    assert broker.wait_depth(dlq, 1) == 1
    policy(other)
    deadline = time.monotonic() + 10
    while broker.mgmt.get(f"queues/{vhost}/{quote(work, safe='')}").get("effective_policy_definition", {}).get(
            "dead-letter-exchange") != other and time.monotonic() < deadline:
        time.sleep(0.2)
    result = _replay(run, broker, dlq, "--canary", "1", "--canary-wait", "1")
    assert "the tap cannot see what the broker dead-letters from" in result.stderr, result.stderr
    assert json.loads(result.stdout)["guard"]["origins_not_watched"] == {
        work: f"dead-letters to {other!r}, to which {dlq!r} is not bound"}


def test_batches_pause_between_them(run, broker, qname):
    """--batch N --pause D without any watching (--no-brake): the pauses are taken, everything moves."""
    shop = _fill(broker, qname, ["CHF"] * 30, origin_type="classic")
    started = time.monotonic()
    result = _replay(run, broker, shop.dlq, "--no-brake", "--batch", "10", "--pause", "0.6")
    elapsed = time.monotonic() - started
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["moved_total"] == 30 and out["guard"]["watching"] is None and out["guard"]["brake"] is None
    assert out["guard"]["moved_and_died_again"] is None  # not watched: not known
    assert elapsed >= 1.2, "two pauses: after the 10th and the 20th"
    assert broker.queue_depth(shop.work) == 30


def test_canary_refused_where_the_dlq_cannot_be_tapped(run, broker, qname):
    """A DLQ fed through the default exchange (x-dead-letter-exchange ""): no tap; --canary refuses (nothing
    changed), a plain replay goes on with the brake off, said."""
    work, dlq = f"{qname}.work", f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": "",
                                                        "x-dead-letter-routing-key": dlq})
        for i in range(3):
            ch.basic_publish("", work, b"x", pika.BasicProperties(message_id=f"m-{i}"))
        for _ in range(3):
            method = None
            while method is None:
                method, _p, _b = ch.basic_get(work, auto_ack=False)
            ch.basic_reject(method.delivery_tag, requeue=False)
    assert broker.wait_depth(dlq, 3) == 3
    refused = _replay(run, broker, dlq, "--canary", "1")
    assert refused.exit_code == 6, refused.stderr
    assert "default exchange" in refused.stderr and broker.queue_depth(dlq) == 3
    plain = _replay(run, broker, dlq)
    assert plain.exit_code == 0, plain.stderr
    assert "the brake is off" in plain.stderr
    assert broker.queue_depth(work) == 3


def test_journal_records_the_canary_decision(run, broker, qname, cli_env):
    shop = _fill(broker, qname, ["SEK", "CHF", "CHF"], origin_type="classic")
    with Consumer(broker, shop, "reject"):
        result = _replay(run, broker, shop.dlq, "--canary", "1", "--canary-wait", "20")
    assert result.exit_code == 8, result.stderr
    listed = run("journal", "--format", "json")
    runs = json.loads(listed.stdout)
    last = runs[-1] if isinstance(runs, list) else runs
    assert last["status"] == "stopped"
    (decision,) = last["decisions"]
    assert decision["kind"] == "canary" and decision["decision"] == "stop" and decision["failed"] == 1


# -- stop signals: a guarded run stops as any replay does --------------------------------------------------------


def _dlxtool(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "dlxtool", *args],
                            env={**env, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_canary_wait_stops_there(broker, qname, cli_env, sig) -> None:
    """No consumer: the canary waits; a stop signal ends the wait, nothing more moves, its exit code."""
    shop = _fill(broker, qname, ["CHF"] * 20, origin_type="classic")
    proc = _dlxtool(["replay", shop.dlq, "--url", broker.url, "--yes", "--format", "json", "--canary", "2",
                     "--canary-wait", "60"], cli_env)
    seen = ""
    while "then watching them" not in seen:
        line = proc.stderr.readline().decode()
        assert line, seen
        seen += line
    time.sleep(1.0)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, seen + err.decode()
    assert b"Traceback" not in err
    summary = json.loads(out)
    assert summary["moved_total"] == 2 and summary["guard"]["canary"]["verdict"] == "interrupted"
    assert sorted(_ids_in(broker, shop.work)) == ["m-0000", "m-0001"]
    assert sorted(_ids_in(broker, shop.dlq)) == shop.ids[2:]


def test_a_signal_during_a_braked_run_stops_it_as_ctrl_c_does(broker, qname, cli_env) -> None:
    shop = _fill(broker, qname, ["CHF"] * 200, origin_type="classic")
    with Consumer(broker, shop, "ok") as consumer:
        proc = _dlxtool(["replay", shop.dlq, "--url", broker.url, "--yes", "--format", "json", "--rate", "50"],
                        {**cli_env, "DLXTOOL_PROGRESS_INTERVAL": "0.5"})
        seen = ""
        while "replaying:" not in seen:  # a progress line: the run is under way
            line = proc.stderr.readline().decode()
            assert line, seen
            seen += line
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        time.sleep(0.3)
    assert proc.returncode == 130, err.decode()
    assert out, err.decode()
    summary = json.loads(out)
    assert 0 < summary["moved_total"] < 200 and summary["guard"]["stopped"] is None
    in_origin, in_dlq = _nothing_lost(broker, shop, consumer)
    assert len(in_dlq) == 200 - summary["moved_total"]
