"""Ingest JSONL traces into the DuckDB file: typed, validated, idempotent per file.

How files go in (a batch of files is one transaction: many small traces, one per job, go in
together, ``BATCH_FILES``; the results, rows and rejected lines are those of one file at a
time, and a reader sees whole files only):

1. ``ingest_plan`` decides what to read from ``ingested_files`` and the file as it is now
   (new, unchanged, grown, replaced, refused as a whole; see its doc). The first line must
   be ``meta``: it names the run and the schema version. A newer version, a missing or
   invalid meta, an empty file or a run id that another file already brought are refused
   as a whole (``ingested_files.status = 'refused'``).
2. The batch is checked and staged: each line by the checks compiled from the pydantic
   models (``ingest.line_check``; pydantic explains what they refuse), then read by DuckDB
   kind by kind with each kind's own table types (``ingest.kinds``, the split read; a
   continued file too), or, for an older version, ``strict`` or lines DuckDB refuses, into the
   one staging table ``_stage`` (``ingest.read``: its slow path runs pydantic on every
   line of a file DuckDB refuses).
3. Here: the staged rows go into the record tables (with the columns derived at ingest),
   the rejected lines into ``rejected_lines``, and what was read into ``ingested_files``,
   in one transaction. From ``_stage``: one statement per table for the whole batch. The
   split read opens the transaction before its check and inserts each segment's rows
   (but cache and memory, numbered over the batch, inserted last) while the next segment
   is checked (``_split``); it commits after the check of the batch's last line, and a
   DuckDB error rolls it back and takes ``_stage``. If the transaction fails, each file
   of the batch is written alone.

Every line is checked against the models before it is stored (``ingest.line_check``, with
pydantic for what it refuses): types (integers must be JSON integers: ``1.5``, ``"7"`` and
``true`` are refused), required fields, allowed values, unknown fields at every level, fields
of another kind or span kind, and the schema's limits (``ember.schemas.records``: line size,
nesting, 64-bit integers, the bounds of times), which ``ember validate`` applies too
(``parse_line``). Default and ``strict`` ingest reject the same lines (``strict`` sends every
line through pydantic, the slow path). One gap: a key given twice in one object is judged by
its last value (msgspec and pydantic keep the last) but DuckDB stores the first, unchecked (a
first value DuckDB cannot cast makes the batch fail instead).

Idempotent: ``ingested_files`` keeps how many bytes of each file were read. The same
file again is skipped; a file that grew (a run still recording) is continued from its
last complete line; a file that was replaced (its first line changed, or it shrank) is
ingested again and replaces its old rows. A last line without a newline is a write cut
short: it is rejected as truncated and read again if the file grows.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from ember.analysis.checks import STRUCT_COLUMNS
from ember.analysis.db import (
    DEFAULT_DB,
    DERIVED_COLUMNS,
    ORDERED_TABLES,
    RECORD_TABLES,
    RUNS_COLUMNS,
    Connection,
    connect,
    record_columns,
    refill_ordered_sql,
)
from ember.analysis.derived import (
    CACHE_KEY,
    CACHE_KEY_COUNTS,
    CACHE_LOOKUP,
    CACHE_POSITION,
    MEMORY_DELTA,
    MEMORY_SUMS,
    RUNNING,
    counted,
)
from ember.analysis.ingest.batch import batch_then_each
from ember.analysis.ingest.kinds import (
    ORDERED_KINDS,
    SplitRefused,
    drop_kinds,
    split_works,
    splittable,
    stage_kinds,
)
from ember.analysis.ingest.plan import (
    FilePlan,
    FileResult,
    FileStatus,
    IngestSummary,
    Previous,
    Refused,
    cannot_read,
    expand_paths,
    first_piece,
    plan_file,
    run_taken,
)
from ember.analysis.ingest.read import FileIngest, check, stage, work_dir
from ember.analysis.schema_types import (
    READ_COLUMNS,
    TABLE_TYPES,
    field_defaults,
    sql_literal,
    transform_structure,
)
from ember.schemas import MIGRATIONS, Migrations
from ember.schemas.records import MAX_LINE_BYTES

__all__ = [
    "MAX_LINE_BYTES",
    "FileResult",
    "FileStatus",
    "IngestInterrupted",
    "IngestSummary",
    "expand_paths",
    "ingest",
    "ingest_file",
]


BATCH_FILES = 256
"""At most this many files are staged, checked and written together (one transaction)."""
BATCH_BYTES = 64 << 20
"""... and at most this many bytes (a larger file is a batch of its own)."""
PIECE_BYTES = 512 << 20
"""A file larger than this goes in in pieces of at most this many bytes (whole lines), one
batch and one transaction each, as a file that grew would: the memory an ingest takes is
bounded by the piece, not the file (a reader may see a big file's first pieces before the
rest; an ingest stopped between pieces continues from the last one written)."""
_WINDOW = 4096  # files whose ``ingested_files`` rows are read in one query


def _previous(con: duckdb.DuckDBPyConnection, files: list[str]) -> dict[str, Previous]:
    """What ``ingested_files`` holds of ``files`` (not refusals), by file."""
    rows = con.execute(
        "SELECT file, run_id, offset_bytes, lines, first_line_hash, schema_version, size_bytes "
        "FROM ingested_files WHERE status <> 'refused' AND file IN (SELECT unnest($files))",
        {"files": files},
    ).fetchall()
    return {r[0]: Previous(*r[1:]) for r in rows}


# ---------------------------------------------------------------- writing


# the run id of a staged row: its file's (``$runs`` lists them by ``_f``)
RUN_ID_SQL = "CAST($runs AS VARCHAR[])[_f + 1]"


def select_for(
    kind: str, cols: dict[str, str], run_id_sql: str = RUN_ID_SQL, typed: bool = False
) -> str:
    """The SQL of a kind's table columns from the staged rows (defaults filled in)."""
    return ", ".join(_column_sql(kind, cols, run_id_sql, typed).values())


