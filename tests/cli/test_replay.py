"""`dlxtool replay` against the real broker, with dead letters the broker made itself."""

from __future__ import annotations

import json
import time

import pika
import pytest

from dlxtool.ops import replay as replay_ops
from dlxtool.ops.record_files import read_records
from tests.support import retry_topologies as rt
from tests.support.codecs import CODECS, wire_codec

HISTORY = ("x-death", "x-first-death-queue", "x-first-death-reason", "x-first-death-exchange",
           "x-last-death-queue", "x-last-death-reason", "x-delivery-count")


def bodies(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() for i in range(n)]


def wait_depth(broker, queue: str, n: int) -> None:
    assert broker.wait_depth(queue, n) == n, f"{queue} should hold {n}"


def replay(run, broker, *args: str):
    return run("replay", *args, "--url", broker.url, "--format", "json")


@pytest.fixture(params=CODECS)
def hotpath(request, monkeypatch):
    """Replay on each wire codec (dlxtool.broker.wire.codec): `c`, counting the messages its fast path
    (dlxtool.ops.replay_raw) spliced, `python` (the code the C stands in for) and `pika` (pika's own frame
    reader and basic_publish). Yields (codec name, the properties the fast path spliced)."""
    answered: list[bytes] = []
    with wire_codec(request.param) as chosen:
        if chosen.name == "c":
            c = chosen.header_splice  # counts the messages the C path spliced
            assert c is not None
            scan, splice, fingerprint = c

            def counting(*args):
                out = splice(*args)
                if out is not None:
                    answered.append(out)
                return out

            monkeypatch.setattr(type(chosen), "header_splice", property(lambda _c: (scan, counting, fingerprint)))
        yield chosen.name, answered


@pytest.fixture
def mixed(broker, qname):
    """One DLQ fed by four production retry topologies."""
    names = {k: f"{qname}.{k}" for k in ("rej", "rk", "ttl", "qq")}
    data = {k: bodies(k, 3) for k in names}
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, names["rej"], data["rej"])
        rt.routing_key_override(ch, top, names["rk"], data["rk"])
        rt.ttl_wait_loop(ch, top, names["ttl"], data["ttl"])
        rt.quorum_delivery_limit(ch, top, names["qq"], data["qq"])
    wait_depth(broker, top.dlq, 12)
    return top, names, data


def test_each_message_goes_home_with_history_reset(run, broker, mixed, hotpath) -> None:
    top, names, data = mixed
    before = {body: headers for body, headers in broker.snapshot(top.dlq)}
    assert {d["reason"] for h in before.values() for d in h["x-death"]} >= {"rejected", "expired", "delivery_limit"}

    result = replay(run, broker, top.dlq, "--yes")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["moved"] == {names[k]: 3 for k in names}
    assert summary["possible_duplicates"] == 0
    assert broker.queue_depth(top.dlq) == 0

    for key, queue in names.items():
        got = broker.snapshot(queue) if key != "qq" else [(b, dict(p.headers or {})) for _m, p, b in
                                                            broker.drain(queue)]
        assert sorted(b for b, _h in got) == sorted(data[key]), key
        for body, headers in got:
            if key == "qq":  # a quorum queue adds its own, fresh count to every delivery (4.x: from the 1st return)
                assert headers.pop("x-delivery-count", None) == (None if broker.major >= 4 else 0)
            assert not set(HISTORY) & set(headers), (key, headers)
            prov = headers["dlxtool-replay"]
            assert prov["from"] == top.dlq and prov["count"] == 1
            assert headers["tenant"] == "acme" and headers["i"] == before[body]["i"]
        if key == "rk":
            assert {h["dlxtool-replay"]["routing-key"] for _b, h in got} == {"order.created"}
    mode, answered = hotpath
    assert len(answered) == (12 if mode == "c" else 0)  # with C, every broker-made dead letter took it


