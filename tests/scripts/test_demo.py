"""scripts/demo plays the whole incident, unattended, in a vhost of its own (so it cannot rot)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("readme", ROOT / "scripts" / "docs" / "readme.py")
assert _spec and _spec.loader
readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme)


@pytest.mark.demo
def test_demo_plays_the_incident_and_leaves_nothing_behind(broker, tmp_path: Path) -> None:
    vhost = broker.vhost + "-demo"
    demo_dir, transcript = tmp_path / "demo", tmp_path / "transcript"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLXTOOL_")}
    env.update(DLXTOOL_DEMO_VHOST=vhost, DLXTOOL_DEMO_DIR=str(demo_dir), DLXTOOL_DEMO_TRANSCRIPT=str(transcript),
               DLXTOOL_BROKER_PORT=str(broker.amqp_port), DLXTOOL_BROKER_HTTP_PORT=str(broker.http_port),
               HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_STATE_HOME=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    if (ROOT / ".venv" / "bin" / "dlxtool").exists():
        env["DLXTOOL_DEMO_NO_INSTALL"] = "1"  # the suite runs in that venv already
    try:
        proc = subprocess.run([str(ROOT / "scripts" / "demo")], env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        step = {p.stem.split("-", 1)[1]: p.read_text() for p in transcript.glob("*.txt")}
        # The examples in README.md and docs/ come from this demo (scripts/docs/readme.py --examples): what they
        # say must still be what the demo prints (as a user's run would show it: vhost dlxtool-demo, .demo/).
        as_shown = {name: text.replace(vhost, "dlxtool-demo").replace(str(demo_dir), ".demo")
                    for name, text in step.items()}
        assert readme.stale_examples(readme.read_docs(), as_shown) == [], \
            "the docs' examples are stale: run python scripts/docs/readme.py --examples"

        assert _row(step["queues"], "orders.work").endswith("clogged")
        assert _row(step["queues"], "orders.dlq").endswith("dlq")
        assert "shop.orders.v1.PaymentFailed {" in step["peek"]  # decoded body
        assert "expired×2 from orders.retry.wait" in step["peek"]
        summary = _row(step["history"], "orders.work").split()  # origin, convention, reason, type, messages
        assert summary[:4] == ["orders.work", "x-death", "rejected", "shop.orders.v1.PaymentFailed"]
        assert step["decode"].count("shop.orders.v1.PaymentFailed") == 3
        planned = int(_row(step["replay-dry-run"], "replay to").split()[3])
        replayed = int(_row(step["replay"], "replayed").split()[2])
        assert replayed >= planned >= int(summary[4])
        log = (demo_dir / "fulfilment.log").read_text()
        assert log.count("(replayed by dlxtool)") == replayed

        backup = [json.loads(line) for line in (demo_dir / "orders-dlq-backup.jsonl").read_text().splitlines()]
        assert sorted(r["properties"]["type"] for r in backup) == [
            "shop.orders.v1.OrderPlaced", "shop.orders.v1.PaymentCaptured"]  # the two bodies cut in half
        assert _depths(broker, vhost) == {"orders.dlq": 0, "orders.work": 0, "orders.retry.wait": 0}
        assert "Clean up" in proc.stdout and f"/api/vhosts/{vhost}" in proc.stdout

        # Everything dlxtool kept is in the demo's directory, which the cleanup removes: its journal (the replay
        # and the purge), its compiled schemas; nothing in the user's own state or cache directories.
        journal = (demo_dir / "state" / "dlxtool" / "journal.jsonl").read_text()
        runs = [json.loads(line) for line in journal.splitlines()]
        assert {r["command"] for r in runs if r["event"] == "start"} == {"replay", "purge"}
        assert list((demo_dir / "cache").glob("*.binpb"))
        assert f"rm -r {demo_dir} " in proc.stdout
        written = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if "dlxtool" in p.name}
        assert not {w for w in written if not w.startswith(("demo", "transcript"))}, written

        # The commands it ends with work from any directory, with dlxtool named by its path (not on PATH).
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        tried = _try_it(proc.stdout)
        assert tried[0].startswith("export DLXTOOL_URL=") and "/.venv/bin/dlxtool queues" in tried[1], tried
        shell = subprocess.run(["bash", "-ec", "\n".join(tried)], cwd=elsewhere, capture_output=True, text=True,
                               timeout=120, env={**{k: v for k, v in env.items() if not k.startswith("DLXTOOL_")},
                                                 "PATH": "/usr/bin:/bin", "NO_COLOR": "1"})
        assert shell.returncode == 0, shell.stdout[-3000:] + shell.stderr[-3000:]
        assert "orders.dlq" in shell.stdout and "shop.orders.v1.OrderPlaced" in shell.stdout
        assert "replay" in shell.stdout and "purge" in shell.stdout  # the journal of the demo's runs
        assert not list(elsewhere.iterdir())
    finally:
        broker.mgmt.request("DELETE", f"vhosts/{quote(vhost, safe='')}")


def _try_it(stdout: str) -> list[str]:
    """The commands under the demo's "Try it yourself" line, up to its clean-up list."""
    lines = stdout[stdout.index("Try it yourself"):stdout.index("Clean up")].splitlines()[1:]
    return [line.split("  #")[0].strip() for line in lines if line.startswith("  ")]


def _row(output: str, cell: str) -> str:
    """The first table row with this cell, from that cell on (`dlxtool queues` starts with the vhost)."""
    for line in output.splitlines():
        m = re.search(rf"(?:^|\s){re.escape(cell)}\s", line)
        if m:
            return line[m.start():].strip()
    raise AssertionError(f"no row with {cell!r} in:\n{output}")


def _depths(broker, vhost: str) -> dict[str, int]:
    import pika

    conn = pika.BlockingConnection(pika.ConnectionParameters(
        broker.host, broker.amqp_port, vhost, pika.PlainCredentials("guest", "guest")))
    try:
        ch = conn.channel()
        return {q: ch.queue_declare(q, passive=True).method.message_count
                for q in ("orders.dlq", "orders.work", "orders.retry.wait")}
    finally:
        conn.close()
