"""The version table (dlxtool/broker/versions.py), fact by fact, measured on the broker under test.

scripts/test runs these on RabbitMQ 3.10.8, 4.0.5 and 4.3.6 (and on whatever node DLXTOOL_TEST_AMQP_PORT names):
each test measures what the broker does and compares it with what the table says for the version the broker gave
in connection.start — never with a version written into the test. A broker that behaves otherwise than its row
fails here, so the table cannot drift from the brokers dlxtool is tested on.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any
from urllib.parse import quote

import pika
import pika.exceptions as pe
import pytest

from dlxtool.broker import versions
from dlxtool.broker.management import queue_info
from dlxtool.errors import DlxtoolError

pytestmark = pytest.mark.broker


def _connect(broker) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(broker.url))


@pytest.fixture
def row(broker) -> versions.Behaviour:
    """The table's row for the broker under test, by the version it gives in connection.start."""
    conn = _connect(broker)
    try:
        version = versions.server_version(conn)
    finally:
        conn.close()
    assert version is not None and str(version) == broker.version.split("-")[0]  # the API says the same
    return versions.behaviour(version)


def _quorum(broker, queue: str, bodies: list[bytes], **args: Any) -> None:
    with broker.channel() as ch:
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum", **args})
    broker.publish(queue, bodies, properties=pika.BasicProperties(delivery_mode=2))


def _give_back_head(conn: pika.BlockingConnection, queue: str, how: str) -> dict[str, Any] | None:
    """Take the head of `queue` unacked and give it back by `how` (versions.GIVE_BACKS); its headers as delivered,
    None when the queue had nothing."""
    ch = conn.channel()
    if how == "cancel":
        got: list[Any] = []
        ch.basic_qos(prefetch_count=1)
        tag = ch.basic_consume(queue, lambda _c, _m, props, _b: got.append(props))
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            conn.process_data_events(0.05)
        ch.basic_cancel(tag)
        ch.close()
        return dict(got[0].headers or {}) if got else None
    method, props, _body = ch.basic_get(queue, auto_ack=False)
    if method is None:
        ch.close()
        return None
    if how == "lost":  # the socket dropped with the message held: the connection is gone
        from dlxtool.broker.connection import abort

        abort(conn)
        return dict(props.headers or {})
    if how == "nack":
        ch.basic_nack(method.delivery_tag, multiple=True, requeue=True)
    elif how == "reject":
        ch.basic_reject(method.delivery_tag, requeue=True)
    ch.close()  # "close": the channel closes with the message held
    return dict(props.headers or {})


def _settled(broker, queue: str, expected: int) -> None:
    """A quorum queue applies returns after the channel closed: wait until it counts them ready again."""
    assert broker.wait_depth(queue, expected) == expected


def _deliveries_until_gone(broker, queue: str, cap: int = 25) -> int:
    """Deliveries of a queue's one message, each given back by a channel close (counted on every version), until the
    queue has none; `cap` when it was still there after that many."""
    conn = _connect(broker)
    delivered = 0
    try:
        while delivered < cap:
            if _give_back_head(conn, queue, "close") is None:
                time.sleep(0.3)  # a return still being applied reads as an empty queue
                if _give_back_head(conn, queue, "close") is None:
                    break
            delivered += 1
    finally:
        conn.close()
    return delivered