def test_properties_and_body_unchanged(run, broker, qname, hotpath) -> None:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", [b"\x00\xffbinary"])
    wait_depth(broker, top.dlq, 1)
    assert replay(run, broker, top.dlq, "--yes").exit_code == 0
    [(method, props, body)] = broker.drain(f"{qname}.o")
    assert body == b"\x00\xffbinary"
    for name, value in rt.PROPS.items():
        assert getattr(props, name) == (value if name != "message_id" else "m-0"), name
    # its original routing key (published to the default exchange: the queue name), through the temporary
    # exchange bound only to the origin
    assert method.exchange.startswith("dlxtool.replay.") and method.routing_key == f"{qname}.o"


def raw_properties(broker, queue: str) -> bytes:
    """The encoded properties of the message at the head of a queue, as on the wire (it stays in the queue)."""
    from dlxtool.broker.channel import AsyncChannel
    from dlxtool.broker.wire import frames

    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        channel = AsyncChannel(conn)
        frames.fast_deliveries(conn, channel.impl, raw=True)
        got: list[bytes] = []
        channel.impl.basic_consume(queue, lambda _c, _m, props, _b: got.append(props), auto_ack=False)
        channel.wait_for(lambda: bool(got), "a delivery")
        return got[0]
    finally:
        conn.close()  # unacked: it goes back


def test_a_long_string_header_that_is_not_utf8_is_replayed_alike_with_and_without_c(run, broker, qname,
                                                                                     hotpath) -> None:
    """RabbitMQ passes a long string of any bytes through dead-lettering (the .NET client writes byte[] so). The
    Python path publishes it back as a byte array (pika decodes it as bytes): the C path must not keep it a
    long string, or the same replay would publish two different messages depending on the build."""
    from dlxtool.amqp_values import RawValue
    from dlxtool.broker.publisher import PublishAnswer, Publisher
    from dlxtool.broker.wire import codec

    origin = f"{qname}.o"
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        ch.queue_declare(origin, arguments={"x-dead-letter-exchange": top.dlx}, durable=True)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        with codec.using("python"):  # pika cannot write such a value: dlxtool's encoder sets the test up
            pub = Publisher(conn, window=1)
        pub.publish("", origin, b"b", rt.props(0, bin=RawValue(b"S\x00\x00\x00\x02\xff\xfe")), "m")
        assert [outcome for _t, outcome, _d in pub.flush(10)] == [PublishAnswer.CONFIRMED]
    finally:
        conn.close()
    with broker.channel() as ch:
        rt.reject_all(ch, origin, 1)
    wait_depth(broker, top.dlq, 1)
    assert b"\x03binS\x00\x00\x00\x02\xff\xfe" in raw_properties(broker, top.dlq)  # the dead letter holds it as sent

    assert replay(run, broker, top.dlq, "--yes").exit_code == 0
    assert b"\x03binx\x00\x00\x00\x02\xff\xfe" in raw_properties(broker, origin)
    _mode, answered = hotpath
    assert answered == []  # with C: left to the Python path


def test_a_new_rejection_counts_from_one(run, broker, mixed, hotpath) -> None:
    """On 3.10 the broker keeps a client-sent x-death: without the reset this count would be 2."""
    top, names, _data = mixed
    assert replay(run, broker, top.dlq, "--yes").exit_code == 0
    with broker.channel() as ch:
        rt.reject_all(ch, names["rej"], 3)
        for _ in range(40):  # the quorum queue dead-letters at its delivery limit again
            method, _p, _b = ch.basic_get(names["qq"])
            if method is None:
                break
            ch.basic_reject(method.delivery_tag, requeue=True)  # counted (4.3 no longer counts a nack)
    wait_depth(broker, top.dlq, 6)
    for _body, headers in broker.snapshot(top.dlq):
        assert [d["count"] for d in headers["x-death"]] == [1], headers["x-death"]
        assert headers["dlxtool-replay"]["count"] == 1


