"""The byte budget of the readers (peek, history, dump) against the real broker: a read that would pass it stops
there, says how many it showed and that more remain (exit 5, partial), and leaves the queue as it was."""

from __future__ import annotations

import orjson
import pika

from dlxtool.cli.output import ExitStatus
from tests.cli.test_peek import delivery_counts, drained, spends

KIB = 1024
N = 10


def bodies(size: int = 100 * KIB) -> list[bytes]:
    return [bytes([65 + i]) * size for i in range(N)]


def fill(broker, queue: str, body_list: list[bytes], **arguments: object) -> None:
    with broker.channel() as ch:
        ch.queue_declare(queue, durable=True, arguments=arguments or None)
        for i, body in enumerate(body_list):
            ch.basic_publish("", queue, body, pika.BasicProperties(message_id=f"m{i}", headers={"n": i},
                                                                   delivery_mode=2), mandatory=True)


def records(result) -> list[dict]:
    return [orjson.loads(line) for line in result.stdout.splitlines()]


def test_a_peek_that_would_pass_the_budget_stops_there_and_says_so(run, broker, qname) -> None:
    fill(broker, qname, bodies())
    before = broker.snapshot(qname)
    result = run("peek", qname, "--url", broker.url, "-n", "10", "-f", "jsonl", "--max-bytes", "350KiB")
    assert result.exit_code == ExitStatus.PARTIAL, result.stderr
    assert [r["headers"]["n"] for r in records(result)] == [0, 1, 2]  # 300 KiB; the 4th would make 400
    assert ("stopped at the byte budget of 350.0 KiB (--max-bytes): showed 3 message(s) of the 10 asked for, "
            "300.0 KiB of bodies; the next one (position 3, 100.0 KiB) would have passed it and was given back "
            "unshown; 7 more remain in the queue") in result.stderr
    assert "raise --max-bytes (config max_bytes)" in result.stderr
    assert broker.snapshot(qname) == before  # given back in place, in order


def test_within_the_budget_nothing_is_said(run, broker, qname) -> None:
    fill(broker, qname, bodies())
    result = run("peek", qname, "--url", broker.url, "-n", "10", "-f", "jsonl", "--max-bytes", "1000KiB")
    assert result.exit_code == 0, result.stderr
    assert len(records(result)) == N and "byte budget" not in result.stderr


def test_one_message_bigger_than_the_budget_is_still_shown(run, broker, qname) -> None:
    """A message cannot be read in part: the first is shown whatever its size, the read stops after it."""
    fill(broker, qname, bodies())
    result = run("peek", qname, "--url", broker.url, "-n", "5", "-f", "jsonl", "--max-bytes", "10KiB")
    assert result.exit_code == ExitStatus.PARTIAL
    assert [r["headers"]["n"] for r in records(result)] == [0]
    assert "showed 1 message(s) of the 5 asked for" in result.stderr


def test_the_config_sets_the_budget_and_the_flag_wins(run, broker, qname, tmp_path) -> None:
    fill(broker, qname, bodies())
    path = tmp_path / "config.toml"
    path.write_text('max_bytes = "1MiB"\n' + broker.config_toml(max_bytes='"250KiB"'))
    env = {"DLXTOOL_CONFIG": str(path), "DLXTOOL_TEST_PASSWORD": "guest"}
    by_profile = run("peek", qname, "-b", "test", "-n", "10", "-f", "jsonl", env=env)
    assert by_profile.exit_code == ExitStatus.PARTIAL
    assert len(records(by_profile)) == 2 and "byte budget of 250.0 KiB" in by_profile.stderr
    by_flag = run("peek", qname, "-b", "test", "-n", "10", "-f", "jsonl", "--max-bytes", "2MiB", env=env)
    assert by_flag.exit_code == 0 and len(records(by_flag)) == N


def test_history_and_dump_stop_at_the_budget_too(run, broker, qname, tmp_path) -> None:
    fill(broker, qname, bodies())
    history = run("history", qname, "--url", broker.url, "-n", "10", "-f", "json", "--max-bytes", "350KiB")
    assert history.exit_code == ExitStatus.PARTIAL
    assert "showed 3 message(s) of the 10 asked for" in history.stderr
    out = tmp_path / "head.jsonl"
    dump = run("dump", qname, "--url", broker.url, "-o", str(out), "--max-bytes", "350KiB")
    assert dump.exit_code == ExitStatus.PARTIAL
    assert "showed 3 message(s), 300.0 KiB of bodies" in dump.stderr  # no -n: every message was asked for
    assert [orjson.loads(line)["headers"]["n"] for line in out.read_bytes().splitlines()] == [0, 1, 2]
    assert broker.queue_depth(qname) == N


