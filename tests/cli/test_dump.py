"""dump against the real broker: every message, every time, nothing removed."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.broker


def test_back_to_back_dumps_of_10000_messages_each_write_all_of_them(run, broker, qname, tmp_path) -> None:
    """A dump right after another must not stop at a ready count taken while the last one's
    give-back was still going on (reviewer: 10000, 2679, 10000 lines, the short one exit 0)."""
    with broker.channel() as ch:
        ch.queue_declare(qname)
    broker.publish_many(qname, [b"%d" % i for i in range(10_000)])
    lines = []
    for i in range(3):
        out = tmp_path / f"dump{i}.jsonl"
        result = run("dump", qname, "--url", broker.url, "-o", str(out))
        assert result.exit_code == 0, result.stderr
        lines.append(len(out.read_bytes().splitlines()))
    assert lines == [10_000] * 3
    assert broker.queue_depth(qname) == 10_000


def test_dump_of_a_quorum_queue_without_limit_keeps_order(run, broker, qname, tmp_path) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum"})
    broker.publish_many(qname, [b"%d" % i for i in range(300)])
    for i in range(2):
        out = tmp_path / f"dump{i}.jsonl"
        result = run("dump", qname, "--url", broker.url, "-o", str(out), "--allow-reorder")
        assert result.exit_code == 0, result.stderr
        assert len(out.read_bytes().splitlines()) == 300
    assert [body for _m, _p, body in broker.drain(qname)] == [b"%d" % i for i in range(300)]