@pytest.mark.parametrize("codec", ["pika", "python"], indirect=True)
def test_the_codec_setting_decides_who_writes_the_publishes(run, broker, qname, codec, monkeypatch) -> None:
    """On `pika` every publish of the run (the replayed messages and the one kept back in the DLQ) goes through
    pika's own Channel.basic_publish, none through dlxtool's frames; on dlxtool's codec, the other way round."""
    from dlxtool.broker.wire import frames

    calls = {"pika": 0, "dlxtool": 0}

    def spy(name, real, at):
        def counted(*args, **kwargs):
            if not str(args[at]).startswith("dlxtool.probe."):  # not the permission probe's publish (issue 28)
                calls[name] += 1
            return real(*args, **kwargs)
        return counted

    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", [b"x1", b"x2", b"keep"])
    wait_depth(broker, top.dlq, 3)
    monkeypatch.setattr(pika.channel.Channel, "basic_publish", spy("pika", pika.channel.Channel.basic_publish, 1))
    monkeypatch.setattr(frames, "send_publish", spy("dlxtool", frames.send_publish, 2))
    result = replay(run, broker, top.dlq, "--yes", "--body-contains", "x")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["moved"] == {f"{qname}.o": 2}
    assert broker.queue_depth(top.dlq) == 1
    # the one kept back was given back in place (a classic DLQ, nothing moved yet: not republished) or republished
    kept = summary["republished_to_tail"]
    expected = 2 + kept
    assert calls == ({"pika": expected, "dlxtool": 0} if codec.name == "pika" else {"pika": 0, "dlxtool": expected})


def test_keep_history_keeps_counting(run, broker, qname) -> None:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", [b"a"])
    wait_depth(broker, top.dlq, 1)
    assert replay(run, broker, top.dlq, "--yes", "--keep-history").exit_code == 0
    with broker.channel() as ch:
        rt.reject_all(ch, f"{qname}.o", 1)
    wait_depth(broker, top.dlq, 1)
    [(_b, headers)] = broker.snapshot(top.dlq)
    # 4.x drops an x-death a client published at the next death and starts afresh (test_versions.py)
    assert headers["x-death"][0]["count"] == (1 if broker.major >= 4 else 2)


def test_selection_keeps_the_rest_in_order(run, broker, qname) -> None:
    a, b = f"{qname}.a", f"{qname}.b"
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        ch.queue_declare(a, arguments={"x-dead-letter-exchange": top.dlx}, durable=True)
        ch.queue_declare(b, arguments={"x-dead-letter-exchange": top.dlx}, durable=True)
        for i in range(30):  # interleaved origins in the DLQ
            ch.basic_publish("", a if i % 3 == 0 else b, f"m{i:02d}".encode(), rt.props(i), mandatory=True)
        rt.reject_all(ch, a, 10)
        rt.reject_all(ch, b, 20)
    wait_depth(broker, top.dlq, 30)
    before = broker.snapshot(top.dlq)
    kept_before = [(body, h) for body, h in before if h["x-death"][0]["queue"] == b]

    result = replay(run, broker, top.dlq, "--yes", "--origin", a)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["kept"] == {"not selected": 20}
    assert broker.snapshot(top.dlq) == kept_before  # same order, same headers
    assert broker.queue_depth(a) == 10


def test_limit_leaves_the_unread_rest_in_place(run, broker, qname) -> None:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", bodies("x", 10))
    wait_depth(broker, top.dlq, 10)
    before = broker.snapshot(top.dlq)
    result = replay(run, broker, top.dlq, "--yes", "--limit", "3")
    assert result.exit_code == 0, result.stderr
    assert sorted(b for b, _ in broker.snapshot(f"{qname}.o")) == [b for b, _ in before[:3]]
    assert broker.snapshot(top.dlq) == before[3:]


def test_dry_run_shows_the_plan_and_changes_nothing(run, broker, qname) -> None:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.here", bodies("h", 2))
        rt.reject_to_dlx(ch, top, f"{qname}.gone", bodies("g", 3))
        ch.queue_delete(f"{qname}.gone")
        ch.basic_publish(top.dlx, "", b"no history", mandatory=True)
    wait_depth(broker, top.dlq, 6)
    before = broker.snapshot(top.dlq)
    result = replay(run, broker, top.dlq, "--dry-run")
    assert result.exit_code == 0, result.stderr
    plan = json.loads(result.stdout)["plan"]
    assert {o["queue"]: (o["messages"], o["exists"]) for o in plan["origins"]} == {
        f"{qname}.here": (2, True), f"{qname}.gone": (3, False)}
    assert plan["stay"] == {"no origin in the death history": 1}
    assert broker.snapshot(top.dlq) == before