def test_a_bad_size_is_a_usage_error(run, broker, qname, tmp_path) -> None:
    flag = run("peek", qname, "--url", broker.url, "--max-bytes", "12XB")
    assert flag.exit_code == ExitStatus.USAGE
    assert "Invalid value for '--max-bytes': '12XB' is not a size" in flag.stderr
    for command in (("replay", qname, "--yes"), ("purge", qname, "--yes"), ("load", "-"), ("history", qname)):
        assert run(*command, "--url", broker.url, "--max-bytes", "0").exit_code == ExitStatus.USAGE
    path = tmp_path / "config.toml"
    path.write_text(broker.config_toml(max_bytes='"lots"'))
    config = run("peek", qname, "-b", "test", env={"DLXTOOL_CONFIG": str(path), "DLXTOOL_TEST_PASSWORD": "guest"})
    assert config.exit_code == ExitStatus.USAGE
    assert "[brokers.test]: max_bytes: 'lots' is not a size" in config.stderr and str(path) in config.stderr


def test_a_stream_read_stops_at_the_budget(run, broker, qname) -> None:
    fill(broker, qname, bodies(), **{"x-queue-type": "stream"})
    result = run("peek", qname, "--url", broker.url, "-n", "10", "-f", "jsonl", "--wait", "2", "--max-bytes",
                 "350KiB")
    assert result.exit_code == ExitStatus.PARTIAL, result.stderr
    assert [r["headers"]["n"] for r in records(result)] == [0, 1, 2]
    assert "showed 3 message(s) of the 10 asked for" in result.stderr
    assert "was not shown; the stream goes on from there" in result.stderr


def test_a_quorum_read_stopped_by_the_budget_keeps_the_order(run, broker, qname) -> None:
    """The message that passed the budget was taken: it goes back with the others, in place; where a give-back
    costs a delivery attempt, it cost one too (and says so)."""
    fill(broker, qname, bodies(), **{"x-queue-type": "quorum", "x-delivery-limit": 10})
    result = run("peek", qname, "--url", broker.url, "-n", "10", "-f", "jsonl", "--max-bytes", "350KiB",
                 *(["--spend-attempts"] if spends(broker) else []))
    assert result.exit_code == ExitStatus.PARTIAL, result.stderr
    assert [r["headers"]["n"] for r in records(result)] == [0, 1, 2]
    assert "showed 3 message(s) of the 10 asked for" in result.stderr
    if spends(broker):
        assert "used one delivery attempt of each of the 4 messages given back" in result.stderr
        assert delivery_counts(broker, qname) == [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    else:
        assert [b for b, _h in drained(broker, qname)] == bodies()


def test_a_compressed_body_inflates_within_the_budget(run, broker, qname, tmp_path) -> None:
    """Decoding a gzip body (what it inflates to) keeps to the same budget: a body that would inflate past it is not
    inflated, so not decoded."""
    import gzip

    from proto_registry import DEMO_PROTOS, Registry
    from tests.cli.test_peek_decoded import demo_config

    cls = Registry.load([DEMO_PROTOS]).message_class("shop.orders.v1.OrderPlaced")
    msg = cls(order_id="ord-42", customer_id="cust-7")
    msg.metadata["note"] = "n" * (300 * KIB)
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
        ch.basic_publish("", qname, gzip.compress(msg.SerializeToString()),
                         pika.BasicProperties(content_encoding="gzip", type="shop.orders.v1.OrderPlaced"))
    env = demo_config(tmp_path)
    roomy = run("peek", qname, "--url", broker.url, "-f", "jsonl", "--max-bytes", "1MiB", env=env)
    assert roomy.exit_code == 0, roomy.stderr
    assert records(roomy)[0]["decoded"]["type"] == "shop.orders.v1.OrderPlaced"
    tight = run("peek", qname, "--url", broker.url, "-f", "jsonl", "--max-bytes", "100KiB", env=env)
    assert tight.exit_code == 0, tight.stderr
    decoded = records(tight)[0]["decoded"]
    assert decoded is None  # the same body: not inflated past the budget, so not decoded
