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
import threading
import time

import duckdb
import pytest
from typer.testing import CliRunner

from ember.analysis import DatabaseBusyError, connect, ingest
from ember.analysis.synthetic import write_trace
from ember.cli.main import app
from tests import recordings


@pytest.fixture
def writer_holding(tmp_path):
    db = tmp_path / "busy.duckdb"
    proc = recordings.start("hold_database", str(db), "60", stdout=subprocess.PIPE, text=True)
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
    with pytest.raises(DatabaseBusyError, match=r"waited 0\.2s"):
        connect(db, read_only=True, wait=0.2)


@pytest.mark.parametrize(
    "placeholder",
    [b"", b"\0" * 64 * 1024],
    ids=["being-created", "moved-into-place-as-it-looks"],
)
def test_a_reader_waits_for_a_database_that_another_process_is_making(tmp_path, placeholder):
    # DuckDB creates the file, then writes its headers: a reader opening it in between was
    # told the file "is not a valid DuckDB database file" (a flake). And a CI flake of that
    # fix: the reader's attempt saw the empty file, then the writer's os.replace put a whole
    # database there before the reader looked at the size, so a file longer than DuckDB's
    # headers (the second placeholder) was taken for "not a database". What was there a
    # moment ago is what counts: a file changed just now is still being made.
    db = tmp_path / "new.duckdb"
    db.write_bytes(placeholder)
    made = tmp_path / "made.duckdb"
    connect(made).close()

    def move_into_place() -> None:
        time.sleep(0.3)
        os.replace(made, db)

    mover = threading.Thread(target=move_into_place)
    mover.start()
    try:
        with connect(db, read_only=True, wait=10) as con:
            assert "runs" in con.tables()
    finally:
        mover.join()


def test_a_file_that_is_not_a_database_is_refused_not_waited_for(tmp_path):
    notes = tmp_path / "notes.duckdb"
    notes.write_text("not a database\n")
    hour_ago = time.time() - 3600
    os.utime(notes, (hour_ago, hour_ago))
    with pytest.raises(duckdb.IOException, match="not a valid DuckDB database file"):
        connect(notes, read_only=True, wait=60)


def test_a_file_from_the_future_is_not_taken_for_one_being_created(tmp_path):
    # a negative age counted as "changed in the last 5 s": the reader waited its whole --wait
    from ember.analysis.db import _being_created

    notes = tmp_path / "notes.duckdb"
    notes.write_text("not a database\n")
    message = "IO Error: ... is not a valid DuckDB database file!"
    assert _being_created(str(notes), message)  # written just now: maybe being made
    hour_ahead = time.time() + 3600
    os.utime(notes, (hour_ahead, hour_ahead))
    assert not _being_created(str(notes), message)


def test_ember_query_on_a_file_that_is_not_a_database_says_so(tmp_path):
    # it printed a traceback ending in duckdb's IOException
    notes = tmp_path / "notes.duckdb"
    notes.write_bytes(b"not a database\n" * 2000)
    hour_ago = time.time() - 3600
    os.utime(notes, (hour_ago, hour_ago))
    result = CliRunner().invoke(app, ["query", "--db", str(notes), "SELECT 1"])
    assert result.exit_code == 1
    assert "is not an Ember database" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_a_reader_during_an_ingest_sees_whole_files_only(tmp_path):
    files, counts = [], {}
    for i in range(3):
        path = tmp_path / f"run{i}.jsonl"
        counts[f"run{i}"] = write_trace(path, 20_000, run_id=f"run{i}", seed=i)
        files.append(str(path))
    db = tmp_path / "c.duckdb"
    proc = recordings.start("ingest_files", str(db), *files)
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


