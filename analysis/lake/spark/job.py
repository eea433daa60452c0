"""Apache Spark on the trace lake: the ingest (``ember ingest --lake DIR --engine spark``).
The Spark schema derived from the pydantic models, the session and the views on Spark SQL
are ``lake_spark_schema``'s (importable from here too).

Needs PySpark and Java 17+ (``pip install pyspark``; ``apt-get install -y
openjdk-17-jre-headless``). Importing this module does not start Spark.

The ingest reads every planned trace file in parallel, as lines with their line numbers
(``textFile`` + ``zipWithIndex``), parses them with ``from_json`` and the schema of
``spark_schema()`` (the same columns as DuckDB's typed read, from the same models), runs the
same checks, rendered once in ``checks`` and translated by ``spark_sql.to_spark``
(``row_invalid_sql``; ``span_problems_sql``: span ids given twice, a ``span_end`` without
its ``span_start``; ``maybe_too_deep_sql``: the nesting limit, decided by ``parse_line``;
and a second ``meta``), and writes the valid rows as the
same columns as the DuckDB engine (``lake.lake_columns``): the executors write each table's
rows as Parquet (partitioned by file) in a staging folder, and the driver appends each
file's rows to the lake's Delta tables and commits them through delta-rs
(``lake.commit_batch``, the DuckDB engine's commit: one append per table, then the
``_ingests`` commit with each file's app transaction), re-reading the staged Parquet with
pyarrow on the way (the Delta connector for Spark is not needed, nor used). The few rows
that fail are explained on the driver by the same pydantic code as the DuckDB path
(``ingest_read.explain_line``), so the rejected lines and reasons are the same. Planning is
``lake``'s own (``lake.plan_batch``, from one ``_ingests`` snapshot): the two engines write
one lake together.

What Spark does not see as DuckDB does: a file of an older schema version, or with a line
over 16 MB, goes to the DuckDB engine (the result says so); a line Spark cannot read but
pydantic accepts (an integer over 2**63) is rejected as "Spark cannot read a value of this
record"; ``step`` (a number for gradients, a name for ops) is read as text, so a number
given as a string is not told apart; and the objects are read as Spark structs, which drop
a key no field has (the DuckDB engine stages them as JSON text and rejects such a line, as
``ember validate`` does: ``checks.structure_fits``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ember.analysis.checks import (
    maybe_too_deep_sql,
    row_invalid_sql,
    row_problem_sql,
    span_problems_sql,
)
from ember.analysis.db import RECORD_TABLES, RUNS_COLUMNS, record_columns
from ember.analysis.ingest.plan import (
    FileResult,
    FileStatus,
    IngestSummary,
    Rejected,
    expand_paths,
    iter_lines,
    raw_text,
    read_extent,
)
from ember.analysis.ingest.read import explain_line, find_long_line
from ember.analysis.lake.commit import LakePlan, LakeState, commit_ingests, refusal_row
from ember.analysis.lake.ingest import (
    commit_batch,
    open_lake_for_writing,
    plan_batch,
    rejected_table,
)
from ember.analysis.lake.spark.schema import duck_to_spark_type, lake_schema
from ember.analysis.lake.spark.schema import read_schema as read_schema
from ember.analysis.lake.spark.schema import register_lake as register_lake
from ember.analysis.lake.spark.schema import spark_schema as spark_schema
from ember.analysis.lake.spark.schema import spark_session as spark_session
from ember.analysis.lake.spark.schema import spark_type as spark_type
from ember.analysis.lake.spark.sql import to_spark
from ember.analysis.lake.write import prior_spans, tag
from ember.analysis.schema_types import READ_COLUMNS, field_defaults
from ember.schemas import MIGRATIONS, Migrations
from ember.schemas.records import MAX_LINE_BYTES, MAX_NESTING

__all__ = [
    "ingest_spark",
    "read_schema",
    "register_lake",
    "spark_schema",
    "spark_session",
    "spark_type",
]


# ---------------------------------------------------------------- ingest


def _spark_check_sql() -> tuple[str, str, str, str]:
    """``row_invalid_sql``, ``row_problem_sql``, ``maybe_too_deep_sql`` and
    ``span_problems_sql`` (over ``_readable``, ``_prior_spans``) for Spark: the DuckDB
    path's checks, translated (see the module doc: ``step``).

    A field two kinds type differently is read as JSON, which Spark keeps as its text: an
    integer is told by its digits; a string given as a number is not told apart."""
    out = []
    deep = maybe_too_deep_sql(MAX_NESTING).replace("strlen(", "length(")  # brackets: ASCII
    for sql in (row_invalid_sql(), row_problem_sql(), deep):
        # a JSON-read column (``step``) is its text in Spark: an integer is told by its
        # digits; a string given as a number cannot be told apart (accepted)
        sql = re.sub(
            r"json_type\(\"(\w+)\"\) NOT IN \('BIGINT', 'UBIGINT', 'NULL'\)",
            lambda m: f"NOT regexp_matches(\"{m.group(1)}\", '^-?[0-9]+$')",
            sql,
        )
        sql = re.sub(r"json_type\(\"(\w+)\"\) NOT IN \('VARCHAR', 'NULL'\)", "false", sql)
        sql = re.sub(r"json_type\(\"(\w+)\"\) = 'UBIGINT'", "false", sql)
        out.append(to_spark(f"SELECT {sql} AS x", pretty=False)[len("SELECT ") : -len(" AS x")])
    spans = to_spark(span_problems_sql("_readable", "line", "_prior_spans", "_file"), pretty=False)
    return out[0], out[1], out[2], spans


def _select_exprs(kind: str) -> list[str]:
    """Spark SQL of the stored columns of one kind from the typed read (``lake_columns``),
    with the defaults pydantic fills in (as ``ingest.select_for`` does for DuckDB)."""
    from ember.analysis.schema_types import sql_literal

    defaults = field_defaults(kind)
    table = {c: t for c, t in record_columns(kind).items() if c != "run_id"}
    out = []
    for c, t in table.items():
        read = READ_COLUMNS.get(c)
        expr = f"`{c}`"
        if read == "JSON" and t not in ("JSON", "VARCHAR"):
            expr = f"CAST(`{c}` AS {duck_to_spark_type(t)})"
        if c in defaults:
            lit = to_spark(f"SELECT {sql_literal(defaults[c], t)} AS x", pretty=False)
            lit = lit[len("SELECT ") : -len(" AS x")]
            expr = f"coalesce({expr}, {lit})"
        out.append(f"{expr} AS `{c}`")
    return out


def _runs_exprs(file_col: str = "_file") -> list[str]:
    cols = {c: t for c, t in RUNS_COLUMNS.items() if c not in ("started_at", "file", "run_id")}
    defaults = field_defaults("meta")
    from ember.analysis.schema_types import sql_literal

    out = []
    for c, t in cols.items():
        expr = f"`{c}`"
        if c in defaults:
            lit = to_spark(f"SELECT {sql_literal(defaults[c], t)} AS x", pretty=False)
            expr = f"coalesce({expr}, {lit[len('SELECT ') : -len(' AS x')]})"
        out.append(f"{expr} AS `{c}`")
    out.append(f"{file_col} AS `file`")
    return out


class _Planned:
    """One file the Spark job reads: its lake plan, where its complete lines end, and its
    result (as the DuckDB engine's ``FileIngest`` gives it to ``lake.commit_batch``)."""

    def __init__(self, idx: int, lp: LakePlan):
        self.idx = idx
        self.lp = lp
        plan = lp.plan
        end, lines, truncated = read_extent(plan)
        self.rejected: list[Rejected] = [truncated] if truncated is not None else []
        self.partial: str | None = truncated.reason if truncated is not None else None
        self.end = end
        self.lines = lines

    @property
    def lines_read(self) -> int:
        return self.lines

    def result(self, records: int, seconds: float) -> FileResult:
        plan = self.lp.plan
        message = self.partial
        if self.rejected and not message:
            message = f"{len(self.rejected)} line(s) rejected; see rejected_lines"
        status: FileStatus = "partial" if self.partial else "ok"
        return FileResult(
            str(plan.path),
            status,
            records=records,
            rejected=len(self.rejected),
            message=message,
            run_id=plan.run_id,
            bytes_read=self.end - plan.start,
            seconds=seconds,
            continued=plan.continued,
            replaced=plan.replaced_run is not None,
        )


def _needs_duckdb(lp: LakePlan, end: int) -> str | None:
    plan = lp.plan
    if not MIGRATIONS.reads_as_is(plan.version):
        return f"schema version {plan.version} (migrated by the DuckDB engine)"
    if find_long_line(plan.path, plan.start, end) is not None:
        return f"a line over {MAX_LINE_BYTES // 2**20} MB (read by the DuckDB engine)"
    return None


def ingest_spark(
    paths: Iterable[str | os.PathLike[str]],
    lake: str | os.PathLike[str],
    *,
    master: str = "local[2]",
    spark: Any = None,
    on_file: Callable[[FileResult], None] | None = None,
    migrations: Migrations = MIGRATIONS,
) -> IngestSummary:
    """Ingest trace files into the lake with Spark (see the module doc)."""
    from ember.analysis.lake.ingest import ingest_lake

    root = open_lake_for_writing(lake)
    files = expand_paths(paths)
    summary = IngestSummary()
    t0 = time.perf_counter()
    state = LakeState(root)
    planned: list[_Planned] = []
    to_duckdb: list[Path] = []
    done: list[FileResult] = []
    for r in plan_batch(state, files, migrations, max(len(files), 1), 1 << 62):
        if isinstance(r, FileResult):
            done.append(r)
            continue
        p = _Planned(len(planned), r)
        if _needs_duckdb(r, p.end) is not None:
            to_duckdb.append(r.plan.path)
        else:
            planned.append(p)
    if planned:
        session = spark or spark_session(master)
        done += _run_job(session, state, planned)
    refusals = [x for x in (refusal_row(state, f) for f in done if f.status == "refused") if x]
    if refusals:
        commit_ingests(state, refusals)
    for result in done:
        summary.files.append(result)
        if on_file is not None:
            on_file(result)
    if to_duckdb:
        rest = ingest_lake(to_duckdb, root, on_file=on_file, migrations=migrations)
        summary.files.extend(rest.files)
    summary.seconds = time.perf_counter() - t0
    return summary


def _run_job(spark: Any, state: LakeState, planned: list[_Planned]) -> list[FileResult]:
    """Read, check and stage every planned file in one Spark job, then commit them on the
    driver (see the module doc); each phase registers the temp views the next one reads."""
    t0 = time.perf_counter()
    parsed = _register_stage(spark, planned)
    _register_file_views(spark, state, planned)
    _explain_rejected(planned, _flag_rows(spark))
    _register_valid(spark, planned)
    # write every table, partitioned by the file; then rename each file's parts into place
    root = state.root
    staging = root / "_staging" / uuid.uuid4().hex
    try:
        counts = _stage_tables(spark, planned, staging)
        outputs = [_staged_tables(p, staging, counts) for p in planned]
        results = commit_batch(state, [p.lp for p in planned], planned, outputs, "spark")
    finally:
        parsed.unpersist()
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):
            (root / "_staging").rmdir()
    took = time.perf_counter() - t0
    for r in results:
        r.seconds = took / len(results)
    return results


