"""A staged batch of trace files turned into each file's lake tables (pyarrow), with DuckDB.

``stage`` and ``check`` (``ingest_read``) put a batch's records into ``_stage``; this
module makes each file's rows of each lake table from it, one query per table for the
whole batch (``stage_output``): the stored columns (``lake_columns``), each record's
``line`` in its file, and the run, ingest and partition columns (``tag``).
``prepare_prior_spans`` gives the checks the span records already in the lake of each
continued file's run. Committing the tables is ``lake_commit``'s.
"""

from __future__ import annotations

import bisect
import itertools
import mmap
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import duckdb

from ember.analysis.db import RECORD_TABLES, RUNS_COLUMNS, record_columns
from ember.analysis.ingest.database import select_for
from ember.analysis.ingest.plan import iter_lines
from ember.analysis.ingest.read import FileIngest
from ember.analysis.lake.commit import LakePlan, LakeState
from ember.analysis.lake.table import files_of_runs, lake_columns, sql_literal


def _line_sql(con: duckdb.DuckDBPyConnection, works: list[FileIngest]) -> str:
    """SQL of each staged row's line number in its file.

    The fast path staged every non-blank line in order: without blank lines, row n of a
    file is line ``base + n + 1``; the lines of the other files (blank lines, the slow
    path's line map) are listed in ``_lines``."""
    listed: list[tuple[int, int]] = []
    for w in works:
        plan = w.plan
        if w.first_row < 0:
            continue
        if w.line_map is not None:
            listed += [(w.first_row + i, line) for i, (line, _) in enumerate(w.line_map)]
        elif _has_blank(w):
            number = plan.base_line
            rid = w.first_row
            for _, raw in iter_lines(plan.path, plan.start, w.end):
                number += 1
                if raw.strip():
                    listed.append((rid, number))
                    rid += 1
    con.execute("CREATE OR REPLACE TEMP TABLE _lines (rid BIGINT, line BIGINT)")
    if listed:
        con.executemany("INSERT INTO _lines VALUES (?, ?)", listed)
    return (
        "coalesce((SELECT line FROM _lines WHERE rid = _stage.rowid), "
        "rowid - CAST($firsts AS BIGINT[])[_f + 1] + CAST($bases AS BIGINT[])[_f + 1] + 1)"
    )


_BLANK = re.compile(rb"(?:\A|\n)[ \t\r\f\v]*\n")


def _has_blank(work: FileIngest) -> bool:
    plan = work.plan
    if work.end <= plan.start:
        return False
    with plan.path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return _BLANK.search(m, max(plan.start - 1, 0), work.end) is not None


def _select_sql(kind: str, line_sql: str) -> str:
    cols = record_columns(kind)
    select = select_for(kind, cols, "NULL")
    # the stored columns: the record's (not run_id) with JSON as text, then line
    names = [c for c in cols if c != "run_id"]
    types = lake_columns(kind)
    inner = f"SELECT {select}, {line_sql} AS line, _f FROM _stage WHERE kind = '{kind}'"
    outer = ", ".join(f'CAST("{c}" AS {types[c]}) AS "{c}"' for c in names)
    all_names = ", ".join(f'"{c}"' for c in cols)
    return f"SELECT {outer}, line, _f FROM ({inner}) AS r({all_names}, line, _f) ORDER BY _f, line"


def _runs_sql() -> str:
    cols = {c: t for c, t in RUNS_COLUMNS.items() if c not in ("started_at", "file")}
    select = select_for("meta", cols)
    types = lake_columns("runs")
    names = ", ".join(f'"{c}"' for c in cols)
    outer = ", ".join(f'CAST("{c}" AS {types[c]}) AS "{c}"' for c in cols if c != "run_id")
    return (
        f"SELECT {outer}, CAST($files AS VARCHAR[])[_f + 1] AS file, _f FROM (SELECT {select}, "
        f"_f FROM _stage WHERE kind = 'meta') AS r({names}, _f) ORDER BY _f"
    )


def _by_file(table: Any, n: int) -> list[Any]:
    """A pyarrow table sorted by ``_f`` as ``n`` tables, one per file (without ``_f``)."""
    fs = table.column("_f").to_pylist()
    bounds = [bisect.bisect_left(fs, f) for f in range(n + 1)]
    rest = table.drop_columns(["_f"])
    return [rest.slice(a, b - a) for a, b in itertools.pairwise(bounds)]


def tag(piece: Any, lp: LakePlan) -> Any:
    """A file's rows of one table with its run, its ingest and its partition values."""
    import pyarrow as pa

    n = piece.num_rows
    for name, value in (
        ("run_id", lp.plan.run_id),
        ("_ingest", lp.ingest),
        ("run_date", lp.run_date),
        ("run_key", lp.run_key),
    ):
        if name in piece.column_names:
            piece = piece.drop_columns([name])
        piece = piece.append_column(name, pa.array([value] * n, pa.string()))
    return piece


