"""The Delta lake's tables: what a lake *is* on disk, its columns and partitions.

A lake is a folder of Delta tables written with ``deltalake`` (delta-rs)::

    LAKE/_ember_lake.json               the marker: format and version (written last)
    LAKE/_ingests/                      one row per committed ingest of a trace file's bytes
    LAKE/<table>/_delta_log/            runs, each record kind, rejected_lines
    LAKE/<table>/run_date=YYYY-MM-DD/part-....parquet

Every record table is partitioned by the run's date only (``PARTITIONS``), so that
``optimize`` merges the many one-piece runs of a day into a few files (partitioned by run
too, as lakes made before 2026-12-02 are, a run ingested in one piece is one file that
nothing can merge). Writers append with the table's own partitioning, so those lakes are
still read and written as they are. Each row also carries ``run_key(run_id)``: the run id
itself when it is short and plain, else a cleaned prefix and a hash of it (the second
partition of the older lakes, where it is a path name: no user string becomes one; a run
id of 300 bytes once crashed the old lake with ENAMETOOLONG). The full ``run_id`` is a
column.
Each row carries ``_ingest``, the id of the ingest that wrote it; a row is part of the lake
once its ingest is a row of ``_ingests`` (see ``lake_commit``). This module owns the names,
the columns (``lake_columns``: the Parquet columns; ``table_columns``: what the views see),
the Arrow schemas, creating a lake (``create_lake``) and telling a lake from what is not
one (``lake_problem``). The old format (Parquet + ``_manifest/``) is ``lake_legacy``'s.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ember.analysis.db import DERIVED_COLUMNS, RECORD_TABLES, RUNS_COLUMNS, record_columns
from ember.analysis.derived import CACHE_ORDER_COLUMNS, MEMORY_RUNNING_COLUMNS
from ember.analysis.schema_types import READ_COLUMNS

MARKER = "_ember_lake.json"
INGESTS = "_ingests"
OLD_MANIFEST = "_manifest"
LAKE_FORMAT = {"format": "ember-delta-lake", "version": 1}
LAKE_TABLES: tuple[str, ...] = ("runs", *RECORD_TABLES, "rejected_lines")
"""The record tables of a lake, one Delta table each (``INGESTS`` is the lake's own)."""
PARTITIONS = ["run_date"]
"""What a new lake's record tables are partitioned by."""
KEY_COLUMNS = ["run_date", "run_key"]
"""The columns every record table has besides ``lake_columns``: the partitions of the lakes
made before 2026-12-02 (``run_date``, ``run_key``), the first of them a new lake's."""

REJECTED_COLUMNS: dict[str, str] = {
    "file": "VARCHAR",
    "line": "BIGINT",
    "byte_offset": "BIGINT",
    "reason": "VARCHAR",
    "raw": "VARCHAR",
    "ingested_at": "TIMESTAMP",
}

INGESTS_COLUMNS: dict[str, str] = {
    "ingest": "VARCHAR",  # the id its rows carry in _ingest (hex ns time + random)
    "file": "VARCHAR",  # the trace file's absolute path
    "fid": "VARCHAR",  # sha1 of its first line: the file's identity (NULL: refused)
    "seq": "BIGINT",  # 1 for the ingest from its start, +1 for each continuation
    "status": "VARCHAR",  # ok | partial | refused
    "message": "VARCHAR",
    "run_id": "VARCHAR",
    "run_date": "VARCHAR",
    "replaces": "VARCHAR",  # the fid of the file it replaced at this path (re-recorded)
    "hides": "VARCHAR",  # the ingests of that file it replaced (space-separated ids)
    "start": "BIGINT",  # the bytes [start, offset_bytes) of the file
    "offset_bytes": "BIGINT",
    "base_line": "BIGINT",  # lines before start
    "lines": "BIGINT",  # lines before offset_bytes
    "records": "BIGINT",
    "rejected": "BIGINT",
    "digest": "VARCHAR",  # sha1 of the bytes read
    "schema_version": "BIGINT",
    "size": "BIGINT",  # the file's size and mtime when read
    "mtime_ns": "BIGINT",
    "engine": "VARCHAR",
    "host": "VARCHAR",
    "ingested_at": "TIMESTAMP",
}


class LakeError(ValueError):
    """A lake (or what was given as one) that cannot be used; the message says what to do."""


def _stored(t: str) -> str:
    """The type a column has in the Parquet files: JSON is stored as its text."""
    return re.sub(r"\bJSON\b", "VARCHAR", t)


def table_columns(table: str) -> dict[str, str]:
    """``{column: DuckDB type}`` of a lake table as the views see it (run_id first).

    The same columns and types as the DuckDB file's table, derived columns included.
    """
    if table == "runs":
        return dict(RUNS_COLUMNS)
    if table == "rejected_lines":
        return {
            **{k: v for k, v in REJECTED_COLUMNS.items() if k != "ingested_at"},
            "run_id": "VARCHAR",
            "ingested_at": "TIMESTAMP",
        }
    cols = dict(record_columns(table))
    cols.update({c: t for c, (t, _) in DERIVED_COLUMNS.get(table, {}).items()})
    if table == "cache":
        cols.update(CACHE_ORDER_COLUMNS)
    if table == "memory":
        cols.update(MEMORY_RUNNING_COLUMNS)
    return cols


def lake_columns(table: str) -> dict[str, str]:
    """``{column: DuckDB type}`` of the Parquet files of a lake table.

    The record's own fields (JSON as text), ``line`` (records), ``run_id`` and ``_ingest``;
    not ``KEY_COLUMNS`` (partitions: in the Delta log and the paths), nor the columns
    computed when the lake is read.
    """
    if table == "runs":
        cols = {c: t for c, t in RUNS_COLUMNS.items() if c not in ("run_id", "started_at")}
    elif table == "rejected_lines":
        cols = dict(REJECTED_COLUMNS)
    else:
        cols = {c: t for c, t in record_columns(table).items() if c != "run_id"}
        cols["line"] = "BIGINT"
    cols["run_id"] = "VARCHAR"
    cols["_ingest"] = "VARCHAR"
    return {c: _stored(t) for c, t in cols.items()}


def arrow_schema(table: str) -> Any:
    """The Arrow schema of a lake table (``INGESTS`` too), ``KEY_COLUMNS`` last."""
    return empty_table(table).schema


@functools.cache
def empty_table(table: str) -> Any:
    """A lake table without rows, as pyarrow (made by DuckDB: pyarrow's own empty arrays
    import pandas, seconds per process where bytecode is not cached)."""
    import duckdb

    cols = INGESTS_COLUMNS if table == INGESTS else lake_columns(table)
    if table != INGESTS:
        cols = {**cols, **dict.fromkeys(KEY_COLUMNS, "VARCHAR")}
    con = duckdb.connect(":memory:")
    try:
        sql = ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in cols.items())
        return con.sql(f"SELECT {sql} LIMIT 0").to_arrow_table()
    finally:
        con.close()


