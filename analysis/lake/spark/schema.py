"""Spark on the trace lake, without the ingest: the Spark schema derived from the pydantic
models, the session, and the lake's tables and views on Spark SQL (``register_lake``).

Needs PySpark and Java 17+ (see ``lake_spark``). Importing this module does not start
Spark. The schema is the one the Spark ingest reads with (``read_schema``, the same
columns as DuckDB's typed read) and the one it reads the lake's Parquet with
(``lake_schema``, ``lake.lake_columns`` as Spark types).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable
from typing import Any

from ember.analysis.lake.ingest import LAKE_TABLES, lake_columns
from ember.analysis.lake.spark.sql import spark_tables, spark_views
from ember.analysis.schema_types import KIND_MODELS, READ_COLUMNS, model_columns
from ember.analysis.views import views_read_by

# ---------------------------------------------------------------- the schema


def spark_type(t: Any) -> Any:
    """The Spark type of a type from ``schema_types`` (a nested description or its SQL)."""
    from pyspark.sql import types as T

    if isinstance(t, tuple):
        if t[0] == "list":
            return T.ArrayType(spark_type(t[1]))
        return T.StructType([T.StructField(k, spark_type(v)) for k, v in t[1].items()])
    scalars = {
        "BIGINT": T.LongType(),
        "DOUBLE": T.DoubleType(),
        "BOOLEAN": T.BooleanType(),
        "VARCHAR": T.StringType(),
        "JSON": T.StringType(),  # a JSON value is kept as its text
        "TIMESTAMP": T.TimestampNTZType(),
        "INTEGER": T.IntegerType(),
    }
    if t in scalars:
        return scalars[t]
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(duck_to_spark_type(t))


def duck_to_spark_type(t: str) -> str:
    """A DuckDB type's SQL as a Spark DDL type (for the nested types of table columns)."""
    import sqlglot

    cast = sqlglot.parse_one(f"CAST(x AS {t})", read="duckdb")
    assert isinstance(cast, sqlglot.exp.Cast)
    return cast.to.sql(dialect="spark").replace("JSON", "STRING")


def _kind_description(kind: str) -> dict[str, Any]:
    from ember.analysis.schema_types import span_columns

    if kind == "span_start":
        return span_columns(0)
    if kind == "span_end":
        return span_columns(1)
    return model_columns(KIND_MODELS[kind])


def spark_schema(kind: str) -> Any:
    """The Spark ``StructType`` of one record kind, derived from its pydantic model(s)
    through ``schema_types`` (the DuckDB columns come from the same description)."""
    from pyspark.sql import types as T

    return T.StructType(
        [T.StructField(k, spark_type(v)) for k, v in _kind_description(kind).items()]
    )


def read_schema() -> Any:
    """The schema of the one typed read of a trace (``READ_COLUMNS``: every kind's fields),
    plus ``_corrupt`` (the text of a line that does not fit it)."""
    from pyspark.sql import types as T

    fields = [T.StructField(k, spark_type(v)) for k, v in READ_COLUMNS.items()]
    return T.StructType([*fields, T.StructField("_corrupt", T.StringType())])


def lake_schema(table: str) -> Any:
    """The Spark schema of a lake table's Parquet files (``lake.lake_columns``)."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(c, spark_type(t)) for c, t in lake_columns(table).items()])


# ---------------------------------------------------------------- the session


def spark_session(master: str = "local[2]", app: str = "ember") -> Any:
    """A Spark session for Ember (the active one, configured, or a new one)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError(
            "Spark needs Java 17 or newer and there is no `java` on PATH (nor JAVA_HOME): "
            "apt-get install -y openjdk-17-jre-headless"
        )
    from pyspark.sql import SparkSession

    # the interpreter the executors' Python workers start: PYSPARK_PYTHON when set (on a
    # cluster), else this one (a local master; a cluster on this machine, or whose workers
    # have the same venv at the same path: they import Ember from its install). PySpark
    # takes it from PYSPARK_PYTHON, not from spark.pyspark.python (which only spark-submit
    # reads), and falls back to "python3": whatever a worker's PATH finds, without Ember
    # (a standalone cluster's Python workers then failed to import it)
    python = sys.executable
    if not master.startswith("local"):
        python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_PYTHON"] = python
    session = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.driver.memory", "1g")
        .config("spark.pyspark.python", python)
        .config("spark.pyspark.driver.python", sys.executable)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("FATAL")  # errors reach Python as exceptions
    return session


