"""`dlxtool decode`: offline, no broker needed."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from proto_registry import DEMO_PROTOS, Registry


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return Registry.load([DEMO_PROTOS], cache_dir=tmp_path_factory.mktemp("proto-cache"))


def cancelled(shop: Registry, **fields: object) -> bytes:
    """An OrderCancelled with enough in it to be told from types nobody registered (its timestamp:
    four flat fields alone would fit many a schema, and score 0.75)."""
    at = {"seconds": 1_714_000_000, "nanos": 5}
    values = {"order_id": "o-77", "customer_id": "c-5", "reason": 2, "cancelled_at": at, "note": "card declined"}
    values |= fields
    return shop.message_class("shop.orders.v1.OrderCancelled")(**values).SerializeToString()


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_decodes_log_lines_from_stdin(run, shop: Registry) -> None:
    b64 = base64.b64encode(cancelled(shop)).decode()
    log = f'INFO consumer up\n{{"level":"error","payload":"{b64}"}}\nWARN rejected {b64} requeue=false\n'
    result = run("decode", "--demo-schemas", input=log)
    assert result.exit_code == 0, result.stderr
    rows = jsonl(result.stdout)
    assert [r["line"] for r in rows] == [2, 3]
    for r in rows:
        assert r["type"] == "shop.orders.v1.OrderCancelled"
        assert r["message"]["reason"] == "CANCEL_REASON_PAYMENT_FAILED"
        assert r["ambiguous"] is False and r["confidence"] >= 0.9
    line2 = log.splitlines()[1]
    start, end = rows[0]["span"]
    assert line2[start:end] == b64 and rows[0]["key"] == "payload"


def test_ambiguous_payload_lists_alternatives(run, shop: Registry) -> None:
    data = shop.message_class("shop.orders.v1.OrderCancelled")(order_id="o-1", customer_id="c").SerializeToString()
    result = run("decode", "--demo-schemas", input=f"payload={base64.b64encode(data).decode()}\n")
    (row,) = jsonl(result.stdout)
    assert row["ambiguous"] is True and row["confidence"] < 0.8
    # 13 types fit: the 10 that declare the fewest fields are listed, and the output says how many more.
    assert len(row["alternatives"]) == 9 and row["alternatives_count"] == 12
    assert "shop.orders.v1.OrderCancelled" in [row["type"], *row["alternatives"]]
    listed = row["alternatives"]
    table = run("decode", "--demo-schemas", "-f", "table", input=f"payload={base64.b64encode(data).decode()}\n")
    assert ", +9 more)" in table.stdout, table.stdout
    # --top N ranks them all: OrderPlaced (8 fields) is among those not listed.
    result = run("decode", "--demo-schemas", "--top", "13", input=f"payload={base64.b64encode(data).decode()}\n")
    (row,) = jsonl(result.stdout)
    assert row["alternatives"] == listed and "shop.orders.v1.OrderPlaced" not in listed  # whatever --top asks
    assert "shop.orders.v1.OrderPlaced" in [m["type"] for m in row["top"]] and len(row["top"]) == 13


def test_forced_type_top_and_text_format(run, shop: Registry, tmp_path: Path) -> None:
    f = tmp_path / "app.log"
    f.write_text(f"body={cancelled(shop).hex()}\n")
    result = run("decode", "--demo-schemas", str(f), "--type", "OrderCancelled", "--format", "text")
    assert result.exit_code == 0, result.stderr
    assert 'note: "card declined"' in result.stdout
    assert "shop.orders.v1.OrderCancelled" in result.stdout
    result = run("decode", "--demo-schemas", str(f), "--top", "3", "--format", "jsonl")
    (row,) = jsonl(result.stdout)
    assert row["top"][0]["type"] == "shop.orders.v1.OrderCancelled" and "score" in row["top"][0]


def test_raw_and_no_match_show_structure(run) -> None:
    unknown = b"\xa0\x38\x01\xaa\x38\x05hello"  # fields 900 and 901: in no schema
    result = run("decode", "--input", "binary", input=unknown)
    (row,) = jsonl(result.stdout)
    assert row["status"] == "no_match" and row["type"] is None
    assert row["raw"] == [
        {"field": 900, "wire_type": "varint", "value": 1},
        {"field": 901, "wire_type": "len", "string": "hello"},
    ]
    result = run("decode", "--raw", input=f"data={base64.b64encode(unknown).decode()}\n")
    (row,) = jsonl(result.stdout)
    assert row["status"] == "raw" and row["raw"][1]["string"] == "hello"


def test_passthrough_and_no_payload(run) -> None:
    result = run("decode", "--passthrough", input="nothing here\n")
    (row,) = jsonl(result.stdout)
    assert row == {"source": "-", "line": 1, "status": "no_payload", "text": "nothing here"}
    result = run("decode", input="nothing here\n")
    assert result.stdout == "" and "no payload" in result.stderr


def test_proto_path_from_option_and_env(run, tmp_path: Path) -> None:
    protos = tmp_path / "protos"
    (protos / "acme").mkdir(parents=True)
    (protos / "acme" / "ping.proto").write_text(
        'syntax = "proto3";\npackage acme;\nmessage Ping { string id = 1; sfixed64 at = 9; bool urgent = 12; }\n'
    )
    payload = b"\x0a\x02p1\x49" + (5).to_bytes(8, "little") + b"\x60\x01"
    line = f"payload={base64.b64encode(payload).decode()}\n"
    for args, env in ((["-I", str(protos)], None), ([], {"DLXTOOL_PROTO_PATH": str(protos)})):
        result = run("decode", *args, input=line, env=env)
        assert result.exit_code == 0, result.stderr
        (row,) = jsonl(result.stdout)
        assert row["type"] == "acme.Ping" and row["message"] == {"id": "p1", "at": "5", "urgent": True}


def test_errors_are_one_line_with_exit_status(run, tmp_path: Path) -> None:
    bad = tmp_path / "protos"
    bad.mkdir()
    (bad / "broken.proto").write_text('syntax = "proto3";\nmessage A { string x = 1 }\n')
    result = run("decode", "-I", str(bad), input="x\n")
    assert result.exit_code == 2
    assert "broken.proto:2" in result.stderr and "Traceback" not in result.stderr
    result = run("decode", "--type", "NoSuchType", input="x\n")
    assert result.exit_code == 4 and "NoSuchType" in result.stderr
    result = run("decode", str(tmp_path / "missing.log"))
    assert result.exit_code == 4
    result = run("decode", "--input", "hex", input="zz\n")
    assert result.exit_code == 2 and "hex" in result.stderr
    empty = tmp_path / "no-schemas"
    empty.mkdir()
    result = run("decode", "-I", str(empty), input="x\n")
    assert result.exit_code == 4 and str(empty) in result.stderr and "no message types" in result.stderr
    # A model.pb that is not a descriptor set (a TensorFlow GraphDef parses as one): skipped, so this
    # path yields no types either (not exit 2 from its bogus imports).
    graph = bytes.fromhex("0a210a0d636f6e76312f77656967687473120a5661726961626c6556321a04696e69742202081b")
    (empty / "model.pb").write_bytes(graph)
    result = run("decode", "-I", str(empty), input="x\n")
    assert result.exit_code == 4 and "model.pb is not a FileDescriptorSet" in result.stderr, result.stderr


def test_ambiguity_does_not_depend_on_how_many_alternatives_are_shown(run) -> None:
    """Issue 19: the same line was `ambiguous: false` alone and `true` with --top 3."""
    line = "payload=CgRvLTQyEAcaAwD/EA==\n"  # fits two demo types equally, each with a defect
    plain = jsonl(run("decode", "--demo-schemas", input=line).stdout)[0]
    ranked = jsonl(run("decode", "--demo-schemas", "--top", "12", input=line).stdout)[0]
    tied = [m["type"] for m in ranked["top"] if m["score"] == ranked["top"][0]["score"]]
    assert plain["ambiguous"] is (len(tied) > 1)
    assert sorted([plain["type"], *plain["alternatives"]]) == sorted(tied)
    for k in ("1", "3"):
        row = jsonl(run("decode", "--demo-schemas", "--top", k, input=line).stdout)[0]
        assert (row["ambiguous"], row["alternatives"]) == (plain["ambiguous"], plain["alternatives"])
        assert len(row["top"]) == int(k)


def test_a_payload_that_is_json_is_reported_as_json(run) -> None:
    body = b'{"order": "o-42", "qty": 2}'
    line = f'level=error msg="cannot handle" payload={base64.b64encode(body).decode()}\n'
    result = run("decode", "--demo-schemas", input=line)
    assert result.exit_code == 0, result.stderr
    (row,) = jsonl(result.stdout)
    assert row["status"] == "not_protobuf" and row["error"] == "payload is JSON, not protobuf"
    assert row["content"] == body.decode() and row["key"] == "payload"
    assert "no payload found" not in result.stderr and "no protobuf payload" in result.stderr
    table = run("decode", "--demo-schemas", "-f", "table", input=line).stdout
    assert "payload is JSON, not protobuf" in table and '"o-42"' in table


def test_a_text_payload_under_a_payload_key_is_reported_as_text(run) -> None:
    line = f"body={base64.b64encode(b'order o-42 failed: out of stock').decode()}\n"
    (row,) = jsonl(run("decode", input=line).stdout)
    assert row["status"] == "not_protobuf" and row["error"] == "payload is text, not protobuf"


def test_the_demo_schemas_load_only_when_asked_for(run, shop: Registry, tmp_path: Path) -> None:
    line = f"payload={base64.b64encode(cancelled(shop)).decode()}\n"
    (row,) = jsonl(run("decode", input=line).stdout)
    assert row["type"] is None and row["status"] == "no_match"
    config = tmp_path / "config.toml"
    config.write_text("demo_schemas = true\n")
    for args, env in ((["--demo-schemas"], None), ([], {"DLXTOOL_CONFIG": str(config)})):
        (row,) = jsonl(run("decode", *args, input=line, env=env).stdout)
        assert row["type"] == "shop.orders.v1.OrderCancelled"


def test_a_defective_guess_is_not_shown_like_a_clean_match(run, shop: Registry) -> None:
    clean = f"payload={base64.b64encode(cancelled(shop)).decode()}\n"
    defective = "payload=CgRvLTQyEAcaAwD/EA==\n"
    table = run("decode", "--demo-schemas", "-f", "table", input=clean + defective).stdout.splitlines()
    assert "shop.orders.v1.OrderCancelled (" in table[0] and "?" not in table[0].split("{")[0]
    assert "? (" in table[1] and "does not fit cleanly" in table[1]


def _ping_protos(tmp_path: Path) -> tuple[Path, str]:
    protos = tmp_path / "protos"
    (protos / "acme").mkdir(parents=True)
    (protos / "acme" / "ping.proto").write_text(
        'syntax = "proto3";\npackage acme;\nmessage Ping { string id = 1; sfixed64 at = 9; bool urgent = 12; }\n'
    )
    payload = b"\x0a\x02p1\x49" + (5).to_bytes(8, "little") + b"\x60\x01"
    return protos, f"payload={base64.b64encode(payload).decode()}\n"


def test_a_config_that_cannot_be_read_does_not_stop_the_offline_decode(run, tmp_path: Path) -> None:
    protos, line = _ping_protos(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[brokers.a\n")  # not TOML: nothing can be taken from it
    result = run("decode", "--config", str(cfg), "-I", str(protos), input=line)
    assert result.exit_code == 0, result.stderr
    (row,) = jsonl(result.stdout)
    assert row["type"] == "acme.Ping"
    assert "invalid TOML" in result.stderr and "decoding without it" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_config_wrong_elsewhere_still_gives_decode_its_proto_paths(run, tmp_path: Path) -> None:
    protos, line = _ping_protos(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'proto_paths = ["{protos}"]\n[brokers.a]\nurl = 5\n')
    result = run("decode", input=line, env={"DLXTOOL_CONFIG": str(cfg)})
    assert result.exit_code == 0, result.stderr
    (row,) = jsonl(result.stdout)
    assert row["type"] == "acme.Ping"
    assert "url must be a string" in result.stderr and "with its proto_paths (1)" in result.stderr


def test_a_broken_config_still_stops_decode_when_it_needs_it(run, tmp_path: Path) -> None:
    _protos, line = _ping_protos(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text('proto_paths = 5\n')  # the one thing decode needs from it is wrong
    result = run("decode", "--config", str(cfg), input=line)
    assert result.exit_code == 2 and "proto_paths must be" in result.stderr
    cfg.write_text("[brokers.a\n")  # a profile typed on the command line: its proto_paths are wanted
    result = run("decode", "--config", str(cfg), "--broker", "a", input=line)
    assert result.exit_code == 2 and "invalid TOML" in result.stderr


CUT_LINE = "ERROR payload=CgZvLTEwMTcSCHBheS0xMDE=\n"  # the demo's body cut in half by its proxy


def test_a_payload_cut_short_is_reported_and_the_run_exits_2(run) -> None:
    """Issue 30: it said "no payload found", exit 0 — the very poison messages hidden."""
    for args in ([], ["-t", "PaymentCaptured"]):
        result = run("decode", "--demo-schemas", "-f", "json", *args, input=CUT_LINE)
        assert result.exit_code == 2, result.stderr
        (row,) = json.loads(result.stdout)
        assert row["status"] == "truncated" and (row["offset"], row["size"]) == (8, 17)
        assert row["raw"][0] == {"field": 1, "wire_type": "len", "string": "o-1017"}
        assert row["raw"][1]["cut"] is True and row["raw"][1]["string"] == "pay-101"
        assert row["message"] is not None and "o-1017" in row["message"].values()
        assert row["source"] == "-"  # not overwritten by where the type came from
        assert "no payload found" not in result.stderr
        assert "1 payload found, none decoded (1 cut short)" in result.stderr
    forced = json.loads(run("decode", "--demo-schemas", "-f", "json", "-t", "PaymentCaptured", input=CUT_LINE).stdout)
    assert forced[0]["raw"][1]["name"] == "payment_id" and forced[0]["type_source"] == "explicit"
    table = run("decode", "--demo-schemas", "-f", "table", input=CUT_LINE)
    assert table.exit_code == 2
    assert "-:1  truncated: cut short at byte 8 of 17: field 2 (len) declares 8 bytes, 7 left" in table.stdout
    assert '"o-1017"' in table.stdout


def test_a_whole_input_cut_short_shows_its_fields(run) -> None:
    result = run("decode", "--input", "base64", "-f", "text", input="CgZvLTEwMTcSCHBheS0xMDE=\n")
    assert result.exit_code == 2
    assert result.stdout.splitlines() == [
        "# -:1: truncated: cut short at byte 8 of 17: field 2 (len) declares 8 bytes, 7 left",
        '1: "o-1017"',
        "# cut short here: 7 of 8 bytes arrived",
        '2: "pay-101"',
    ]


def test_one_payload_that_decodes_is_enough_for_exit_0(run, shop: Registry) -> None:
    good = f"payload={base64.b64encode(cancelled(shop)).decode()}\n"
    result = run("decode", "--demo-schemas", "--passthrough", input="no payload here\n" + CUT_LINE + good)
    assert result.exit_code == 0, result.stderr
    assert [r["status"] for r in jsonl(result.stdout)] == ["no_payload", "truncated", "match"]
    result = run("decode", "--passthrough", input="nothing\nstill nothing\n")  # no payload at all: passthrough goes on
    assert result.exit_code == 0 and len(jsonl(result.stdout)) == 2


def test_a_gzip_payload_is_decoded_inflated_and_labelled(run, shop: Registry) -> None:
    import gzip

    packed = gzip.compress(cancelled(shop))
    line = f"payload={base64.b64encode(packed).decode()}\n"
    (row,) = jsonl(run("decode", "--demo-schemas", input=line).stdout)
    assert row["type"] == "shop.orders.v1.OrderCancelled" and row["message"]["note"] == "card declined"
    assert row["decompressed"] == {"from": "gzip", "compressed_bytes": len(packed), "bytes": len(cancelled(shop))}
    table = run("decode", "--demo-schemas", "-f", "table", input=line).stdout
    label = f"[decompressed from gzip, {len(packed)} B → {len(cancelled(shop))} B]"
    assert f"{label} shop.orders.v1.OrderCancelled" in table


def test_decode_reads_the_default_profiles_proto_paths_as_peek_does(run, tmp_path: Path) -> None:
    """Issue 30: decode warned "no schemas loaded" where peek used the default profile's proto_paths."""
    protos, line = _ping_protos(tmp_path)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'default = "staging"\n[brokers.staging]\nurl = "amqp://localhost:5672/"\n'
                   f'proto_paths = ["{protos}"]\n')
    result = run("decode", input=line, env={"DLXTOOL_CONFIG": str(cfg)})
    assert result.exit_code == 0, result.stderr
    (row,) = jsonl(result.stdout)
    assert row["type"] == "acme.Ping" and "no schemas loaded" not in result.stderr
    from dlxtool.cli.app import App

    app = App(env={"DLXTOOL_CONFIG": str(cfg)}, config_file=str(cfg))
    assert app.schemas().paths == (str(protos),) and app.schemas(offline=True) == app.schemas()


