"""Opening a trace lake for reading: its tables and the analysis views over its Parquet.

``connect_lake`` gives an in-memory DuckDB with the tables and views of an Ember database;
``attach_lake`` adds them to a connection (the dashboard's). The columns the DuckDB file
computes at ingest (cache order, memory running sums, ``runs.started_at``) are computed
here (``lake_table_sql``, also what the Spark views are translated from); a lake written
by an older Ember that lacks a column reads it as NULL; ``ingested_files`` is made from
the manifest entries.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from .db import (
    DERIVED_COLUMNS,
    VIEW_NAMES,
    Connection,
    view_sql,
)
from .lake_manifest import LAKE_TABLES, MANIFEST, _lit, is_lake, lake_columns, table_columns


def _cache_sql(src: str) -> str:
    """The cache table from its stored columns: derived and order columns, as db.py's."""
    derived = ", ".join(f"{expr} AS {c}" for c, (_, expr) in DERIVED_COLUMNS["cache"].items())
    return f"""
SELECT *,
    CASE WHEN seq IS NOT NULL THEN lag(seq) OVER (
        PARTITION BY run_id, source, position, lookup_key, seq IS NULL ORDER BY seq
    ) END AS prev_seq
FROM (
    SELECT *,
        row_number() OVER (PARTITION BY run_id, source, position ORDER BY ts_ns, line) AS ord,
        CASE WHEN action IN ('hit', 'miss') THEN sum(CAST(action IN ('hit', 'miss') AS BIGINT))
            OVER (PARTITION BY run_id, source, position ORDER BY ts_ns, line
                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) END AS seq,
        sum(CAST(action = 'miss' AS BIGINT)) OVER k AS life,
        sum(CAST(action = 'hit' AS BIGINT)) OVER k AS hits_so_far,
        sum(CAST(action = 'evict' AS BIGINT)) OVER k AS evictions
    FROM (SELECT *, {derived} FROM {src}) AS c
    WINDOW k AS (PARTITION BY run_id, source, position, lookup_key ORDER BY ts_ns, line
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
) AS c
"""


def _memory_sql(src: str) -> str:
    delta = "CASE WHEN action = 'alloc' THEN bytes ELSE -bytes END"
    return f"""
SELECT *,
    CAST(sum({delta}) OVER (PARTITION BY run_id, device, category ORDER BY ts_ns, line
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS BIGINT) AS category_live_bytes,
    CAST(sum({delta}) OVER (PARTITION BY run_id, device ORDER BY ts_ns, line
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS BIGINT) AS device_live_bytes
FROM {src}
"""


def lake_table_sql(table: str, src: str) -> str:
    """SQL (DuckDB) of a lake table as the views see it, from its stored rows ``src``.

    ``src`` has the stored columns plus ``run_id``; the result has exactly the DuckDB
    file's columns, in its order, with its types. Ordered by ``line`` within a run.
    """
    cols = table_columns(table)
    if table == "cache":
        body = _cache_sql(src)
    elif table == "memory":
        body = _memory_sql(src)
    elif table == "runs":
        body = f"SELECT *, make_timestamp_ns(wall_time_ns) AS started_at FROM {src}"
    elif table == "rejected_lines":
        body = f"SELECT * FROM {src}"
    else:
        body = f"SELECT * FROM {src}"
    casts = ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t in cols.items())
    return f"SELECT {casts} FROM ({body}) AS t"


def _stored_view(con: duckdb.DuckDBPyConnection, lake: Path, table: str) -> str:
    """A view of the stored rows of one lake table (with run_id), or an empty one."""
    name = f"_lake_{table}"
    folder = lake / table
    has = folder.is_dir() and any(folder.glob("run_date=*/run_id=*/*.parquet"))
    if has:
        glob = _lit(str(folder / "run_date=*" / "run_id=*" / "*.parquet"))
        read = (
            f"read_parquet({glob}, hive_partitioning = true, "
            "hive_types = {'run_date': DATE, 'run_id': VARCHAR}, union_by_name = true)"
        )
        # a lake written by an older Ember may lack a column: NULL, typed
        have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {read}").fetchall()}
        cols = {**lake_columns(table), "run_id": "VARCHAR"}
        select = ", ".join(
            f'"{c}"' if c in have else f'NULL::{t} AS "{c}"' for c, t in cols.items()
        )
        sql = f"SELECT {select} FROM {read}"
    else:
        cols = {**lake_columns(table), "run_id": "VARCHAR"}
        sql = "SELECT " + ", ".join(f'NULL::{t} AS "{c}"' for c, t in cols.items()) + " WHERE false"
    con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
    return name


