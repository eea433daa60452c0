"""Ingest under faults: a file that grows while it is read, a killed ingest, duplicate ids."""

from __future__ import annotations

import importlib
from pathlib import Path

from traces import cache_line, meta_line, write_lines

from ember.analysis import connect, ingest

# the module (``ember.analysis.ingest`` the attribute is the function)
ingest_module = importlib.import_module("ember.analysis.ingest")


def _rows(db: Path, sql: str) -> list[tuple]:
    with connect(db, read_only=True) as con:
        return con.duck.execute(sql).fetchall()


def test_a_file_that_grows_while_it_is_read_is_read_up_to_its_recorded_offset(
    tmp_path, monkeypatch
):
    # a recorder appends right after ingest looked at the file's size (here: while ingest
    # counts its lines), before DuckDB reads it. DuckDB read the appended lines too while
    # offset_bytes kept the old end, so the next ingest stored them a second time.
    path = write_lines(
        tmp_path / "live.jsonl", [meta_line(), *(cache_line(i, "hit") for i in range(1, 6))]
    )
    appended = [cache_line(i, "hit") for i in range(100, 104)]
    count_lines = ingest_module._count_lines

    def count_then_append(*args):
        n = count_lines(*args)
        if appended:
            with path.open("a") as f:
                f.write("".join(line + "\n" for line in appended))
            appended.clear()
        return n

    monkeypatch.setattr(ingest_module, "_count_lines", count_then_append)
    db = tmp_path / "t.duckdb"
    first = ingest([path], db).files[0]
    assert (first.status, first.records, first.rejected) == ("ok", 6, 0)
    assert _rows(db, "SELECT offset_bytes, lines, records FROM ingested_files") == [
        (first.bytes_read, 6, 6)
    ]
    second = ingest([path], db).files[0]
    assert (second.continued, second.records) == (True, 4)
    lines = len(path.read_text().splitlines())
    assert _rows(db, "SELECT lines, records FROM ingested_files") == [(lines, lines)]
    ts = [t for (t,) in _rows(db, "SELECT ts_ns FROM cache ORDER BY ts_ns")]
    assert ts == [1, 2, 3, 4, 5, 100, 101, 102, 103]