def _column_sql(
    kind: str, cols: dict[str, str], run_id_sql: str = RUN_ID_SQL, typed: bool = False
) -> dict[str, str]:
    """The SQL of each of a kind's table columns from the staged rows (defaults filled in):
    from ``_stage`` (``ingest.read.STAGE_COLUMNS``), or, ``typed``, from a kind's own
    staging table (``ingest.kinds``: the table's types already)."""
    defaults = field_defaults(kind)
    parts = {}
    for c, t in cols.items():
        if c == "run_id" and kind != "meta":
            parts[c] = run_id_sql
            continue
        if typed:
            expr = f'"{c}"'
        elif c in STRUCT_COLUMNS:
            # staged as JSON text (ingest_read.STAGE_COLUMNS): the table's STRUCT of its kind
            table_type = TABLE_TYPES["meta" if kind == "runs" else kind][c]
            expr = f"json_transform(\"{c}\", '{transform_structure(table_type)}')"
        elif READ_COLUMNS.get(c) == "JSON" and t != "JSON":
            expr = f"json_extract_string(\"{c}\", '$')" if t == "VARCHAR" else f'CAST("{c}" AS {t})'
        else:
            expr = f'"{c}"'
        if c in defaults:
            expr = f"coalesce({expr}, {sql_literal(defaults[c], t)})"
        parts[c] = expr
    return parts


def _source(kind: str, typed: bool) -> str:
    """Where a kind's staged rows are: in ``_stage`` (``ingest.read``), or, ``typed``, in its
    own staging table (``ingest.kinds``)."""
    return f"_stage_{kind}" if typed else f"_stage WHERE kind = '{kind}'"


def _insert_sql(kind: str, typed: bool = False) -> str:
    cols = select_for(kind, record_columns(kind), typed=typed)
    select = f"SELECT {cols} FROM {_source(kind, typed)}"
    derived = DERIVED_COLUMNS.get(kind)
    if not derived:
        return f"INSERT INTO {kind} {select}"
    # the derived columns are computed from the typed record columns, once, here
    names = ", ".join(f'"{c}"' for c in record_columns(kind))
    exprs = ", ".join(expr for _, expr in derived.values())
    return f"INSERT INTO {kind} SELECT *, {exprs} FROM ({select}) AS record({names})"


# the cache record's columns that its derived columns are computed from
_CACHE_OBJECT = ("key", "shapes", "statics")
# the runs of the batch: what a continued file's stored rows are looked up by
_BATCH_RUNS = "run_id IN (SELECT unnest(CAST($runs AS VARCHAR[])))"


def _same(columns: Iterable[str], a: str, b: str) -> str:
    """``a`` and ``b`` agree on ``columns`` (NULL equal to NULL)."""
    return " AND ".join(f"{a}.{c} IS NOT DISTINCT FROM {b}.{c}" for c in columns)