# -- quorum give-backs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", versions.GIVE_BACKS)
def test_which_give_backs_count_a_delivery_attempt(broker, qname, row, how) -> None:
    """Three give-backs of the head of a quorum queue with a limit (10): x-delivery-count reads 3 where `how`
    counts, and stays as on a first delivery where it does not (4.3's nack); the head stays the head either way;
    x-acquired-count (4.3) counts every give-back."""
    _quorum(broker, qname, [b"m0", b"m1", b"m2"], **{"x-delivery-limit": 10})
    conn = _connect(broker)
    try:
        seen = []
        for _ in range(3):
            if not conn.is_open:  # "lost" drops it each time
                conn = _connect(broker)
            seen.append(_give_back_head(conn, qname, how))
            _settled(broker, qname, 3)
    finally:
        if conn.is_open:
            conn.close()
    first = seen[0] or {}
    assert ("x-delivery-count" in first) == (row.first_delivery_count_header and how != "cancel")
    after = [(body, dict(props.headers or {})) for _m, props, body in broker.drain(qname)]
    assert [body for body, _h in after] == [b"m0", b"m1", b"m2"]
    head = after[0][1]
    counted = versions.quorum_give_back_counts(broker.version, how)
    assert counted == (how in row.quorum_counted)
    assert head.get("x-delivery-count", 0) == (3 if counted else 0), head
    assert head.get("x-acquired-count") == (3 if row.acquired_count_header else None), head
    untouched = after[1][1]
    assert untouched.get("x-delivery-count") == (0 if row.first_delivery_count_header else None)
    assert "x-acquired-count" not in untouched


def _get_all_and_nack_in_chunks(broker, queue: str, n: int, chunk: int = 32) -> list[bytes]:
    """basic.get `n` messages, then nack them `chunk` at a time, each chunk applied before the next (the
    passive-declare consumer count drops by it: each basic.get is a consumer of its own until it comes back)."""
    conn = _connect(broker)
    try:
        ch = conn.channel()
        tags, bodies = [], []
        for _ in range(n):
            method, _props, body = ch.basic_get(queue, auto_ack=False)
            tags.append(method.delivery_tag)
            bodies.append(body)
        for start in range(0, n, chunk):
            end = min(start + chunk, n)
            ch.basic_nack(tags[end - 1], multiple=True, requeue=True)
            deadline = time.monotonic() + 10
            while ch.queue_declare(queue, passive=True).method.consumer_count > n - end:
                assert time.monotonic() < deadline, "the queue did not apply the nacks"
                time.sleep(0.005)
        ch.close()
        return bodies
    finally:
        conn.close()


def test_nacks_32_at_a_time_keep_a_limited_queues_order(broker, qname, row) -> None:
    """80 messages read with basic.get and nacked 32 at a time (a peek's give-back): in order on every version;
    each one counted where the table says nacks count (3.10, 4.0), none on 4.3."""
    bodies = [str(i).encode() for i in range(80)]
    _quorum(broker, qname, bodies, **{"x-delivery-limit": 10})
    assert _get_all_and_nack_in_chunks(broker, qname, 80) == bodies
    _settled(broker, qname, 80)
    after = broker.drain(qname)
    assert [body for _m, _p, body in after] == bodies
    counts = {(props.headers or {}).get("x-delivery-count", 0) for _m, props, _b in after}
    assert counts == {1 if "nack" in row.quorum_counted else 0}


@pytest.mark.parametrize("limited", [False, True])
def test_where_a_nacked_message_goes(broker, qname, row, limited) -> None:
    """The head nacked back: to the back of a quorum queue with no limit in effect (3.x without one, 4.0 with -1),
    in place with one; in place either way on 4.3."""
    args = {"x-delivery-limit": 5} if limited else broker.quorum_without_limit()
    args.pop("x-queue-type", None)
    _quorum(broker, qname, [b"0", b"1", b"2"], **args)
    limit = versions.effective_delivery_limit(broker.version, args.get("x-delivery-limit"), None)
    assert (limit is None) == (not limited)
    conn = _connect(broker)
    try:
        _give_back_head(conn, qname, "nack")
    finally:
        conn.close()
    _settled(broker, qname, 3)
    order = [body for _m, _p, body in broker.drain(qname)]
    to_back = versions.quorum_nack_to_back(broker.version, limit)
    assert to_back == (not limited and row.quorum_unlimited_nack_to_back)
    assert order == ([b"1", b"2", b"0"] if to_back else [b"0", b"1", b"2"])


# -- delivery limits -------------------------------------------------------------------------------------------


