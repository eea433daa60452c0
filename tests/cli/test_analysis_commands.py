"""`ember ingest|query|report|export|import` (and the Python API beside them), on recorded
traces."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from ember.analysis import connect
from ember.analysis.candle import CANDLE_SCHEMA
from ember.cli.main import app
from ember.schemas import validate_file
from tests.analysis.traces import DATA, cache_line, checked_in, meta_line, write_lines

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_ingest_prints_a_summary_and_is_idempotent(tmp_path, sweep_trace, bus_trace):
    db = tmp_path / "e.duckdb"
    result = runner.invoke(app, ["ingest", str(sweep_trace), str(bus_trace), "--db", str(db)])
    assert result.exit_code == 0, result.output
    out = _flat(result.output)
    assert "2 file(s)," in out
    assert "0 rejected, 0 refused" in out
    assert "records/s" in out
    # the time as a duration with its unit (analysis/format.py), not "0.05 s"
    assert re.search(r"0 refused, \d+(\.\d)? (ms|s|µs), [\d,]+ records/s", out), out
    again = runner.invoke(app, ["ingest", str(sweep_trace), "--db", str(db)])
    assert "unchanged (already ingested)" in _flat(again.output)
    assert "1 file(s), 0 records" in _flat(again.output)


def test_ingest_of_a_refused_file_exits_1_with_the_reason(tmp_path):
    bad = write_lines(tmp_path / "new.jsonl", [meta_line(schema="ember.trace/7")])
    result = runner.invoke(app, ["ingest", str(bad), "--db", str(tmp_path / "e.duckdb")])
    assert result.exit_code == 1
    assert "refused: the trace is ember.trace/7" in _flat(result.output)


def test_ingest_of_a_missing_path_says_so(tmp_path):
    result = runner.invoke(app, ["ingest", str(tmp_path / "nope"), "--db", str(tmp_path / "x")])
    assert result.exit_code == 1
    assert "no such file or folder" in _flat(result.output)


def test_query_formats(views_db, tmp_path):
    sql = "SELECT compile_index, reason FROM recompiles WHERE run_id = 'sweep' AND position = 0 "
    sql += "ORDER BY compile_index LIMIT 1"
    table = runner.invoke(app, ["query", sql, "--db", str(views_db)])
    assert table.exit_code == 0, table.output
    assert "input_ids dim 1: 17 -> 23" in _flat(table.output)
    csv = runner.invoke(app, ["query", sql, "--db", str(views_db), "--format", "csv"])
    assert csv.output.splitlines() == ["compile_index,reason", "2,input_ids dim 1: 17 -> 23"]
    js = runner.invoke(app, ["query", sql, "--db", str(views_db), "-f", "json"])
    assert json.loads(js.output) == [{"compile_index": 2, "reason": "input_ids dim 1: 17 -> 23"}]
    out = tmp_path / "r.parquet"
    pq = runner.invoke(app, ["query", sql, "--db", str(views_db), "-f", "parquet", "-o", str(out)])
    assert pq.exit_code == 0, pq.output
    assert pl.read_parquet(out)["reason"].to_list() == ["input_ids dim 1: 17 -> 23"]
    # nested values become JSON text in CSV
    nested = runner.invoke(
        app, ["query", "SELECT [1, 2] AS l", "--db", str(views_db), "--format", "csv"]
    )
    assert nested.output.splitlines() == ["l", '"[1, 2]"']
    many = runner.invoke(
        app, ["query", "SELECT * FROM range(500)", "--db", str(views_db), "--max-rows", "3"]
    )
    assert "500 row(s), showing 3" in _flat(many.output)


def test_query_is_read_only_and_errors_are_clear(views_db):
    write = runner.invoke(app, ["query", "DELETE FROM runs", "--db", str(views_db)])
    assert write.exit_code == 1
    assert "read-only" in _flat(write.output)
    typo = runner.invoke(app, ["query", "SELECT * FROM recompile", "--db", str(views_db)])
    assert typo.exit_code == 1
    assert "recompiles" in typo.output  # the tables and views are listed


def test_report_runs_and_names_a_run_that_is_not_there(views_db):
    # what the report says of a run is tested in test_report.py (its CLI too); here: it
    # runs on the database the other commands read, and a run it lacks is an error
    result = runner.invoke(
        app, ["report", "--db", str(views_db), "--run", "sweep"], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("token_filter  sweep  infer  cpu")
    missing = runner.invoke(app, ["report", "--db", str(views_db), "--run", "nope"])
    assert missing.exit_code == 1
    assert "no run 'nope'" in _flat(missing.output)


def test_python_api_returns_polars(views_db):
    with connect(views_db, read_only=True) as con:
        df = con.sql(
            "SELECT cache_size, compiles FROM cache_what_if WHERE run_id = ? "
            "AND position = 0 ORDER BY cache_size",
            ["sweep"],
        )
    assert isinstance(df, pl.DataFrame)
    assert df.rows() == [(1, 5), (2, 5), (3, 3)]


def test_chrome_export_has_spans_counters_and_instants(views_db, tmp_path):
    out = tmp_path / "trace.json"
    r = runner.invoke(
        app, ["export", "--db", str(views_db), "--chrome", str(out), "--run", "bus-run"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["cat"] for e in spans} >= {"hub_download", "hub_info", "load", "step", "call", "jit"}
    failed = next(e for e in spans if e["cat"] == "call")
    assert failed["args"]["status"] == "error"
    assert "expected int64" in failed["args"]["error"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    counters = [e for e in events if e["ph"] == "C"]
    assert {"cpu:0 tensor bytes", "cpu:0 used bytes", "cpu:0 rss bytes"} <= {
        e["name"] for e in counters
    }
    peak = max(e["args"]["activation"] for e in counters if "activation" in e["args"])
    assert peak == 3000
    assert doc["otherData"]["run_id"] == "bus-run"
    sweep = tmp_path / "sweep.json"
    runner.invoke(app, ["export", "--db", str(views_db), "--chrome", str(sweep), "--run", "sweep"])
    instants = [e for e in json.loads(sweep.read_text())["traceEvents"] if e["ph"] == "i"]
    assert sum(e["name"] == "cache evict @0" for e in instants) == 3
    bad = runner.invoke(app, ["export", "--db", str(views_db), "--chrome", str(out), "--run", "x"])
    assert bad.exit_code == 1
    assert "no run 'x'" in _flat(bad.output)


def test_parquet_export_is_partitioned_and_readable_by_other_engines(views_db, tmp_path):
    out = tmp_path / "pq"
    r = runner.invoke(app, ["export", "--db", str(views_db), "--parquet", str(out)])
    assert r.exit_code == 0, r.output
    parts = sorted(
        p.relative_to(out / "cache").parts[:2] for p in (out / "cache").rglob("*.parquet")
    )
    assert parts
    assert all(a.startswith("run_date=") and b.startswith("run_key=") for a, b in parts)
    # polars and a fresh DuckDB read it back with the partition columns
    df = pl.read_parquet(out / "recompiles" / "**" / "*.parquet", hive_partitioning=True)
    assert set(df.filter(pl.col("run_id") == "sweep")["compile_index"].to_list()) >= {2, 3, 4, 5}
    n = duckdb.sql(
        f"SELECT count(*) FROM read_parquet('{out}/cache/**/*.parquet', hive_partitioning = true)"
        " WHERE run_id = 'sweep'"
    ).fetchall()[0][0]
    with connect(views_db, read_only=True) as con:
        assert n == con.sql("SELECT count(*) AS n FROM cache WHERE run_id = 'sweep'")["n"][0]


# a trace in candle-graph's own format, one record of each kind (tests/data/candle/README.md)
CANDLE_TRACE = "candle/train.jsonl"
CANDLE = [json.loads(line) for line in (DATA / CANDLE_TRACE).read_text().splitlines()]


def test_candle_import_then_ingest(tmp_path):
    assert CANDLE[0]["schema"] == CANDLE_SCHEMA  # the sample is of the version the importer reads
    src = checked_in(CANDLE_TRACE, tmp_path)
    out = tmp_path / "ember.jsonl"
    r = runner.invoke(app, ["import", "candle", str(src), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "9 records" in _flat(r.output)
    db = tmp_path / "c.duckdb"
    res = runner.invoke(app, ["ingest", str(out), "--db", str(db)])
    assert res.exit_code == 0
    assert "0 rejected" in _flat(res.output)
    with connect(db, read_only=True) as con:
        span = con.sql("SELECT name, span_kind, start_ns, end_ns, duration_ns FROM spans")
        assert span.rows() == [("forward", "op", 100, 180, 80)]
        assert con.sql(
            "SELECT phase, json_extract_string(tags, '$.profile') p FROM runs"
        ).rows() == [("train", "release")]
        assert con.sql("SELECT op_name, ts_ns, span_id FROM op").rows() == [("matmul", 120, 1)]
        mem = con.sql("SELECT series, bytes FROM memory_timeline ORDER BY series").rows()
        assert mem == [("tensors", 24), ("used", 1000)]


def test_candle_import_straight_into_a_database(tmp_path):
    src = checked_in(CANDLE_TRACE, tmp_path)
    db = tmp_path / "c.duckdb"
    r = runner.invoke(app, ["import", "candle", str(src), "--db", str(db)])
    assert r.exit_code == 0, r.output
    out = _flat(r.output)
    trace = tmp_path / "train.ember.jsonl"  # the Ember trace is kept: ingest is per file
    assert f"{trace}: 9 records" in out
    assert "9 records, 0 rejected" in out
    with connect(db, read_only=True) as con:
        (run_id,) = con.sql("SELECT run_id FROM runs").rows()[0]
        assert con.sql("SELECT count(*) FROM spans").rows() == [(1,)]
        assert con.sql("SELECT file FROM ingested_files").rows() == [(str(trace),)]
    assert f"ember report --db {db} --run {run_id[:8]}" in out
    # again, with --out: the same file is unchanged, nothing is counted twice
    again = runner.invoke(app, ["import", "candle", str(src), "--out", str(trace), "--db", str(db)])
    assert again.exit_code == 0
    assert "unchanged (already ingested)" in _flat(again.output)
    with connect(db, read_only=True) as con:
        assert con.sql("SELECT count(*) FROM op").rows() == [(1,)]


def test_candle_import_errors_name_the_line(tmp_path):
    bad = [CANDLE[0], {"kind": "op", "span_id": "s1", "op_name": "x"}]
    src = write_lines(tmp_path / "c.jsonl", [json.dumps(r) for r in bad])
    r = runner.invoke(app, ["import", "candle", str(src)])
    assert r.exit_code == 1
    assert f"{src}:2:" in _flat(r.output)
    assert "dtype: missing required field" in _flat(r.output)
    wrong = write_lines(tmp_path / "w.jsonl", [meta_line()])
    r2 = runner.invoke(app, ["import", "candle", str(wrong)])
    assert r2.exit_code == 1
    assert "this importer reads 'candle-graph/trace/6'" in _flat(r2.output)


def test_a_trace_written_by_hand_without_final_newline_is_complete(tmp_path):
    path = write_lines(
        tmp_path / "h.jsonl", [meta_line(), cache_line(1, "miss")], newline_at_end=False
    )
    result = runner.invoke(app, ["ingest", str(path), "--db", str(tmp_path / "h.duckdb")])
    assert "2 records, 0 rejected" in _flat(result.output)
    assert Path(path).read_bytes()[-1:] == b"}"


def test_ingest_lines_never_leave_a_number_apart_from_its_word(tmp_path):
    # `make demo` at 80 columns printed ".../growing-sequence.jsonl: 201 records, 0" and
    # "rejected" on the next line: rich wrapped at any space
    folder = tmp_path / "a-folder-name-long-enough-to-wrap"
    folder.mkdir()
    trace = write_lines(folder / "growing-sequence.jsonl", [meta_line("r"), cache_line(1)])
    for columns in range(40, 121, 7):
        db = tmp_path / f"e{columns}.duckdb"
        result = runner.invoke(
            app, ["ingest", str(trace), "--db", str(db)], env={"COLUMNS": str(columns)}
        )
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        apart = r"\d\n\s*(records|rejected|refused|file|ms|s|µs)\b"
        assert not re.search(apart, "\n".join(lines)), (columns, lines)
        assert all(len(line) <= columns for line in lines if " " in line.strip()), lines
        assert "2 records, 0 rejected" in _flat(result.output)


def _nested_op(depth: int) -> str:
    op = json.dumps(CANDLE[2])
    return op[:-1] + ', "extra": ' + "[" * depth + "]" * depth + "}"


CANDLE_BAD = {
    "a string for pid": ("meta", {"pid": "12ab"}),
    "a float for wall_time_ns": ("meta", {"wall_time_ns": 1.5e18}),
    "a string for duration_ns": ("end", {"duration_ns": "80"}),
    "a null duration": ("end", {"duration_ns": None}),
    "a fraction for duration_ns": ("end", {"duration_ns": 80.7}),
    "a list as id": ("start", {"id": ["s", 1]}),
    "a fraction for storage_bytes": ("op", {"storage_bytes": 24.9}),
    "a fraction for a timestamp": ("op", {"timestamp_ns": 120.5}),
}


@pytest.mark.parametrize("case", sorted(CANDLE_BAD))
def test_candle_import_bad_values_are_errors_naming_the_line_never_tracebacks(tmp_path, case):
    # before: non-numeric wall_time_ns/pid/duration_ns, a null duration and a list as id
    # gave tracebacks; 80.7 went in as 80 (truncated silently)
    where, change = CANDLE_BAD[case]
    records = [dict(r) for r in CANDLE]
    index = {"meta": 0, "start": 1, "op": 2, "end": len(CANDLE) - 1}[where]
    records[index] |= change
    src = write_lines(tmp_path / "c.jsonl", [json.dumps(r) for r in records])
    r = runner.invoke(app, ["import", "candle", str(src)])
    out = _flat(r.output)
    assert r.exit_code == 1, out
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in out
    assert f"{src}:{index + 1}: {next(iter(change))}" in out, out
    if where != "meta":  # the rest is kept (a span_end whose start went goes too)
        ember = tmp_path / "c.ember.jsonl"
        kept = [json.loads(x) for x in ember.read_text().splitlines()]
        assert kept[0]["kind"] == "meta"
        assert 6 <= len(kept) < len(CANDLE)
        assert validate_file(ember).ok


def test_candle_import_a_line_nested_5000_deep_is_left_out_and_the_rest_kept(tmp_path):
    # before: RecursionError (the depth limit of ingest did not reach the importer)
    lines = [json.dumps(r) for r in CANDLE]
    lines.insert(3, _nested_op(5000))
    src = write_lines(tmp_path / "deep.jsonl", lines)
    db = tmp_path / "d.duckdb"
    r = runner.invoke(app, ["import", "candle", str(src), "--db", str(db)])
    out = _flat(r.output)
    assert r.exit_code == 1, out
    assert f"{src}:4: nested deeper than" in out
    assert "9 records" in out
    assert "1 line(s) left out" in out
    with connect(db, read_only=True) as con:
        assert con.sql("SELECT count(*) FROM op").rows() == [(1,)]


def test_query_csv_neutralises_spreadsheet_formulas_and_keeps_numbers(views_db):
    sql = (
        "SELECT * FROM (VALUES ('=HYPERLINK(1)', -3), ('+1', 2), ('-x', 1), ('@s', 0), "
        "(chr(9) || 't', 5), ('ok', -1)) AS t(cell, n)"
    )
    r = runner.invoke(app, ["query", sql, "--db", str(views_db), "--format", "csv"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [
        "cell,n",
        "'=HYPERLINK(1),-3",
        "'+1,2",
        "'-x,1",
        "'@s,0",
        "'\tt,5",
        "ok,-1",
    ]
