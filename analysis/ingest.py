"""Ingest JSONL traces into the DuckDB file: typed, validated, idempotent per file.

How one file goes in (each file is one transaction):

1. ``ingest_plan`` decides what to read from ``ingested_files`` and the file as it is now
   (new, unchanged, grown, replaced, refused as a whole; see its doc). The first line must
   be ``meta``: it names the run and the schema version. A newer version, a missing or
   invalid meta, an empty file or a run id that another file already brought are refused
   as a whole (``ingested_files.status = 'refused'``).
2. ``ingest_read`` reads the planned bytes into the staging table ``_stage`` (DuckDB's typed
   ``read_json``, the fast path; pydantic on every line when DuckDB refuses the bytes, the
   slow path) and finds the rows to reject, with pydantic's explanation.
3. Here: the staged rows go into the record tables (with the columns derived at ingest),
   the rejected lines into ``rejected_lines``, and what was read into ``ingested_files``,
   in one transaction.

What the fast path does not see (``ember validate`` and ``ingest(strict=True)``, which
run pydantic on every line, do), at the top level of a record only: a field no record
kind has (DuckDB's typed read skips keys it was not asked for), a JSON number or boolean
given for a text field (DuckDB casts it to its text), and a fraction given for an integer
field other than ``ts_ns`` (DuckDB rounds it; ``ts_ns`` is read as JSON and must be a JSON
integer). Inside objects (``attrs``, ``error``, ``shapes``, ``statics``: staged as JSON text,
see ``ingest_read``) every key and JSON type is checked against the models. Everything
else pydantic checks is checked: types of numbers, lists and objects, required fields,
allowed values, non-negative ints, fields of another kind or span kind, and the schema's
limits (``ember.schemas.records``: line size, nesting, 64-bit integers), which
``ember validate`` applies too (``parse_line``). One difference remains inside objects: a
key given twice keeps its first value (pydantic keeps the last; both accept the line).

Idempotent: ``ingested_files`` keeps how many bytes of each file were read. The same
file again is skipped; a file that grew (a run still recording) is continued from its
last complete line; a file that was replaced (its first line changed, or it shrank) is
ingested again and replaces its old rows. A last line without a newline is a write cut
short: it is rejected as truncated and read again if the file grows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import duckdb
import pyarrow as pa

from ember.schemas import MIGRATIONS, Migrations
from ember.schemas.records import MAX_LINE_BYTES

from .checks import STRUCT_COLUMNS
from .db import (
    DEFAULT_DB,
    DERIVED_COLUMNS,
    RECORD_TABLES,
    RUNS_COLUMNS,
    Connection,
    _record_columns,
    connect,
)
from .ingest_plan import (
    FileResult,
    FileStatus,
    IngestSummary,
    Previous,
    _Plan,
    _Refused,
    cannot_read,
    expand_paths,
    plan_file,
)
from .ingest_read import _FileIngest, work_dir
from .schema_types import (
    READ_COLUMNS,
    TABLE_TYPES,
    field_defaults,
    sql_literal,
    transform_structure,
)

__all__ = [
    "MAX_LINE_BYTES",
    "FileResult",
    "FileStatus",
    "IngestSummary",
    "expand_paths",
    "ingest",
    "ingest_file",
]


_PREVIOUS_SQL = (
    "SELECT run_id, offset_bytes, lines, first_line_hash, schema_version "
    "FROM ingested_files WHERE file = ? AND status <> 'refused'"
)


def _previous(con: duckdb.DuckDBPyConnection, file: str) -> Previous | None:
    """What ``ingested_files`` holds of ``file`` (None: nothing, or a refusal)."""
    rows = con.execute(_PREVIOUS_SQL, [file]).fetchall()
    return Previous(*rows[0]) if rows else None


def _plan(con: duckdb.DuckDBPyConnection, path: Path, migrations: Migrations) -> _Plan | FileResult:
    file = str(path)

    def run_owner(run_id: str) -> str | None:
        other = con.execute(
            "SELECT file FROM runs WHERE run_id = ? AND file <> ?", [run_id, file]
        ).fetchall()
        return other[0][0] if other else None

    return plan_file(path, _previous(con, file), migrations, run_owner)


# ---------------------------------------------------------------- writing


def _select_for(kind: str, cols: dict[str, str]) -> str:
    defaults = field_defaults(kind)
    parts = []
    for c, t in cols.items():
        if c == "run_id" and kind != "meta":
            parts.append("$run_id")
            continue
        if c in STRUCT_COLUMNS:
            # staged as JSON text (ingest_read.STAGE_COLUMNS): the table's STRUCT of its kind
            table_type = TABLE_TYPES["meta" if kind == "runs" else kind][c]
            expr = f"json_transform(\"{c}\", '{transform_structure(table_type)}')"
        elif READ_COLUMNS.get(c) == "JSON" and t != "JSON":
            expr = f"json_extract_string(\"{c}\", '$')" if t == "VARCHAR" else f'CAST("{c}" AS {t})'
        else:
            expr = f'"{c}"'
        if c in defaults:
            expr = f"coalesce({expr}, {sql_literal(defaults[c], t)})"
        parts.append(expr)
    return ", ".join(parts)


def _insert_sql(kind: str) -> str:
    select = f"SELECT {_select_for(kind, _record_columns(kind))} FROM _stage WHERE kind = '{kind}'"
    derived = DERIVED_COLUMNS.get(kind)
    if not derived:
        return f"INSERT INTO {kind} {select}"
    # the derived columns are computed from the typed record columns, once, here
    names = ", ".join(f'"{c}"' for c in _record_columns(kind))
    exprs = ", ".join(expr for _, expr in derived.values())
    return f"INSERT INTO {kind} SELECT *, {exprs} FROM ({select}) AS record({names})"


def _insert_cache_sql() -> str:
    """The cache rows with their derived columns and order columns (``CACHE_ORDER_COLUMNS``).

    The views number events per (run, source, position) by ts_ns, then file order; doing
    that here, once per file, spares every query a sort of all cache events. A continued
    file numbers on from the rows of its run already stored (``prior_*``). Rows go in in
    file order, as in every other table. The windows sort narrow rows (the staging row
    id and the columns they need) and are joined back by row id: sorting the whole
    record, shapes and all, three times was most of the cost.
    """
    cols = _record_columns("cache")
    names = ", ".join(f'"{c}"' for c in cols)
    derived = ", ".join(f"{expr} AS {c}" for c, (_, expr) in DERIVED_COLUMNS["cache"].items())
    select = f"SELECT {_select_for('cache', cols)}, rowid FROM _stage WHERE kind = 'cache'"
    out = ", ".join(f"r.{c}" for c in [*cols, *DERIVED_COLUMNS["cache"]])
    return f"""