def _struct(**fields: Any) -> Any:
    """A Spark schema of the given fields, in order (name=type)."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(name, kind) for name, kind in fields.items()])


def _register_stage(spark: Any, planned: list[_Planned]) -> Any:
    """Every planned file's complete, non-blank lines, with their file index and line
    number, parsed by the typed read's schema; persisted (each later phase reads it) and
    registered as ``_stage``. The caller unpersists it."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    sc = spark.sparkContext
    rdds = []
    for p in planned:
        plan = p.lp.plan
        lo, hi, idx = plan.base_line, plan.base_line + p.lines, p.idx
        rdd = (
            sc.textFile(str(plan.path))
            .zipWithIndex()
            .map(lambda t, idx=idx: (idx, t[1] + 1, t[0]))
            .filter(lambda r, lo=lo, hi=hi: lo < r[1] <= hi and r[2].strip() != "")
        )
        rdds.append(rdd)
    lines_schema = _struct(_file=T.IntegerType(), line=T.LongType(), value=T.StringType())
    raw = spark.createDataFrame(sc.union(rdds), lines_schema)
    parsed = raw.select(
        "_file",
        "line",
        F.from_json(
            "value", read_schema(), {"columnNameOfCorruptRecord": "_corrupt", "mode": "PERMISSIVE"}
        ).alias("r"),
        F.instr("value", "\ufffd").alias("_replaced"),
    ).select("_file", "line", "_replaced", "r.*")
    parsed = parsed.persist()
    parsed.createOrReplaceTempView("_stage")
    return parsed


