"""Ctrl-C during ``ember ingest --db``: a real process, a real SIGINT.

Before: DuckDB's InterruptException was caught by the batch's fallback, which retried the
files one by one (20-26 s more) and exited 0; landing on the commit, it printed a
"Duplicate key" traceback although every row had been committed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from ember.analysis.synthetic import write_trace

N_FILES = 6


def _traces(folder: Path) -> list[Path]:
    folder.mkdir()
    paths = []
    for i in range(N_FILES):
        path = folder / f"t{i}.jsonl"
        write_trace(path, 60_000, run_id=f"run-{i}", seed=i)
        paths.append(path)
    return paths


# As from a terminal: a process started in the background (a CI step, this test's own
# runner) may inherit SIGINT ignored, and Python then never raises KeyboardInterrupt on it.
_AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv = ['ember', *sys.argv[1:]]; runpy.run_module('ember.cli.main', run_name='__main__')"
)


def _ingest(folder: Path, db: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _AS_FROM_A_TERMINAL, "ingest", str(folder), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_ctrl_c_stops_ingest_with_130_says_what_was_committed_and_a_rerun_completes(tmp_path):
    folder = tmp_path / "traces"
    _traces(folder)
    db = tmp_path / "t.duckdb"
    proc = _ingest(folder, db)
    # wait until it is reading (the database file exists), then Ctrl-C
    deadline = time.monotonic() + 60
    while not db.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)
    assert proc.poll() is None, "ingest ended before the interrupt: make the traces larger"
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=120)
    stopped_after = time.monotonic() - sent
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "Traceback" not in out + err
    assert "interrupted" in err
    assert "committed" in err
    assert stopped_after < 10, stopped_after  # (seconds on a loaded 2-core machine; was 20+)
    # what it says was committed is what the database holds
    with duckdb.connect(str(db), read_only=True) as con:
        (committed,) = con.execute(
            "SELECT count(*) FROM ingested_files WHERE status <> 'refused'"
        ).fetchone()
    assert f"{committed} of {N_FILES} file(s) committed" in err
    # the same command again: every file, none twice
    again = _ingest(folder, db)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err
    with duckdb.connect(str(db), read_only=True) as con:
        runs = con.execute("SELECT count(*), count(DISTINCT run_id) FROM runs").fetchone()
        (files,) = con.execute("SELECT count(*) FROM ingested_files").fetchone()
    assert runs == (N_FILES, N_FILES)
    assert files == N_FILES
