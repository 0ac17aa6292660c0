"""history against broker-made dead letters: the right origin and counts for each topology."""

from __future__ import annotations

import orjson

from dlxtool.cli.output import ExitStatus
from tests.support import topologies


def history(run, broker, queue: str, *args: str) -> list[dict]:
    result = run("history", queue, "--url", broker.url, "-f", "json", *args)
    assert result.exit_code == 0, result.stderr
    return orjson.loads(result.stdout)


def test_reject_to_dlq(run, broker, qname) -> None:
    topo = topologies.reject_to_dlq(broker, qname, 3, error="NullPointerException: order.id")
    items = history(run, broker, topo.dlq)
    assert [i["origin"] for i in items] == [topo.work] * 3
    assert items[0]["deaths"][0]["reason"] == "rejected" and items[0]["deaths"][0]["count"] == 1
    assert items[0]["first_death"] == {"queue": topo.work, "reason": "rejected", "exchange": ""}
    summary = history(run, broker, topo.dlq, "--summary")
    assert summary == [{"origin": topo.work, "convention": "x-death", "reason": "rejected",
                        "type": "shop.orders.v1.OrderPlaced", "error": "NullPointerException: order.id",
                        "origin_route": {"queue": topo.work, "exchange": None, "routing_key": None},
                        "messages": 3, "deaths": 3, "deaths_recorded": 3,
                        # 4.x restarts x-death when an app republishes: a count of 1 may be low there
                        "deaths_may_be_low": 3 if broker.major >= 4 else 0,
                        "failures": 3, "deaths_by_reason": {"rejected": 3}, "waits": 0,
                        "attempts": 3, "attempts_per_message": [1, 1],
                        "first": summary[0]["first"], "last": summary[0]["last"],
                        "error_pattern": "NullPointerException: order.id", "exception": None, "frame": None,
                        "error_texts": 1, "example_message_id": "m-0", "message_ids": ["m-0", "m-1", "m-2"],
                        "sampled": False, "looked_at": 3, "queue_depth": 3}]
    assert summary[0]["first"] is not None


def test_a_summary_covers_the_whole_queue_up_to_its_bound_and_says_so_first(run, broker, qname) -> None:
    """A summary reads all of the queue (not the first 100, as it did: issue 37), up to --max-unacked; when it read
    less, its first line says so, before the table; -n N summarises the first N, and says so too."""
    topo = topologies.reject_to_dlq(broker, qname, 130, error="boom")
    [group] = history(run, broker, topo.dlq, "--summary")
    assert (group["messages"], group["sampled"], group["looked_at"], group["queue_depth"]) == (130, False, 130, 130)
    whole = run("history", topo.dlq, "--url", broker.url, "--summary", "-f", "table")
    assert whole.exit_code == 0, whole.stderr
    assert "looked at" not in whole.stdout and " 130 " in whole.stdout
    bounded = run("history", topo.dlq, "--url", broker.url, "--summary", "--max-unacked", "100", "-f", "table")
    assert bounded.exit_code == 0, bounded.stderr
    first, header = bounded.stdout.splitlines()[:2]
    assert first == ("looked at 100 of 130 messages (the first 100; a summary reads up to --max-unacked 100 messages "
                     "and --max-bytes 256.0 MiB of bodies; raise them to cover more)")
    assert header.split()[0] == "origin" and " 100 " in bounded.stdout.splitlines()[3]  # the count is of those 100
    [group] = history(run, broker, topo.dlq, "--summary", "-n", "40")
    assert (group["messages"], group["sampled"], group["looked_at"], group["queue_depth"]) == (40, True, 40, 130)
    first_n = run("history", topo.dlq, "--url", broker.url, "--summary", "-n", "40", "-f", "table")
    assert first_n.stdout.splitlines()[0] == "looked at 40 of 130 messages (the first 40; -n N or --all for all)"
    [group] = history(run, broker, topo.dlq, "--summary", "--all")
    assert (group["messages"], group["sampled"], group["looked_at"], group["queue_depth"]) == (130, False, 130, 130)
    timelines = run("history", topo.dlq, "--url", broker.url, "-n", "2", "-f", "table")
    assert timelines.stdout.splitlines()[-1] == "looked at 2 of 130 messages (the first 2; -n N or --all for all)"
    assert run("history", topo.dlq, "--url", broker.url, "-n", "2", "--all").exit_code == ExitStatus.USAGE
    assert broker.queue_depth(topo.dlq) == 130


def test_ttl_wait_queue_loop_origin_is_the_work_queue(run, broker, qname) -> None:
    topo = topologies.ttl_retry_loop(broker, qname, n=2, cycles=3)
    items = history(run, broker, topo.dlq)
    for item in items:
        deaths = item["deaths"]
        assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
            (topo.wait, "expired", 4), (topo.work, "rejected", 3)]
        assert deaths[0]["original_expiration"] == "50"
        assert item["origin"] == topo.work and "rejected" in item["origin_why"]
        assert item["total_deaths"] == 7
        assert (item["failures"], item["waits"], item["attempts"]) == (3, 4, 3)


