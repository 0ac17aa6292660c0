"""Compressed bodies dead-lettered by the broker: peek shows them inflated and labelled, replay puts the same
bytes back at the origin (issue 30).

One message is made by hand (pika, gzip/zlib from the stdlib, kombu's header written the way kombu writes
it); one is made by kombu itself, when the framework libraries are installed (scripts/framework-libs:
DLXTOOL_TEST_CELERY_PYTHON, a python with celery and so kombu), else that test skips.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import zlib
from pathlib import Path

import pika
import pytest

from tests.cli.test_peek_decoded import demo_config, order_placed_bytes
from tests.support.topologies import _dlx_pair, _take

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only

FRAMEWORKS = Path(__file__).parent.parent / "support" / "frameworks"
ORDER_JSON = json.dumps({"order": "o-42", "lines": [{"sku": f"A-{i}", "qty": 2} for i in range(100)]}).encode()


def dead_letter(broker, prefix: str, messages: list[tuple[bytes, pika.BasicProperties]]):
    """Publish to a work queue and reject each (requeue=False): the broker dead-letters them into the DLQ."""
    with broker.channel() as ch:
        topo = _dlx_pair(ch, prefix)
        for body, props in messages:
            ch.basic_publish("", topo.work, body, props, mandatory=True)
        for _ in messages:
            ch.basic_reject(_take(ch, topo.work), requeue=False)
    assert broker.wait_depth(topo.dlq, len(messages)) == len(messages)
    return topo


def test_compressed_dead_letters_are_shown_inflated_and_replayed_as_they_were(run, broker, qname, tmp_path) -> None:
    proto = gzip.compress(order_placed_bytes())
    kombu_style = zlib.compress(ORDER_JSON)  # kombu: zlib bytes under "application/x-gzip"
    sent = [
        (proto, pika.BasicProperties(content_type="application/x-protobuf", content_encoding="gzip",
                                     type="shop.orders.v1.OrderPlaced", message_id="m-proto")),
        (kombu_style, pika.BasicProperties(content_type="application/json", content_encoding="utf-8",
                                           headers={"compression": "application/x-gzip"}, message_id="m-json")),
    ]
    topo = dead_letter(broker, qname, sent)
    env = demo_config(tmp_path)

    records = json.loads(run("peek", topo.dlq, "--url", broker.url, "-f", "json", env=env).stdout)
    assert [base64.b64decode(r["body"]) for r in records] == [proto, kombu_style]  # the records keep raw bytes
    first, second = records
    assert first["decoded"]["type"] == "shop.orders.v1.OrderPlaced"
    assert first["decoded"]["message"]["orderId"] == "ord-42"
    assert first["decoded"]["decompressed"] == {"from": "gzip", "compressed_bytes": len(proto),
                                                "bytes": len(order_placed_bytes())}
    assert second["decoded"]["status"] == "json" and second["decoded"]["type"] is None  # parsed, not identified
    assert second["decoded"]["message"] == json.loads(ORDER_JSON)
    assert second["decoded"]["decompressed"] == {"from": "zlib", "compressed_bytes": len(kombu_style),
                                                 "bytes": len(ORDER_JSON)}

    table = run("peek", topo.dlq, "--url", broker.url, "-f", "table", env=env)
    assert table.exit_code == 0, table.stderr
    assert f"[gzip {len(proto)} B→{len(order_placed_bytes())} B] shop.orders.v1.OrderPlaced" in table.stdout
    assert '[zlib ' in table.stdout and '{"order": "o-42"' in table.stdout  # not hex
    whole = run("peek", topo.dlq, "--url", broker.url, "--body", "-f", "table", env=env).stdout
    assert f"body: decompressed from zlib, {len(kombu_style)} B → 2.7 KiB\n{ORDER_JSON.decode()}" in whole

    result = run("replay", topo.dlq, "--url", broker.url, "--yes")
    assert result.exit_code == 0, result.stderr
    back = broker.drain(topo.work)
    assert [body for _m, _p, body in back] == [proto, kombu_style]  # bytes unchanged at the origin
    assert [p.content_encoding for _m, p, _b in back] == ["gzip", "utf-8"]
    assert back[1][1].headers["compression"] == "application/x-gzip"


def zip_bomb(size: int) -> bytes:
    """`size` zeros, zlib-compressed at ~1000:1, made a MiB at a time."""
    packer = zlib.compressobj(9)
    mib = b"\0" * (1024 * 1024)
    return b"".join([*(packer.compress(mib) for _ in range(size // len(mib))), packer.flush()])


def test_a_body_that_inflates_past_the_cap_is_shown_compressed(run, broker, qname, tmp_path) -> None:
    from dlxtool.compression import DEFAULT_MAX_INFLATED, human_size

    bomb = zip_bomb(DEFAULT_MAX_INFLATED + 1024 * 1024)  # 257 MiB in ~260 KiB
    topo = dead_letter(broker, qname, [(bomb, pika.BasicProperties(content_encoding="deflate"))])
    result = run("peek", topo.dlq, "--url", broker.url, "-f", "table", env=demo_config(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert "[zlib >256 MiB, not inflated] hex:78da" in result.stdout
    whole = run("peek", topo.dlq, "--url", broker.url, "--body", "-f", "table").stdout
    assert f"body: zlib-compressed, {human_size(len(bomb))}, inflates past 256 MiB (ratio over " in whole
    assert "hex:78da" in whole


@pytest.mark.framework
def test_a_kombu_compressed_message_is_shown_inflated_and_replayed_as_it_was(run, broker, qname) -> None:
    python = os.environ.get("DLXTOOL_TEST_CELERY_PYTHON")
    if not python or not Path(python).exists():
        pytest.skip("DLXTOOL_TEST_CELERY_PYTHON not set: scripts/framework-libs installs celery (and kombu)")
    with broker.channel() as ch:
        topo = _dlx_pair(ch, qname)
    env = {**os.environ, "KOMBU_TEST_URL": broker.url, "KOMBU_TEST_QUEUE": topo.work,
           "KOMBU_TEST_COMPRESSION": "zlib"}
    done = subprocess.run([python, str(FRAMEWORKS / "kombu_compressed.py")], env=env, check=True, timeout=60,
                          capture_output=True, text=True)
    wire = json.loads(done.stdout)
    assert wire["headers"]["compression"] == "application/x-gzip"  # what kombu writes for "zlib"
    assert broker.wait_depth(topo.dlq, 1) == 1

    table = run("peek", topo.dlq, "--url", broker.url, "-f", "table")
    assert table.exit_code == 0, table.stderr
    assert '[zlib ' in table.stdout and '{"order":"o-42"' in table.stdout.replace(" ", "")
    whole = run("peek", topo.dlq, "--url", broker.url, "--body", "-f", "table").stdout
    assert "body: decompressed from zlib" in whole and '"sku": "A-199"' in whole

    ((dead, _headers),) = broker.snapshot(topo.dlq)
    assert zlib.decompress(dead).hex() == wire["body"]  # on the broker: compressed, as kombu sent it
    assert run("replay", topo.dlq, "--url", broker.url, "--yes").exit_code == 0
    ((_m, props, body),) = broker.drain(topo.work)
    assert body == dead and props.headers["compression"] == "application/x-gzip"  # unchanged at the origin