def _cache_record_sql(typed: bool) -> str:
    """CTEs ``objects`` and ``record``: the staged cache rows, typed, with their derived
    columns (``DERIVED_COLUMNS``) and staging row id ``_rid``.

    Each distinct (key, shapes, static values) is typed once: a run repeats them call
    after call (they are what the cache is keyed on), and turning them into STRUCTs and
    text was most of the cost of each row."""
    exprs = _column_sql("cache", record_columns("cache"), typed=typed)
    derived = ", ".join(f"{expr} AS {c}" for c, (_, expr) in DERIVED_COLUMNS["cache"].items())
    own = ", ".join(f'{e} AS "{c}"' for c, e in exprs.items() if c not in _CACHE_OBJECT)
    as_text = ", ".join(f'"{c}" AS _{c}' for c in _CACHE_OBJECT)
    if typed:
        # staged typed (``ingest.kinds``): the derived columns of each row as it is
        everything = ", ".join(f'{e} AS "{c}"' for c, e in exprs.items())
        return f"""
record AS (
    SELECT *, {derived} FROM (
        SELECT {everything}, rowid AS _rid FROM {_source("cache", typed)}
    )
)"""
    return f"""
objects AS (
    SELECT *, {derived} FROM (
        SELECT {", ".join(f'"{c}" AS _{c}, {exprs[c]} AS "{c}"' for c in _CACHE_OBJECT)}
        FROM (SELECT DISTINCT {", ".join(f'"{c}"' for c in _CACHE_OBJECT)}
            FROM {_source("cache", typed)})
    )
),
record AS (
    SELECT r.* EXCLUDE ({", ".join(f"_{c}" for c in _CACHE_OBJECT)}),
        {", ".join(f'o."{c}"' for c in _CACHE_OBJECT)},
        {", ".join(f"o.{c}" for c in DERIVED_COLUMNS["cache"])}
    FROM (SELECT {own}, {as_text}, rowid AS _rid FROM {_source("cache", typed)}) AS r
    JOIN objects AS o ON {_same([f"_{c}" for c in _CACHE_OBJECT], "r", "o")}
)"""


def _cache_windows_sql() -> str:
    """CTEs ``ids`` (a number ``pid`` for each ``CACHE_POSITION``, ``kid`` for each
    ``CACHE_KEY``) and ``w2``: the order columns of the batch's rows alone (``*_here``).

    The windows sort narrow rows partitioned by those numbers: sorting the whole record
    was most of the cost, and so was partitioning by the text columns. Two sorts: by
    position, then by key, where the previous lookup of a key is the last non-null
    ``seq`` before."""
    by_position = f"PARTITION BY pid ORDER BY ts_ns, _rid {RUNNING}"
    counts = ", ".join(f"sum({counted(e)}) OVER k AS {c}_here" for c, e in CACHE_KEY_COUNTS.items())
    return f"""
ids AS (
    SELECT *, dense_rank() OVER (ORDER BY {", ".join(CACHE_POSITION)}) AS pid,
        row_number() OVER () AS kid
    FROM (SELECT DISTINCT {", ".join(CACHE_KEY)} FROM record)
),
narrow AS (
    SELECT r._rid, i.pid, i.kid, r.action, r.ts_ns
    FROM record AS r JOIN ids AS i ON {_same(CACHE_KEY, "i", "r")}
),
w AS (
    SELECT _rid, kid, action, ts_ns, row_number() OVER ({by_position}) AS ord_here,
        CASE WHEN {CACHE_LOOKUP} THEN sum({counted(CACHE_LOOKUP)}) OVER ({by_position})
            END AS seq_here
    FROM narrow
),
w2 AS (
    SELECT _rid, kid, ord_here, seq_here,
        CASE WHEN seq_here IS NOT NULL THEN lag(seq_here IGNORE NULLS) OVER k END AS prev_here,
        {counts}
    FROM w
    WINDOW k AS (PARTITION BY kid ORDER BY ts_ns, _rid {RUNNING})
)"""


def _cache_prior_sql() -> str:
    """CTE ``prior``: what the rows of the batch's runs already stored add, per ``kid`` (a
    continued file numbers on from them; else zeros)."""
    counts = ", ".join(f"count(*) FILTER (WHERE {e}) AS {c}" for c, e in CACHE_KEY_COUNTS.items())
    return f"""
prior_position AS (
    SELECT {", ".join(CACHE_POSITION)}, max(ord) AS ord, max(seq) AS seq
    FROM cache WHERE {_BATCH_RUNS} GROUP BY ALL
),
prior_key AS (
    SELECT {", ".join(CACHE_KEY)}, max(seq) AS seq, {counts}
    FROM cache WHERE {_BATCH_RUNS} GROUP BY ALL
),
prior AS (
    SELECT i.kid, coalesce(p.ord, 0) AS ord, coalesce(p.seq, 0) AS seq, k.seq AS key_seq,
        {", ".join(f"coalesce(k.{c}, 0) AS {c}" for c in CACHE_KEY_COUNTS)}
    FROM ids AS i
    LEFT JOIN prior_position p ON {_same(CACHE_POSITION, "p", "i")}
    LEFT JOIN prior_key k ON {_same(CACHE_KEY, "k", "i")}
)"""


def _insert_cache_sql(typed: bool = False) -> str:
    """The cache rows with their derived columns and order columns (``CACHE_ORDER_COLUMNS``,
    defined in ``analysis.derived``).

    The views number events per (run, source, position) by ts_ns, then file order; doing
    that here, once per file, spares every query a sort of all cache events. A continued
    file numbers on from the rows of its run already stored (``prior``). Rows go in in
    file order, as in every other table.
    """
    out = ", ".join(f"r.{c}" for c in [*record_columns("cache"), *DERIVED_COLUMNS["cache"]])
    return f"""
INSERT INTO cache
WITH {_cache_record_sql(typed)},
{_cache_windows_sql()},
{_cache_prior_sql()}
SELECT {out},
    w.ord_here + p.ord,
    w.seq_here + p.seq,
    CASE WHEN w.seq_here IS NOT NULL THEN coalesce(w.prev_here + p.seq, p.key_seq) END,
    {", ".join(f"w.{c}_here + p.{c}" for c in CACHE_KEY_COUNTS)}
FROM record AS r
JOIN w2 AS w ON w._rid = r._rid
JOIN prior AS p ON p.kid = w.kid
ORDER BY r._rid
"""