def test_a_plan_from_the_first_messages_says_so_in_the_table_and_the_json(run, broker, qname, tmp_path) -> None:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", bodies("o", 10))
    wait_depth(broker, top.dlq, 10)
    cfg = tmp_path / "c.toml"
    cfg.write_text("dump_unacked_limit = 4\n" + broker.config_toml("t"))  # a plan reads at most 4
    env = {"DLXTOOL_CONFIG": str(cfg), "DLXTOOL_TEST_PASSWORD": "guest"}
    table = run("replay", top.dlq, "--dry-run", "-b", "t", "-f", "table", env=env)
    assert table.exit_code == 0, table.stderr
    assert f"replay to  {qname}.o" in table.stdout and "  4  " in table.stdout
    assert table.stdout.splitlines()[-1] == ("looked at 4 of 10 messages (the first 4; a plan reads at most "
                                             "--max-unacked (config dump_unacked_limit); the replay goes through all "
                                             "10)")
    plan = json.loads(run("replay", top.dlq, "--dry-run", "-b", "t", "-f", "json", env=env).stdout)["plan"]
    assert (plan["sampled"], plan["looked_at"], plan["queue_depth"], plan["snapshot"]) == (True, 4, 10, 10)
    whole = run("replay", top.dlq, "--dry-run", "--url", broker.url, "-f", "table")
    assert "looked at" not in whole.stdout and "  10  " in whole.stdout
    plan = json.loads(run("replay", top.dlq, "--dry-run", "--url", broker.url, "-f", "json").stdout)["plan"]
    assert (plan["sampled"], plan["looked_at"], plan["queue_depth"]) == (False, 10, 10)
    assert broker.queue_depth(top.dlq) == 10


def test_without_yes_and_terminal_it_refuses(run, broker, qname) -> None:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", [b"a"])
    wait_depth(broker, top.dlq, 1)
    result = replay(run, broker, top.dlq)
    assert result.exit_code == 6
    assert broker.queue_depth(top.dlq) == 1


def test_unroutable_and_no_origin_stay_and_exit_5(run, broker, qname) -> None:
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.gone", bodies("g", 4))
        rt.reject_to_dlx(ch, top, f"{qname}.ok", bodies("k", 2))
        ch.basic_publish(top.dlx, "", b"no history", mandatory=True)
    wait_depth(broker, top.dlq, 7)
    with broker.channel() as ch:
        ch.queue_delete(f"{qname}.gone")
    result = replay(run, broker, top.dlq, "--yes")
    assert result.exit_code == 5, result.stderr
    summary = json.loads(result.stdout)
    assert summary["moved"] == {f"{qname}.ok": 2}
    assert summary["left"]["no origin in the death history"] == 1
    # the original-key route binds a temporary exchange to the origin: a deleted origin cannot be bound
    assert summary["left"][f"{qname}.gone: queue missing (no temporary exchange can be bound to it)"] == 4
    left = broker.snapshot(top.dlq)
    assert sorted(b for b, _ in left) == sorted([*bodies("g", 4), b"no history"])
    assert all("x-death" in h for b, h in left if b != b"no history")  # stayed unchanged


def test_full_origin_with_reject_publish(run, broker, qname) -> None:
    origin = f"{qname}.o"
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, origin, bodies("x", 8))
    wait_depth(broker, top.dlq, 8)
    with broker.channel() as ch:
        ch.queue_delete(origin)
        # declared again with its dead-letter exchange: without one, its dead letters would stay (Routes.died_there)
        ch.queue_declare(origin, arguments={"x-max-length": 3, "x-overflow": "reject-publish",
                                            "x-dead-letter-exchange": top.dlx}, durable=True)
    result = replay(run, broker, top.dlq, "--yes")
    assert result.exit_code == 5
    summary = json.loads(result.stdout)
    assert summary["moved"] == {origin: 3}
    assert sum(n for why, n in summary["left"].items() if why.startswith("nacked")) == 5
    everywhere = [b for b, _ in broker.snapshot(top.dlq)] + [b for b, _ in broker.snapshot(origin)]
    assert sorted(everywhere) == bodies("x", 8)


