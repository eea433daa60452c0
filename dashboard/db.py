"""The dashboard's only door to the database: read-only DuckDB connections and cached queries.

Every connection is opened ``read_only`` with external access off and the configuration
locked, so neither a page nor the SQL console can write the database, attach another
one, read or write other files, or load extensions; DuckDB itself enforces that.

The "database" may also be a folder written by ``ember export --parquet``: then each
connection is an in-memory DuckDB whose tables and views read that folder's Parquet
datasets (``allowed_directories`` is that folder only, external access is off, the
configuration locked), and whatever the export left out (empty tables) is created
empty, with the analysis views over it.

Connections are short-lived (one per cache miss): DuckDB lets one process write a file
or many read it, so a dashboard that held a connection open would block ``ember ingest``
from adding runs. Query results are cached per database *version* (path, size, mtime),
so a new ingest shows up on the next rerun without a restart.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import streamlit as st

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "DatabaseError",
    "DbVersion",
    "database_path",
    "db_version",
    "open_readonly",
    "query",
    "relations",
    "has_relation",
]

DB_ENV = "EMBER_DASHBOARD_DB"
"""Environment variable that carries the database path from ``ember dashboard`` to the app."""
DEFAULT_DB = "ember.duckdb"

# What DuckDB enforces for every dashboard connection.
READONLY_CONFIG: dict[str, Any] = {
    "enable_external_access": False,
    "lock_configuration": True,
}


class DatabaseError(RuntimeError):
    """The database is missing or unreadable; the message says what to do."""


@dataclass(frozen=True)
class DbVersion:
    """Identifies one state of the database file; part of every cache key."""

    path: str
    size: int
    mtime_ns: int


def database_path() -> Path:
    """The database the app shows: ``$EMBER_DASHBOARD_DB``, else ``ember.duckdb`` here."""
    return Path(os.environ.get(DB_ENV) or DEFAULT_DB).expanduser().resolve()


def db_version(path: Path | None = None) -> DbVersion:
    """The current version of the database file or export folder (``DatabaseError`` if
    it is absent)."""
    path = path or database_path()
    if path.is_dir():
        files = [f.stat() for f in path.rglob("*.parquet")]
        if not files:
            raise DatabaseError(
                f"{path}: a folder without Parquet files. Give a database written by "
                "`ember ingest`, or a folder written by `ember export --parquet DIR`."
            )
        return DbVersion(
            str(path), sum(f.st_size for f in files), max(f.st_mtime_ns for f in files)
        )
    try:
        st_ = path.stat()
    except FileNotFoundError:
        raise DatabaseError(
            f"{path}: no such database. Create it with `ember ingest TRACES --db {path}`, "
            "then start the dashboard with `ember dashboard --db PATH`."
        ) from None
    # The write-ahead log changes while the file itself may not; count it in.
    wal = path.with_name(path.name + ".wal")
    wal_mtime = wal.stat().st_mtime_ns if wal.exists() else 0
    return DbVersion(str(path), st_.st_size, max(st_.st_mtime_ns, wal_mtime))


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _open_export(folder: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory database over a Parquet export, allowed to read that folder only."""
    from ember.analysis.db import VIEW_NAMES, table_ddl, view_sql

    con = duckdb.connect(":memory:")
    try:
        con.execute(f"SET allowed_directories = [{_sql_text(str(folder) + os.sep)}]")
        con.execute("SET enable_external_access = false")
        present = {
            d.name
            for d in folder.iterdir()
            if d.is_dir() and re.fullmatch(r"[a-z_]+", d.name) and any(d.rglob("*.parquet"))
        }
        for name in sorted(present):
            glob = _sql_text(str(folder / name / "**" / "*.parquet"))
            con.execute(
                f"CREATE VIEW {name} AS SELECT * EXCLUDE (run_date) FROM read_parquet({glob}, "
                "hive_partitioning = true, hive_types = {'run_date': DATE, 'run_id': VARCHAR})"
            )
        # tables the export left out (no rows) exist empty, with their real columns
        for stmt in table_ddl():
            name = re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", stmt)
            if name and name.group(1) not in present:
                con.execute(stmt)
        con.execute(view_sql("macros"))
        for name in VIEW_NAMES:
            if name not in present:
                con.execute(f"CREATE VIEW {name} AS\n{view_sql(name).strip().rstrip(';')}")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def _connect(version: DbVersion, wait_s: float) -> duckdb.DuckDBPyConnection:
    path = Path(version.path)
    if path.is_dir():
        return _open_export(path)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return duckdb.connect(version.path, read_only=True, config=dict(READONLY_CONFIG))
        except duckdb.IOException as e:
            # an ingest holds the file (one writer, no readers meanwhile): wait a little
            if "lock" not in str(e).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextmanager
def open_readonly(
    version: DbVersion, *, wait_s: float = 10.0
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only, locked-down connection to the database, closed on exit."""
    try:
        con = _connect(version, wait_s)
    except duckdb.IOException as e:
        if "lock" in str(e).lower():
            raise DatabaseError(
                f"{version.path} is being written by another process (an `ember ingest`?) "
                f"and cannot be read meanwhile ({e}). Reload the page when it has finished."
            ) from e
        raise DatabaseError(
            f"{version.path}: not a DuckDB database or Parquet export Ember can read ({e}). "
            "Point --db at a file written by `ember ingest` or a folder written by "
            "`ember export --parquet`."
        ) from e
    except duckdb.Error as e:
        raise DatabaseError(
            f"{version.path}: not a DuckDB database or Parquet export Ember can read ({e}). "
            "Point --db at a file written by `ember ingest` or a folder written by "
            "`ember export --parquet`."
        ) from e
    try:
        yield con
    finally:
        con.close()


@st.cache_data(show_spinner=False, max_entries=512)
def _cached_query(version: DbVersion, sql: str, params: tuple[Any, ...]) -> pl.DataFrame:
    with open_readonly(version) as con:
        return con.sql(sql, params=list(params) or None).pl()


def query(sql: str, *params: Any) -> pl.DataFrame:
    """Run a page's query (``?`` placeholders for ``params``) and cache the result."""
    return _cached_query(db_version(), sql, tuple(params))


@st.cache_data(show_spinner=False, max_entries=16)
def _relations(version: DbVersion) -> dict[str, str]:
    with open_readonly(version) as con:
        rows = con.execute(
            "SELECT table_name, table_type FROM information_schema.tables "
            "WHERE table_schema = 'main' ORDER BY table_name"
        ).fetchall()
    return {name: ("view" if kind == "VIEW" else "table") for name, kind in rows}


def relations() -> dict[str, str]:
    """Tables and views of the database: name -> ``"table"`` or ``"view"``."""
    return _relations(db_version())


def has_relation(name: str) -> bool:
    """Whether the database has this table or view (pages degrade when one is missing)."""
    return name in relations()
