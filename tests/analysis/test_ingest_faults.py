"""Ingest under faults: a file that grows while it is read, a killed ingest, duplicate ids."""

from __future__ import annotations

import fcntl
import importlib
import os
import subprocess
import sys
import tempfile
import time

from ember.analysis import ingest
from ember.analysis.synthetic import write_trace
from tests.analysis.databases import query_rows
from tests.analysis.traces import cache_line, meta_line, span_line, write_lines

# the modules: ``_count_lines`` plans, ``_cleaned`` guards the read path's work folders
plan_module = importlib.import_module("ember.analysis.ingest.plan")
read_module = importlib.import_module("ember.analysis.ingest.read")


def test_a_file_that_grows_while_it_is_read_is_read_up_to_its_recorded_offset(
    tmp_path, monkeypatch
):
    # a recorder appends right after ingest looked at the file's size (here: once ingest
    # found where its complete lines end), before DuckDB reads it. DuckDB read the appended
    # lines too while offset_bytes kept the old end, so the next ingest stored them a second
    # time.
    path = write_lines(
        tmp_path / "live.jsonl", [meta_line(), *(cache_line(i, "hit") for i in range(1, 6))]
    )
    appended = [cache_line(i, "hit") for i in range(100, 104)]
    end_of_lines = plan_module._end_of_complete_lines

    def find_end_then_append(*args):
        found = end_of_lines(*args)
        if appended:
            with path.open("a") as f:
                f.write("".join(line + "\n" for line in appended))
            appended.clear()
        return found

    monkeypatch.setattr(plan_module, "_end_of_complete_lines", find_end_then_append)
    db = tmp_path / "t.duckdb"
    first = ingest([path], db).files[0]
    assert (first.status, first.records, first.rejected) == ("ok", 6, 0)
    assert query_rows(db, "SELECT offset_bytes, lines, records FROM ingested_files") == [
        (first.bytes_read, 6, 6)
    ]
    second = ingest([path], db).files[0]
    assert (second.continued, second.records) == (True, 4)
    lines = len(path.read_text().splitlines())
    assert query_rows(db, "SELECT lines, records FROM ingested_files") == [(lines, lines)]
    ts = [t for (t,) in query_rows(db, "SELECT ts_ns FROM cache ORDER BY ts_ns")]
    assert ts == [1, 2, 3, 4, 5, 100, 101, 102, 103]


# ---------------------------------------------------------------- a killed ingest

SLOW_INGEST = """
import sys
from ember.analysis import ingest
ingest([sys.argv[1]], sys.argv[2])
"""


def test_the_work_folder_of_a_killed_ingest_is_removed_by_the_next_ingest(tmp_path, monkeypatch):
    # ingest copies the lines it checked into a work folder (one file per record kind, or
    # the valid lines of a range); kill -9 runs no cleanup and left that copy behind for good
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    trace = tmp_path / "slow.jsonl"
    write_trace(trace, 300_000, run_id="slow")
    with trace.open("ab") as f:
        f.write(b"not json\n")
    db = tmp_path / "t.duckdb"
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_INGEST, str(trace), str(db)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not any(p.stat().st_size for p in tmp.glob("ember-ingest-*/*.jsonl")):
            assert proc.poll() is None, "the ingest ended before its work folder was seen"
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait(timeout=60)
    [left] = list(tmp.glob("ember-ingest-*"))
    assert any(p.stat().st_size > 0 for p in left.glob("*.jsonl"))
    old = time.time() - 60
    os.utime(left, (old, old))  # killed a minute ago
    # a folder in use by a live ingest (its lock held) stays
    busy = tmp / "ember-ingest-busy"
    busy.mkdir()
    os.utime(busy, (old, old))
    with (busy / ".in-use").open("w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        monkeypatch.setattr(read_module, "_cleaned", False, raising=False)
        small = write_lines(tmp_path / "small.jsonl", [meta_line("small"), cache_line(1, "miss")])
        assert ingest([small], tmp_path / "other.duckdb").files[0].records == 2
        assert not left.exists()
        assert busy.exists()
    assert sorted(p.name for p in tmp.iterdir()) == ["ember-ingest-busy"]


# ---------------------------------------------------------------- duplicate span ids


def test_duplicate_span_ids_from_concatenated_traces_are_rejected(tmp_path):
    body = [
        span_line("span_start", 1, 10),
        span_line("span_end", 1, 11),
        span_line("span_start", 2, 12),
    ]
    body += [span_line("span_end", 2, 13)]
    path = write_lines(tmp_path / "cat.jsonl", [meta_line(), *body, *body])
    db = tmp_path / "t.duckdb"
    r = ingest([path], db).files[0]
    assert (r.records, r.rejected, r.slow_path) == (5, 4, False)
    assert query_rows(db, "SELECT line, reason FROM rejected_lines ORDER BY line") == [
        (
            6,
            "a second span_start of span_id 1 (span ids are unique in a run; were two "
            "traces concatenated?)",
        ),
        (
            7,
            "a second span_end of span_id 1 (span ids are unique in a run; were two "
            "traces concatenated?)",
        ),
        (
            8,
            "a second span_start of span_id 2 (span ids are unique in a run; were two "
            "traces concatenated?)",
        ),
        (
            9,
            "a second span_end of span_id 2 (span ids are unique in a run; were two "
            "traces concatenated?)",
        ),
    ]
    assert query_rows(db, "SELECT span_id, duration_ns FROM spans ORDER BY 1") == [(1, 1), (2, 1)]
    # and when the copy is appended to a file already ingested: its starts are seen as
    # duplicates of the stored ones, and its ends, whose starts are rejected, too
    grown = write_lines(tmp_path / "grown.jsonl", [meta_line("g"), *body])
    ingest([grown], db)
    with grown.open("a") as f:
        f.write("\n".join(body) + "\n")
    again = ingest([grown], db).files[0]
    assert (again.continued, again.records, again.rejected) == (True, 0, 4)
