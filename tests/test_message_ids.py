"""The journal's message ids (dlxtool.message_ids): listed when few, a count and an order-free digest when many, and
message_id read from encoded properties as pika decodes it (pure logic; pika's own encoder makes the bytes)."""

from __future__ import annotations

from typing import Any

import pika
from hypothesis import given, settings
from hypothesis import strategies as st

from dlxtool.message_ids import MAX_LISTED, MessageIds, id_digest, message_id_of


def tally(ids: list[Any]) -> dict[str, Any]:
    out = MessageIds()
    for i in ids:
        out.add(i)
    return out.to_json()


def test_few_ids_are_listed_and_the_ones_without_counted() -> None:
    assert tally(["a", None, "b", ""]) == {"message_ids": ["a", "b"], "without_message_id": 2}


def test_many_ids_are_a_count_and_a_digest_that_a_later_list_can_be_checked_against() -> None:
    ids = [f"m-{i}" for i in range(MAX_LISTED + 5)]
    many = tally(ids)
    assert many["message_ids_count"] == MAX_LISTED + 5 and len(many["message_ids_first"]) == MAX_LISTED
    assert many["message_ids_digest"] == id_digest(reversed(ids))  # the order does not matter
    assert many["message_ids_digest"] != id_digest(ids[:-1])


short = st.text(max_size=20).filter(lambda t: len(t.encode()) <= 255)


@settings(max_examples=300, deadline=None)
@given(message_id=st.one_of(st.none(), short), content_type=st.one_of(st.none(), short),
       headers=st.one_of(st.none(), st.dictionaries(st.text(max_size=8), st.text(max_size=30), max_size=3)),
       delivery_mode=st.one_of(st.none(), st.sampled_from([1, 2])), priority=st.one_of(st.none(), st.integers(0, 9)),
       correlation_id=st.one_of(st.none(), short), expiration=st.one_of(st.none(), st.just("60000")),
       app_id=st.one_of(st.none(), short))
def test_message_id_from_encoded_properties_is_pikas(**props: Any) -> None:
    encoded = b"".join(pika.BasicProperties(**props).encode())
    decoded = pika.BasicProperties()
    decoded.decode(encoded)
    assert message_id_of(encoded) == decoded.message_id  # None where absent


def test_cut_properties_give_no_id() -> None:
    encoded = b"".join(pika.BasicProperties(content_type="x", message_id="abc").encode())
    assert message_id_of(encoded[:-2]) is None