def _register_file_views(spark: Any, state: LakeState, planned: list[_Planned]) -> None:
    """``_prior_spans`` and ``_files``, what the checks need to know of each file."""
    from pyspark.sql import types as T

    # the first record of a file read from its start may be its meta; the span_starts of
    # a continued run already in the lake count for its span_ends, and its span_ends make
    # another end of their ids a second one
    firsts = {p.idx: (p.lp.plan.start == 0) for p in planned}
    prior = [
        (p.idx, kind, s)
        for p in planned
        if p.lp.plan.start > 0
        for kind, s in prior_spans(state, p.lp)
    ]
    spark.createDataFrame(
        prior, _struct(_file=T.IntegerType(), kind=T.StringType(), span_id=T.LongType())
    ).createOrReplaceTempView("_prior_spans")
    spark.createDataFrame(
        [(i, f) for i, f in firsts.items()],
        _struct(_file=T.IntegerType(), from_start=T.BooleanType()),
    ).createOrReplaceTempView("_files")


def _flag_rows(spark: Any) -> dict[int, dict[int, tuple[str, str | None]]]:
    """The rows of ``_stage`` the checks flag, by file and line: why (a reason, or
    ``unread``/``check``/``maybe`` for the driver to explain) and the check's problem."""
    invalid, problem, deep, spans = _spark_check_sql()
    spark.sql(
        "SELECT * FROM _stage WHERE _corrupt IS NULL AND _replaced = 0"
    ).createOrReplaceTempView("_readable")
    flagged = spark.sql(
        f"""
        WITH s AS (
            SELECT _stage.*, f.from_start,
                min(line) OVER (PARTITION BY _stage._file) AS first_line,
                _corrupt IS NULL AND _replaced = 0 AS readable
            FROM _stage JOIN _files f ON f._file = _stage._file
        ),
        -- a row with two reasons says the first in text order, as the DuckDB path does
        sp AS (SELECT _file, line, min(reason) AS reason FROM ({spans}) GROUP BY _file, line)
        SELECT s._file, s.line,
            CASE WHEN NOT readable THEN 'unread'
                WHEN kind = 'meta' AND NOT (from_start AND s.line = first_line)
                    THEN 'a second ''meta'' record; one file is one run'
                WHEN sp.reason IS NOT NULL THEN sp.reason
                WHEN {invalid} THEN 'check'
                -- may nest too deeply: parse_line decides, and keeps those that do not
                WHEN {deep} THEN 'maybe'
            END AS why,
            CASE WHEN _corrupt IS NULL THEN {problem} END AS problem
        FROM s LEFT JOIN sp ON sp._file = s._file AND sp.line = s.line
        """
    )
    by_file: dict[int, dict[int, tuple[str, str | None]]] = {}
    for r in flagged.where("why IS NOT NULL").collect():
        by_file.setdefault(r["_file"], {})[r["line"]] = (r["why"], r["problem"])
    return by_file