def _insert_memory_sql(typed: bool = False) -> str:
    """The memory rows with their running live bytes (``MEMORY_RUNNING_COLUMNS``, defined in
    ``analysis.derived``).

    Running sums (``MEMORY_SUMS``) by ts_ns then file order; a continued file adds the
    sums of the rows of its run already stored. As for the cache, the windows sort narrow
    rows partitioned by integer ids (``{column}_id``), joined back by row id.
    """
    cols = record_columns("memory")
    names = ", ".join(f'"{c}"' for c in cols)
    select = (
        f"SELECT {select_for('memory', cols, typed=typed)}, rowid FROM {_source('memory', typed)}"
    )
    finest = max(MEMORY_SUMS.values(), key=len)
    ids = ", ".join(
        f"dense_rank() OVER (ORDER BY {', '.join(p)}) AS {c}_id" for c, p in MEMORY_SUMS.items()
    )
    sums = ", ".join(
        f"sum({MEMORY_DELTA}) OVER (PARTITION BY {c}_id ORDER BY ts_ns, _rid {RUNNING}) AS {c}_here"
        for c in MEMORY_SUMS
    )
    priors = ",\n".join(
        f"prior_{c} AS (SELECT {', '.join(p)}, sum({MEMORY_DELTA}) AS live\n"
        f"    FROM memory WHERE {_BATCH_RUNS} GROUP BY ALL)"
        for c, p in MEMORY_SUMS.items()
    )
    joins = "\n".join(
        f"LEFT JOIN prior_{c} ON {_same(p, f'prior_{c}', 'i')}" for c, p in MEMORY_SUMS.items()
    )
    return f"""
INSERT INTO memory
WITH record AS (SELECT * FROM ({select}) AS r({names}, _rid)),
ids AS (
    SELECT *, row_number() OVER () AS cid, {ids}
    FROM (SELECT DISTINCT {", ".join(finest)} FROM record)
),
w AS (
    SELECT _rid, cid, {sums}
    FROM (
        SELECT r._rid, r.ts_ns, r.action, r.bytes, i.*
        FROM record AS r JOIN ids AS i ON {_same(finest, "i", "r")}
    )
),
{priors},
-- what the rows already stored add, per (run, device, category) (a continued file)
prior AS (
    SELECT i.cid, {", ".join(f"coalesce(prior_{c}.live, 0) AS {c}" for c in MEMORY_SUMS)}
    FROM ids AS i
{joins}
)
SELECT {", ".join(f"r.{c}" for c in cols)},
    -- NULL past 2**63 - 1 bytes (absurd sizes; one such run must not stop the others)
    {", ".join(f"TRY_CAST(w.{c}_here + p.{c} AS BIGINT)" for c in MEMORY_SUMS)}
FROM record AS r
JOIN w ON w._rid = r._rid
JOIN prior AS p ON p.cid = w.cid
ORDER BY r._rid
"""


def _inserts(typed: bool) -> dict[str, str]:
    """The insert of each record table (and ``runs``) from the staged rows."""
    out = {kind: _insert_sql(kind, typed) for kind in RECORD_TABLES}
    out["cache"] = _insert_cache_sql(typed)
    out["memory"] = _insert_memory_sql(typed)
    cols = {c: t for c, t in RUNS_COLUMNS.items() if c not in ("started_at", "file")}
    out["runs"] = (
        f"INSERT INTO runs ({', '.join(chr(34) + c + chr(34) for c in cols)}, started_at, file) "
        f"SELECT {select_for('meta', cols, typed=typed)}, "
        f"make_timestamp_ns(CAST(wall_time_ns AS BIGINT)), CAST($files AS VARCHAR[])[_f + 1] "
        f"FROM {_source('meta', typed)}"
    )
    return out


_INSERTS = _inserts(typed=False)
TYPED_INSERTS = _inserts(typed=True)
"""The inserts from the kinds' own staging tables (``ingest.kinds``)."""


_DONE_TYPES = {
    "file": "VARCHAR",
    "run_id": "VARCHAR",
    "status": "VARCHAR",
    "message": "VARCHAR",
    "offset_bytes": "BIGINT",
    "lines": "BIGINT",
    "records": "BIGINT",
    "rejected": "BIGINT",
    "first_line_hash": "VARCHAR",
    "schema_version": "INTEGER",
    "size_bytes": "BIGINT",
}


