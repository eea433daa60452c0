"""The trace lake (``ember ingest --lake``) on DuckDB: parity with the DuckDB file, re-ingest,
growth, replacement, rejected lines, claims, the CLI and the dashboard's reader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ember.analysis import connect, ingest
from ember.analysis.lake import (
    CLAIMS,
    MANIFEST,
    connect_lake,
    file_key,
    ingest_lake,
    lake_columns,
    manifest_entries,
)
from tests.analysis.lake_parity import bad_corpus, differences, table
from tests.analysis.traces import cache_line, meta_line, write_lines

REPO = Path(__file__).resolve().parents[2]


def _parts(lake: Path) -> list[str]:
    return sorted(str(p.relative_to(lake)) for p in lake.rglob("*.parquet"))


def test_the_lake_gives_every_table_and_view_of_the_duckdb_file(tmp_path, sweep_trace, bus_trace):
    bad = bad_corpus(tmp_path / "bad.jsonl")
    files = [sweep_trace, bus_trace, bad]
    db, lake = tmp_path / "t.duckdb", tmp_path / "lake"
    ingest(files, db)
    summary = ingest_lake(files, lake)
    assert [f.status for f in summary.files] == ["ok", "ok", "partial"]
    with connect(db, read_only=True) as a, connect_lake(lake) as b:
        assert differences(a, b) == []
        # not vacuous: the views have rows and the bad lines are there with their reasons
        assert b.sql("SELECT count(*) AS n FROM recompiles")["n"][0] == 10
        reasons = b.sql("SELECT line, reason FROM rejected_lines ORDER BY line").rows()
    assert [line for line, _ in reasons] == [5, 6, 7, 8, 10, 11, 12, 15]
    assert reasons[0][1].startswith("position: Input should be a valid integer")
    assert reasons[-1][1].startswith("truncated last line 15")


def test_layout_one_set_of_parts_per_file_and_a_manifest_entry(tmp_path, bus_trace):
    lake = tmp_path / "lake"
    ingest_lake([bus_trace], lake)
    key = file_key(str(bus_trace))
    parts = _parts(lake)
    assert parts
    assert all(p.split("/")[1].startswith("run_date=") for p in parts)
    assert all(
        p.split("/")[2] == "run_id=bus-run" and p.split("/")[3].startswith(key) for p in parts
    )
    assert {p.split("/")[0] for p in parts} == {
        "runs",
        "span_start",
        "span_end",
        "hub",
        "memory",
        "device_memory",
    }
    [entry] = manifest_entries(lake)[key]
    size = bus_trace.stat().st_size
    assert (entry["file"], entry["status"], entry["size"], entry["offset_bytes"]) == (
        str(bus_trace),
        "ok",
        size,
        size,
    )
    assert entry["records"] == 30
    assert entry["rejected"] == 0
    assert entry["digest"].startswith("sha1:")
    assert sorted(entry["parts"]) == parts
    assert not list(lake.rglob("*.tmp"))  # every part was renamed into place
    # the stored columns: the record's fields with JSON as text, and the line
    import pyarrow.parquet as pq

    cache = next(p for p in parts if p.startswith("hub/"))
    names = pq.read_schema(lake / cache).names
    assert names == list(lake_columns("hub"))
    assert names[-1] == "line"


def test_reingest_of_unchanged_files_writes_nothing(tmp_path, sweep_trace, bus_trace):
    lake = tmp_path / "lake"
    ingest_lake([sweep_trace, bus_trace], lake)
    before = _parts(lake), sorted(os.listdir(lake / MANIFEST))
    again = ingest_lake([sweep_trace, bus_trace], lake)
    assert [f.status for f in again.files] == ["unchanged", "unchanged"]
    assert (_parts(lake), sorted(os.listdir(lake / MANIFEST))) == before


def test_a_grown_file_continues_with_the_same_rows_as_one_ingest(tmp_path, sweep_trace):
    data = sweep_trace.read_bytes()
    lines = data.splitlines(keepends=True)
    cut = len(lines) // 2
    growing = tmp_path / "growing.jsonl"
    # the first half and half of the next line: a writer mid-line
    growing.write_bytes(b"".join(lines[:cut]) + lines[cut][:10])
    lake = tmp_path / "lake"
    first = ingest_lake([growing], lake).files[0]
    assert (first.status, first.rejected) == ("partial", 1)
    growing.write_bytes(data)
    second = ingest_lake([growing], lake).files[0]
    assert (second.status, second.continued, second.rejected) == ("ok", True, 0)
    assert first.records + second.records == len(lines)  # every line is a record
    whole = tmp_path / "whole.duckdb"
    ingest([growing], whole)
    with connect(whole, read_only=True) as a, connect_lake(lake) as b:
        # the cache order columns and memory sums span both parts; the truncated line's
        # rejection is gone once the line is complete
        assert differences(a, b) == []
        assert b.sql("SELECT count(*) AS n FROM rejected_lines")["n"][0] == 0
        assert b.sql("SELECT offset_bytes, lines, records FROM ingested_files").rows() == [
            (len(data), len(lines), len(lines))
        ]


def test_a_replaced_file_replaces_its_rows(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", [meta_line("r1"), cache_line(1, "miss")])
    lake = tmp_path / "lake"
    ingest_lake([path], lake)
    old = _parts(lake)
    write_lines(path, [meta_line("r2"), cache_line(1, "miss"), cache_line(2, "hit")])
    r = ingest_lake([path], lake).files[0]
    assert (r.status, r.replaced, r.records) == ("ok", True, 3)
    assert not set(old) & set(_parts(lake))
    with connect_lake(lake) as b:
        assert b.sql("SELECT run_id FROM runs").rows() == [("r2",)]
        assert b.sql("SELECT count(*) AS n FROM cache")["n"][0] == 2
    assert len(os.listdir(lake / MANIFEST)) == 1


def test_a_run_in_the_lake_from_another_file_is_refused(tmp_path):
    a = write_lines(tmp_path / "a.jsonl", [meta_line("same"), cache_line(1, "miss")])
    b = write_lines(tmp_path / "b.jsonl", [meta_line("same"), cache_line(1, "miss")])
    lake = tmp_path / "lake"
    results = ingest_lake([a, b], lake).files
    assert [r.status for r in results] == ["ok", "refused"]
    assert results[1].message.startswith(f"run same is already in the lake from {a}")
    with connect_lake(lake) as con:
        assert sorted(con.sql("SELECT file, status FROM ingested_files").rows()) == [
            (str(a), "ok"),
            (str(b), "refused"),
        ]


def test_a_file_claimed_by_a_live_ingester_is_skipped_and_a_dead_ones_claim_taken(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", [meta_line("r1"), cache_line(1, "miss")])
    lake = tmp_path / "lake"
    (lake / CLAIMS).mkdir(parents=True)
    claim = lake / CLAIMS / f"{file_key(str(path))}.claim"
    import socket
    import time

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        claim.write_text(
            json.dumps({"host": socket.gethostname(), "pid": live.pid, "at": time.time()})
        )
        r = ingest_lake([path], lake).files[0]
        assert (r.status, r.message) == ("busy", "another ingester is writing this file now")
        assert _parts(lake) == []
    finally:
        live.kill()
        live.wait()
    # the holder died without removing its claim: the next ingester takes it over
    r = ingest_lake([path], lake).files[0]
    assert (r.status, r.records) == ("ok", 2)
    assert not claim.exists()


def test_cli_ingest_lake_then_query_and_report_on_it(tmp_path, sweep_trace, con, views_db):
    lake = tmp_path / "lake"
    ember = [sys.executable, "-m", "ember.cli.main"]
    run = subprocess.run(
        [*ember, "ingest", str(sweep_trace), "--lake", str(lake)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    n = len(sweep_trace.read_bytes().splitlines())
    assert f"1 file(s), {n} records, 0 rejected, 0 refused" in run.stdout
    q = subprocess.run(
        [
            *ember,
            "query",
            "--db",
            str(lake),
            "--format",
            "csv",
            "SELECT count(*) AS n FROM recompiles WHERE run_id = 'sweep'",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert q.returncode == 0, q.stderr
    want = con.sql("SELECT count(*) AS n FROM recompiles WHERE run_id = 'sweep'")["n"][0]
    assert want > 0
    assert q.stdout.split() == ["n", str(want)]
    # the report over the lake is the report over the DuckDB file, word for word
    reports = [
        subprocess.run(
            [*ember, "report", "--db", str(db), "--run", "sweep"],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=120,
            env={**os.environ, "COLUMNS": "100"},
        )
        for db in (lake, views_db)
    ]
    assert [r.returncode for r in reports] == [0, 0], reports[0].stderr
    assert "6 calls" in reports[0].stdout
    assert reports[0].stdout == reports[1].stdout


def test_the_dashboard_reads_a_lake_and_only_the_lake(tmp_path, bus_trace):
    from ember.dashboard.db import db_version, open_readonly

    lake = tmp_path / "lake"
    ingest_lake([bus_trace], lake)
    with connect_lake(lake) as direct:
        want = table(direct, "peak_memory")
    with open_readonly(db_version(lake), wait_s=1.0) as con:
        got = con.execute("SELECT count(*) FROM peak_memory").fetchall()[0][0]
        assert got == len(want[1]) > 0
        with pytest.raises(Exception, match="Permission"):
            con.execute(f"SELECT * FROM read_json('{bus_trace}')").fetchall()
