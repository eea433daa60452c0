"""A reader that stops early (`ember query ... | head`) ends the output quietly: no error
on stderr, and the command's own exit code (click and rich turned the broken pipe into
exit 1, which `ember compare` gives for a broken rule)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ember.analysis import ingest
from tests.analysis.traces import REPO, checked_in


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pipes")
    names = ("sweep.jsonl", "disk-cold.jsonl", "disk-warm.jsonl")
    db = folder / "runs.duckdb"
    summary = ingest([checked_in(n, folder) for n in names], db)
    assert summary.rejected == 0
    return db


def _ember_into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """``ember ARGS`` with its stdout a pipe whose reading end is already closed (as when
    ``head`` has read what it wanted)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "ember.cli.main", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            timeout=300,
        )
    finally:
        os.close(write)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["query", "SELECT * FROM range(20000)", "--max-rows", "20000"], 0),
        (["query", "SELECT * FROM range(200000)", "--format", "csv"], 0),
        (["report"], 0),
        (["views"], 0),
        (["compare", "disk-cold", "disk-warm", "--fail-on", "none"], 0),
        (["compare", "sweep", "disk-cold", "--fail-on", "calls>0"], 1),  # the rule breaks
    ],
    ids=["query", "query-csv", "report", "views", "compare-pass", "compare-fail"],
)
def test_a_reader_that_stops_early_is_not_an_error(db, args, code):
    if args[0] != "views":
        args = [*args, "--db", str(db)]
    done = _ember_into_a_closed_pipe(*args)
    assert done.stderr == ""
    assert done.returncode == code