def test_default_delivery_limit(broker, qname, row) -> None:
    """A quorum queue declared without a limit: the message survives default_delivery_limit counted returns
    (channel closes) and is gone at the next; with no default it survives them all."""
    _quorum(broker, qname, [b"only"])
    deliveries = _deliveries_until_gone(broker, qname)
    default = versions.default_delivery_limit(broker.version)
    assert default == row.default_delivery_limit
    assert deliveries == (25 if default is None else default + 1)
    info = broker.mgmt.queue(broker.vhost, qname)
    assert info.delivery_limit == default


@pytest.mark.parametrize("argument, policy", [(-1, None), (-1, 7), (5, -1), (10, 2), (3, 7), (-1, -1)])
def test_effective_delivery_limit_of_argument_and_policy(broker, qname, row, argument, policy) -> None:
    """The limit in effect from x-delivery-limit and a policy's delivery-limit, as the table resolves it
    (effective_delivery_limit), against the returns the message really survives; and what dlxtool reads through
    the management API (QueueInfo.delivery_limit, from 4.3's own `delivery_limit` where it reports one)."""
    if policy is not None:
        try:
            broker.mgmt.request("PUT", f"policies/{quote(broker.vhost, safe='')}/{qname}",
                                {"pattern": f"^{qname}$", "definition": {"delivery-limit": policy},
                                 "apply-to": "queues", "priority": 5})
        except DlxtoolError as exc:  # 3.10 validates a policy's delivery-limit: not below 0
            assert policy < 0 and not row.negative_delivery_limit_is_off and "400" in exc.message
            return
    try:
        _quorum(broker, qname, [b"only"], **{"x-delivery-limit": argument})
        limit = versions.effective_delivery_limit(broker.version, argument, policy)
        deadline = time.monotonic() + 15
        info = broker.mgmt.queue(broker.vhost, qname)
        while policy is not None and info.policy != qname and time.monotonic() < deadline:
            time.sleep(0.3)  # the API shows a new queue's policy with its first statistics sample
            info = broker.mgmt.queue(broker.vhost, qname)
        assert info.delivery_limit == limit
        reported, from_api = versions.api_delivery_limit(broker.version, info.raw)
        if info.figures_known:  # sampled: 4.x rows have the limit in effect then
            assert reported == row.api_reports_delivery_limit
        assert not reported or from_api == limit
        deliveries = _deliveries_until_gone(broker, qname)
        assert deliveries == (25 if limit is None else limit + 1)
        both = [v for v in (argument, policy) if v is not None]
        assert (limit is None) == (row.negative_delivery_limit_is_off and max(both) < 0)
    finally:
        if policy is not None:
            broker.mgmt.request("DELETE", f"policies/{quote(broker.vhost, safe='')}/{qname}")


# -- dead-lettering -------------------------------------------------------------------------------------------


def test_an_application_republished_dead_letter_and_its_x_death(broker, qname, row) -> None:
    """An app takes a dead letter from the DLQ and republishes it with the headers it received, three rounds: 3.10
    counts on (x-death count 3), 4.x restarts x-death at each death of a client-published one (count 1) and writes
    x-last-death-*. dlxtool.deaths reads x-last-death-* as "this broker restarts x-death"."""
    work, dlq = f"{qname}.work", f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True)
        ch.queue_declare(work, durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        ch.basic_publish("", work, b"poison", pika.BasicProperties(message_id="p"), mandatory=True)
        for done in range(3):
            method = _wait_get(ch, work)[0]
            ch.basic_reject(method.delivery_tag, requeue=False)
            dead, props, body = _wait_get(ch, dlq)
            if done < 2:
                ch.basic_publish("", work, body, pika.BasicProperties(message_id="p", headers=dict(props.headers)),
                                 mandatory=True)
            ch.basic_ack(dead.delivery_tag)
    headers = dict(props.headers)
    assert [d["count"] for d in headers["x-death"]] == [1 if row.x_death_restarts_on_republish else 3]
    assert any(k.startswith("x-last-death-") for k in headers) == row.writes_x_last_death


def _wait_get(ch: Any, queue: str) -> tuple[Any, Any, bytes]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=False)
        if method is not None:
            return method, props, body
        time.sleep(0.02)
    raise AssertionError(f"nothing came to {queue}")


# -- the AMQP type probe -----------------------------------------------------------------------------------------


