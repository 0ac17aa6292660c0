"""Replay the checked-in regression corpus (tests/fuzz/corpus): inputs the fuzzers or hostile-message
work found, each of which once crashed something. Add a file there for every new finding.

  record-files/  bytes of a dump file: records or a UsageError (exit 2), never another exception
  headers/       a JSON array of header tables (record tags allowed): history parses each
  config/        TOML: a config, or a DlxtoolError
  lines/         log lines: the extractor's candidates lie inside the line
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import orjson
import pytest

from dlxtool.deaths import message_history, summarize
from dlxtool.errors import DlxtoolError, UsageError
from dlxtool.extract import candidates
from dlxtool.ops.record_files import read_records
from dlxtool.record import tag_table, untag_table
from dlxtool.render import dumps
from tests.fuzz.test_fuzz_config import use

CORPUS = Path(__file__).parent / "corpus"


def _files(kind: str) -> list[Path]:
    files = sorted((CORPUS / kind).iterdir())
    assert files, f"empty corpus {kind}"
    return files


@pytest.mark.parametrize("path", _files("record-files"), ids=lambda p: p.name)
def test_record_files(path: Path) -> None:
    try:
        for record in read_records(io.BytesIO(path.read_bytes()), path.name):
            dumps(record.to_json())
            assert untag_table(orjson.loads(dumps(tag_table(record.headers)))) == record.headers
    except UsageError:
        pass


@pytest.mark.parametrize("path", _files("headers"), ids=lambda p: p.name)
def test_header_tables(path: Path) -> None:
    for raw in orjson.loads(path.read_bytes()):
        item = message_history(untag_table(raw))
        dumps(item.to_json())
        summarize(item.history.deaths)


@pytest.mark.parametrize("path", _files("config"), ids=lambda p: p.name)
def test_configs(path: Path) -> None:
    from dlxtool.config import load_config

    with contextlib.suppress(DlxtoolError):
        use(load_config(str(path), {}))


@pytest.mark.parametrize("path", _files("lines"), ids=lambda p: p.name)
def test_log_lines(path: Path) -> None:
    for line in path.read_text(errors="surrogateescape").splitlines() or [""]:
        for cand in candidates(line):
            assert 0 <= cand.start < cand.end <= len(line)