def _hold_for_reading(db, seconds: float) -> subprocess.Popen:
    proc = recordings.start(
        "hold_database", str(db), str(seconds), "--read-only", stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_reader_is_named_as_a_reader_and_ingest_waits_for_it(tmp_path):
    db = tmp_path / "r.duckdb"
    trace = tmp_path / "t.jsonl"
    n = write_trace(trace, 100, run_id="t")
    connect(db).close()
    # a reader (a dashboard query, a notebook) holds the file: the error named it as
    # "open for writing ... (an ingest?)"
    reader = _hold_for_reading(db, 60)
    try:
        with pytest.raises(DatabaseBusyError) as err:
            connect(db, wait=0.3)
        msg = " ".join(str(err.value).split())
        assert f"open for reading by process {reader.pid}" in msg
        assert "--wait SECONDS" in msg
    finally:
        reader.kill()
        reader.wait()
    # a reader that holds it for 12 s (past the old 10 s default): ingest waits it out
    reader = _hold_for_reading(db, 12)
    try:
        result = ingest([trace], db).files[0]
    finally:
        reader.wait(timeout=60)
    assert (result.status, result.records) == ("ok", n)


def test_ember_query_has_a_wait_and_says_what_holds_the_file(writer_holding):
    db, pid = writer_holding
    result = CliRunner().invoke(app, ["query", "SELECT 1", "--db", str(db), "--wait", "0.3"])
    assert result.exit_code == 1
    out = " ".join(result.output.split())
    assert f"open for writing by process {pid}" in out
    assert "waited 0.3s" in out
    assert "--wait SECONDS" in out


# ---------------------------------------------------------------- all at once


def test_recording_ingesting_and_reading_at_once_lose_and_repeat_nothing(tmp_path):
    # the README's promise: ingest keeps adding a run that is still being recorded while
    # people look at the database. A recorder appends, `ember ingest` runs in a loop and a
    # reader queries, all at once: no reader error, no ingest error, no span twice, and at
    # the end every line of the trace is in the database once.
    trace, db, stop = tmp_path / "live.jsonl", tmp_path / "live.duckdb", tmp_path / "stop"
    ingested = stop.with_suffix(".ingested")  # the ingest loop's sign that one ingest ran
    recorder = recordings.start("live_recording", str(trace), "4", str(ingested))
    while not trace.exists():
        time.sleep(0.01)
    ingester = recordings.start(
        "ingest_loop",
        str(trace),
        str(db),
        str(stop),
        stdout=subprocess.PIPE,
        text=True,
    )
    seen = []
    try:
        while ingester.poll() is None:
            if recorder.poll() is not None and not stop.exists():
                stop.touch()  # one last ingest after the recorder finished
            if not db.exists():
                time.sleep(0.05)
                continue
            with connect(db, read_only=True, wait=120) as con:
                twice = con.duck.execute(
                    "SELECT count(*) FROM (SELECT span_id FROM span_start GROUP BY span_id "
                    "HAVING count(*) > 1)"
                ).fetchone()[0]
                stored = con.duck.execute(
                    "SELECT (SELECT count(*) FROM span_start) + (SELECT count(*) FROM span_end)"
                    " + (SELECT count(*) FROM memory) + (SELECT count(*) FROM runs)"
                ).fetchone()[0]
            seen.append((twice, stored))
            time.sleep(0.02)
    finally:
        recorder.wait(timeout=120)
        ingester.wait(timeout=300)
    assert recorder.returncode == 0
    assert ingester.returncode == 0, "an ingest failed while the reader read"
    runs = int(ingester.stdout.read().split()[-1])
    assert runs >= 2, (runs, len(seen))
    assert len(seen) >= 2, (runs, len(seen))
    assert all(twice == 0 for twice, _ in seen)
    assert [s for _, s in seen] == sorted(s for _, s in seen)  # never fewer records
    lines = trace.read_bytes().splitlines()
    print(f"{runs} ingests, {len(seen)} reads, {len(lines)} lines")
    with connect(db, read_only=True) as con:
        assert con.duck.execute("SELECT count(*) FROM rejected_lines").fetchone()[0] == 0
        assert con.duck.execute("SELECT lines, records FROM ingested_files").fetchall() == [
            (len(lines), len(lines))
        ]
        spans = con.duck.execute(
            "SELECT count(*), count(DISTINCT span_id) FROM span_start"
        ).fetchone()
    starts = sum(1 for line in lines if b'"span_start"' in line)
    assert spans == (starts, starts)
