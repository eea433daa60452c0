"""Opening a trace lake for reading: its tables and the analysis views over its Parquet.

``connect_lake`` gives an in-memory DuckDB with the tables and views of an Ember database;
``attach_lake`` adds them to a connection (the dashboard's). The columns the DuckDB file
computes at ingest (cache order, memory running sums, ``runs.started_at``) are computed
here (``lake_table_sql``, from the definitions of ``analysis.derived``; also what the
Spark views are translated from); a lake written by an older Ember that lacks a column
reads it as NULL; ``ingested_files`` is made from the ``_ingests`` rows. A reader reads
one snapshot: the ``_ingests`` rows first, then each table's committed file list, and a
row counts only when its ingest is committed and not of a replaced file
(``lake_commit.visible_sql``): an uncommitted or orphaned file is never read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb

from ember.analysis.db import DERIVED_COLUMNS, VIEW_NAMES, Connection, view_sql
from ember.analysis.derived import cache_order_sql, memory_sums_sql
from ember.analysis.lake.commit import damaged_log, visible_sql
from ember.analysis.lake.location import local_lake_path
from ember.analysis.lake.table import (
    INGESTS,
    LAKE_TABLES,
    LakeError,
    lake_columns,
    lake_problem,
    read_delta,
    sql_literal,
    table_columns,
)


def _cache_sql(src: str) -> str:
    """The cache table from its stored columns: derived and order columns, as db.py's."""
    derived = ", ".join(f"{expr} AS {c}" for c, (_, expr) in DERIVED_COLUMNS["cache"].items())
    return cache_order_sql(f"(SELECT *, {derived} FROM {src}) AS c", "line")


def lake_table_sql(table: str, src: str) -> str:
    """SQL (DuckDB) of a lake table as the views see it, from its stored rows ``src``.

    ``src`` has the stored columns plus ``run_id``; the result has exactly the DuckDB
    file's columns, in its order, with its types. Ordered by ``line`` within a run.
    """
    cols = table_columns(table)
    if table == "cache":
        body = _cache_sql(src)
    elif table == "memory":
        body = memory_sums_sql(src, "line")
    elif table == "runs":
        body = f"SELECT *, make_timestamp_ns(wall_time_ns) AS started_at FROM {src}"
    elif table == "rejected_lines":
        body = f"SELECT * FROM {src}"
    else:
        body = f"SELECT * FROM {src}"
    casts = ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t in cols.items())
    return f"SELECT {casts} FROM ({body}) AS t"


class LakeSnapshot:
    """What a reader reads of a lake: the ``_ingests`` rows first, then each table's
    committed file list (a row whose ingest was committed after the first read is in a
    file the later lists have; never the other way round)."""

    def __init__(self, root: Path, storage_options: dict[str, str] | None = None) -> None:
        self.root = root
        self.storage_options = storage_options
        ingests = self.table(INGESTS)
        local = all(os.path.isabs(u) for u in ingests.file_uris())
        self.ingests = read_delta(ingests, INGESTS) if local else ingests.to_pyarrow_table()
        self.tables = {t: self.table(t) for t in LAKE_TABLES}
        self.files = {t: dt.file_uris() for t, dt in self.tables.items()}

    def table(self, name: str) -> Any:
        from deltalake import DeltaTable

        try:
            dt = DeltaTable(str(self.root / name), storage_options=self.storage_options)
        except Exception as exc:  # delta-rs: a missing or damaged log
            raise LakeError(damaged_log(self.root, name, exc)) from None
        unread = {"deletionVectors", "columnMapping"} & set(dt.protocol().reader_features or [])
        if unread:
            raise LakeError(
                f"{self.root / name}: the table uses {', '.join(sorted(unread))}, which Ember's "
                "readers do not apply; rewrite it without them (Spark: REORG TABLE ... APPLY "
                "(PURGE)), or read it with Spark and the Delta connector"
            )
        return dt