_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def read_delta(dt: Any, table: str) -> Any:
    """The rows of a (local) Delta table's snapshot as a pyarrow table, read by DuckDB from
    its committed file list (not ``to_pyarrow_table``: that imports ``pyarrow.dataset`` and
    with it pandas, seconds per process where bytecode is not cached)."""
    import duckdb

    uris = dt.file_uris()
    if not uris:
        return empty_table(table)
    con = duckdb.connect(":memory:")
    try:
        parts = [] if table == INGESTS else KEY_COLUMNS  # (partitions: not in every file)
        # by name: the files of an _ingests table made before its `hides` column lack it
        by_name = "true" if table == INGESTS else "false"
        src = f"read_parquet($f, hive_partitioning = false, union_by_name = {by_name})"
        have = set(con.sql(f"SELECT * FROM {src} LIMIT 0", params={"f": uris}).columns)
        types = INGESTS_COLUMNS if table == INGESTS else lake_columns(table)
        cols = ", ".join(
            f'"{c}"' if c in have else f'NULL::{types[c]} AS "{c}"'
            for c in arrow_schema(table).names
            if c not in parts
        )
        return con.sql(f"SELECT {cols} FROM {src}", params={"f": uris}).to_arrow_table()
    finally:
        con.close()


FileRuns = tuple[str | None, str | None, str | None, str | None]
"""What a Delta log says of the runs in one file: the min and max of its ``run_id``
statistics (None: not recorded, as for tables whose ``run_id`` is past the first 32 leaf
columns; a long id's may be a truncated prefix), its ``run_date`` and ``run_key``
partition values (None: not a partition)."""