def _explain_rejected(
    planned: list[_Planned], by_file: dict[int, dict[int, tuple[str, str | None]]]
) -> None:
    """Add each file's flagged lines to its rejected lines, explained by the same code as
    the DuckDB path (a ``maybe`` line it accepts is kept)."""
    for p in planned:
        bad = by_file.get(p.idx)
        if not bad:
            continue
        plan = p.lp.plan
        first = _first(p) if plan.start == 0 else -1
        number = plan.base_line
        for offset, raw in iter_lines(plan.path, plan.start, p.end):
            number += 1
            if number not in bad:
                continue
            reason = _rejection_reason(raw, *bad[number], expect_meta=number == first)
            if reason is not None:
                p.rejected.append(Rejected(number, offset, reason, raw_text(raw)))
        p.rejected.sort(key=lambda r: r.line)


def _rejection_reason(
    raw: bytes, why: str, row_problem: str | None, expect_meta: bool
) -> str | None:
    """Why a flagged line is rejected, or None for a ``maybe`` line ``parse_line`` keeps."""
    if why == "maybe":
        return explain_line(raw, expect_meta=expect_meta)
    if why in ("unread", "check"):
        reason = explain_line(raw, expect_meta=expect_meta)
        if reason is None:
            reason = (
                row_problem or "refused by the typed read's checks"
                if why == "check"
                else "Spark cannot read a value of this record (a number out of range?)"
            )
        return reason
    return why


def _register_valid(spark: Any, planned: list[_Planned]) -> None:
    """``_valid``: the rows of ``_stage`` not among any file's rejected lines."""
    from pyspark.sql import types as T

    rejected_keys = [(p.idx, r.line) for p in planned for r in p.rejected]
    spark.createDataFrame(
        rejected_keys, _struct(_file=T.IntegerType(), line=T.LongType())
    ).createOrReplaceTempView("_rejected")
    valid = spark.sql(
        "SELECT * FROM _stage s WHERE NOT EXISTS (SELECT 1 FROM _rejected r "
        "WHERE r._file = s._file AND r.line = s.line)"
    )
    valid.createOrReplaceTempView("_valid")