def test_max_replays_guards_loops(run, broker, qname) -> None:
    origin = f"{qname}.o"
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, origin, [b"poison"])
    wait_depth(broker, top.dlq, 1)
    assert replay(run, broker, top.dlq, "--yes", "--max-replays", "1").exit_code == 0
    with broker.channel() as ch:
        rt.reject_all(ch, origin, 1)
    wait_depth(broker, top.dlq, 1)
    result = replay(run, broker, top.dlq, "--yes", "--max-replays", "1")
    assert result.exit_code == 5
    assert "replayed 1 times already" in json.dumps(json.loads(result.stdout)["left"])
    assert broker.queue_depth(top.dlq) == 1


def test_reset_header_save_and_to(run, broker, qname, tmp_path) -> None:
    other = f"{qname}.other"
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        ch.queue_declare(other, durable=True)
        ch.queue_declare(f"{qname}.o", arguments={"x-dead-letter-exchange": top.dlx}, durable=True)
        ch.basic_publish("", f"{qname}.o", b"a", rt.props(0, count=7, **{"x-retry-count": 3}), mandatory=True)
        rt.reject_all(ch, f"{qname}.o", 1)
    wait_depth(broker, top.dlq, 1)
    save = tmp_path / "replayed.jsonl"
    result = replay(run, broker, top.dlq, "--yes", "--reset-header", "count", "--to", other, "--save", str(save))
    assert result.exit_code == 0, result.stderr
    [(_m, props, _b)] = broker.drain(other)
    assert "count" not in props.headers and "x-retry-count" not in props.headers
    assert "count=7" in props.headers["dlxtool-replay"]["reset"]
    [record] = list(read_records(save.open("rb")))
    assert record.queue == other and record.headers == props.headers and record.body == b"a"


def test_the_original_routing_key_reaches_only_the_origin(run, broker, qname) -> None:
    origin = f"{qname}.o"
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        exchange = rt.routing_key_override(ch, top, origin, [b"a"])
        ch.queue_declare(f"{qname}.audit", durable=True)
        ch.queue_bind(f"{qname}.audit", exchange, "#")  # would get a copy if we went through `exchange`
        ch.queue_purge(f"{qname}.audit")
    wait_depth(broker, top.dlq, 1)
    result = replay(run, broker, top.dlq, "--yes")  # the default
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["routes"] == {origin: replay_ops.ORIGINAL_KEY}
    [(method, _p, body)] = broker.drain(origin)
    assert (method.routing_key, body) == ("order.created", b"a")
    assert broker.queue_depth(f"{qname}.audit") == 0
    exchanges = broker.mgmt.get(f"exchanges/{broker.vhost}")
    assert not [e for e in exchanges if e["name"].startswith("dlxtool.replay.") and qname in e["name"]]