def run_ranges(dt: Any) -> dict[str, FileRuns]:
    """``{uri: FileRuns}`` of each committed file of a (local) Delta table."""
    import pyarrow as pa

    # the log's paths are relative (and URL-encoded): find each file's URI by its name (a
    # part's name holds a uuid)
    uris = {os.path.basename(u): u for u in dt.file_uris()}
    actions = pa.table(dt.get_add_actions(flatten=True))
    n = actions.num_rows

    def column(name: str) -> list[Any]:
        return actions.column(name).to_pylist() if name in actions.column_names else [None] * n

    paths = actions.column("path").to_pylist()
    return {
        uris[unquote(os.path.basename(p))]: (lo, hi, date, key)
        for p, lo, hi, date, key in zip(
            paths,
            column("min.run_id"),
            column("max.run_id"),
            column("partition.run_date"),
            column("partition.run_key"),
            strict=True,
        )
    }


def may_hold(runs: FileRuns, run_id: str, date: str | None) -> bool:
    """Whether a file (``run_ranges``) may hold rows of the run ``run_id`` of ``date``
    (a truncated max is a prefix of the true one: the id's prefix of its length is
    compared)."""
    lo, hi, part_date, key = runs
    if key is not None and key != run_key(run_id):
        return False
    if part_date is not None and date is not None and part_date != date:
        return False
    return (lo is None or lo <= run_id) and (hi is None or run_id[: len(hi)] <= hi)


def files_of_runs(dt: Any, runs: Mapping[str, str | None]) -> list[str]:
    """The committed files of a (local) Delta table that may hold rows of ``runs`` (run
    id -> its date). Any layout: a file of a lake partitioned by run holds one run, a
    compacted file of a date partition many."""
    return [
        uri
        for uri, fr in run_ranges(dt).items()
        if any(may_hold(fr, r, d) for r, d in runs.items())
    ]


