"""`dlxtool move SRC DST` on the real broker: the move pipeline's plainest policy (dlxtool.ops.move) — each test over
both protocols where the broker speaks both (issue 39: the same safety rules, proved by the same tests run over
both; over AMQP 1.0 on RabbitMQ 4.x, dlxtool.ops.pipeline_amqp10)."""

from __future__ import annotations

import json

import pika
import pytest

from dlxtool.broker import versions
from dlxtool.cli.output import ExitStatus


@pytest.fixture(params=["0-9-1", "1.0"])
def over(request, broker) -> list[str]:
    """The --protocol arguments of this run (1.0: RabbitMQ 4.x only)."""
    if request.param == "1.0" and not versions.speaks_amqp10(broker.version):
        pytest.skip(f"RabbitMQ {broker.version}: no AMQP 1.0 path here (4.x only)")
    return ["--protocol", request.param]


def queues(broker, qname: str, **dst_args) -> tuple[str, str]:
    src, dst = f"{qname}.src", f"{qname}.dst"
    with broker.channel() as ch:
        ch.queue_declare(src, durable=True)
        ch.queue_declare(dst, durable=True, arguments=dst_args or None)
    return src, dst


def publish(broker, queue: str, n: int) -> None:
    with broker.channel() as ch:
        for i in range(n):
            ch.basic_publish("", queue, f"order {i}".encode(),
                             pika.BasicProperties(message_id=f"m-{i}", content_type="text/plain",
                                                  headers={"tenant": "acme", "n": i}), mandatory=True)
    assert broker.wait_depth(queue, n) == n


def test_every_message_moves_unchanged_and_keeps_its_routing_key(run, broker, qname, over) -> None:
    src, dst = queues(broker, qname)
    publish(broker, src, 3)
    result = run("move", src, dst, *over, "--yes", "--url", broker.url, "--format", "json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["moved"] == {dst: 3} and out["depths_after"][src]["ready"] == 0
    got = broker.drain(dst)
    assert [b for _m, _p, b in got] == [b"order 0", b"order 1", b"order 2"]  # in order
    method, props, _body = got[0]
    assert method.routing_key == src  # the key it was published with, kept (a temporary exchange, not DST's name)
    assert props.message_id == "m-0" and props.headers == {"tenant": "acme", "n": 0}
    assert broker.queue_depth(src) == 0
    runs = json.loads(run("journal", "--format", "json").stdout)
    assert runs[-1]["command"] == "move" and runs[-1]["status"] == "ok" and runs[-1]["counts"]["moved"] == 3


def test_what_the_selection_leaves_stays_in_order(run, broker, qname, over) -> None:
    src, dst = queues(broker, qname)
    publish(broker, src, 5)
    result = run("move", src, dst, *over, "--body-contains", "order 3", "--yes", "--url", broker.url)
    assert result.exit_code == 0, result.stderr
    assert [b for _m, _p, b in broker.drain(dst)] == [b"order 3"]
    assert [b for _m, _p, b in broker.drain(src)] == [b"order 0", b"order 1", b"order 2", b"order 4"]


def test_a_missing_destination_is_not_found_and_nothing_changes(run, broker, qname, over) -> None:
    src, _dst = queues(broker, qname)
    publish(broker, src, 2)
    result = run("move", src, f"{qname}.nowhere", *over, "--yes", "--url", broker.url)
    assert result.exit_code == ExitStatus.NOT_FOUND, result.stderr
    assert "nowhere" in result.stderr and broker.queue_depth(src) == 2


def test_a_full_destination_takes_what_fits_and_nothing_is_refused_with_6(run, broker, qname, over) -> None:
    """DST with x-max-length 2 (drop-head: a move beyond it would push out DST's head): 2 move, the rest stay (5);
    run again, nothing fits: refused, 6, nothing changed (its reason's kind is the destination's)."""
    src, dst = queues(broker, qname, **{"x-max-length": 2})
    publish(broker, src, 4)
    result = run("move", src, dst, *over, "--yes", "--url", broker.url, "--format", "json")
    assert result.exit_code == ExitStatus.PARTIAL, result.stderr
    out = json.loads(result.stdout)
    assert out["moved"] == {dst: 2} and out["left_by_kind"] == {"destination_full": 2}
    result = run("move", src, dst, *over, "--yes", "--url", broker.url, "--format", "json")
    assert result.exit_code == ExitStatus.REFUSED, result.stderr
    assert broker.queue_depth(dst) == 2
    assert [b for _m, _p, b in broker.drain(src)] == [b"order 2", b"order 3"]  # in place, in order


def test_dry_run_and_no_terminal_change_nothing(run, broker, qname, over) -> None:
    src, dst = queues(broker, qname)
    publish(broker, src, 2)
    result = run("move", src, dst, *over, "--dry-run", "--url", broker.url)
    assert result.exit_code == 0 and "would move every message" in result.stderr
    result = run("move", src, dst, *over, "--url", broker.url)
    assert result.exit_code == ExitStatus.REFUSED and "not confirmed" in result.stderr
    assert broker.queue_depth(src) == 2 and broker.queue_depth(dst) == 0
