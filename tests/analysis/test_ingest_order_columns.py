"""Columns ingest computes for the views (cache order, memory running sums, key text).

They must give the views the values the views computed themselves before: whether a
file is ingested at once or in pieces as it grows, in a database made before the columns
existed (``connect`` adds and fills them), and in a lake (computed when it is read). All
three read the one definition of the columns in ``ember.analysis.derived``.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from ember.analysis import connect, ingest
from ember.analysis.db import CACHE_ORDER_COLUMNS, DERIVED_COLUMNS, MEMORY_RUNNING_COLUMNS
from ember.analysis.lake import connect_lake, ingest_lake
from ember.analysis.synthetic import write_trace

# the views that read the computed columns, each as one ordered list of rows
VIEWS = (
    "cache_lookups",
    "cache_events",
    "compiles",
    "recompiles",
    "evictions",
    "cache_thrash",
    "cache_what_if",
    "compile_payback",
    "memory_timeline",
    "peak_memory",
)


def _views(db: Path) -> dict[str, list[tuple]]:
    with connect(db, read_only=True) as con:
        return {v: con.duck.execute(f"SELECT * FROM {v} ORDER BY ALL").fetchall() for v in VIEWS}


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # small cache and many lengths: misses, evictions and re-compiles at both positions
    path = tmp_path_factory.mktemp("order") / "run.jsonl"
    write_trace(path, 4_000, run_id="order", seed=7, cache_size=2, lengths=6)
    return path


@pytest.fixture(scope="module")
def whole(trace: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple]]:
    db = tmp_path_factory.mktemp("whole") / "whole.duckdb"
    ingest([trace], db)
    return _views(db)


def test_the_trace_exercises_every_view(whole):
    for view in ("cache_lookups", "recompiles", "evictions", "cache_thrash", "peak_memory"):
        assert whole[view], view
    # some keys come back after an eviction: the after_eviction path is covered
    assert any(row[13] for row in whole["recompiles"])


def test_a_file_ingested_in_pieces_gives_the_same_views(trace, whole, tmp_path):
    lines = trace.read_bytes().splitlines(keepends=True)
    grown = tmp_path / "run.jsonl"
    db = tmp_path / "pieces.duckdb"
    # three ingests of a growing file, cut in the middle of calls
    cuts = [len(lines) // 3 + 1, 2 * len(lines) // 3 + 2, len(lines)]
    start = 0
    for cut in cuts:
        with grown.open("ab") as f:
            f.writelines(lines[start:cut])
        start = cut
        summary = ingest([grown], db)
        assert summary.rejected == 0
    pieces = _views(db)
    for view in VIEWS:
        assert pieces[view] == whole[view], view


def test_a_database_without_the_columns_gets_them_filled(trace, whole, tmp_path):
    db = tmp_path / "old.duckdb"
    ingest([trace], db)
    con = duckdb.connect(str(db))
    # what an older Ember left: no computed columns, views of another version
    for col in [*DERIVED_COLUMNS["cache"], *CACHE_ORDER_COLUMNS]:
        con.execute(f'ALTER TABLE cache DROP COLUMN "{col}"')
    for col in MEMORY_RUNNING_COLUMNS:
        con.execute(f'ALTER TABLE memory DROP COLUMN "{col}"')
    con.execute("UPDATE ember_schema SET hash = 'older'")
    con.close()

    connect(db).close()

    with connect(db, read_only=True) as con:
        nulls = con.duck.execute(
            "SELECT count(*) FILTER (WHERE ord IS NULL OR life IS NULL OR shapes_text IS NULL)"
            " FROM cache"
        ).fetchall()
        assert nulls == [(0,)]
    assert _views(db) == whole


def test_a_lake_computes_the_same_columns_when_read(trace, whole, tmp_path):
    lake = tmp_path / "lake"
    ingest_lake([trace], lake)
    with connect_lake(lake) as con:
        views = {v: con.duck.execute(f"SELECT * FROM {v} ORDER BY ALL").fetchall() for v in VIEWS}
    for view in VIEWS:
        assert views[view] == whole[view], view