def test_default_exchange_is_opt_in_and_keeps_what_its_dead_letter_exchange_would_drop(run, broker, qname) -> None:
    """--default-exchange: an origin whose direct DLX does not route the queue name keeps its messages in
    the DLQ with the reason (exit 5); an origin with a fanout DLX goes on the default exchange."""
    origin, fine = f"{qname}.o", f"{qname}.fine"
    with broker.channel() as ch:
        ch.exchange_declare(f"{qname}.direct-dlx", "direct")
        ch.queue_declare(f"{qname}.dlq", durable=True)
        ch.queue_bind(f"{qname}.dlq", f"{qname}.direct-dlx", "orders.created")
        ch.queue_declare(origin, arguments={"x-dead-letter-exchange": f"{qname}.direct-dlx"}, durable=True)
        ch.exchange_declare(f"{qname}.in", "direct")
        ch.queue_bind(origin, f"{qname}.in", "orders.created")
        ch.basic_publish(f"{qname}.in", "orders.created", b"a", mandatory=True)
        rt.reject_all(ch, origin, 1)
        ch.exchange_declare(f"{qname}.fan-dlx", "fanout")
        ch.queue_bind(f"{qname}.dlq", f"{qname}.fan-dlx")
        ch.queue_declare(fine, arguments={"x-dead-letter-exchange": f"{qname}.fan-dlx"}, durable=True)
        ch.basic_publish("", fine, b"b", mandatory=True)
        rt.reject_all(ch, fine, 1)
    wait_depth(broker, f"{qname}.dlq", 2)
    plan = replay(run, broker, f"{qname}.dlq", "--dry-run", "--default-exchange")
    assert plan.exit_code == 0, plan.stderr
    stay = json.loads(plan.stdout)["plan"]["stay"]
    [reason] = stay
    assert stay[reason] == 1 and reason.startswith(f"{origin}: ") and "would drop" in reason

    result = replay(run, broker, f"{qname}.dlq", "--yes", "--default-exchange")
    assert result.exit_code == 5, result.stderr
    summary = json.loads(result.stdout)
    assert summary["moved"] == {fine: 1} and summary["left"] == {reason: 1}
    assert summary["routes"] == {fine: replay_ops.DEFAULT_EXCHANGE}
    assert [b for b, _h in broker.snapshot(f"{qname}.dlq")] == [b"a"]
    with broker.channel() as ch:  # the replayed message fails again: its fanout DLX takes it back to the DLQ
        method, _p, body = ch.basic_get(fine)
        assert (method.exchange, method.routing_key, body) == ("", fine, b"b")
        ch.basic_reject(method.delivery_tag, requeue=False)
    wait_depth(broker, f"{qname}.dlq", 2)
    assert sorted(b for b, _h in broker.snapshot(f"{qname}.dlq")) == [b"a", b"b"]  # every message in a queue
    assert broker.queue_depth(origin) == 0 and broker.queue_depth(fine) == 0


def test_target_broker_profile(run, broker, qname, tmp_path) -> None:
    """Publishing over a second connection (another profile) — same guarantees."""
    config = tmp_path / "config.toml"
    config.write_text(broker.config_toml("src") + broker.config_toml("dst"))
    env = {"DLXTOOL_CONFIG": str(config), "DLXTOOL_TEST_PASSWORD": "guest"}
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.o", bodies("x", 50))
    wait_depth(broker, top.dlq, 50)
    result = run("--broker", "src", "replay", top.dlq, "--target-broker", "dst", "--yes", "--format", "json",
                 env=env)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["moved"] == {f"{qname}.o": 50}
    assert broker.queue_depth(f"{qname}.o") == 50


def test_stream_is_refused(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "stream"})
    for _ in range(50):
        try:
            broker.mgmt.queue(broker.vhost, qname)
            break
        except Exception:  # noqa: BLE001 - management stats lag a moment
            time.sleep(0.1)
    result = replay(run, broker, qname, "--yes")
    assert result.exit_code == 6 and "stream" in result.stderr


def test_publisher_settles_returns_and_confirms_separately(broker, qname) -> None:
    """Look-alike publishes to a live and a missing queue interleaved: each outcome lands on its own token."""
    from dlxtool.broker.publisher import PublishAnswer, Publisher

    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    conn = pika.BlockingConnection(pika.URLParameters(broker.url))
    try:
        pub = Publisher(conn, window=50)
        for i in range(200):
            pub.publish("", qname if i % 2 else f"{qname}.missing", b"same body", pika.BasicProperties(), i)
        settled = pub.flush(10)
    finally:
        conn.close()
    outcomes = {token: outcome for token, outcome, _ in settled}
    assert len(outcomes) == 200
    assert {t for t, o in outcomes.items() if o is PublishAnswer.CONFIRMED} == set(range(1, 200, 2))
    assert {t for t, o in outcomes.items() if o is PublishAnswer.RETURNED} == set(range(0, 200, 2))
    assert broker.queue_depth(qname) == 100


