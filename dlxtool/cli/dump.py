"""`dlxtool dump QUEUE`: message records (JSON Lines) of a queue's messages, nothing removed."""

from __future__ import annotations

import os
from typing import IO

import click

from dlxtool.cli.app import App
from dlxtool.cli.options import connection_options, queue_argument
from dlxtool.cli.reading import SAFETY_HELP, check_count, finish_read, make_read_options, read_options, read_queue
from dlxtool.errors import UsageError


@click.command(epilog=SAFETY_HELP)
@queue_argument
@click.option("-n", "--count", type=click.IntRange(min=1), default=None,
              help="How many messages from the head.")
@click.option("--all", "all_", is_flag=True, help="Every message there is (the default).")
@click.option("-o", "--output", metavar="FILE",
              help="Write to FILE (complete when it appears: written as FILE.partial, then renamed); "
                   "default stdout.")
@read_options
@connection_options
@click.pass_obj
def dump(app: App, queue: str, count: int | None, all_: bool, output: str | None, **read: object) -> None:
    """Write QUEUE's messages as message records (JSON Lines), without removing them.

    Same reading as `peek`, with the same safety rules (below): the messages
    are held unacked until the read ends and given back before anything is
    written, so a dump bigger than --max-unacked (config dump_unacked_limit)
    is refused; stderr says how much the dump holds. Reads until the queue
    is empty; if the bound stops it first, it says how many were left and
    exits 5. `load` publishes a dump back; `history --from` explains it.

    \b
    Examples:
      dlxtool dump orders.dlq -o orders-dlq.jsonl
      dlxtool dump orders.dlq -n 100 | jq -r .routing_key
      dlxtool --broker prod-eu dump audit.stream --offset 2h -o audit.jsonl
    """
    check_count(count, all_)
    opts = make_read_options(app, count, **read)  # type: ignore[arg-type]
    path = output if output not in (None, "-") else None
    with read_queue(app, queue, opts) as reader, _open(app, path) as stream:
        for batch in reader.batches():
            for record in batch:
                stream.write(record.to_jsonl())
            stream.flush()
    if path:
        os.replace(path + ".partial", path)
    app.info(f"dumped {reader.shown} messages of {queue!r} to {path or 'stdout'}; nothing was removed")
    finish_read(app, reader)


class _open:
    """stdout's byte stream, or FILE.partial (removed again if the dump fails)."""

    def __init__(self, app: App, path: str | None) -> None:
        self.app, self.path = app, path
        self.stream: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        if self.path is None:
            out = self.app.stdout
            return out.buffer if hasattr(out, "buffer") else out  # type: ignore[return-value]
        try:
            self.stream = open(self.path + ".partial", "wb")  # noqa: SIM115 - closed in __exit__
        except OSError as exc:
            raise UsageError(f"cannot write {self.path}: {exc.strerror}") from None
        return self.stream

    def __exit__(self, exc_type: object, *_: object) -> None:
        if self.stream is None:
            return
        self.stream.close()
        if exc_type is not None and self.path:
            os.unlink(self.path + ".partial")