def test_a_stream_offset_consumer_tells_the_type_and_changes_nothing(broker, qname, row) -> None:
    """dlxtool.broker.queues.probe_type: classic and quorum refuse an x-stream-offset consumer naming their type
    (versions.STREAM_OFFSET_REFUSAL) before delivering anything; a stream takes it. The queues are as they were:
    a quorum queue with delivery limit 1 still has its messages, none redelivered, none counted."""
    from dlxtool.broker.queues import probe_type

    with broker.channel() as ch:
        ch.queue_declare(f"{qname}.c", durable=True)
        ch.queue_declare(f"{qname}.q", durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 1})
        ch.queue_declare(f"{qname}.s", durable=True, arguments={"x-queue-type": "stream"})
    for kind in "cqs":
        broker.publish(f"{qname}.{kind}", [b"a", b"b"], properties=pika.BasicProperties(delivery_mode=2))
    profile = broker.profile()
    conn = _connect(broker)
    try:
        for kind, expected in (("c", "classic"), ("q", "quorum"), ("s", "stream")):
            for _ in range(3):
                assert probe_type(profile, f"{qname}.{kind}", conn=conn, timeout=20) == expected
        assert conn.is_open  # a refusal closes the probe's channel only
        assert probe_type(profile, f"{qname}.c") == "classic"  # on a connection of its own
        ch = conn.channel()
        with pytest.raises(pe.ChannelClosedByBroker) as refused:
            ch.basic_qos(prefetch_count=1)
            ch.basic_consume(f"{qname}.q", lambda *_: None, arguments={"x-stream-offset": "next"})
        assert versions.type_from_refusal(refused.value.reply_text) == "quorum"
    finally:
        conn.close()
    for kind in "cq":
        after = broker.drain(f"{qname}.{kind}")
        first = {"x-delivery-count": 0} if kind == "q" and row.first_delivery_count_header else None
        assert [(body, m.redelivered, props.headers) for m, props, body in after] == [(b"a", False, first),
                                                                                       (b"b", False, first)]


# -- deprecated features and the management API --------------------------------------------------------------


def _deprecated_features(broker) -> Any:
    try:
        return broker.mgmt.get("deprecated-features")
    except DlxtoolError:  # 3.10: no such endpoint (406)
        return None


def test_what_the_broker_says_of_its_deprecated_features(broker, row) -> None:
    listed = _deprecated_features(broker)
    assert (listed is not None) == row.deprecated_features_listed
    if listed is None:
        return
    names = {item["name"] for item in listed}
    assert set(versions.AVOIDED_DEPRECATED_FEATURES) | {versions.METRICS_FEATURE} <= names
    assert all(("state" in item) == row.deprecated_feature_state for item in listed)


def test_a_transient_non_exclusive_queue_where_the_broker_denies_it(broker, qname) -> None:
    """transient_nonexcl_queues: where /api/deprecated-features says "denied" (the dev-broker's 4.3 node), a
    queue.declare durable=false exclusive=false closes the connection (541); elsewhere it is declared. dlxtool never
    declares one (tests/support/deprecated.py)."""
    denied = versions.feature_denied(_deprecated_features(broker), "transient_nonexcl_queues")
    conn = _connect(broker)
    try:
        ch = conn.channel()
        if denied:
            with pytest.raises(pe.ConnectionClosedByBroker) as closed:
                ch.queue_declare(f"{qname}.transient", durable=False)
            assert closed.value.reply_code == 541 and "transient_nonexcl_queues" in closed.value.reply_text
        else:
            ch.queue_declare(f"{qname}.transient", durable=False)
            ch.queue_delete(f"{qname}.transient")
    finally:
        if conn.is_open:
            conn.close()