def test_keep_routing_key_deletes_every_temporary_exchange_even_when_a_bind_fails(run, broker, qname) -> None:
    """The origin of the first dead letters is gone: its exchange is declared, the bind fails (404, which
    closes that channel), and the exchange must still be deleted; the next origin still gets its own."""
    gone, ok = f"{qname}.gone", f"{qname}.ok"
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, gone, bodies("g", 2))
        rt.reject_to_dlx(ch, top, ok, bodies("k", 3))
    wait_depth(broker, top.dlq, 5)
    with broker.channel() as ch:
        ch.queue_delete(gone)
    result = replay(run, broker, top.dlq, "--yes", "--keep-routing-key")
    assert result.exit_code == 5, result.stderr
    summary = json.loads(result.stdout)
    assert summary["moved"] == {ok: 3}
    assert summary["left"] == {f"{gone}: queue missing (no temporary exchange can be bound to it)": 2}
    assert sorted(b for _m, _p, b in broker.drain(ok)) == bodies("k", 3)
    assert sorted(b for b, _h in broker.snapshot(top.dlq)) == bodies("g", 2)
    exchanges = broker.mgmt.get(f"exchanges/{broker.vhost}")
    assert [e["name"] for e in exchanges if e["name"].startswith("dlxtool.replay.") and qname in e["name"]] == []


def test_keep_routing_key_gives_long_origin_names_their_own_exchange(run, broker, qname) -> None:
    """Two origins whose names differ only past the 231st character: each temporary exchange must stay
    bound to one queue (a shared one would fan every message out to both)."""
    stem = f"{qname}." + "x" * (250 - len(qname))
    first, second = f"{stem}.1", f"{stem}.2"
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, first, bodies("a", 2))
        rt.reject_to_dlx(ch, top, second, bodies("b", 2))
    wait_depth(broker, top.dlq, 4)
    result = replay(run, broker, top.dlq, "--yes", "--keep-routing-key")
    assert result.exit_code == 0, result.stderr
    assert sorted(b for _m, _p, b in broker.drain(first)) == bodies("a", 2)
    assert sorted(b for _m, _p, b in broker.drain(second)) == bodies("b", 2)


def test_the_depths_after_a_replay_are_counted_by_the_broker(run, broker, qname) -> None:
    """Issue 30: after a replay, `queues` still showed the DLQ full for seconds (the API's sample). The replay says
    the depths of the queues it touched as the broker counts them at its end (passive declares), in JSON and in the
    table's closing lines — taken when the API's sample of the DLQ still shows its messages."""
    with broker.channel() as ch:
        top = rt.dead_letter_target(ch, qname)
        rt.reject_to_dlx(ch, top, f"{qname}.work", bodies("d", 3))
    wait_depth(broker, top.dlq, 3)
    deadline = time.monotonic() + 30  # the API's sample counts them, as `queues` would show
    while broker.mgmt.queue(broker.vhost, top.dlq).messages_ready != 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    result = replay(run, broker, top.dlq, "--yes")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["depths_after"] == {top.dlq: {"ready": 0, "consumers": 0},
                                                         f"{qname}.work": {"ready": 3, "consumers": 0}}
    result = run("replay", f"{qname}.work", "--to", top.dlq, "--url", broker.url, "--format", "table", "--yes")
    assert result.exit_code == 0, result.stderr
    assert (f"now (counted by the broker after the run): {qname}.work 0 ready; {top.dlq} 3 ready"
            in result.stderr)


def test_nothing_to_replay_is_said_and_exits_0_without_a_question(run, broker, qname) -> None:
    """An empty DLQ, and a selection that selects none of it: the plan says so, exit 0, nothing asked (no terminal
    here: a question would be refused, exit 6); the DLQ as it was."""
    from tests.support.mixed_dlq import mixed_dlq

    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    empty = run("replay", qname, "--url", broker.url, "-f", "table")
    assert empty.exit_code == 0, empty.output
    assert f"nothing to replay: {qname!r} has no ready message" in empty.stderr
    m = mixed_dlq(broker, f"{qname}.m")
    none = run("replay", m.dlq, "--error", "no such error", "--url", broker.url, "-f", "json")
    assert none.exit_code == 0, none.output
    assert "nothing to replay: the selection selects none of the 7 messages" in none.stderr
    assert json.loads(none.stdout)["plan"]["stay"] == {"not selected": 7}
    some = run("replay", m.dlq, "--error", "timed out", "--url", broker.url, "-f", "json")
    assert some.exit_code == 6 and "not confirmed" in some.stderr
    assert [b for b, _h in broker.snapshot(m.dlq)] == m.bodies
