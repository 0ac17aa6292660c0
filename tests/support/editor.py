"""An editor for tests, named in $EDITOR: `python editor.py PLAN FILE`. PLAN (JSON) says what to do with FILE:

    seen     copy the document as shown to this path
    save     false: quit without saving (FILE untouched)
    empty    true: save it empty
    replace  [[old, new[, count]], …]: each `old` must be there (replaced everywhere, or its first `count`
             times); "@section N" stands for message N's whole section
    take     take this many messages from the head of `queue` at `url` (acked) while "open": a consumer took them
"""

from __future__ import annotations

import json
import re
import sys
import time


def main(plan_path: str, path: str) -> None:
    with open(plan_path) as f:
        plan = json.load(f)
    with open(path) as f:
        text = f.read()
    with open(plan["seen"], "w") as f:
        f.write(text)
    if plan.get("take"):
        take(plan["url"], plan["queue"], plan["take"])
    if plan.get("save") is False:
        return
    if plan.get("empty"):
        text = ""
    for old, new, *count in plan.get("replace", []):
        found = re.match(r"@section (\d+)$", old)
        if found:
            n = int(found.group(1))
            old = text[text.index(f"### message {n} of"):text.index(f"### message {n + 1} of")]
        if old not in text:
            sys.exit(f"editor.py: {old!r} is not in the document")
        text = text.replace(old, new, *count)
    time.sleep(0.01)  # a modification time that differs from the one the file was written with
    with open(path, "w") as f:
        f.write(text)


def take(url: str, queue: str, n: int) -> None:
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        for _ in range(n):
            method, _props, _body = ch.basic_get(queue, auto_ack=True)
            assert method is not None, f"nothing to take from {queue}"
    finally:
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