def run_key(run_id: str) -> str:
    """The ``run_key`` partition value of a run: its id when short and plain (letters,
    digits, ``_.-``, at most 64), else a cleaned prefix and a hash of the whole id."""
    if _PLAIN.fullmatch(run_id):
        return run_id
    head = re.sub(r"[^A-Za-z0-9_.-]", "_", run_id[:24]).lstrip("._-")
    digest = hashlib.sha1(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{head}-h{digest}" if head else f"h{digest}"


def run_date(wall_time_ns: int | None) -> str:
    """The ``run_date`` partition of a run: the UTC date of its wall-clock anchor."""
    return datetime.fromtimestamp((wall_time_ns or 0) / 1e9, UTC).strftime("%Y-%m-%d")


def read_columns_sql() -> str:
    """The ``read_json`` columns (kept here so the Spark reader and the tests see one list)."""
    return ", ".join(f"{k} {v}" for k, v in READ_COLUMNS.items())


def sql_literal(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


# ---------------------------------------------------------------- what a lake is


def is_lake(path: str | os.PathLike[str]) -> bool:
    """A folder written by ``ember ingest --lake`` (it has the lake's marker file)."""
    return (Path(path) / MARKER).is_file()


def marker_problem(marker: Path) -> str | None:
    """Why the lake marker file ``marker`` is not one this Ember reads, or None."""
    try:
        found = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return (
            f"{marker}: not a lake marker ({e}); it should hold {json.dumps(LAKE_FORMAT)}: "
            "restore it, or ingest into a new folder"
        )
    if not isinstance(found, dict) or found.get("format") != LAKE_FORMAT["format"]:
        kind = found.get("format") if isinstance(found, dict) else found
        return (
            f"{marker}: not an Ember lake marker (format {kind!r}); "
            f"it should hold {json.dumps(LAKE_FORMAT)}"
        )
    if found.get("version") != LAKE_FORMAT["version"]:
        return (
            f"{marker}: lake version {found.get('version')!r}, this Ember reads version "
            f"{LAKE_FORMAT['version']}: use the Ember that wrote it, or upgrade Ember"
        )
    return None


def is_old_lake(path: str | os.PathLike[str]) -> bool:
    """A lake of the old format (Parquet parts and a ``_manifest/`` folder)."""
    return (Path(path) / OLD_MANIFEST).is_dir() and not is_lake(path)


def lake_problem(path: str | os.PathLike[str], *, writing: bool) -> str | None:
    """Why ``path`` cannot be used as a lake (to write one when ``writing``), or None."""
    p = Path(path)
    upgrade = f"`ember lake upgrade {p} NEW` copies it into a Delta lake"
    if p.exists() and not p.is_dir():
        return f"{p} is a file, not a lake folder; give a folder (it is made if missing)"
    if (p / OLD_MANIFEST).exists() and not (p / OLD_MANIFEST).is_dir():
        return f"{p / OLD_MANIFEST} is a file: {p} is not an Ember lake (nor an old one)"
    if is_old_lake(p):
        return (
            f"{p} is a lake of the old format (Parquet + {OLD_MANIFEST}/), read only now: {upgrade}"
        )
    if (p / MARKER).exists() and not is_lake(p):
        return f"{p / MARKER} is not a file: {p} is not an Ember lake"
    if is_lake(p):
        bad = marker_problem(p / MARKER)
        if bad is not None:
            return bad
    if writing:
        known = {MARKER, INGESTS, *LAKE_TABLES}
        if p.is_dir() and not is_lake(p) and any(n not in known for n in os.listdir(p)):
            return f"{p} is a folder with other files in it, not an Ember lake; give a new folder"
        return None
    if not is_lake(p):
        return (
            f"{p}: not a trace lake (no {MARKER}); write one with `ember ingest TRACES --lake {p}`"
        )
    return None


def create_lake(root: Path) -> None:
    """Make ``root`` a lake: each table created once (safe when two ingesters race to make
    it: delta-rs refuses a second version 0, and then the table is there), then the marker.

    Writers that start together must not create a table while another appends to it (the
    append then fails, "protocol changed"): every table exists before the marker does, and
    an ingester that finds the marker creates nothing."""
    from deltalake import DeltaTable

    if is_lake(root):
        bad = marker_problem(root / MARKER)
        if bad is not None:
            raise LakeError(bad)
        return
    problem = lake_problem(root, writing=True)
    if problem is not None:
        raise LakeError(problem)
    root.mkdir(parents=True, exist_ok=True)
    for table in (INGESTS, *LAKE_TABLES):
        path = root / table
        if DeltaTable.is_deltatable(str(path)):
            continue
        partitions = None if table == INGESTS else PARTITIONS
        try:
            DeltaTable.create(
                str(path), arrow_schema(table), mode="ignore", partition_by=partitions
            )
        except Exception:
            if not DeltaTable.is_deltatable(str(path)):
                raise
    tmp = root / f".{MARKER}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.write_text(json.dumps(LAKE_FORMAT) + "\n")
    os.replace(tmp, root / MARKER)