def test_a_payload_value_that_is_no_base64_is_reported_not_decoded_in_part(run) -> None:
    """issue 37: `payload=CgdvLTAwMDEy!!!` decoded its valid prefix, silently, as `Money? (0.06)` with exit 0."""
    result = run("decode", "--demo-schemas", input="payload=CgdvLTAwMDEy!!!\n")
    assert result.exit_code == 2, result.stderr  # a payload found, none decoded
    [row] = jsonl(result.stdout)
    assert row["status"] == "invalid" and row["message"] is None and row["type"] is None
    assert row["error"] == "payload: not valid base64 or hex: '!' at character 13 of 15"
    assert "1 not valid base64 or hex" in result.stderr and "not base64 or hex" in result.stderr
    table = run("decode", "--demo-schemas", "-f", "table", input="payload=CgdvLTAwMDEy!!!\n")
    assert table.stdout.startswith("-:1  invalid: payload: not valid base64 or hex: '!' at character 13")


def test_input_base64_garbage_says_what_is_wrong_once(run) -> None:
    result = run("decode", "--input", "base64", input="not base64 at all !!\n")
    assert result.exit_code == 2
    assert "dlxtool: error: -: not valid base64: '!' at character 15 of 16\n" in result.stderr
    assert result.stderr.count("not valid base64") == 1  # was "not valid base64 (not valid base64)"
