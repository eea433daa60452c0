"""The trace lake (``ember ingest --lake``, Delta tables) on DuckDB: parity with the DuckDB file,
the layout, re-ingest, growth, replacement, copies, long run ids, the CLI, the dashboard, and
what is not a lake."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable

from ember.analysis import connect, ingest
from ember.analysis.lake import table as lake_table
from ember.analysis.lake.ingest import (
    INGESTS,
    LAKE_TABLES,
    LakeError,
    connect_lake,
    ingest_lake,
    ingested_files,
    lake_columns,
    run_key,
)
from tests.analysis.lake_parity import (
    _norm,
    bad_corpus,
    check_a_grown_file_rejects_a_second_stored_end,
    differences,
    table,
)
from tests.analysis.traces import cache_line, meta_line, write_lines

REPO = Path(__file__).resolve().parents[2]
EMBER = [sys.executable, "-m", "ember.cli.main"]


def _versions(lake: Path) -> dict[str, int]:
    return {t: DeltaTable(str(lake / t)).version() for t in (INGESTS, *LAKE_TABLES)}


def _cli(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*EMBER, *args], capture_output=True, text=True, cwd=REPO, timeout=180, **kw
    )


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


def test_polars_scan_delta_reads_every_table_with_the_rows_duckdb_reads(
    tmp_path, sweep_trace, bus_trace
):
    lake = tmp_path / "lake"
    ingest_lake([sweep_trace, bus_trace, bad_corpus(tmp_path / "bad.jsonl")], lake)
    with connect_lake(lake) as con:
        for name in LAKE_TABLES:
            cols = list(lake_columns(name))
            quoted = ", ".join(f'"{c}"' for c in cols)
            want = con.sql(f"SELECT {quoted} FROM _lake_{name}")
            got = pl.scan_delta(str(lake / name)).select(cols).collect()
            assert got.height == want.height > 0 or name in EMPTY, name
            assert _rows(got) == _rows(want), name
        assert con.sql("SELECT count(*) AS n FROM cache")["n"][0] > 0


EMPTY = {"op", "tensor", "gradient", "edge", "process"}  # kinds none of these traces records


def _rows(df: pl.DataFrame) -> list[str]:
    return sorted(repr(tuple(_norm(v) for v in r.values())) for r in df.to_dicts())


def test_layout_delta_tables_partitioned_by_date(tmp_path, bus_trace):
    lake = tmp_path / "lake"
    ingest_lake([bus_trace], lake)
    for name in (INGESTS, *LAKE_TABLES):
        assert DeltaTable.is_deltatable(str(lake / name)), name
    spans = DeltaTable(str(lake / "span_start"))
    assert spans.metadata().partition_columns == ["run_date"]
    files = [Path(u).relative_to(lake / "span_start") for u in spans.file_uris()]
    assert len(files) == 1
    assert len(files[0].parts) == 2
    assert files[0].parts[0].startswith("run_date=")
    # the Parquet holds the record's fields, line, run_id, the ingest id and the run key
    import pyarrow.parquet as pq

    hub = DeltaTable(str(lake / "hub")).file_uris()
    assert pq.read_schema(hub[0]).names == [*lake_columns("hub"), "run_key"]
    [row] = ingested_files(lake)
    size = bus_trace.stat().st_size
    assert (row["file"], row["status"], row["size"], row["offset_bytes"], row["seq"]) == (
        str(bus_trace),
        "ok",
        size,
        size,
        1,
    )
    assert (row["records"], row["rejected"]) == (30, 0)
    assert row["digest"].startswith("sha1:")
    # the file's identity is an application transaction of the _ingests commit
    assert DeltaTable(str(lake / INGESTS)).transaction_version(f"ember:{row['fid']}") == 1


def test_reingest_of_unchanged_files_and_copies_commits_nothing(tmp_path, sweep_trace, bus_trace):
    lake = tmp_path / "lake"
    ingest_lake([sweep_trace, bus_trace], lake)
    before = _versions(lake)
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(bus_trace.read_bytes())
    again = ingest_lake([sweep_trace, bus_trace, copy], lake)
    assert [f.status for f in again.files] == ["unchanged"] * 3
    assert again.files[2].message == f"already in the lake: the same content as {bus_trace}"
    assert _versions(lake) == before


def test_a_grown_file_continues_with_the_same_rows_as_one_ingest(tmp_path, sweep_trace, layout):
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
    assert [(r["seq"], r["start"]) for r in ingested_files(lake)][1] == (
        2,
        len(b"".join(lines[:cut])),
    )
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


def test_a_grown_file_rejects_a_second_end_of_a_span_whose_end_is_in_the_lake(tmp_path):
    check_a_grown_file_rejects_a_second_stored_end(tmp_path, ingest_lake)


def test_a_re_recorded_file_replaces_its_old_run_in_one_commit(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", [meta_line("r1"), cache_line(1, "miss")])
    lake = tmp_path / "lake"
    ingest_lake([path], lake)
    write_lines(path, [meta_line("r2"), cache_line(1, "miss"), cache_line(2, "hit")])
    r = ingest_lake([path], lake).files[0]
    assert (r.status, r.replaced, r.records) == ("ok", True, 3)
    with connect_lake(lake) as b:
        assert b.sql("SELECT run_id FROM runs").rows() == [("r2",)]
        assert b.sql("SELECT count(*) AS n FROM cache")["n"][0] == 2
        assert b.sql("SELECT file, run_id FROM ingested_files").rows() == [(str(path), "r2")]
    rows = ingested_files(lake)
    assert rows[1]["replaces"] == rows[0]["fid"]  # the old rows stay on disk, hidden
    # the old content again is another replacement, not a duplicate
    write_lines(path, [meta_line("r1"), cache_line(1, "miss")])
    assert ingest_lake([path], lake).files[0].status == "ok"
    with connect_lake(lake) as b:
        assert b.sql("SELECT run_id FROM runs").rows() == [("r1",)]


def test_a_replacement_is_decided_by_what_its_ingest_saw_not_by_clocks(tmp_path, monkeypatch):
    # machines' clocks differ: the ingest that replaces a file may carry an earlier
    # ingested_at than the one it replaces; it still hides exactly what its snapshot held
    from datetime import timedelta

    from ember.analysis.lake import commit as lake_commit

    real = lake_commit._now
    path = write_lines(tmp_path / "t.jsonl", [meta_line("r1"), cache_line(1, "miss")])
    lake = tmp_path / "lake"
    ingest_lake([path], lake)
    for run, skew in (("r2", -1), ("r1", +2), ("r3", -3)):  # days off the first's clock
        monkeypatch.setattr(lake_commit, "_now", lambda s=skew: real() + timedelta(days=s))
        write_lines(path, [meta_line(run), cache_line(1, "miss"), cache_line(2, "hit")])
        r = ingest_lake([path], lake).files[0]
        assert (r.status, r.replaced) == ("ok", True), r.message
        with connect_lake(lake) as b:
            assert b.sql("SELECT run_id FROM runs").rows() == [(run,)]
            assert b.sql("SELECT count(*) AS n FROM cache")["n"][0] == 2
            assert b.sql("SELECT file, run_id FROM ingested_files").rows() == [(str(path), run)]
        assert ingest_lake([path], lake).files[0].status == "unchanged"


def test_an_ingests_table_made_before_hides_gets_the_column_and_replaces_by_time(tmp_path):
    from deltalake import write_deltalake

    path = write_lines(tmp_path / "t.jsonl", [meta_line("r1"), cache_line(1, "miss")])
    lake = tmp_path / "lake"
    ingest_lake([path], lake)
    old = DeltaTable(str(lake / INGESTS)).to_pyarrow_table().drop_columns(["hides"])
    shutil.rmtree(lake / INGESTS)
    write_deltalake(str(lake / INGESTS), old)  # as written before 2026-12-02
    assert [r["run_id"] for r in ingested_files(lake)] == ["r1"]
    write_lines(path, [meta_line("r2"), cache_line(1, "miss"), cache_line(2, "hit")])
    r = ingest_lake([path], lake).files[0]
    assert (r.status, r.replaced) == ("ok", True)
    assert "hides" in DeltaTable(str(lake / INGESTS)).schema().to_arrow().names
    with connect_lake(lake) as b:
        assert b.sql("SELECT run_id FROM runs").rows() == [("r2",)]
    assert ingest_lake([path], lake).files[0].status == "unchanged"


def test_a_rewritten_shorter_file_with_the_same_first_line_is_refused(tmp_path):
    path = write_lines(
        tmp_path / "t.jsonl", [meta_line("r1"), cache_line(1, "miss"), cache_line(2, "hit")]
    )
    lake = tmp_path / "lake"
    ingest_lake([path], lake)
    write_lines(path, [meta_line("r1"), cache_line(1, "miss")])
    r = ingest_lake([path], lake).files[0]
    assert r.status == "refused"
    assert "rewritten, not appended" in r.message
    with connect_lake(lake) as b:
        assert b.sql("SELECT count(*) AS n FROM cache")["n"][0] == 2  # the rows stay


def test_a_run_in_the_lake_from_another_file_is_refused(tmp_path):
    a = write_lines(tmp_path / "a.jsonl", [meta_line("same"), cache_line(1, "miss")])
    b = write_lines(tmp_path / "b.jsonl", [meta_line("same"), cache_line(2, "miss")])
    lake = tmp_path / "lake"
    results = ingest_lake([a, b], lake).files
    assert [r.status for r in results] == ["ok", "refused"]
    assert results[1].message.startswith(f"run same is already in the lake from {a}")
    # and in a later ingest (from the snapshot, not the batch)
    later = ingest_lake([b], lake).files[0]
    assert later.status == "refused"
    with connect_lake(lake) as con:
        assert sorted(con.sql("SELECT file, status FROM ingested_files").rows()) == [
            (str(a), "ok"),
            (str(b), "refused"),
        ]
    # the same refusal again is not written again
    assert len(ingested_files(lake)) == 2


@pytest.fixture(params=["by date", "by date and run"])
def layout(request, monkeypatch) -> str:
    """A new lake's layout (partitioned by date), or that of the lakes made before
    2026-12-02 (by date and run key), which are still read and written as they are."""
    if request.param == "by date and run":
        monkeypatch.setattr(lake_table, "PARTITIONS", ["run_date", "run_key"])
    return request.param


def test_a_run_id_over_255_bytes_is_a_column_not_a_path(tmp_path, layout):
    long_id = "ü/" * 100 + "x" * 60  # 260 bytes, with a slash
    path = write_lines(tmp_path / "t.jsonl", [meta_line(long_id), cache_line(1, "miss")])
    lake = tmp_path / "lake"
    assert ingest_lake([path], lake).files[0].status == "ok"
    key = run_key(long_id)
    assert len(key.encode()) <= 64
    assert "/" not in key
    uris = DeltaTable(str(lake / "cache")).file_uris()
    parts = [Path(u).relative_to(lake / "cache").parts[:-1] for u in uris]
    assert len(parts) == 1
    assert parts[0][0].startswith("run_date=")
    assert parts[0][1:] == (() if layout == "by date" else (f"run_key={key}",))
    if layout == "by date":  # a column of the file (a partition's is in the path)
        import pyarrow.parquet as pq

        assert pq.read_table(uris[0], columns=["run_key"]).column(0).to_pylist() == [key]
    with connect_lake(lake) as con:
        assert con.sql("SELECT run_id FROM runs").rows() == [(long_id,)]
        assert con.sql("SELECT run_id FROM cache").rows() == [(long_id,)]
    assert ingest_lake([path], lake).files[0].status == "unchanged"
    assert run_key("plain-id_1.2") == "plain-id_1.2"
    assert run_key("a b") != run_key("a_b")
    assert run_key("a b").startswith("a_b-h")


def test_cli_ingest_lake_then_query_and_report_on_it(tmp_path, sweep_trace, con, views_db):
    lake = tmp_path / "lake"
    run = _cli("ingest", str(sweep_trace), "--lake", str(lake))
    assert run.returncode == 0, run.stderr
    n = len(sweep_trace.read_bytes().splitlines())
    assert f"1 file(s), {n} records, 0 rejected, 0 refused" in run.stdout
    q = _cli(
        "query",
        "--db",
        str(lake),
        "--format",
        "csv",
        "SELECT count(*) AS n FROM recompiles WHERE run_id = 'sweep'",
    )
    assert q.returncode == 0, q.stderr
    want = con.sql("SELECT count(*) AS n FROM recompiles WHERE run_id = 'sweep'")["n"][0]
    assert want > 0
    assert q.stdout.split() == ["n", str(want)]
    # the report over the lake is the report over the DuckDB file, word for word
    env = {**os.environ, "COLUMNS": "100"}
    reports = [
        _cli("report", "--db", str(db), "--run", "sweep", env=env) for db in (lake, views_db)
    ]
    assert [r.returncode for r in reports] == [0, 0], reports[0].stderr
    assert "6 calls" in reports[0].stdout
    assert reports[0].stdout == reports[1].stdout


def test_what_is_not_a_lake_is_a_clear_error(tmp_path, bus_trace):
    a_file = tmp_path / "lake.txt"
    a_file.write_text("x")
    r = _cli("ingest", str(bus_trace), "--lake", str(a_file))
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert f"{a_file} is a file, not a lake folder" in " ".join(r.stderr.split())
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "_manifest").write_text("not a folder")
    for args in (
        ["ingest", str(bus_trace), "--lake", str(odd)],
        ["query", "--db", str(odd), "SELECT 1"],
    ):
        r = _cli(*args)
        assert r.returncode == 1, args
        assert "Traceback" not in r.stderr
        assert "_manifest is a file" in " ".join(r.stderr.split()), r.stderr
    with pytest.raises(LakeError, match="is a file"):
        ingest_lake([bus_trace], a_file)


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


def test_the_dashboard_on_an_old_format_lake_says_to_upgrade_it(tmp_path, monkeypatch):
    from ember.dashboard.db import DB_ENV
    from tests.dashboard.apptest import APP

    # a lake of the Parquet + _manifest format: one part, one manifest entry
    old = tmp_path / "old"
    part = old / "runs" / "run_date=2026-11-30" / "run_id=r1" / "k0-0-x.parquet"
    part.parent.mkdir(parents=True)
    duckdb.sql("SELECT 'r1' AS model").write_parquet(str(part))
    (old / "_manifest").mkdir()
    (old / "_manifest" / "k0-0-x.json").write_text('{"run_id": "r1"}')
    monkeypatch.setenv(DB_ENV, str(old))
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    shown = " ".join(e.value for e in at.error)
    assert "old format" in shown
    assert f"ember lake upgrade {old} NEW" in shown.replace("\\", "")
    r = _cli("dashboard", "--db", str(old), "--port", "1")
    assert r.returncode != 0
    assert "ember lake upgrade" in " ".join(r.stderr.split())


def test_a_lake_error_exits_1_and_in_compare_2_where_1_is_a_broken_rule(tmp_path, bus_trace):
    old = tmp_path / "old"
    (old / "_manifest").mkdir(parents=True)
    q = _cli("query", "--db", str(old), "SELECT 1")
    assert q.returncode == 1, q.stderr
    assert "ember lake upgrade" in " ".join(q.stderr.split())
    c = _cli("compare", "bus-run", "bus-run", "--db", str(old))
    assert c.returncode == 2, c.stderr
    assert "ember lake upgrade" in " ".join(c.stderr.split())
    assert "Traceback" not in q.stderr + c.stderr
