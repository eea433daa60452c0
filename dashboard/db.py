"""The dashboard's only door to the database: read-only DuckDB connections and cached queries.

Every connection is opened ``read_only`` with external access off and the configuration
locked, so neither a page nor the SQL console can write the database, attach another
one, read or write other files, or load extensions; DuckDB itself enforces that.

Connections are short-lived (one per cache miss): DuckDB lets one process write a file
or many read it, so a dashboard that held a connection open would block ``ember ingest``
from adding runs. Query results are cached per database *version* (path, size, mtime),
so a new ingest shows up on the next rerun without a restart.
"""

from __future__ import annotations

import os
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
    """The current version of the database file (raises ``DatabaseError`` if it is absent)."""
    path = path or database_path()
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


@contextmanager
def open_readonly(version: DbVersion) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only, locked-down connection to the database, closed on exit."""
    try:
        con = duckdb.connect(version.path, read_only=True, config=dict(READONLY_CONFIG))
    except duckdb.IOException as e:
        raise DatabaseError(
            f"{version.path}: cannot open read-only ({e}). If `ember ingest` is writing it "
            "right now, wait for it to finish and reload the page."
        ) from e
    except duckdb.Error as e:
        raise DatabaseError(
            f"{version.path}: not a DuckDB database Ember can read ({e}). "
            "Point --db at a file written by `ember ingest`."
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