def _stored_view(con: duckdb.DuckDBPyConnection, snap: LakeSnapshot, table: str) -> str:
    """A view of the visible stored rows of one lake table: the snapshot's files (DuckDB's
    own Parquet reader for local ones, the Delta table's Arrow dataset otherwise), rows of
    committed ingests only."""
    name = f"_lake_{table}"
    cols = lake_columns(table)
    select = ", ".join(f'"{c}"' for c in cols)
    uris = snap.files[table]
    if not uris:
        sql = "SELECT " + ", ".join(f'NULL::{t} AS "{c}"' for c, t in cols.items()) + " WHERE false"
    else:
        if all(os.path.isabs(u) for u in uris):
            files = "[" + ", ".join(sql_literal(u) for u in uris) + "]"
            # one schema (the Delta table's): DuckDB binds on the first file's footer only
            src = f"read_parquet({files}, hive_partitioning = false)"
        else:
            src = f"_delta_{table}"
            con.register(src, snap.tables[table].to_pyarrow_dataset())
        sql = f"SELECT {select} FROM {src} WHERE _ingest IN (SELECT ingest FROM _lake_visible)"
    con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
    return name


_INGESTED_FILES_SQL = """
WITH v AS (SELECT * FROM _lake_ingests WHERE ingest IN (SELECT ingest FROM _lake_visible)),
seg AS (
    SELECT file, first(run_id ORDER BY seq DESC) AS run_id,
        first(status ORDER BY seq DESC) AS status, first(message ORDER BY seq DESC) AS message,
        max(offset_bytes) AS offset_bytes, max(lines) AS lines,
        CAST(sum(records) AS BIGINT) AS records,
        first(fid ORDER BY seq DESC) AS first_line_hash,
        CAST(first(schema_version ORDER BY seq DESC) AS INTEGER) AS schema_version,
        max(ingested_at) AS ingested_at, first(size ORDER BY seq DESC) AS size_bytes
    FROM v GROUP BY file
),
refused AS (
    SELECT file, NULL::VARCHAR AS run_id, 'refused' AS status,
        first(message ORDER BY ingested_at DESC) AS message, 0::BIGINT AS offset_bytes,
        0::BIGINT AS lines, 0::BIGINT AS records, NULL::VARCHAR AS first_line_hash,
        NULL::INTEGER AS schema_version, max(ingested_at) AS ingested_at,
        first(size ORDER BY ingested_at DESC) AS size_bytes
    FROM _lake_ingests WHERE status = 'refused' AND file NOT IN (SELECT file FROM seg)
    GROUP BY file
)
SELECT * FROM seg UNION ALL SELECT * FROM refused
"""


def _register_ingests(con: duckdb.DuckDBPyConnection, snap: LakeSnapshot) -> None:
    con.register("_ingests_arrow", snap.ingests)
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE _lake_ingests AS SELECT * FROM _ingests_arrow")
    finally:
        con.unregister("_ingests_arrow")
    con.execute(f"CREATE OR REPLACE TEMP TABLE _lake_visible AS {visible_sql('_lake_ingests')}")