def test_a_summary_counts_wait_queue_expiries_as_waits_not_failures(run, broker, qname) -> None:
    """Two messages, each rejected 3 times with a TTL wait in between (4 expiries): 6 failures, 8 waits — not
    "14 deaths" — and 3 attempts each."""
    topo = topologies.ttl_retry_loop(broker, qname, n=2, cycles=3)
    [group] = history(run, broker, topo.dlq, "--summary")
    assert (group["messages"], group["deaths"], group["failures"], group["waits"]) == (2, 14, 6, 8)
    assert group["deaths_by_reason"] == {"rejected": 6}
    assert (group["attempts"], group["attempts_per_message"]) == (6, [3, 3])
    table = run("history", topo.dlq, "--url", broker.url, "--summary", "-f", "table")
    header, _, row = table.stdout.splitlines()[:3]
    assert header.split() == ["origin", "convention", "reason", "type", "error", "messages", "attempts", "deaths",
                              "waits", "first", "last"]
    assert f"{topo.work}  x-death" in row and "  3 each  " in row and "  6 rejected" in row and "  8  " in row
    line = run("history", topo.dlq, "--url", broker.url, "-n", "1", "-f", "table").stdout.splitlines()[0]
    low = "+" if broker.major >= 4 else ""  # 4.x: x-death restarts when an app republishes (may be low)
    assert line.startswith(f"#0 m-0: origin {topo.work} (x-death: most recent rejected death), 3{low} deaths, "
                           "4 waits (expired in a wait queue)")


def test_dead_letter_routing_key_override_does_not_fool_origin(run, broker, qname) -> None:
    topo = topologies.routing_key_override(broker, qname)
    items = history(run, broker, topo.dlq)
    assert [i["routing_key"] for i in items] == ["parked", "parked"]
    assert items[0]["origin"] == topo.work
    assert items[0]["deaths"][0]["routing_keys"] == ["order.placed"]
    assert items[0]["deaths"][0]["exchange"] == topo.exchange


def test_quorum_delivery_limit(run, broker, qname, tmp_path) -> None:
    """Limit 2: the consumer rejected each message three times before the broker dead-lettered it; x-death says
    count 1 and the dead letter has no x-delivery-count, so the attempts come from the queue's limit."""
    topo = topologies.quorum_delivery_limit(broker, qname, n=2, limit=2)
    items = history(run, broker, topo.dlq)
    assert [(i["origin"], i["deaths"][0]["reason"]) for i in items] == [(topo.work, "delivery_limit")] * 2
    assert [(i["deaths"][0]["count"], i["delivery_count"]) for i in items] == [(1, None)] * 2
    assert [i["attempts"] for i in items] == [3, 3]
    assert items[0]["attempts_from"] == f"x-death: delivery_limit in {topo.work}, whose delivery-limit is 2 now: " \
                                        "3 deliveries"
    table = run("history", topo.dlq, "--url", broker.url, "-f", "table")
    assert f"  attempts: 3 (x-death: delivery_limit in {topo.work}, whose delivery-limit is 2 now: 3 deliveries)" \
        in table.stdout.splitlines()
    [group] = history(run, broker, topo.dlq, "--summary")
    assert (group["deaths_by_reason"], group["attempts_per_message"], group["waits"]) == (
        {"delivery_limit": 2}, [3, 3], 0)
    # From a file no broker says the limit: counted as 1, and said so
    dump = tmp_path / "dlq.jsonl"
    assert run("dump", topo.dlq, "--url", broker.url, "-o", str(dump)).exit_code == 0
    offline = orjson.loads(run("history", "--from", str(dump), "-f", "json").stdout)
    assert offline[0]["attempts"] == 1 and "the limit is not known here" in offline[0]["attempts_from"]


def test_max_length_overflow(run, broker, qname) -> None:
    topo = topologies.max_length_overflow(broker, qname, n=5, max_length=2)
    items = history(run, broker, topo.dlq, "--summary")
    assert (items[0]["origin"], items[0]["reason"], items[0]["messages"]) == (topo.work, "maxlen", 3)


