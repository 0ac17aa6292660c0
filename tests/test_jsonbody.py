"""dlxtool.jsonbody and the `decoded` of a JSON body (dlxtool.decoding.json_decoded): strict JSON, read only from
bodies that are JSON."""

from __future__ import annotations

import gzip

import pytest

from dlxtool import jsonbody
from dlxtool.decoding import json_decoded
from dlxtool.record import MessageRecord


def test_strict_json_names_the_line() -> None:
    assert jsonbody.parse('{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}
    for bad, line in (('{"a": NaN}', 0), ("[1e999]", 0), ('{\n "a": 1,\n}', 3)):
        with pytest.raises(jsonbody.JsonError) as err:
            jsonbody.parse(bad)
        assert err.value.line == line, bad


def test_only_json_bodies_have_a_value() -> None:
    assert jsonbody.body_value(b'{"a": 1}', "") == {"a": 1}
    assert jsonbody.body_value(b"7", "application/json") == 7
    assert jsonbody.body_value(b"7", "") is jsonbody.MISSING  # a bare number is JSON only when said so
    assert jsonbody.body_value(b"{not json", "application/json") is jsonbody.MISSING
    assert jsonbody.body_value(b"\xff{", "application/json") is jsonbody.MISSING


def test_json_decoded() -> None:
    plain = MessageRecord("q", b'{"id": 1}', properties={"content_type": "application/json"})
    assert json_decoded(plain, "application/json") == {"status": "json", "type": None, "message": {"id": 1}}
    zipped = MessageRecord("q", gzip.compress(b"[1]"), properties={"content_encoding": "gzip"})
    assert json_decoded(zipped, "") == {"status": "json", "type": None, "message": [1],
                                        "decompressed": {"from": "gzip", "compressed_bytes": len(zipped.body),
                                                         "bytes": 3}}
    proto = MessageRecord("q", b'{"id": 1}', properties={"content_type": "application/x-protobuf"})
    assert json_decoded(proto, "application/x-protobuf") is None
    bzip = MessageRecord("q", b"BZh9", headers={"compression": "application/x-bz2"})
    assert json_decoded(bzip, "") is None