_INGESTED_FILES_SQL = """
SELECT file, first(run_id ORDER BY ingested_at DESC) AS run_id,
    first(status ORDER BY offset_bytes DESC, ingested_at DESC) AS status,
    first(message ORDER BY offset_bytes DESC, ingested_at DESC) AS message,
    max(offset_bytes) AS offset_bytes, max(lines) AS lines,
    CAST(sum(records) AS BIGINT) AS records,
    CAST(NULL AS BIGINT) AS rejected,
    first(first_line_hash ORDER BY ingested_at DESC) AS first_line_hash,
    CAST(first(schema_version ORDER BY ingested_at DESC) AS INTEGER) AS schema_version,
    CAST(to_timestamp(max(ingested_at)) AS TIMESTAMP) AS ingested_at,
    CAST(first(size ORDER BY offset_bytes DESC, ingested_at DESC)
        FILTER (WHERE status <> 'refused') AS BIGINT) AS size_bytes
FROM {src} GROUP BY file
"""


def attach_lake(con: duckdb.DuckDBPyConnection, lake: str | os.PathLike[str]) -> None:
    """Create the lake's tables (as views over its Parquet) and the analysis views on ``con``."""
    root = Path(lake).resolve()
    con.execute(view_sql("macros"))
    for table in LAKE_TABLES:
        src = _stored_view(con, root, table)
        if table == "rejected_lines":
            continue
        con.execute(f"CREATE OR REPLACE VIEW {table} AS {lake_table_sql(table, src)}")
    # ingested_files from the manifest entries
    manifest = root / MANIFEST
    if any(n.endswith(".json") and not n.startswith(".") for n in os.listdir(manifest)):
        glob = _lit(str(manifest / "*.json"))
        entries = (
            f"(SELECT * FROM read_json({glob}, format = 'auto', union_by_name = true, "
            "columns = {'file': 'VARCHAR', 'run_id': 'VARCHAR', 'status': 'VARCHAR', "
            "'message': 'VARCHAR', 'offset_bytes': 'BIGINT', 'lines': 'BIGINT', "
            "'records': 'BIGINT', 'rejected': 'BIGINT', 'first_line_hash': 'VARCHAR', "
            "'schema_version': 'BIGINT', 'ingested_at': 'DOUBLE', 'size': 'BIGINT'}))"
        )
    else:
        entries = (
            "(SELECT NULL::VARCHAR AS file, NULL::VARCHAR AS run_id, NULL::VARCHAR AS status, "
            "NULL::VARCHAR AS message, NULL::BIGINT AS offset_bytes, NULL::BIGINT AS lines, "
            "NULL::BIGINT AS records, NULL::BIGINT AS rejected, NULL::VARCHAR AS "
            "first_line_hash, NULL::BIGINT AS schema_version, NULL::DOUBLE AS ingested_at, "
            "NULL::BIGINT AS size WHERE false)"
        )
    con.execute(f"CREATE OR REPLACE VIEW _lake_manifest AS SELECT * FROM {entries}")
    # a truncated last line rejected before is superseded once the file grew past it
    con.execute(
        f"""CREATE OR REPLACE VIEW rejected_lines AS
        SELECT {", ".join(f'r."{c}"' for c in table_columns("rejected_lines"))}
        FROM _lake_rejected_lines r
        LEFT JOIN (SELECT file, max(offset_bytes) AS offset_bytes FROM _lake_manifest
            GROUP BY file) m ON m.file = r.file
        WHERE NOT (r.reason LIKE 'truncated last line%'
            AND r.byte_offset < coalesce(m.offset_bytes, 0))"""
    )
    files = _INGESTED_FILES_SQL.format(src="_lake_manifest")
    con.execute(
        f"""CREATE OR REPLACE VIEW ingested_files AS
        SELECT f.* REPLACE (CAST(coalesce(r.n, 0) AS BIGINT) AS rejected)
        FROM ({files}) f
        LEFT JOIN (SELECT file, count(*) AS n FROM rejected_lines GROUP BY file) r
            ON r.file = f.file"""
    )
    for name in VIEW_NAMES:
        con.execute(f"CREATE OR REPLACE VIEW {name} AS\n{view_sql(name).strip().rstrip(';')}")


def connect_lake(lake: str | os.PathLike[str], *, threads: int | None = None) -> Connection:
    """Open a lake for reading: an in-memory DuckDB with the tables and views of an Ember
    database over the lake's Parquet (``FileNotFoundError`` if ``lake`` is not one)."""
    if not is_lake(lake):
        raise FileNotFoundError(
            f"{lake}: not a trace lake (no {MANIFEST}/ folder); write one with "
            f"`ember ingest TRACES --lake {lake}`"
        )
    duck = duckdb.connect(":memory:")
    duck.execute("SET enable_progress_bar = false")
    if threads:
        duck.execute(f"SET threads = {int(threads)}")
    attach_lake(duck, lake)
    return Connection(duck, str(lake), True)