def test_history_from_a_dump_file_and_stdin(run, broker, qname, tmp_path) -> None:
    topo = topologies.reject_to_dlq(broker, qname, 2)
    out = tmp_path / "dlq.jsonl"
    dumped = run("dump", topo.dlq, "--url", broker.url, "-o", str(out))
    assert dumped.exit_code == 0, dumped.stderr
    assert "dumped 2 messages" in dumped.stderr and "nothing was removed" in dumped.stderr
    first = run("dump", topo.dlq, "--url", broker.url, "-n", "1", "-o", str(tmp_path / "first.jsonl"))
    assert "dumped 1 of 2 messages of" in first.stderr and "(the first 1; -n N or --all for more)" in first.stderr
    assert broker.queue_depth(topo.dlq) == 2
    offline = run("history", "--from", str(out), "--summary", "-f", "json")
    assert orjson.loads(offline.stdout)[0]["messages"] == 2
    piped = run("history", "--from", "-", "-f", "jsonl", input=out.read_bytes())
    assert [orjson.loads(line)["origin"] for line in piped.stdout.splitlines()] == [topo.work] * 2


def test_malformed_headers_warn_and_give_the_best_reading(run, tmp_path) -> None:
    records = [
        {"queue": "q", "body": "", "headers": {"x-death": "garbage"}},
        {"queue": "q", "body": "", "headers": {"x-death": {"queue": "a", "reason": "rejected", "count": "7"}}},
        {"queue": "q", "body": "", "headers": {"x-death": [{"reason": "rejected"}, 5],
                                               "x-first-death-queue": "b"}},
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    result = run("history", "--from", str(path), "-f", "json")
    assert result.exit_code == 0
    items = orjson.loads(result.stdout)
    assert [i["origin"] for i in items] == [None, "a", "b"]
    assert items[1]["total_deaths"] == 7
    assert "not an array" in result.stderr and "lacks queue, count" in result.stderr
    table = run("history", "--from", str(path), "-f", "table")
    assert table.exit_code == 0 and "origin a" in table.stdout


def test_history_needs_a_queue_or_a_file(run) -> None:
    assert run("history").exit_code == ExitStatus.USAGE


def test_dump_refuses_above_the_configured_bound_and_says_the_cost(run, broker, qname, tmp_path) -> None:
    topo = topologies.max_length_overflow(broker, qname, n=8, max_length=8)  # 8 messages, no deaths
    config = tmp_path / "config.toml"
    config.write_text("dump_unacked_limit = 5\n" + broker.config_toml())
    env = {"DLXTOOL_CONFIG": str(config), "DLXTOOL_TEST_PASSWORD": "guest"}
    refused = run("dump", topo.work, "-b", "test", "--all", env=env)
    assert refused.exit_code == ExitStatus.REFUSED
    assert "bound is 5" in refused.stderr and "dump --remove" in refused.stderr
    allowed = run("dump", topo.work, "-b", "test", "--all", "--max-unacked", "8", env=env)
    assert allowed.exit_code == 0, allowed.stderr
    assert len(allowed.stdout.splitlines()) == 8
    assert "holding up to 8 messages unacked" in allowed.stderr
    assert broker.queue_depth(topo.work) == 8
    assert run("dump", topo.work, "-b", "test", "--all", "-n", "2", env=env).exit_code == ExitStatus.USAGE


def test_a_replayed_message_that_fails_again_names_its_real_exchange(run, broker, qname) -> None:
    """Replayed through dlxtool's temporary exchange, really rejected again: the broker's x-death (and
    x-first-death-exchange, and the delivery the application gets) name that deleted exchange; history and peek
    show the exchange it stood for, which the provenance header recorded."""
    topo = topologies.routing_key_override(broker, qname, n=1)
    assert run("replay", topo.dlq, "--url", broker.url, "--yes").exit_code == 0
    peeked = run("peek", topo.work, "--url", broker.url, "-f", "table")
    assert f"order.placed   {topo.exchange} (dlxtool replay)" in peeked.stdout
    with broker.channel() as ch:
        method, _props, _body = ch.basic_get(topo.work)
        assert method.exchange.startswith("dlxtool.replay.") and method.exchange.endswith(f".0.{topo.work}")
        ch.basic_reject(method.delivery_tag, requeue=False)
    broker.wait_depth(topo.dlq, 1)
    [item] = history(run, broker, topo.dlq)
    assert item["deaths"][0]["exchange"].startswith("dlxtool.replay.")  # what the broker wrote, as it is
    assert (item["replayed"]["exchange"], item["replayed"]["routing_key"], item["replayed"]["count"]) == (
        topo.exchange, "order.placed", 1)
    lines = run("history", topo.dlq, "--url", broker.url, "-f", "table").stdout.splitlines()
    assert f"  replayed: 1 time(s) by dlxtool, last from {topo.dlq} at {item['replayed']['at']}; its first " \
           f"origin's exchange {topo.exchange}, routing key order.placed" in lines
    assert f"  first death: queue={topo.work} reason=rejected exchange={topo.exchange} (dlxtool replay)" in lines
    [row] = [line for line in lines if line.startswith(topo.work)]
    assert f"rejected  1        {topo.exchange} (dlxtool replay)  order.placed" in row