@contextlib.contextmanager
def _transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction: committed if the block ends, else rolled back."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        # (an interrupt that lands just after the commit leaves no transaction to roll back)
        with contextlib.suppress(duckdb.Error):
            con.execute("ROLLBACK")
        raise


def _write(con: duckdb.DuckDBPyConnection, works: list[FileIngest]) -> list[int]:
    """Write a batch staged in ``_stage`` and checked, in one transaction; the records of
    each file."""
    plans = [w.plan for w in works]
    files = [str(p.path) for p in plans]
    runs = [p.run_id for p in plans]
    staged = dict(con.execute("SELECT _f, count(*) FROM _stage GROUP BY _f").fetchall())
    records = [staged.get(w.f, 0) for w in works]
    with _transaction(con):
        _delete_replaced(con, plans)
        stored = _StoredEnds(con, plans)
        con.execute(_INSERTS["runs"], {"files": files})
        for kind in RECORD_TABLES:
            con.execute(_INSERTS[kind], {"runs": runs})
        stored.refill(con)
        _write_files(con, works, records)
    return records


def _write_files(
    con: duckdb.DuckDBPyConnection, works: list[FileIngest], records: list[int]
) -> None:
    """The batch's rejected lines and its ``ingested_files`` rows (``records``: of each file)."""
    _insert_rejected(con, works)
    _upsert_ingested(con, _ingested_rows(con, works, records))


class _StoredEnds:
    """What the runs of a batch's continued files stored in the ordered tables, noted before
    the batch's rows are inserted: each table's last rowid and each run's latest ts_ns.

    A continued file's rows are numbered on from its run's stored rows (the cache order
    columns, the memory running sums), which is what one ingest of the whole file gives as
    long as they do not go back in time. A growth with a row earlier than a stored one
    (another thread's record written late) changes the numbers of the stored rows after
    it: ``refill`` then computes the run's columns again over all its rows."""

    def __init__(self, con: duckdb.DuckDBPyConnection, plans: list[FilePlan]) -> None:
        runs = [p.run_id for p in plans if p.continued]
        self.ends: dict[str, tuple[int, dict[str, int]]] = {}
        for table in ORDERED_TABLES if runs else ():
            last = con.execute(f"SELECT coalesce(max(rowid), -1) FROM {table}").fetchone()
            ends = con.execute(
                f"SELECT run_id, max(ts_ns) FROM {table} "
                "WHERE run_id IN (SELECT unnest(CAST($runs AS VARCHAR[]))) GROUP BY run_id",
                {"runs": runs},
            ).fetchall()
            if ends:
                self.ends[table] = (last[0] if last else -1, dict(ends))

    def refill(self, con: duckdb.DuckDBPyConnection) -> None:
        """Compute the ordered columns again for the runs whose new rows go back in time."""
        for table, (last, ends) in self.ends.items():
            late = con.execute(
                f"SELECT DISTINCT t.run_id FROM {table} AS t JOIN (SELECT "
                "unnest(CAST($runs AS VARCHAR[])) AS run_id, unnest(CAST($ends AS BIGINT[])) "
                "AS ts_ns) AS s ON s.run_id = t.run_id WHERE t.rowid > $last AND t.ts_ns < s.ts_ns",
                {"runs": list(ends), "ends": list(ends.values()), "last": last},
            ).fetchall()
            if late:
                con.execute(
                    refill_ordered_sql(
                        table, "run_id IN (SELECT unnest(CAST($late AS VARCHAR[])))"
                    ),
                    {"late": [r for (r,) in late]},
                )


def _delete_replaced(con: duckdb.DuckDBPyConnection, plans: list[FilePlan]) -> None:
    """Delete the rows of the runs the batch's files replace, and the rejected lines that
    are read again."""
    replaced = [p.replaced_run for p in plans if p.replaced_run is not None]
    if replaced:
        for table in (*RECORD_TABLES, "runs"):
            con.execute(
                f"DELETE FROM {table} WHERE run_id IN (SELECT unnest($runs))",
                {"runs": replaced},
            )
    # a partial last line rejected before is read again now; a file read from the
    # start replaces all of its rejected lines
    con.execute(
        "DELETE FROM rejected_lines WHERE EXISTS (SELECT 1 FROM _files b "
        "WHERE b.file = rejected_lines.file AND rejected_lines.byte_offset >= b.start)"
    )