def test_global_qos_on_a_quorum_queue(broker, qname, row) -> None:
    """basic.qos(global=true) and a consumer on a (empty) quorum queue: 540 NOT_IMPLEMENTED, closing the connection,
    on 3.10 and 4.0; accepted on 4.3.6 even with global_qos denied. Nothing to build on: dlxtool sends neither."""
    _quorum(broker, qname, [])
    conn = _connect(broker)
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1, global_qos=True)
        try:
            tag = ch.basic_consume(qname, lambda *_: None)
        except pe.ConnectionClosedByBroker as exc:
            assert exc.reply_code == 540 and "global qos" in exc.reply_text
            refused = True
        else:
            ch.basic_cancel(tag)
            refused = False
        assert refused == row.global_qos_refused_on_quorum
    finally:
        if conn.is_open:
            conn.close()


@pytest.mark.metrics
def test_what_the_management_api_has_without_statistics(broker, qname, row) -> None:
    """With statistics (metrics collection permitted; /api/overview disable_stats false) a queue row gets its
    counts within a sample or two, and the API lists our connection; with them off (management_metrics_collection
    denied: 4.3) rows never have counts and the connection list is empty. A row asked for with disable_stats=true
    has its policy on 4.3 only (api_policy_without_stats)."""
    off = versions.stats_disabled(broker.mgmt.overview())
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, [b"x"])
    name = f"dlxtool-facts-{uuid.uuid4().hex[:8]}"
    params = pika.URLParameters(broker.url)
    params.client_properties = {"connection_name": name}
    conn = pika.BlockingConnection(params)
    try:
        deadline = time.monotonic() + (6 if off else 20)
        info = queue_info(broker.mgmt.get(f"queues/{quote(broker.vhost, safe='')}/{quote(qname, safe='')}"))
        listed = False
        while time.monotonic() < deadline and not (info.figures_known and listed and (off or info.messages_ready == 1)):
            time.sleep(0.5)
            info = queue_info(broker.mgmt.get(f"queues/{quote(broker.vhost, safe='')}/{quote(qname, safe='')}"))
            listed = any(c.get("client_properties", {}).get("connection_name") == name
                         for c in broker.mgmt.get("connections", columns="client_properties.connection_name"))
        assert info.figures_known == (not off) and listed == (not off)
        assert off or info.messages_ready == 1
    finally:
        conn.close()
    bare = broker.mgmt.get(f"queues/{quote(broker.vhost, safe='')}", disable_stats="true")
    [item] = [q for q in bare if q["name"] == qname]
    assert ("effective_policy_definition" in item) == row.api_policy_without_stats


def test_the_api_s_answer_for_a_vhost_the_user_may_not_use(broker, qname, row) -> None:
    """A user without permissions on the vhost asks the API for one of its queues (one that exists): 401 "not
    authorised" on 3.10 and 4.0, 404 on 4.3."""
    from dlxtool.broker.management import ManagementClient

    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    name = f"dlx-{uuid.uuid4().hex[:8]}"
    broker.mgmt.request("PUT", f"users/{name}", {"password": "pw", "tags": "management"})
    try:
        client = ManagementClient(broker.management_url, name, "pw", timeout=10)
        with pytest.raises(DlxtoolError) as refused:
            client.get(f"queues/{quote(broker.vhost, safe='')}/{quote(qname, safe='')}")
    finally:
        broker.mgmt.request("DELETE", f"users/{name}")
    said = refused.value.message
    assert ("not found" in said) == row.api_404_for_a_vhost_not_permitted
    assert ("not authorised for that virtual host" in said) == (not row.api_404_for_a_vhost_not_permitted)


