"""Apache Spark on the trace lake: the schema from the models, the Spark ingest writes the same
lake as DuckDB's, and every view gives the same rows on DuckDB (file), DuckDB (lake) and Spark
(lake). One Spark session (local[2]) for the whole run; small data."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from ember.analysis import VIEW_NAMES, connect, ingest
from ember.analysis.lake.ingest import connect_lake, ingest_lake, ingested_files
from ember.analysis.lake.spark.job import ingest_spark, register_lake, spark_schema, spark_session
from ember.analysis.torch_trace import import_torch_trace
from ember.analysis.views import views_read_by
from ember.schemas import records as R
from tests.analysis.lake_parity import (
    bad_corpus,
    check_a_grown_file_rejects_a_second_stored_end,
    differences,
    duck_rows,
    jax_steps_corpus,
    require_spark,
    spans_and_depth_corpus,
    view_differences,
)

pytestmark = pytest.mark.spark

require_spark()

REPO = Path(__file__).resolve().parents[2]

# every view of analysis/sql (from the folder, so that a view added there cannot be left
# out), checked row for row on Spark
SQL_VIEWS = sorted(p.stem for p in (REPO / "analysis" / "sql").glob("*.sql") if p.stem != "macros")
# the views that cannot run on Spark, each with the reason (none today)
NOT_ON_SPARK: dict[str, str] = {}
CHECKED_VIEWS = [v for v in VIEW_NAMES if v not in NOT_ON_SPARK]
# views with no rows on the mixed corpus below, which has no job whose ranks diverge: they
# are compared on Spark all the same (empty against empty), and their rows are checked on
# DuckDB by tests/analysis/test_job_views.py
EMPTY_ON_THE_CORPUS = ["rank_divergence"]


def test_every_view_of_the_sql_folder_is_checked_on_spark():
    assert sorted(VIEW_NAMES) == SQL_VIEWS
    assert set(NOT_ON_SPARK) <= set(SQL_VIEWS)
    assert len(CHECKED_VIEWS) == len(SQL_VIEWS) - len(NOT_ON_SPARK)


@pytest.fixture(scope="session")
def spark():
    session = spark_session("local[2]", app="ember-tests")
    yield session
    session.stop()


def test_the_spark_schema_is_the_models(spark):
    from pyspark.sql import types as T

    def check(model_fields, struct, where):
        names = [info.alias or n for n, info in model_fields.items()]
        assert [f.name for f in struct.fields] == names, where

    check(R.Cache.model_fields, spark_schema("cache"), "cache")
    check(R.Memory.model_fields, spark_schema("memory"), "memory")
    cache = {f.name: f.dataType for f in spark_schema("cache").fields}
    assert cache["ts_ns"] == T.LongType()
    assert cache["key"] == T.StringType()
    shapes = cache["shapes"]
    assert isinstance(shapes, T.ArrayType)
    assert isinstance(shapes.elementType, T.StructType)
    assert shapes.elementType["shape"].dataType == T.ArrayType(T.LongType())
    assert cache["statics"].elementType["value"].dataType == T.StringType()  # JSON as text
    assert {f.name: f.dataType for f in spark_schema("gradient").fields}["norm"] == T.DoubleType()
    # every span kind's attributes are fields of the span tables' attrs struct
    attrs = spark_schema("span_end")["attrs"].dataType
    for kind, (_, end) in R.SPAN_ATTRS.items():
        for name in end.model_fields:
            assert name in attrs.fieldNames(), (kind, name)


TORCH_LOG = Path(__file__).parents[1] / "data" / "torch" / "rank_0.log"


def test_spark_and_duckdb_write_the_same_lake_and_every_view_agrees(
    tmp_path, spark, sweep_trace, bus_trace
):
    files = [
        sweep_trace,
        bus_trace,
        bad_corpus(tmp_path / "bad.jsonl"),
        # the span id and nesting checks, one rendering for both engines (Spark had its own
        # copy of the first and none of the second)
        spans_and_depth_corpus(tmp_path / "spans.jsonl"),
        # a torch.compile run imported from TORCH_TRACE: the rows of torch_compiles
        Path(import_torch_trace(TORCH_LOG, tmp_path / "torch.jsonl").path),
        # a jitted function's steps: the rows of jit_calls and jit_shape_buckets
        jax_steps_corpus(tmp_path / "steps.jsonl"),
    ]
    db, duck_lake, spark_lake = tmp_path / "t.duckdb", tmp_path / "a", tmp_path / "b"
    want = [(f.status, f.records, f.rejected) for f in ingest(files, db).files]
    ingest_lake(files, duck_lake)
    summary = ingest_spark(files, spark_lake, spark=spark)
    assert [(f.status, f.records, f.rejected) for f in summary.files] == want
    assert want[2] == ("partial", 6, 8)
    assert want[3] == ("ok", 6, 6)
    assert {r["engine"] for r in ingested_files(spark_lake) if r["status"] != "refused"} == {
        "spark"
    }
    with (
        connect(db, read_only=True) as file_db,
        connect_lake(duck_lake) as a,
        connect_lake(spark_lake) as b,
    ):
        # the same lake contents (every table, the rejected lines and their reasons)
        assert differences(a, b) == []
        assert differences(file_db, b) == []
        # every view: the same rows on Spark over the lake as on DuckDB
        errors: dict[str, str] = {}
        names = register_lake(spark, spark_lake, errors)
        assert errors == {k: errors[k] for k in NOT_ON_SPARK if k in errors}, errors
        assert [n for n in names if n in CHECKED_VIEWS] == CHECKED_VIEWS
        assert view_differences(b, spark, CHECKED_VIEWS) == []
        # not vacuous
        assert len(duck_rows(b, "recompiles")[1]) == 11  # 10, and the jitted update's retrace
        empty = [n for n in CHECKED_VIEWS if not duck_rows(b, n)[1]]
        assert empty == EMPTY_ON_THE_CORPUS  # each other view has rows
    again = ingest_spark(files, spark_lake, spark=spark)
    assert [f.status for f in again.files] == ["unchanged"] * len(files)


def test_the_heaviest_views_run_as_plain_views_in_the_shared_1_gib_session(
    tmp_path, spark, sweep_trace, bus_trace
):
    # the views as `ember views --dialect spark` prints them, as plain temporary views (not
    # computed once each, as register_lake does by default): Spark plans every view again
    # inside each one that reads it. recompile_causes (over recompiles over compiles) and
    # run_summary ran out of a 1-3 GiB driver heap this way while recompiles read its CTEs
    # ~19 times; they must run in this session's 1 GiB, with DuckDB's rows
    lake = tmp_path / "lake"
    ingest_lake([sweep_trace, bus_trace], lake)
    plain = spark.newSession()  # its own temporary views, the same driver
    # only these two and the views they read (each plain view costs Spark an analysis of
    # every view it reads: all 49 took 26 of this test's 29 s)
    heaviest = ["recompile_causes", "run_summary"]
    names = register_lake(plain, lake, computed=False, views=heaviest)
    assert names == list(views_read_by(heaviest))
    assert len(names) < len(VIEW_NAMES)
    assert not plain.catalog.tableExists("bucket_advice")  # a view neither reads
    # plain: no view's rows computed and kept (register_lake's default keeps them as RDDs)
    plan = plain.sql("SELECT * FROM recompile_causes")._jdf.queryExecution().analyzed()
    assert "LogicalRDD" not in plan.toString()
    with connect_lake(lake) as con:
        assert view_differences(con, plain, ["recompile_causes", "run_summary"]) == []
        assert len(duck_rows(con, "recompile_causes")[1]) > 0


def test_ember_views_dialect_spark_prints_every_view(spark):
    out = subprocess.run(
        [sys.executable, "-m", "ember.cli.main", "views", "--dialect", "spark"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    for name in VIEW_NAMES:
        assert f"CREATE OR REPLACE TEMP VIEW {name} AS" in out.stdout
    assert "ASOF LEFT JOIN" not in out.stdout
    assert "lambda " not in out.stdout
    # the statements of the checked views parse in Spark
    for stmt in out.stdout.split(";\n"):
        body = "\n".join(x for x in stmt.splitlines() if not x.startswith("--")).strip()
        name = body.split(" AS", 1)[0].rsplit(" ", 1)[-1] if body else ""
        if name in VIEW_NAMES:
            assert spark._jsparkSession.sessionState().sqlParser().parsePlan(body) is not None


def test_two_ingesters_a_spark_ingest_and_a_reader_on_one_lake(tmp_path, spark):
    from tests.analysis.traces import cache_line, meta_line, write_lines

    traces = tmp_path / "traces"
    traces.mkdir()
    for i in range(24):
        write_lines(
            traces / f"t{i:02d}.jsonl",
            [
                meta_line(f"run-{i:02d}"),
                *[cache_line(10 + j, "miss" if j == 0 else "hit") for j in range(5)],
            ],
        )
    files = sorted(traces.glob("*.jsonl"))
    lake = tmp_path / "lake"
    ingest_lake(files[:1], lake)  # the lake exists before the reader starts
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(lake)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    # two DuckDB ingesters on overlapping halves, and Spark on the rest at the same time
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ember.cli.main",
                "ingest",
                *map(str, part),
                "--lake",
                str(lake),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for part in (files[:14], files[8:20])
    ]
    result = ingest_spark(files[16:], lake, spark=spark)
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    assert {f.status for f in result.files} <= {"ok", "unchanged"}
    time.sleep(0.5)
    reader.terminate()
    rout, rerr = reader.communicate(timeout=60)
    assert "ERROR" not in rout, (rout[-2000:], rerr[-2000:])
    assert rerr.strip() == "", (rout[-2000:], rerr[-2000:])
    assert int(rout.split()[-1]) > 0  # the reader ran the view while the lake grew
    with connect_lake(lake) as con:
        runs = con.sql("SELECT run_id, count(*) AS n FROM runs GROUP BY run_id").rows()
        assert sorted(runs) == [(f"run-{i:02d}", 1) for i in range(24)]  # none lost, none twice
        assert con.sql("SELECT count(*) AS n FROM cache")["n"][0] == 24 * 5
        assert con.sql("SELECT count(*) AS n FROM cache_lookups")["n"][0] == 24 * 5
        assert con.sql("SELECT count(*) AS n FROM ingested_files WHERE status = 'ok'")["n"][0] == 24


_READER = """
import sys, time
from ember.analysis.lake import connect_lake
n = 0
t0 = time.time()
while time.time() - t0 < 240:
    try:
        with connect_lake(sys.argv[1]) as con:
            con.sql("SELECT count(*) FROM cache_lookups")
            con.sql("SELECT * FROM runs")
        n += 1
    except Exception as exc:
        print("ERROR", repr(exc), flush=True)
    print(n, flush=True)
    time.sleep(0.05)
"""


def test_a_grown_file_on_spark_rejects_a_second_end_of_a_span_whose_end_is_in_the_lake(
    tmp_path, spark
):
    check_a_grown_file_rejects_a_second_stored_end(
        tmp_path, lambda paths, lake: ingest_spark(paths, lake, spark=spark)
    )