def _insert_rejected(con: duckdb.DuckDBPyConnection, works: list[FileIngest]) -> None:
    """Insert the batch's rejected lines."""
    rejected = [(w, r) for w in works for r in w.rejected]
    if not rejected:
        return
    # lists unnested in one statement, not executemany: that inserts row by row
    # (36 k rejected lines took 90 s); not an Arrow table either: DuckDB imports
    # pandas to read one (a few tenths of a second, once per process)
    con.execute(
        "INSERT INTO rejected_lines SELECT unnest(CAST($file AS VARCHAR[])), "
        "unnest(CAST($line AS BIGINT[])), unnest(CAST($offset AS BIGINT[])), "
        "unnest(CAST($reason AS VARCHAR[])), unnest(CAST($raw AS VARCHAR[])), "
        "unnest(CAST($run_id AS VARCHAR[])), now()::TIMESTAMP",
        {
            "file": [str(w.plan.path) for w, _ in rejected],
            "line": [r.line for _, r in rejected],
            "offset": [r.offset for _, r in rejected],
            "reason": [r.reason for _, r in rejected],
            "raw": [r.raw for _, r in rejected],
            "run_id": [w.plan.run_id for w, _ in rejected],
        },
    )


def _ingested_rows(
    con: duckdb.DuckDBPyConnection, works: list[FileIngest], records: list[int]
) -> dict[str, list[Any]]:
    """The ``ingested_files`` rows of the batch (column -> values), after its records and
    rejected lines were inserted."""
    plans = [w.plan for w in works]
    files = [str(p.path) for p in plans]
    totals = dict(
        con.execute(
            "SELECT file, count(*) FROM rejected_lines "
            "WHERE file IN (SELECT unnest($files)) GROUP BY file",
            {"files": files},
        ).fetchall()
    )
    before = dict(
        con.execute(
            "SELECT file, records FROM ingested_files WHERE file IN (SELECT unnest($files))",
            {"files": [str(p.path) for p in plans if p.continued]},
        ).fetchall()
    )
    return {
        "file": files,
        "run_id": [p.run_id for p in plans],
        "status": ["partial" if w.partial else "ok" for w in works],
        # the file's rejected lines so far (all of them, for a file read in pieces)
        "message": [
            w.partial
            or (f"{totals[f]} line(s) rejected; see rejected_lines" if totals.get(f) else None)
            for w, f in zip(works, files, strict=True)
        ],
        "offset_bytes": [w.end for w in works],
        "lines": [w.plan.base_line + w.lines_read for w in works],
        "records": [before.get(f, 0) + n for f, n in zip(files, records, strict=True)],
        "rejected": [totals.get(f, 0) for f in files],
        "first_line_hash": [p.first_hash for p in plans],
        "schema_version": [p.version for p in plans],
        "size_bytes": [p.size for p in plans],
    }


def _upsert_ingested(con: duckdb.DuckDBPyConnection, done: dict[str, list[Any]]) -> None:
    """Insert or replace the batch's ``ingested_files`` rows (``_ingested_rows``)."""
    columns = ", ".join(f"unnest(CAST(${c} AS {_DONE_TYPES[c]}[])) AS {c}" for c in done)
    con.execute(
        f"""
        INSERT INTO ingested_files BY NAME
        SELECT {columns}, now()::TIMESTAMP AS ingested_at
        ON CONFLICT (file) DO UPDATE SET
            run_id = excluded.run_id, status = excluded.status,
            message = excluded.message, offset_bytes = excluded.offset_bytes,
            lines = excluded.lines, records = excluded.records,
            rejected = excluded.rejected, first_line_hash = excluded.first_line_hash,
            schema_version = excluded.schema_version,
            ingested_at = excluded.ingested_at, size_bytes = excluded.size_bytes
        """,
        done,
    )


def _refuse(con: duckdb.DuckDBPyConnection, path: Path, message: str) -> None:
    file = str(path)
    if _previous(con, [file]):
        # a file that was ingested before and is unreadable now keeps its rows
        return
    con.execute(
        """
        INSERT INTO ingested_files (file, run_id, status, message, offset_bytes, lines,
            records, rejected, first_line_hash, schema_version, ingested_at, size_bytes)
        VALUES (?, NULL, 'refused', ?, 0, 0, 0, 0, NULL, NULL, now()::TIMESTAMP, NULL)
        ON CONFLICT (file) DO UPDATE SET status = 'refused', message = excluded.message,
            ingested_at = excluded.ingested_at
        """,
        [file, message],
    )


# the span records the run of each continued file stored (``checks.span_problems_sql``'s
# ``prior``: a second start, or a second end, of one of their ids is rejected)
_PRIOR_SPANS_SQL = """
CREATE OR REPLACE TEMP VIEW _prior_spans AS
SELECT b.f AS _f, 'span_start' AS kind, s.span_id
FROM span_start s JOIN _files b ON s.run_id = b.run_id WHERE NOT b.from_start
UNION ALL
SELECT b.f AS _f, 'span_end' AS kind, e.span_id
FROM span_end e JOIN _files b ON e.run_id = b.run_id WHERE NOT b.from_start
"""