# ---------------------------------------------------------------- reading the lake


def _visible_ingests(snap: Any) -> list[str]:
    """The ids of the ingests a reader of the snapshot sees (``lake_commit.visible_sql``)."""
    import duckdb

    from ember.analysis.lake.commit import visible_sql

    con = duckdb.connect(":memory:")
    try:
        con.register("_ingests", snap.ingests)
        return [r[0] for r in con.execute(visible_sql("_ingests")).fetchall()]
    finally:
        con.close()


def register_lake(
    spark: Any,
    lake: str | os.PathLike[str],
    errors: dict[str, str] | None = None,
    *,
    computed: bool = True,
    views: Iterable[str] | None = None,
) -> list[str]:
    """Create the lake's tables and every view as temporary views of ``spark``; returns
    the names of the views, in order. With ``errors``, a view Spark refuses (and the views
    that read it) is left out and its error recorded there instead of raised. ``views``:
    only these views and the views they read (``views_read_by``), not all of them (each
    view costs Spark a job to compute, or an analysis of every view it reads to register).

    Each view is computed once, here, in dependency order, and its rows kept by the
    executors (``localCheckpoint``): a view that reads another then reads those rows.
    Spark otherwise inlines a view's whole plan into every view (and every CTE
    reference) that reads it: ``run_summary`` over ``compiles`` over ``cache_lookups``...
    once planned for 6 minutes and ran out of a 1 GiB driver heap on the two demo traces
    (``recompiles`` then read its CTEs ~19 times); with each view kept, all of them take
    about 1.5 minutes there (loaded machine). The rows are those of the lake's files when
    this is called, as the tables are.

    ``computed=False`` registers the views as plain temporary views instead (the SQL of
    ``ember views --dialect spark``): nothing is computed here, and each query plans every
    view it reads again."""
    from pyspark.sql import functions as F

    from ember.analysis.lake.location import local_lake_path
    from ember.analysis.lake.read import LakeSnapshot

    root = local_lake_path(lake)
    snap = LakeSnapshot(root)  # the _ingests rows first, then each table's file list
    # the ids as a literal set (an IN list), not a DataFrame: a plain view then reads no
    # RDD of the driver's (see ``computed``)
    visible = _visible_ingests(snap)
    stored = {}
    for table in LAKE_TABLES:
        name = f"_lake_{table}"
        files = snap.files[table]
        schema = lake_schema(table)
        if files:
            # the committed files only, their columns only (not the partitions in the paths)
            df = spark.read.schema(schema).parquet(*files).select(*schema.fieldNames())
            df = df.where(F.col("_ingest").isin(visible))
        else:
            df = spark.createDataFrame([], schema)
        df.createOrReplaceTempView(name)
        stored[table] = name
    for table, sql in spark_tables(stored).items():
        spark.sql(f"CREATE OR REPLACE TEMP VIEW {table} AS {sql}")
    names = []
    wanted = None if views is None else set(views_read_by(views))
    for name, sql in spark_views().items():
        if wanted is not None and name not in wanted:
            continue
        try:
            if computed:
                spark.sql(sql).localCheckpoint().createOrReplaceTempView(name)
            else:
                spark.sql(f"CREATE OR REPLACE TEMP VIEW {name} AS {sql}")
        except Exception as exc:  # pyspark's AnalysisException, ParseException
            if errors is None:
                raise
            errors[name] = str(exc).splitlines()[0] if str(exc).strip() else repr(exc)
            continue
        names.append(name)
    return names