def test_what_a_dead_letter_s_counters_say_in_its_quorum_dlq(broker, qname, row) -> None:
    """A message rejected by a quorum queue, first delivered in its quorum DLQ and then given back once there: on 4.x
    its first delivery there already carries delivery counters and one return leaves them as they were (the headers
    cannot tell the two apart: versions.returned_here says None); on 3.x the first delivery says 0, the return 1."""
    dlq = f"{qname}.dlq"
    with broker.channel() as ch:
        ch.queue_declare(dlq, durable=True, arguments={"x-queue-type": "quorum", "x-delivery-limit": 50})
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum", "x-dead-letter-exchange": "",
                                                         "x-dead-letter-routing-key": dlq})
        ch.basic_publish("", qname, b"poison", pika.BasicProperties(message_id="p"), mandatory=True)
        method = _wait_get(ch, qname)[0]
        ch.basic_reject(method.delivery_tag, requeue=False)
    _settled(broker, dlq, 1)
    conn = _connect(broker)
    try:
        first = _give_back_head(conn, dlq, "nack")
        _settled(broker, dlq, 1)
        again = _give_back_head(conn, dlq, "nack")
    finally:
        conn.close()
    assert first is not None and again is not None
    counters = ("x-delivery-count", "x-acquired-count")
    first_counts = {k: first[k] for k in counters if k in first}
    again_counts = {k: again[k] for k in counters if k in again}
    if row.dead_letters_carry_delivery_counts:
        assert first_counts and again_counts == first_counts
        assert versions.returned_here(str(broker.version), first) is None
    else:
        assert not any(first_counts.values()) and again_counts.get("x-delivery-count", 0) > 0
        assert versions.returned_here(str(broker.version), first) is False
        assert versions.returned_here(str(broker.version), again) is True


def test_a_consumer_timeout_and_its_count(broker, qname, row) -> None:
    """A consumer holds the head of a quorum queue past the queue's x-consumer-timeout (1 s): 4.0 closes its
    channel (checked once a minute) and the return counts; 4.3 returns the message itself, uncounted (x-acquired-count
    + 1), the consumer staying. 3.10 takes the argument but has no per-queue timeout (3.12 brought it); its
    broker-wide one is 30 min by default: the table says "not measured" (None) and this test skips there."""
    if row.consumer_timeout_counted is None:
        pytest.skip(f"{row.measured}: no per-queue consumer timeout to measure (the table says None)")
    _quorum(broker, qname, [b"m0", b"m1"], **{"x-consumer-timeout": 1000, "x-delivery-limit": 10})
    conn = _connect(broker)
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume(qname, lambda *_: None)
        deadline = time.monotonic() + 90
        with broker.channel() as probe:
            while probe.queue_declare(qname, passive=True).method.message_count < 2:
                assert time.monotonic() < deadline, "the consumer timeout did not return the message"
                conn.process_data_events(0.5)
    finally:
        if conn.is_open:
            conn.close()
    head = dict(broker.drain(qname)[0][1].headers or {})
    assert (head.get("x-delivery-count", 0) >= 1) == row.consumer_timeout_counted, head


# -- AMQP 1.0 (4.x) -------------------------------------------------------------------------------------------


def _amqp10_or_skip(row: versions.Behaviour) -> None:
    from dlxtool.broker import amqp10

    if row.amqp10_counted is None:
        pytest.skip("no AMQP 1.0 facts for this version (3.x: AMQP 1.0 is a plugin there, address format v1)")
    if not amqp10.available():
        pytest.fail("python-qpid-proton is not installed (the test extra brings it)")


def _profile(broker) -> Any:

    return broker.profile()


def _amqp10_give_back(broker, queue: str, how: str, n: int) -> list[bytes]:
    """Read the first `n` messages of `queue` over AMQP 1.0 unsettled and give them back by `how`
    (versions.AMQP10_GIVE_BACKS); their bodies as read."""
    from dlxtool.amqp10_message import parse_message
    from dlxtool.broker.amqp10 import outcomes
    from dlxtool.broker.amqp10.addresses import queue_address
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.broker.amqp10.links import HeadReader

    by = {"released": outcomes.RELEASE, "modified": outcomes.MODIFY_UNCOUNTED,
          "failed": outcomes.modify(delivery_failed=True)}
    conn = open_connection(_profile(broker))
    try:
        reader = HeadReader(conn, queue_address(queue), give_back=by.get(how, outcomes.RELEASE))
        got = reader.read(n)
        bodies = [parse_message(d.raw).body.payload() for d in got]
        if how in by:
            reader.close()
        elif how == "detach":
            reader.link.close()
            conn.pump(0.2)
        elif how == "lost":
            conn.blocking.conn.transport.close_tail()  # the socket dropped: no close, no detach
            conn.blocking.conn.transport.close_head()
            conn.pump(0.2)
        return bodies
    finally:
        conn.close()