INSERT INTO cache
WITH record AS (
    SELECT *, {derived} FROM ({select}) AS r({names}, _rid)
),
w AS (
    SELECT _rid, source, position, lookup_key,
        row_number() OVER p AS ord_here,
        -- lookups so far, over the same sort as ord_here (one sort, not two)
        CASE WHEN action IN ('hit', 'miss')
            THEN sum(CAST(action IN ('hit', 'miss') AS BIGINT)) OVER p END AS seq_here,
        sum(CAST(action = 'miss' AS BIGINT)) OVER k AS life_here,
        sum(CAST(action = 'hit' AS BIGINT)) OVER k AS hits_here,
        sum(CAST(action = 'evict' AS BIGINT)) OVER k AS evictions_here
    FROM (SELECT _rid, source, position, lookup_key, action, ts_ns FROM record)
    WINDOW p AS (PARTITION BY source, position ORDER BY ts_ns, _rid
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW),
        k AS (PARTITION BY source, position, lookup_key ORDER BY ts_ns, _rid
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
w2 AS (
    SELECT *,
        CASE WHEN seq_here IS NOT NULL THEN lag(seq_here) OVER (
            PARTITION BY source, position, lookup_key, seq_here IS NULL ORDER BY seq_here
        ) END AS prev_here
    FROM w
),
prior_position AS (
    SELECT source, position, max(ord) AS ord, max(seq) AS seq
    FROM cache WHERE run_id = $run_id GROUP BY ALL
),
prior_key AS (
    SELECT source, position, lookup_key, max(seq) AS seq,
        count(*) FILTER (WHERE action = 'miss') AS misses,
        count(*) FILTER (WHERE action = 'hit') AS hits,
        count(*) FILTER (WHERE action = 'evict') AS evictions
    FROM cache WHERE run_id = $run_id GROUP BY ALL
)
SELECT {out},
    w.ord_here + coalesce(p.ord, 0),
    w.seq_here + coalesce(p.seq, 0),
    CASE WHEN w.seq_here IS NOT NULL THEN coalesce(w.prev_here + coalesce(p.seq, 0), k.seq) END,
    w.life_here + coalesce(k.misses, 0),
    w.hits_here + coalesce(k.hits, 0),
    w.evictions_here + coalesce(k.evictions, 0)
FROM record AS r
JOIN w2 AS w ON w._rid = r._rid
LEFT JOIN prior_position p ON p.source IS NOT DISTINCT FROM w.source
    AND p.position IS NOT DISTINCT FROM w.position
LEFT JOIN prior_key k ON k.source IS NOT DISTINCT FROM w.source
    AND k.position IS NOT DISTINCT FROM w.position
    AND k.lookup_key IS NOT DISTINCT FROM w.lookup_key
ORDER BY r._rid
"""


def _insert_memory_sql() -> str:
    """The memory rows with their running live bytes (``MEMORY_RUNNING_COLUMNS``).

    Running sums per (device, category) and per device, by ts_ns then file order; a
    continued file adds the sums of the rows of its run already stored.
    """
    cols = _record_columns("memory")
    names = ", ".join(f'"{c}"' for c in cols)
    select = f"SELECT {_select_for('memory', cols)}, rowid FROM _stage WHERE kind = 'memory'"
    out = ", ".join(f"w.{c}" for c in cols)
    delta = "CASE WHEN action = 'alloc' THEN bytes ELSE -bytes END"
    return f"""
INSERT INTO memory
WITH w AS (
    SELECT *,
        sum({delta}) OVER (PARTITION BY device, category ORDER BY ts_ns, _rid
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS category_here,
        sum({delta}) OVER (PARTITION BY device ORDER BY ts_ns, _rid
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS device_here
    FROM ({select}) AS r({names}, _rid)
),
prior_category AS (
    SELECT device, category, sum({delta}) AS live
    FROM memory WHERE run_id = $run_id GROUP BY ALL
),
prior_device AS (
    SELECT device, sum({delta}) AS live FROM memory WHERE run_id = $run_id GROUP BY ALL
)
SELECT {out},
    CAST(w.category_here + coalesce(pc.live, 0) AS BIGINT),
    CAST(w.device_here + coalesce(pd.live, 0) AS BIGINT)
FROM w
LEFT JOIN prior_category pc ON pc.device IS NOT DISTINCT FROM w.device
    AND pc.category IS NOT DISTINCT FROM w.category
LEFT JOIN prior_device pd ON pd.device IS NOT DISTINCT FROM w.device
ORDER BY w._rid
"""


_INSERTS = {kind: _insert_sql(kind) for kind in RECORD_TABLES}
_INSERTS["cache"] = _insert_cache_sql()
_INSERTS["memory"] = _insert_memory_sql()
_RUN_COLS = {c: t for c, t in RUNS_COLUMNS.items() if c not in ("started_at", "file")}
_INSERT_RUN = (
    f"INSERT INTO runs ({', '.join(chr(34) + c + chr(34) for c in _RUN_COLS)}, started_at, file) "
    f"SELECT {_select_for('meta', _RUN_COLS)}, make_timestamp_ns(wall_time_ns), $file "
    f"FROM _stage WHERE kind = 'meta'"
)


def _delete_run(con: duckdb.DuckDBPyConnection, run_id: str, file: str) -> None:
    for table in (*RECORD_TABLES, "runs"):
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
    con.execute("DELETE FROM rejected_lines WHERE file = ?", [file])


def _write(
    con: duckdb.DuckDBPyConnection, plan: _Plan, work: _FileIngest, message: str | None
) -> int:
    file = str(plan.path)
    con.execute("BEGIN TRANSACTION")
    try:
        if plan.replaced_run is not None:
            _delete_run(con, plan.replaced_run, file)
        elif plan.start == 0:
            con.execute("DELETE FROM rejected_lines WHERE file = ?", [file])
        else:
            # a partial last line rejected before is read again now
            con.execute(
                "DELETE FROM rejected_lines WHERE file = ? AND byte_offset >= ?", [file, plan.start]
            )
        records = 0
        if plan.start == 0:
            (metas,) = con.execute("SELECT count(*) FROM _stage WHERE kind = 'meta'").fetchall()[0]
            if metas:
                con.execute(_INSERT_RUN, {"file": file})
                records += metas
        for kind in RECORD_TABLES:
            cur = con.execute(_INSERTS[kind], {"run_id": plan.run_id})
            records += cur.fetchall()[0][0]
        if work.rejected:
            # one Arrow table, not executemany: that inserts row by row (36 k rejected
            # lines took 90 s)
            rejected = pa.table(
                {
                    "line": [r.line for r in work.rejected],
                    "byte_offset": [r.offset for r in work.rejected],
                    "reason": [r.reason for r in work.rejected],
                    "raw": [r.raw for r in work.rejected],
                }
            )
            con.register("_rejected", rejected)
            try:
                con.execute(
                    "INSERT INTO rejected_lines SELECT $file, line, byte_offset, reason, raw, "
                    "$run_id, now()::TIMESTAMP FROM _rejected",
                    {"file": file, "run_id": plan.run_id},
                )
            finally:
                con.unregister("_rejected")
        status = "partial" if work.partial else "ok"
        rejected_total = con.execute(
            "SELECT count(*) FROM rejected_lines WHERE file = ?", [file]
        ).fetchall()[0][0]
        con.execute(
            """
            INSERT INTO ingested_files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now()::TIMESTAMP)
            ON CONFLICT (file) DO UPDATE SET
                run_id = excluded.run_id, status = excluded.status, message = excluded.message,
                offset_bytes = excluded.offset_bytes, lines = excluded.lines,
                records = CASE WHEN ? THEN ingested_files.records ELSE 0 END + excluded.records,
                rejected = excluded.rejected,
                first_line_hash = excluded.first_line_hash,
                schema_version = excluded.schema_version,
                ingested_at = excluded.ingested_at
            """,
            [
                file,
                plan.run_id,
                status,
                message,
                work.end,
                plan.base_line + work.lines_read,
                records,
                rejected_total,
                plan.first_hash,
                plan.version,
                plan.continued,
            ],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return records


def _refuse(con: duckdb.DuckDBPyConnection, path: Path, message: str) -> None:
    file = str(path)
    if _previous(con, file) is not None:
        # a file that was ingested before and is unreadable now keeps its rows
        return
    con.execute(
        """
        INSERT INTO ingested_files VALUES (?, NULL, 'refused', ?, 0, 0, 0, 0, NULL, NULL,
            now()::TIMESTAMP)
        ON CONFLICT (file) DO UPDATE SET status = 'refused', message = excluded.message,
            ingested_at = excluded.ingested_at
        """,
        [file, message],
    )


def ingest_file(
    con: Connection, path: Path, migrations: Migrations = MIGRATIONS, *, strict: bool = False
) -> FileResult:
    """Ingest one file on an open connection (see the module doc).

    ``strict`` sends every line through pydantic (the slow path): it also rejects what the
    typed read does not see (a field no kind has, a number given for a text field).
    """
    t0 = time.perf_counter()
    duck = con.duck
    try:
        plan = _plan(duck, path, migrations)
    except _Refused as exc:
        _refuse(duck, path, str(exc))
        return FileResult(str(path), "refused", message=str(exc), seconds=time.perf_counter() - t0)
    except OSError as exc:
        msg = cannot_read(exc)
        _refuse(duck, path, msg)
        return FileResult(str(path), "refused", message=msg, seconds=time.perf_counter() - t0)
    if isinstance(plan, FileResult):
        plan.seconds = time.perf_counter() - t0
        return plan
    try:
        with work_dir("ember-ingest-") as tmp:
            work = _FileIngest(duck, plan, migrations, tmp, strict)
            work.run()
            message = work.partial
            if work.rejected and not message:
                message = f"{len(work.rejected)} line(s) rejected; see rejected_lines"
            records = _write(duck, plan, work, message)
    finally:
        duck.execute("DROP TABLE IF EXISTS _stage")
    return FileResult(
        str(path),
        "partial" if work.partial else "ok",
        records=records,
        rejected=len(work.rejected),
        message=message,
        run_id=plan.run_id,
        bytes_read=work.end - plan.start,
        seconds=time.perf_counter() - t0,
        continued=plan.continued,
        replaced=plan.replaced_run is not None,
        slow_path=work.slow_path,
    )


def ingest(
    paths: Iterable[str | os.PathLike[str]],
    db: str | os.PathLike[str] = DEFAULT_DB,
    *,
    on_file: Callable[[FileResult], None] | None = None,
    migrations: Migrations = MIGRATIONS,
    threads: int | None = None,
    wait: float | None = None,
    strict: bool = False,
) -> IngestSummary:
    """Ingest trace files, folders or globs into the database ``db``.

    The database is opened for each file and closed after it, so that other processes
    (a dashboard) can read between files; ``on_file`` is called after each file. Opening
    waits up to ``wait`` seconds for readers and other writers to let go (by default
    ``INGEST_WAIT_S``, longer than a dashboard query may run).
    """
    files = expand_paths(paths)
    summary = IngestSummary()
    t0 = time.perf_counter()
    for path in files:
        with connect(db, wait=wait, threads=threads) as con:
            result = ingest_file(con, path, migrations, strict=strict)
        summary.files.append(result)
        if on_file is not None:
            on_file(result)
    summary.seconds = time.perf_counter() - t0
    return summary