def stage_output(
    con: duckdb.DuckDBPyConnection, works: list[FileIngest], batch: list[LakePlan]
) -> list[dict[str, Any]]:
    """Each staged file's lake tables (table -> pyarrow.Table), from one query per table."""
    outputs: list[dict[str, Any]] = [{} for _ in works]
    params: dict[str, list[Any]] = {
        "firsts": [w.first_row for w in works],
        "bases": [w.plan.base_line for w in works],
    }
    line_sql = _line_sql(con, works)
    kinds = [
        r[0]
        for r in con.execute("SELECT DISTINCT kind FROM _stage WHERE kind <> 'meta'").fetchall()
    ]
    queries: list[tuple[str, str, dict[str, list[Any]]]] = [
        ("runs", _runs_sql(), {"files": [str(w.plan.path) for w in works]})
    ]
    queries += [(k, _select_sql(k, line_sql), params) for k in RECORD_TABLES if k in kinds]
    for table, sql, args in queries:
        t = con.sql(sql, params=args).to_arrow_table()
        if not t.num_rows:
            continue
        for out, piece, lp in zip(outputs, _by_file(t, len(works)), batch, strict=True):
            if piece.num_rows:
                out[table] = tag(piece, lp)
    for w, out, lp in zip(works, outputs, batch, strict=True):
        if w.rejected:
            out["rejected_lines"] = tag(rejected_table(str(w.plan.path), w.rejected), lp)
    return outputs


def rejected_table(file: str, rejected: list[Any]) -> Any:
    """The rejected lines of one file as a pyarrow table of ``lake_columns('rejected_lines')``."""
    import pyarrow as pa

    now = datetime.now(UTC).replace(tzinfo=None)
    return pa.table(
        {
            "file": pa.array([file] * len(rejected), pa.string()),
            "line": pa.array([r.line for r in rejected], pa.int64()),
            "byte_offset": pa.array([r.offset for r in rejected], pa.int64()),
            "reason": pa.array([r.reason for r in rejected], pa.string()),
            "raw": pa.array([r.raw for r in rejected], pa.string()),
            "ingested_at": pa.array([now] * len(rejected), pa.timestamp("us")),
        }
    )


_SPAN_TABLES = ("span_start", "span_end")


def _span_files(state: LakeState, table: str, runs: Mapping[str, str | None]) -> list[str]:
    """The committed files of ``table`` (a span table) that may hold rows of ``runs`` (id ->
    date)."""
    from deltalake import DeltaTable

    return files_of_runs(DeltaTable(str(state.root / table)), runs)


def prior_spans(state: LakeState, lp: LakePlan) -> list[tuple[str, int]]:
    """The span records already in the lake of a continued file's run (its committed
    ingests): ``(kind, span_id)``, kind the table, 'span_start' or 'span_end'."""
    ids = [r["ingest"] for r in state.streams.get(lp.fid, [])]
    if not ids:
        return []
    out: list[tuple[str, int]] = []
    con = duckdb.connect(":memory:")
    try:
        for table in _SPAN_TABLES:
            files = _span_files(state, table, {lp.plan.run_id: lp.run_date})
            if not files:
                continue
            rows = con.execute(
                "SELECT span_id FROM read_parquet($f, hive_partitioning = false) "
                "WHERE list_contains($ids, _ingest)",
                {"f": files, "ids": ids},
            ).fetchall()
            out += [(table, r[0]) for r in rows]
    finally:
        con.close()
    return out


def prepare_prior_spans(
    con: duckdb.DuckDBPyConnection, state: LakeState, batch: list[LakePlan]
) -> None:
    """``_prior_spans`` for the checks (``checks.span_problems_sql``'s ``prior``): the span
    records already in the lake of each continued file's run (the rows of its committed
    ingests), by its place in the batch (``_f``), with their ``kind``."""
    reads = []
    continued = [(f, lp) for f, lp in enumerate(batch) if lp.plan.start > 0]
    runs = {lp.plan.run_id: lp.run_date for _, lp in continued}
    for table in _SPAN_TABLES if continued else ():
        uris = _span_files(state, table, runs)
        for f, lp in continued:
            ids = [r["ingest"] for r in state.streams.get(lp.fid, [])]
            if uris and ids:
                files = "[" + ", ".join(sql_literal(u) for u in uris) + "]"
                inside = ", ".join(sql_literal(i) for i in ids)
                reads.append(
                    f"SELECT {f}::INTEGER AS _f, '{table}' AS kind, span_id "
                    f"FROM read_parquet({files}, hive_partitioning = false, "
                    f"union_by_name = true) WHERE _ingest IN ({inside})"
                )
    reads.append(
        "SELECT NULL::INTEGER AS _f, NULL::VARCHAR AS kind, NULL::BIGINT AS span_id WHERE false"
    )
    con.execute(f"CREATE OR REPLACE TEMP VIEW _prior_spans AS {' UNION ALL '.join(reads)}")
