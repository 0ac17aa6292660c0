"""dump → load keeps names that are not UTF-8 byte for byte, on the real broker (issue 28): header names at every
depth (a table in a header, an array of tables, x-death), the routing key. The record's side alone (exchange names
and string properties too) is tests/test_record_names.py.

A header name b'\\xff\\xfekey' came back from dump → load as the text "b'\\xff\\xfekey'", a routing key as
backslash-escaped text. Here the broker makes the dead letter (a reject through a dead-letter exchange), dlxtool
reads it with each wire codec, and what `load` publishes is read back with pika.

RabbitMQ 3.10.8 takes such names in a publish (its routing key, header names at any depth, string properties) but
not in exchange.declare or queue.bind (501 FRAME_ERROR "Malformed UTF-8 in shortstr", the connection closed): no
exchange or binding key is named so there, and a message's exchange is UTF-8 text.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlxtool.record import MessageRecord
from tests.support.broker import BrokerEnv, open_vhost
from tests.support.codecs import CODECS

NOT_UTF8 = b"\xff\xfekey"
ROUTING_KEY = b"order.\xff.placed"
HEADERS: dict[Any, Any] = {
    NOT_UTF8: "top level",
    "table": {b"\xfe": {b"\xc3(": b"\xff", "plain": 1}},
    "tables": [{b"\x80": "in an array"}, {"ok": True}],
    "text": "plain names stay strings",
}


@pytest.fixture(scope="module")
def env(broker: BrokerEnv) -> Iterator[BrokerEnv]:
    """A vhost of its own: the management API lists exchanges whose names are not UTF-8 badly (other tests of
    the run list the run's vhost)."""
    with open_vhost(broker.host, broker.amqp_port, broker.http_port,
                    f"{broker.vhost}-names-{uuid.uuid4().hex[:6]}") as own:
        yield own


def as_bytes(value: Any) -> Any:
    """Names as bytes at every depth (pika hands over UTF-8 names as str, the others as bytes); values as they are."""
    if isinstance(value, dict):
        return {name_bytes(k): as_bytes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_bytes(v) for v in value]
    return value


def name_bytes(name: Any) -> bytes:
    return name.encode() if isinstance(name, str) else name


def one_message(env: BrokerEnv, queue: str) -> tuple[Any, Any, bytes]:
    got = env.drain(queue)
    assert len(got) == 1, got
    return got[0]


def messages(env: BrokerEnv, p: str) -> None:
    """Two messages published with ROUTING_KEY and HEADERS through a topic exchange `p.orders` (binding key "#")
    into `p.work`. A consumer rejects the first: the broker dead-letters it into `p.dlq` (x-death: `p.orders` and
    ROUTING_KEY); the second stays in `p.work`."""
    with env.channel() as ch:
        ch.exchange_declare(f"{p}.orders", "topic")
        ch.exchange_declare(f"{p}.dlx", "fanout")
        ch.queue_declare(f"{p}.work", durable=True, arguments={"x-dead-letter-exchange": f"{p}.dlx"})
        ch.queue_bind(f"{p}.work", f"{p}.orders", routing_key="#")
        ch.queue_declare(f"{p}.dlq", durable=True)
        ch.queue_bind(f"{p}.dlq", f"{p}.dlx")
        ch.queue_declare(f"{p}.back", durable=True)
        for body in (b"dead", b"alive"):
            ch.basic_publish(f"{p}.orders", ROUTING_KEY, body, pika.BasicProperties(headers=HEADERS),
                             mandatory=True)
        ch.basic_qos(prefetch_count=1)
        method, _props, body = next(ch.consume(f"{p}.work", inactivity_timeout=10))
        assert body == b"dead"
        ch.basic_reject(method.delivery_tag, requeue=False)
        ch.cancel()
    assert env.wait_depth(f"{p}.dlq", 1) == 1 and env.wait_depth(f"{p}.work", 1) == 1


def dump(run, env: BrokerEnv, queue: str, path: Path) -> dict[str, Any]:
    dumped = run("dump", queue, "-o", str(path), "--url", env.url, "--management-url", env.management_url)
    assert dumped.exit_code == 0, dumped.stderr
    [data] = [json.loads(line) for line in path.read_text().splitlines()]
    return data


@pytest.mark.parametrize("codec", CODECS, indirect=True)
def test_dump_then_load_keeps_every_name(run, env: BrokerEnv, tmp_path: Path, codec: Any) -> None:
    p = f"n{uuid.uuid4().hex[:6]}"
    messages(env, p)
    alive = dump(run, env, f"{p}.work", tmp_path / "work.jsonl")
    dead = dump(run, env, f"{p}.dlq", tmp_path / "dlq.jsonl")
    # tagged where not UTF-8, plain text where it is
    assert (alive["exchange"], dead["exchange"]) == (f"{p}.orders", f"{p}.dlx")
    assert alive["routing_key"] == dead["routing_key"] == {"$bytes": "b3JkZXIu/y5wbGFjZWQ="}
    # RabbitMQ 4.x hands the headers back in an order of its own: look the name up, not its place
    assert [{"$bytes": "//5rZXk="}, "top level"] in alive["headers"]["$pairs"]
    assert dead["deaths"][0]["queue"] == f"{p}.work"
    assert MessageRecord.from_json(alive).routing_key == ROUTING_KEY

    for name in ("work", "dlq"):
        loaded = run("load", str(tmp_path / f"{name}.jsonl"), "--to", f"{p}.back", "--yes", "--url", env.url,
                     "--management-url", env.management_url)
        assert loaded.exit_code == 0, loaded.stderr
    got = {body: (method, props) for method, props, body in env.drain(f"{p}.back")}
    assert set(got) == {b"alive", b"dead"}
    for method, props in got.values():
        assert name_bytes(method.routing_key) == ROUTING_KEY
        headers = as_bytes(props.headers)
        assert {k: v for k, v in headers.items() if not k.startswith(b"x-")} == as_bytes(HEADERS)
    [death] = as_bytes(got[b"dead"][1].headers)[b"x-death"]
    assert death[b"exchange"] == f"{p}.orders" and death[b"routing-keys"] == [ROUTING_KEY]


def test_peek_json_is_the_same_record(run, env: BrokerEnv) -> None:
    p = f"n{uuid.uuid4().hex[:6]}"
    messages(env, p)
    peeked = run("peek", f"{p}.work", "-f", "json", "--url", env.url, "--management-url", env.management_url)
    assert peeked.exit_code == 0, peeked.stderr
    [data] = json.loads(peeked.stdout)
    record = MessageRecord.from_json(data)
    assert (record.exchange, record.routing_key) == (f"{p}.orders", ROUTING_KEY)
    assert as_bytes(record.headers) == as_bytes(HEADERS)


names = st.binary(min_size=1, max_size=255)
values = st.recursive(
    st.one_of(st.text(max_size=10), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=10), st.booleans()),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(names, inner, max_size=3)),
    max_leaves=8,
)
EXAMPLES = int(os.environ.get("DLXTOOL_NAME_EXAMPLES", "15"))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(headers=st.dictionaries(names, values, min_size=1, max_size=4), routing_key=st.binary(max_size=255))
def test_any_names_in_a_record_reach_the_broker_as_they_were(run, env: BrokerEnv, tmp_path: Path,
                                                             headers: dict[bytes, Any], routing_key: bytes) -> None:
    """Arbitrary bytes as header names (at any depth) and routing key → record JSON → load → the broker delivers
    the same bytes."""
    queue = f"h{uuid.uuid4().hex[:8]}"
    with env.channel() as ch:
        ch.queue_declare(queue, durable=True)
    path = tmp_path / f"{queue}.jsonl"
    path.write_bytes(MessageRecord(queue=queue, body=b"b", routing_key=routing_key, headers=headers).to_jsonl())
    try:
        loaded = run("load", str(path), "--yes", "--url", env.url, "--management-url", env.management_url)
        assert loaded.exit_code == 0, loaded.stderr
        method, props, _body = one_message(env, queue)
    finally:
        with env.channel() as ch:
            ch.queue_delete(queue)
    assert name_bytes(method.routing_key) == routing_key
    assert as_bytes(props.headers) == as_bytes(headers)