@pytest.mark.parametrize("how", versions.AMQP10_GIVE_BACKS)
@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_what_each_amqp10_give_back_costs_and_where_it_puts_the_message(broker, qname, row, how, kind) -> None:
    """The first two of three messages read over AMQP 1.0 and given back by `how`, three times: the order is kept
    (classic and quorum alike: returns are served first, in the order given); on a quorum queue x-delivery-count
    reads 3 where the table says `how` counts and is absent where it does not (4.3's released and modified: only
    x-acquired-count rises)."""
    _amqp10_or_skip(row)
    args = {"x-queue-type": "quorum", "x-delivery-limit": 10} if kind == "quorum" else {}
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments=args)
    broker.publish(qname, [b"m0", b"m1", b"m2"], properties=pika.BasicProperties(delivery_mode=2))
    for _ in range(3):
        assert _amqp10_give_back(broker, qname, how, 2) == [b"m0", b"m1"]
        assert broker.wait_depth(qname, 3) == 3
        if kind == "quorum":
            deadline = time.monotonic() + 10
            while broker.mgmt.queue(broker.vhost, qname).raw.get("messages_unacknowledged") and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
    after = broker.drain(qname)
    assert [body for _m, _p, body in after] == [b"m0", b"m1", b"m2"]
    if kind == "classic":
        return
    counted = versions.amqp10_give_back_counts(broker.version, how)
    assert counted == (how in (row.amqp10_counted or ()))
    head = dict(after[0][1].headers or {})
    assert head.get("x-delivery-count", 0) == (3 if counted else 0), head
    assert "x-delivery-count" not in dict(after[2][1].headers or {})


def test_a_peek_over_amqp10_gives_back_by_the_tables_outcome(broker, qname, row) -> None:
    """amqp10_peek_give_back: the outcome a 1.0 peek uses is one that does not count (4.3: released), or None
    where every one counts (4.0)."""
    _amqp10_or_skip(row)
    chosen = versions.amqp10_peek_give_back(broker.version)
    uncounted = [h for h in ("released", "modified") if h not in (row.amqp10_counted or ())]
    assert chosen == (uncounted[0] if uncounted else None)


@pytest.mark.parametrize("kind", ["char", "uuid"])
def test_a_char_or_uuid_application_property_and_a_091_reader(broker, qname, row, kind) -> None:
    """An AMQP 1.0 message whose application properties hold a char (or a uuid), read with basic.get: 4.0.5 and 4.3.6
    close the 0.9.1 connection (541 INTERNAL_ERROR) and the message stays."""
    _amqp10_or_skip(row)
    from dlxtool.amqp10_message import Amqp10Message, Body, Typed, encode_message
    from dlxtool.broker.amqp10.addresses import queue_address
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.broker.amqp10.links import Sender

    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    conn = open_connection(_profile(broker))
    try:
        value = Typed("char", "x") if kind == "char" else Typed("uuid", str(uuid.uuid4()))
        msg = Amqp10Message(application_properties=[(Typed("string", "p"), value)],
                            body=Body("data", [b"poison"]))
        assert Sender(conn, queue_address(qname)).send(encode_message(msg)).taken
    finally:
        conn.close()
    reader = _connect(broker)
    try:
        ch = reader.channel()
        if row.amqp10_char_uuid_close_091:
            with pytest.raises(pe.ConnectionClosedByBroker) as closed:
                ch.basic_get(qname, auto_ack=False)
            assert closed.value.reply_code == 541
        else:
            method, _props, body = ch.basic_get(qname, auto_ack=False)
            assert body == b"poison"
            ch.basic_nack(method.delivery_tag, requeue=True)
    finally:
        if reader.is_open:
            reader.close()
    assert versions.char_uuid_poison_091(broker.version) == row.amqp10_char_uuid_close_091
    assert broker.wait_depth(qname, 1) == 1


