"""Two processes and one database: a reader never sees half a file; a second writer is told.

DuckDB lets one process open a database file for writing, and while it does, no other
process can open it at all. Ingest writes each file in one transaction and closes the
database between files, so a reader gets in between files (and sees whole files only)
or waits; a second writer waits up to ``wait`` seconds and then gets a
``DatabaseBusyError`` that says what is going on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from ember.analysis import DatabaseBusyError, connect
from ember.analysis.synthetic import write_trace
from ember.cli.main import app

HOLD = textwrap.dedent(
    """
    import sys, time
    from ember.analysis import connect
    con = connect(sys.argv[1])
    print("ready", flush=True)
    time.sleep(60)
    """
)

INGEST = textwrap.dedent(
    """
    import sys
    from ember.analysis import ingest
    ingest(sys.argv[2:], sys.argv[1])
    """
)


@pytest.fixture()
def writer_holding(tmp_path):
    db = tmp_path / "busy.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield db, proc.pid
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_second_writer_gets_a_clear_error(writer_holding, tmp_path):
    db, pid = writer_holding
    with pytest.raises(DatabaseBusyError) as err:
        connect(db, wait=0.3)
    msg = str(err.value)
    assert f"process {pid}" in msg
    assert "DuckDB allows one writer process at a time" in msg
    trace = tmp_path / "t.jsonl"
    write_trace(trace, 100, run_id="t")
    result = CliRunner().invoke(app, ["ingest", str(trace), "--db", str(db), "--wait", "0.3"])
    assert result.exit_code == 1
    assert "one writer process at a time" in " ".join(result.output.split())


def test_a_reader_waits_for_the_writer_then_reads(writer_holding):
    db, _ = writer_holding
    with pytest.raises(DatabaseBusyError, match="waited 0.2s"):
        connect(db, read_only=True, wait=0.2)


def test_a_reader_during_an_ingest_sees_whole_files_only(tmp_path):
    files, counts = [], {}
    for i in range(3):
        path = tmp_path / f"run{i}.jsonl"
        counts[f"run{i}"] = write_trace(path, 20_000, run_id=f"run{i}", seed=i)
        files.append(str(path))
    db = tmp_path / "c.duckdb"
    proc = subprocess.Popen([sys.executable, "-c", INGEST, str(db), *files])
    observations = []
    try:
        while True:
            done = proc.poll() is not None
            if not db.exists():
                continue
            try:
                con = connect(db, read_only=True, wait=0.05)
            except (DatabaseBusyError, FileNotFoundError):
                continue
            with con:
                stored = dict(
                    con.duck.execute(
                        "SELECT run_id, (SELECT count(*) FROM cache c WHERE c.run_id = r.run_id)"
                        " + (SELECT count(*) FROM span_start s WHERE s.run_id = r.run_id)"
                        " + (SELECT count(*) FROM span_end s WHERE s.run_id = r.run_id)"
                        " + (SELECT count(*) FROM memory m WHERE m.run_id = r.run_id)"
                        " + (SELECT count(*) FROM device_memory d WHERE d.run_id = r.run_id)"
                        " + 1 FROM runs r"
                    ).fetchall()
                )
                claimed = dict(
                    con.duck.execute("SELECT run_id, records FROM ingested_files").fetchall()
                )
            observations.append((stored, claimed))
            if done:
                break
    finally:
        proc.wait(timeout=300)
    assert proc.returncode == 0
    # every observation: each run present is complete, and nothing is there without its file
    for stored, claimed in observations:
        assert stored == claimed
    assert observations[-1][0] == counts
    print("runs seen by the reader:", sorted({len(stored) for stored, _ in observations}))