def _split(
    con: duckdb.DuckDBPyConnection,
    batch: list[FilePlan],
    migrations: Migrations,
    tmp: Path,
    strict: bool,
) -> tuple[list[FileIngest], list[int]] | None:
    """The batch checked, staged by kind and written in one transaction (``ingest.kinds``:
    each segment's rows are inserted while the next segment is checked; the transaction is
    committed after the last line of the batch was checked), or None, rolled back, where
    it takes the ``_stage`` path (an older version, ``strict``, a line
    over the limit, or DuckDB refused a kind's lines)."""
    if not splittable(batch, migrations, strict):
        return None
    works = split_works(con, batch, migrations, tmp)
    if works is None:
        return None
    files = [str(p.path) for p in batch]
    runs = [p.run_id for p in batch]

    def take(kind: str) -> None:  # a segment's rows of a kind that is not ordered
        if kind == "meta":
            con.execute(TYPED_INSERTS["runs"], {"files": files})
        else:
            con.execute(TYPED_INSERTS[kind], {"runs": runs})

    try:
        with _transaction(con):
            _delete_replaced(con, batch)
            stored = _StoredEnds(con, batch)
            kinds = stage_kinds(con, works, tmp, take)
            for kind in RECORD_TABLES:
                if kind in ORDERED_KINDS and kind in kinds:
                    con.execute(TYPED_INSERTS[kind], {"runs": runs})
            stored.refill(con)
            records = [sum(counts[w.f] for counts in kinds.values()) for w in works]
            _write_files(con, works, records)
    except SplitRefused:
        drop_kinds(con)
        return None
    except duckdb.InterruptException:
        raise
    except duckdb.Error:
        # DuckDB refused a kind's lines that the checks accepted (rolled back): the batch
        # goes through ``_stage``, whose slow path finds and rejects those lines
        drop_kinds(con)
        return None
    return works, records


def _ingest_planned(
    con: duckdb.DuckDBPyConnection, plans: list[FilePlan], migrations: Migrations, strict: bool
) -> list[FileResult]:
    """Stage, check and write planned files together (one transaction); if that fails,
    each file alone (``batch_then_each``)."""

    def attempt(batch: list[FilePlan]) -> tuple[list[FileIngest], list[int]]:
        try:
            with work_dir("ember-ingest-") as tmp:
                split = _split(con, batch, migrations, tmp, strict)
                if split is not None:
                    return split
                works = stage(con, batch, migrations, tmp, strict)
                con.execute(_PRIOR_SPANS_SQL)
                check(con, works)
                return works, _write(con, works)
        except duckdb.InterruptException:
            # Ctrl-C (DuckDB stops the query it runs): stop, never try the files one by one
            raise KeyboardInterrupt from None
        except Exception:
            if _CTRL_C.is_set():
                raise KeyboardInterrupt from None
            raise
        finally:
            con.execute("DROP TABLE IF EXISTS _stage")
            drop_kinds(con)

    def finish(batch: list[FilePlan], done: tuple[list[FileIngest], list[int]]) -> list[FileResult]:
        works, records = done
        return [w.result(n, 0.0) for w, n in zip(works, records, strict=True)]

    return batch_then_each(plans, attempt, finish)


def _ingest_batch(
    con: duckdb.DuckDBPyConnection, paths: list[Path], migrations: Migrations, strict: bool
) -> tuple[list[FileResult], bool]:
    """Ingest the first files of ``paths`` as one batch; their results, in order (at least
    one file; as many as fit ``BATCH_FILES`` and ``BATCH_BYTES``), and whether the last of
    them goes on (a big file's piece, ``PIECE_BYTES``: its result is of that piece)."""
    window = paths[:_WINDOW]
    previous = _previous(con, [str(p) for p in window])
    results: list[FileResult | FilePlan] = []
    planned = 0
    size = 0
    for path in window:
        if planned >= BATCH_FILES or (planned and size >= BATCH_BYTES):
            break
        if any(isinstance(r, FilePlan) and r.more for r in results[-1:]):
            break  # a piece of a big file ends its batch: its next piece is planned after it
        t0 = time.perf_counter()
        try:
            plan = plan_file(path, previous.get(str(path)), migrations, lambda _: None)
            if isinstance(plan, FilePlan):
                plan = first_piece(plan, PIECE_BYTES)
        except Refused as exc:
            _refuse(con, path, str(exc))
            plan = FileResult(str(path), "refused", message=str(exc))
        except OSError as exc:
            _refuse(con, path, cannot_read(exc))
            plan = FileResult(str(path), "refused", message=cannot_read(exc))
        if isinstance(plan, FileResult):
            plan.seconds = time.perf_counter() - t0
        else:
            planned += 1
            size += plan.size - plan.start
        results.append(plan)
    _refuse_taken_runs(con, results)
    plans = [r for r in results if isinstance(r, FilePlan)]
    done = iter(_ingest_planned(con, plans, migrations, strict) if plans else [])
    more = isinstance(results[-1], FilePlan) and results[-1].more
    return [r if isinstance(r, FileResult) else next(done) for r in results], more