def test_a_decimal_header_and_an_amqp10_reader(broker, qname, row) -> None:
    """A message published over 0.9.1 with a decimal header, read over AMQP 1.0: 4.0.5 and 4.3.6 end the session
    (internal-error, mc_amqpl:from_091 function_clause) and the message stays."""
    _amqp10_or_skip(row)
    from decimal import Decimal

    from dlxtool.broker.amqp10 import outcomes
    from dlxtool.broker.amqp10.addresses import queue_address
    from dlxtool.broker.amqp10.connection import open_connection
    from dlxtool.broker.amqp10.links import HeadReader

    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, [b"decimal"], properties=pika.BasicProperties(headers={"price": Decimal("12.345")}))
    conn = open_connection(_profile(broker))
    ended: str | None = None
    try:
        reader = HeadReader(conn, queue_address(qname), give_back=outcomes.RELEASE)
        try:
            got = reader.read(1, timeout=10)
            assert [d.raw for d in got] and not row.decimal_header_ends_amqp10_session
            reader.close()
        except DlxtoolError as exc:
            ended = str(exc)
    finally:
        with contextlib.suppress(DlxtoolError):
            conn.close()
    if row.decimal_header_ends_amqp10_session:
        assert ended is not None and "function_clause" in ended and "from_091" in ended, ended
    assert versions.decimal_poison_amqp10(broker.version) == row.decimal_header_ends_amqp10_session
    assert broker.wait_depth(qname, 1) == 1


def test_where_an_amqp10_release_goes_without_a_limit(broker, qname, row) -> None:
    """The head read over AMQP 1.0 and released, on a quorum queue with no limit in effect (x-delivery-limit -1):
    where a 0.9.1 nack goes (versions.quorum_nack_to_back: the back on 4.0, in place on 4.3) — the 1.0 peek takes
    that rule for its reorder check."""
    _amqp10_or_skip(row)
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True, arguments=broker.quorum_without_limit())
    broker.publish(qname, [b"0", b"1", b"2"], properties=pika.BasicProperties(delivery_mode=2))
    assert _amqp10_give_back(broker, qname, "released", 1) == [b"0"]
    _settled(broker, qname, 3)
    order = [body for _m, _p, body in broker.drain(qname)]
    to_back = versions.quorum_nack_to_back(broker.version, None)
    assert order == ([b"1", b"2", b"0"] if to_back else [b"0", b"1", b"2"])


def test_the_metadata_store_and_the_single_active_consumer_tag(broker, qname, row) -> None:
    """Khepri where the table says so (its feature flag khepri_db enabled; 3.10 has no such flag, 4.0.5 has it
    disabled, 4.3.6 enabled: a majority of the cluster's nodes must run for any change), and the API's
    `single_active_consumer_tag` on a plain quorum queue with one consumer: set on 4.0 and 4.3 (issue 35; it may
    come a sample after the consumer), which is why
    single-active-consumer is read from the queue's argument (ops/busy.py) and never from the tag."""
    flags = broker.mgmt.request("GET", "feature-flags")
    khepri = any(f.get("name") == "khepri_db" and f.get("state") == "enabled" for f in flags)
    assert khepri == row.khepri, flags
    conn = _connect(broker)
    try:
        ch = conn.channel()
        ch.queue_declare(qname, durable=True, arguments={"x-queue-type": "quorum"})
        ch.basic_publish("", qname, b"held")
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume(qname, lambda *_a: None)
        path = f"queues/{quote(broker.vhost, safe='')}/{quote(qname, safe='')}"
        deadline = time.monotonic() + 30
        said = broker.mgmt.request("GET", path)
        # the consumer and what it holds in the API's sample (the tag comes with them on 4.3)
        while time.monotonic() < deadline and not (said.get("consumer_details")
                                                    and said.get("messages_unacknowledged") == 1
                                                    and (said.get("single_active_consumer_tag")
                                                         or not row.api_sac_tag_on_any_quorum_consumer)):
            conn.process_data_events(0.3)
            said = broker.mgmt.request("GET", path)
    finally:
        conn.close()
    assert said.get("consumer_details"), said
    assert "x-single-active-consumer" not in said["arguments"]
    assert bool(said.get("single_active_consumer_tag")) == row.api_sac_tag_on_any_quorum_consumer
