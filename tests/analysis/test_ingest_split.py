"""The split read (``ingest.kinds``: lines checked in Python, each kind read with its own
table types) stores what the ``_stage`` read (``ingest.read``) stores: every table, row for
row and in each file's order, the rejected lines and the files' results, on traces of every
shape and on bad ones (a multi-file batch: each line carries its file's number there)."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

from ember.analysis import connect, ingest
from ember.analysis.db import RECORD_TABLES
from ember.analysis.synthetic import write_compile_trace, write_memory_trace, write_trace
from tests.analysis.lake_parity import VOLATILE, bad_corpus, spans_and_depth_corpus

database = importlib.import_module("ember.analysis.ingest.database")
kinds = importlib.import_module("ember.analysis.ingest.kinds")


def _tables(db) -> dict[str, list[tuple]]:
    out = {}
    with connect(db, read_only=True) as con:
        for t in (*RECORD_TABLES, "runs", "rejected_lines", "ingested_files"):
            drop = [c for c in VOLATILE.get(t, []) if c != "file"]
            exclude = f" EXCLUDE ({', '.join(drop)})" if drop else ""
            # in file order within each file (the _stage read stages small files first)
            order = "file" if t == "ingested_files" else "run_id, rowid"
            out[t] = con.sql(f"SELECT *{exclude} FROM {t} ORDER BY {order}").rows()
    return out


def _results(summary) -> list[tuple]:
    return [
        dataclasses.astuple(dataclasses.replace(f, seconds=0.0, slow_path=False))
        for f in summary.files
    ]


def write_shapes(traces: Path, records: int) -> None:
    """Into the new folder ``traces``: a trace of each shape (``records`` each) and two bad
    ones."""
    traces.mkdir()
    write_compile_trace(traces / "compile.jsonl", records, run_id="compile", seed=1)
    write_memory_trace(traces / "memory.jsonl", records, run_id="memory", seed=1)
    write_trace(traces / "repetitive.jsonl", records, run_id="repetitive", seed=1)
    bad_corpus(traces / "bad.jsonl")
    spans_and_depth_corpus(traces / "spans.jsonl")


def assert_same_tables(a: Path, b: Path) -> None:
    """The databases ``a`` and ``b`` hold the same rows, table by table, in each file's order."""
    tables_a, tables_b = _tables(a), _tables(b)
    for name in tables_a:
        assert tables_a[name] == tables_b[name], name


def test_the_split_read_stores_what_the_stage_read_stores(tmp_path, monkeypatch):
    traces = tmp_path / "traces"
    write_shapes(traces, 3000)
    split_calls = []
    real = kinds.split_file
    monkeypatch.setattr(kinds, "split_file", lambda *a: split_calls.append(a) or real(*a))
    split = ingest([traces], tmp_path / "split.duckdb")
    assert len(split_calls) == 5  # not vacuous: every file took the split read
    monkeypatch.setattr(database, "splittable", lambda *a: False)
    staged = ingest([traces], tmp_path / "stage.duckdb")
    assert len(split_calls) == 5
    assert _results(split) == _results(staged)
    assert split.rejected > 5
    assert split.records > 9000
    assert_same_tables(tmp_path / "split.duckdb", tmp_path / "stage.duckdb")


def test_a_last_line_without_its_newline_is_counted_as_the_stage_read_counts_it(
    tmp_path, monkeypatch
):
    # the split read counts a file's lines as it checks them; a last line that is a whole
    # record without its newline is a line too (it was left out: ``lines`` one short)
    from tests.analysis.traces import cache_line, meta_line, write_lines

    path = write_lines(
        tmp_path / "t.jsonl",
        [meta_line(), *(cache_line(i, "hit") for i in range(1, 6))],
        newline_at_end=False,
    )
    split_calls = []
    real = kinds.split_file
    monkeypatch.setattr(kinds, "split_file", lambda *a: split_calls.append(a) or real(*a))
    split = ingest([path], tmp_path / "split.duckdb")
    assert len(split_calls) == 1
    monkeypatch.setattr(database, "splittable", lambda *a: False)
    staged = ingest([path], tmp_path / "stage.duckdb")
    assert (split.files[0].records, split.files[0].rejected) == (6, 0)
    with connect(tmp_path / "split.duckdb", read_only=True) as con:
        assert con.sql("SELECT lines, records FROM ingested_files").rows() == [(6, 6)]
    assert _results(split) == _results(staged)
    assert_same_tables(tmp_path / "split.duckdb", tmp_path / "stage.duckdb")