def attach_lake(
    con: duckdb.DuckDBPyConnection,
    lake: str | os.PathLike[str],
    storage_options: dict[str, str] | None = None,
) -> None:
    """Create the lake's tables (views over its committed Parquet) and the analysis views
    on ``con``. ``LakeError`` when a table's log cannot be read."""
    snap = LakeSnapshot(local_lake_path(lake), storage_options)
    con.execute(view_sql("macros"))
    _register_ingests(con, snap)
    for table in LAKE_TABLES:
        src = _stored_view(con, snap, table)
        if table == "rejected_lines":
            continue
        con.execute(f"CREATE OR REPLACE VIEW {table} AS {lake_table_sql(table, src)}")
    # a truncated last line rejected before is superseded once the file grew past it
    con.execute(
        f"""CREATE OR REPLACE VIEW rejected_lines AS
        SELECT {", ".join(f'r."{c}"' for c in table_columns("rejected_lines"))}
        FROM _lake_rejected_lines r
        LEFT JOIN (SELECT file, max(offset_bytes) AS offset_bytes FROM _lake_ingests
            WHERE ingest IN (SELECT ingest FROM _lake_visible) GROUP BY file) m
            ON m.file = r.file
        WHERE NOT (r.reason LIKE 'truncated last line%'
            AND r.byte_offset < coalesce(m.offset_bytes, 0))"""
    )
    con.execute(
        f"""CREATE OR REPLACE VIEW ingested_files AS
        SELECT f.file, f.run_id, f.status,
            -- a file read in pieces: the rejected lines of all of them, as a database says
            CASE WHEN f.status = 'ok' AND r.n > 0
                THEN r.n || ' line(s) rejected; see rejected_lines' ELSE f.message END
                AS message,
            f.offset_bytes, f.lines, f.records,
            CAST(coalesce(r.n, 0) AS BIGINT) AS rejected, f.first_line_hash,
            f.schema_version, CAST(f.ingested_at AS TIMESTAMP) AS ingested_at,
            CAST(f.size_bytes AS BIGINT) AS size_bytes
        FROM ({_INGESTED_FILES_SQL}) f
        LEFT JOIN (SELECT file, count(*) AS n FROM rejected_lines GROUP BY file) r
            ON r.file = f.file"""
    )
    for name in VIEW_NAMES:
        con.execute(f"CREATE OR REPLACE VIEW {name} AS\n{view_sql(name).strip().rstrip(';')}")


def damaged_file(root: str, exc: Exception) -> LakeError | None:
    """The error for a query that failed on a damaged data file of the lake, or None."""
    text = str(exc)
    found = re.search(r"""['"]?(/[^'"\s]+\.parquet)['"]?""", text)
    if found is None or not found.group(1).startswith(str(Path(root).resolve())):
        return None
    first = text.strip().splitlines()[0]
    return LakeError(
        f"{found.group(1)}: a data file of the lake cannot be read ({first}); run "
        f"`ember lake check {root}` to list the damaged files and `ember lake check --repair "
        f"{root}` to drop them and their ingests, then ingest those traces again"
    )


class LakeConnection(Connection):
    """A lake opened for reading; a query that meets a damaged data file raises
    ``LakeError`` naming the file and what to do."""

    def sql(
        self,
        query: str,
        params: list[Any] | dict[str, Any] | None = None,
        *,
        as_text: Iterable[str] = (),
    ) -> Any:
        try:
            return super().sql(query, params, as_text=as_text)
        except duckdb.Error as exc:
            raise damaged_file(self.path, exc) or exc from None

    def execute(self, query: str, params: list[Any] | dict[str, Any] | None = None) -> Any:
        try:
            return super().execute(query, params)
        except duckdb.Error as exc:
            raise damaged_file(self.path, exc) or exc from None


def connect_lake(
    lake: str | os.PathLike[str],
    *,
    threads: int | None = None,
    storage_options: dict[str, str] | None = None,
) -> Connection:
    """Open a lake for reading: an in-memory DuckDB with the tables and views of an Ember
    database over the lake's committed rows (``FileNotFoundError`` if ``lake`` is not one,
    ``LakeError`` if it is damaged or of the old format)."""
    lake = local_lake_path(lake)
    problem = lake_problem(lake, writing=False)
    if problem is not None:
        if Path(lake).exists():
            raise LakeError(problem)
        raise FileNotFoundError(problem)
    duck = duckdb.connect(":memory:")
    duck.execute("SET enable_progress_bar = false")
    if threads:
        duck.execute(f"SET threads = {int(threads)}")
    try:
        attach_lake(duck, lake, storage_options)
    except duckdb.Error as exc:
        duck.close()
        raise damaged_file(str(Path(lake).resolve()), exc) or exc from None
    except BaseException:
        duck.close()
        raise
    return LakeConnection(duck, str(Path(lake).resolve()), True)


def ingested_files(lake: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every row of a lake's ``_ingests`` table (committed ingests and refusals), oldest
    first."""
    snap_rows = LakeSnapshot(local_lake_path(lake)).ingests.to_pylist()
    return sorted(snap_rows, key=lambda r: (r["ingested_at"], r["seq"] or 0))
