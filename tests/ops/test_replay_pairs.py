"""Recognising the copies a kill -9 left (dlxtool.ops.replay: provenance `src`, Pairs, Lineage): pure logic."""

from __future__ import annotations

import pika

from dlxtool.broker.wire.frames import encode_properties
from dlxtool.ops.provenance import Pairs, provenance_src, record_fingerprint, source_fingerprint
from dlxtool.ops.replay_address import Lineage
from dlxtool.ops.replay_decision import replay_headers
from dlxtool.record import MessageRecord

DEATH = {"x-death": [{"count": 1, "reason": "rejected", "queue": "orders", "exchange": "",
                      "routing-keys": ["orders"]}]}


def _record(body: bytes = b"order-1", headers: dict | None = None, **props) -> MessageRecord:
    return MessageRecord(queue="orders.dlq", body=body, properties={"message_id": "m1", **props},
                         headers=dict(DEATH if headers is None else headers))


def test_the_fingerprint_ignores_headers_and_tells_bodies_and_properties_apart() -> None:
    a = _record()
    redelivered = _record(headers={**DEATH, "x-delivery-count": 1})  # what a quorum queue adds
    copy = _record(headers=replay_headers(a, source="orders.dlq", src=record_fingerprint(a)))
    assert record_fingerprint(a) == record_fingerprint(redelivered) == record_fingerprint(copy)
    assert record_fingerprint(_record(body=b"order-2")) != record_fingerprint(a)
    assert record_fingerprint(_record(message_id="m2")) != record_fingerprint(a)


def test_raw_bytes_and_a_decoded_record_give_the_same_fingerprint_and_src() -> None:
    a = _record()
    headers = replay_headers(a, source="orders.dlq", publish_id="run1-7", src=record_fingerprint(a))
    raw = encode_properties(pika.BasicProperties(headers=headers, message_id="m1"))
    assert source_fingerprint(raw, a.body) == record_fingerprint(a)
    assert provenance_src(headers) == (record_fingerprint(a), "run1")


def test_pairs_a_source_with_its_copy_and_copies_across_runs_only() -> None:
    pairs = Pairs()
    pairs.add("f1", None, "source")
    assert pairs.partners("f1", ("f1", "run1")) == ["source"]     # its copy
    assert pairs.partners("f1", None) == []                        # an identical never-replayed message
    pairs.add("f2", ("f2", "run1"), "copy-a")
    assert pairs.partners("f2", ("f2", "run1")) == []              # identical copies made by one run
    assert pairs.partners("f2", ("f2", "run2")) == ["copy-a"]      # a rerun's copy of the same source
    assert pairs.partners("f2", None) == ["copy-a"]                # the source, after its copy


def test_max_replays_counts_a_pair_as_one_message_and_replays_one_of_them() -> None:
    lineage = Lineage()
    # the copy first (count 2), then its source (count 1): the source counts 2
    assert lineage.decide("f", ("f", "run1"), 2, max_replays=5) is None
    assert "replayed in this run" in lineage.decide("f", None, 1, max_replays=5)
    lineage = Lineage()
    assert "replayed 2 times already (--max-replays 2), counting its copy" in (
        lineage.decide("f", ("f", "run1"), 2, max_replays=2) and lineage.decide("f", None, 1, max_replays=2))
    lineage = Lineage()
    # the source first: it goes, its copy stays
    assert lineage.decide("f", None, 0, max_replays=5) is None
    assert "replayed in this run" in lineage.decide("f", ("f", "run1"), 1, max_replays=5)
    # identical messages that are not copies all go
    lineage = Lineage()
    assert all(lineage.decide("g", None, 0, max_replays=5) is None for _ in range(3))
    assert all(lineage.decide("h", ("h", "run1"), 1, max_replays=5) is None for _ in range(3))