def _add_piece(whole: FileResult | None, piece: FileResult) -> FileResult:
    """One file's result from those of its pieces (``PIECE_BYTES``) so far."""
    if whole is None:
        return piece
    whole.status = piece.status
    whole.records += piece.records
    whole.rejected += piece.rejected
    whole.bytes_read += piece.bytes_read
    whole.seconds += piece.seconds
    whole.slow_path = whole.slow_path or piece.slow_path
    whole.message = piece.message
    if piece.status != "partial" and whole.rejected:  # as ``FileIngest.message`` says it
        whole.message = f"{whole.rejected} line(s) rejected; see rejected_lines"
    return whole


def _refuse_taken_runs(
    con: duckdb.DuckDBPyConnection, results: list[FileResult | FilePlan]
) -> None:
    """Refuse (in place) the files planned from the start whose run another file brought:
    one already in the database, or one earlier in this batch (one run is one file)."""
    new = [r for r in results if isinstance(r, FilePlan) and r.start == 0]
    if not new:
        return
    owners = dict(
        con.execute(
            "SELECT run_id, file FROM runs WHERE run_id IN (SELECT unnest($runs))",
            {"runs": [p.run_id for p in new]},
        ).fetchall()
    )
    for i, r in enumerate(results):
        if not isinstance(r, FilePlan) or r.start != 0:
            continue
        file = str(r.path)
        other = owners.get(r.run_id)
        if other is not None and other != file:
            exc = run_taken(r.run_id, other, "database")
            _refuse(con, r.path, str(exc))
            results[i] = FileResult(file, "refused", message=str(exc))
            continue
        owners[r.run_id] = file
        if r.replaced_run not in (None, r.run_id) and owners.get(r.replaced_run) == file:
            del owners[r.replaced_run]  # its old run goes with it: another file may bring it


def ingest_file(
    con: Connection, path: Path, migrations: Migrations = MIGRATIONS, *, strict: bool = False
) -> FileResult:
    """Ingest one file on an open connection (see the module doc).

    ``strict`` sends every line through pydantic (the slow path): it also rejects what the
    typed read does not see (a field no kind has, a number given for a text field).
    """
    result = None
    while True:
        results, more = _ingest_batch(con.duck, [path], migrations, strict)
        result = _add_piece(result, results[0])
        if not more or result.status == "refused":
            return result


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

    Files are ingested in batches (``BATCH_FILES``, ``BATCH_BYTES``): each batch is staged,
    checked and written together, in one transaction, so that many small files go in fast;
    the results are the same as one file at a time. The database is opened for each batch
    and closed after it, so that other processes (a dashboard) can read between batches;
    ``on_file`` is called for each file after its batch. Opening
    waits up to ``wait`` seconds for readers and other writers to let go (by default
    ``INGEST_WAIT_S``, longer than a dashboard query may run).
    """
    files = expand_paths(paths)
    summary = IngestSummary()
    t0 = time.perf_counter()
    i = 0
    piece: FileResult | None = None  # the pieces so far of a big file (``PIECE_BYTES``)
    try:
        while i < len(files):
            with connect(db, wait=wait, threads=threads) as con, _interruptible(con.duck):
                results, more = _ingest_batch(con.duck, files[i:], migrations, strict)
                if _CTRL_C.is_set():  # DuckDB finished the query it was in: not committed
                    raise KeyboardInterrupt
            if piece is not None:
                results[0] = _add_piece(piece, results[0])
                piece = None
            if more:  # its last file goes on: its next piece starts the next batch
                piece = results.pop()
            i += len(results)
            for result in results:
                summary.files.append(result)
                if on_file is not None:
                    on_file(result)
    except (KeyboardInterrupt, duckdb.InterruptException):
        summary.seconds = time.perf_counter() - t0
        raise IngestInterrupted(summary, len(files), piece) from None
    summary.seconds = time.perf_counter() - t0
    return summary


_CTRL_C = threading.Event()


@contextlib.contextmanager
def _interruptible(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Ctrl-C while a batch is read and written: the query DuckDB runs is interrupted
    (``con.interrupt()``) and the batch raises ``KeyboardInterrupt``. Python's own handler
    alone was not enough: DuckDB checks for signals while it runs a query, and a Ctrl-C it
    saw there could end up swallowed (the ingest went on to the end and exited 0). Only in
    the main thread, and not where SIGINT is ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        yield
        return

    def on_ctrl_c(signum: int, frame: Any) -> None:
        _CTRL_C.set()
        con.interrupt()
        raise KeyboardInterrupt

    _CTRL_C.clear()
    signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class IngestInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``ingest``: ``summary`` holds the files whose batches were committed
    (a batch is one transaction: the one being read was rolled back, and the same ingest
    again continues from there), ``total`` how many files there were, ``piece`` the part
    committed of a big file read in pieces (``PIECE_BYTES``), if one was under way."""

    def __init__(self, summary: IngestSummary, total: int, piece: FileResult | None = None) -> None:
        super().__init__(f"interrupted: {len(summary.files)} of {total} file(s) committed")
        self.summary = summary
        self.total = total
        self.piece = piece