def _stage_tables(spark: Any, planned: list[_Planned], staging: Path) -> dict[tuple[int, str], int]:
    """Write each table's valid rows as Parquet under ``staging/TABLE``, partitioned by
    file, in the lake's columns; returns the row count of each (file, table).

    The rows of every table are counted by one query, and only the tables that have rows
    are written: a count and a write of each table were two passes over the rows of each
    of the ~15 tables (most of a small ingest's time: a Spark job costs ~0.3 s however
    few its rows)."""
    from pyspark.sql import types as T

    spark.createDataFrame(
        [(p.idx, str(p.lp.plan.path)) for p in planned],
        _struct(_file=T.IntegerType(), _path=T.StringType()),
    ).createOrReplaceTempView("_paths")
    table_of = {"meta": "runs", **{t: t for t in RECORD_TABLES}}
    counts: dict[tuple[int, str], int] = {}
    for r in spark.sql(
        "SELECT _file, kind, count(*) AS n FROM _valid GROUP BY _file, kind"
    ).collect():
        if r["kind"] in table_of:  # an unknown kind's rows are rejected lines, not in _valid
            counts[(r["_file"], table_of[r["kind"]])] = r["n"]
    present = {table for _, table in counts}
    for table in ("runs", *RECORD_TABLES):
        if table in present:
            _lake_rows(spark, table).repartition("_file").write.partitionBy("_file").parquet(
                str(staging / table), compression="zstd"
            )
    return counts


def _lake_rows(spark: Any, table: str) -> Any:
    """The valid rows of one table (``runs`` from the meta records), with their ``_file``,
    conformed to the lake's schema of it."""
    if table == "runs":
        exprs = _runs_exprs("p._path")
        where = "kind = 'meta'"
    else:
        exprs = [*_select_exprs(table), "line"]
        where = f"kind = '{table}'"
    df = spark.sql(
        f"SELECT v._file, {', '.join(exprs)} FROM _valid v "
        f"JOIN _paths p ON p._file = v._file WHERE {where}"
    )
    schema = lake_schema(table)
    have = dict(zip(df.columns, [f.dataType for f in df.schema.fields], strict=True))
    return df.selectExpr(
        "_file",
        *[
            f"{_conform(f'`{f.name}`', have[f.name], f.dataType)} AS `{f.name}`"
            for f in schema.fields
            if f.name not in ("run_id", "_ingest")  # added on the driver (tag)
        ],
    )


def _staged_tables(
    p: _Planned, staging: Path, counts: dict[tuple[int, str], int]
) -> dict[str, Any]:
    """One file's staged tables read back with pyarrow, tagged, with its rejected lines."""
    tables: dict[str, Any] = {}
    for table in ("runs", *RECORD_TABLES):
        if counts.get((p.idx, table), 0):
            parts = sorted((staging / table / f"_file={p.idx}").glob("*.parquet"))
            tables[table] = tag(pq.read_table(parts), p.lp)
    if p.rejected:
        tables["rejected_lines"] = tag(rejected_table(str(p.lp.plan.path), p.rejected), p.lp)
    return tables


def _conform(expr: str, src: Any, dst: Any, depth: int = 0) -> str:
    """Spark SQL that turns ``expr`` of type ``src`` into ``dst``: structs field by field by
    name (the typed read's structs hold the fields of every kind; a kind's have fewer),
    lists item by item, anything else by a cast."""
    from pyspark.sql import types as T

    if isinstance(dst, T.StructType) and isinstance(src, T.StructType):
        have = {f.name: f.dataType for f in src.fields}
        parts = []
        for f in dst.fields:
            inner = (
                _conform(f"{expr}.`{f.name}`", have[f.name], f.dataType, depth + 1)
                if f.name in have
                else f"CAST(NULL AS {f.dataType.simpleString()})"
            )
            parts.append(f"'{f.name}', {inner}")
        return f"IF({expr} IS NULL, NULL, named_struct({', '.join(parts)}))"
    if isinstance(dst, T.ArrayType) and isinstance(src, T.ArrayType):
        if src.elementType == dst.elementType:
            return expr
        var = f"_x{depth}"
        item = _conform(var, src.elementType, dst.elementType, depth + 1)
        return f"transform({expr}, {var} -> {item})"
    if src == dst:
        return expr
    return f"CAST({expr} AS {dst.simpleString()})"


def _first(p: _Planned) -> int:
    """The line number of the first non-blank line of a file read from its start."""
    plan = p.lp.plan
    number = plan.base_line
    for _, raw in iter_lines(plan.path, plan.start, p.end):
        number += 1
        if raw.strip():
            return number
    return 0
