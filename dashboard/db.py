"""The dashboard's only door to the database: read-only DuckDB connections and cached queries.

Every connection is opened ``read_only`` with external access off and the configuration
locked, so neither a page nor the SQL console can write the database, attach another
one, read or write other files, or load extensions; DuckDB itself enforces that.

The "database" may also be a trace lake (``ember ingest --lake DIR``; the same tables and
views, see ``ember.analysis.lake``) or a folder written by ``ember export --parquet``: then each
connection is an in-memory DuckDB whose tables and views read that folder's Parquet
datasets (``allowed_directories`` is that folder only, external access is off, the
configuration locked), and whatever the export left out (empty tables) is created
empty, with the analysis views over it.

Connections are short-lived: one per page run, opened at the first query that misses the
cache and closed when the page has run (``page_connection``). DuckDB lets one process
write a file or many read it, so a dashboard that held a connection open would block
``ember ingest`` from adding runs. Query results are cached per database *version*
(path, size, mtime), so a new ingest shows up on the next rerun without a restart.
"""

from __future__ import annotations

import contextvars
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

from ember.analysis.db import (
    announce_waiting,
    lock_holder,
    other_side_waiting,
    withdraw_waiting,
)

__all__ = [
    "DB_ENV",
    "DEFAULT_DB",
    "DatabaseBusy",
    "DatabaseError",
    "DbVersion",
    "connect_readonly",
    "database_path",
    "db_version",
    "has_relation",
    "open_readonly",
    "page_connection",
    "query",
    "query_set",
    "relations",
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


class DatabaseBusy(DatabaseError):
    """An ingest is writing the database (or waiting to): try again in a moment."""

    def __init__(self, message: str, pid: str | None, holder: str) -> None:
        super().__init__(message)
        self.pid = pid
        self.holder = holder  # "writer" or "reader" (from DuckDB's lock error)

    def __reduce__(self) -> tuple[type[DatabaseBusy], tuple[str, str | None, str]]:
        # the SQL console's child process sends it back pickled: rebuilt with all three
        return (type(self), (str(self), self.pid, self.holder))


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
        from ember.analysis.lake import is_old_lake

        if is_old_lake(path):  # its orphaned parts would be read as an export's rows
            raise DatabaseError(
                f"{path} is a trace lake in the old format (Parquet parts and a _manifest "
                f"folder), which Ember no longer reads here: run `ember lake upgrade {path} "
                "NEW` and open NEW (`ember dashboard --db NEW`)."
            )
        files = [f.stat() for f in path.rglob("*.parquet")]
        if not files:
            raise DatabaseError(
                f"{path}: a folder without Parquet files. Give a database written by "
                "`ember ingest`, or a folder written by `ember export --parquet DIR`."
            )
        return DbVersion(
            str(path), sum(f.st_size for f in files), max(f.st_mtime_ns for f in files)
        )
    if path.exists() and not path.is_file():  # a FIFO: DuckDB would wait on it forever
        raise DatabaseError(f"{path} is not a regular file: give a database file or folder")
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


def _open_export(folder: Path, limits: dict[str, Any]) -> duckdb.DuckDBPyConnection:
    """An in-memory database over a Parquet export, allowed to read that folder only."""
    from ember.analysis.db import VIEW_NAMES, table_ddl, view_sql
    from ember.analysis.lake import attach_lake, is_lake

    con = duckdb.connect(":memory:")
    try:
        con.execute(f"SET allowed_directories = [{_sql_text(str(folder) + os.sep)}]")
        con.execute("SET enable_external_access = false")
        for name, value in limits.items():  # before the configuration is locked
            con.execute(f"SET {name} = {_sql_text(str(value))}")
        if is_lake(folder):  # a lake written by `ember ingest --lake`
            attach_lake(con, folder)
            con.execute("SET lock_configuration = true")
            return con
        present = {
            d.name
            for d in folder.iterdir()
            if d.is_dir() and re.fullmatch(r"[a-z_]+", d.name) and any(d.rglob("*.parquet"))
        }
        for name in sorted(present):
            glob = _sql_text(str(folder / name / "**" / "*.parquet"))
            # partitioned by run_key (the run_id in the files), or by run_id before it
            first = next((folder / name).rglob("*.parquet")).relative_to(folder / name)
            part = "run_key" if any(p.startswith("run_key=") for p in first.parts) else "run_id"
            drop = "run_date, run_key" if part == "run_key" else "run_date"
            con.execute(
                f"CREATE VIEW {name} AS SELECT * EXCLUDE ({drop}) FROM read_parquet({glob}, "
                f"hive_partitioning = true, hive_types = {{'run_date': DATE, '{part}': VARCHAR}})"
            )
        # tables the export left out (no rows) exist empty, with their real columns
        for stmt in table_ddl():
            created = re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", stmt)
            if created and created.group(1) not in present:
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


def _connect(
    version: DbVersion, wait_s: float, limits: dict[str, Any]
) -> duckdb.DuckDBPyConnection:
    path = Path(version.path)
    if path.is_dir():
        return _open_export(path, limits)
    deadline = time.monotonic() + wait_s
    waited = False
    try:
        while True:
            # an ingest waiting for the readers to let go goes first: no new connection then
            if not other_side_waiting(version.path, read_only=True):
                try:
                    return duckdb.connect(
                        version.path, read_only=True, config={**READONLY_CONFIG, **limits}
                    )
                except duckdb.IOException as e:
                    # an ingest holds the file (one writer, no readers meanwhile): wait a
                    # little, and say so, so that it lets us in before its next trace file
                    if "lock" not in str(e).lower():
                        raise
                    if time.monotonic() > deadline:
                        raise DatabaseBusy(_BUSY, *lock_holder(str(e))) from e
                    announce_waiting(version.path, read_only=True)
                    waited = True
            elif time.monotonic() > deadline:
                raise DatabaseBusy(_BUSY, None, "writer")
            time.sleep(0.1)
    finally:
        if waited:
            withdraw_waiting(version.path, read_only=True)


_BUSY = "The database is being updated (an `ember ingest` is writing it); retrying…"


def connect_readonly(
    version: DbVersion, *, wait_s: float = 2.0, limits: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """A read-only, locked-down connection to the database (the caller closes it).
    ``limits``: more DuckDB settings, fixed before the configuration is locked (the SQL
    console's ``memory_limit`` and ``threads``).

    While an ingest writes the file (or waits to), this waits ``wait_s`` seconds, then
    raises ``DatabaseBusy``: the app shows that the database is being updated and runs the
    page again (``app.py``), so an ingest never waits long for the dashboard.
    """
    try:
        return _connect(version, wait_s, limits or {})
    except DatabaseBusy:
        raise
    except duckdb.IOException as e:
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


@contextmanager
def open_readonly(
    version: DbVersion, *, wait_s: float = 2.0, limits: dict[str, Any] | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only, locked-down connection to the database, closed on exit."""
    con = connect_readonly(version, wait_s=wait_s, limits=limits)
    try:
        yield con
    finally:
        con.close()


# The connection of the page run in progress (the script thread's), opened lazily.
_page: contextvars.ContextVar[dict[DbVersion, duckdb.DuckDBPyConnection] | None] = (
    contextvars.ContextVar("ember_dashboard_page_connection", default=None)
)


@contextmanager
def page_connection() -> Iterator[None]:
    """Share one connection among the queries of a page run; close it at the end.

    Opening a database and binding its first query costs a few hundred milliseconds on a
    large file; a page makes several queries. Outside this scope each query opens its own.
    """
    token = _page.set({})
    try:
        yield
    finally:
        for con in (_page.get() or {}).values():
            con.close()
        _page.reset(token)


@contextmanager
def _borrow(version: DbVersion) -> Iterator[duckdb.DuckDBPyConnection]:
    shared = _page.get()
    if shared is None:
        with open_readonly(version) as con:
            yield con
        return
    if version not in shared:
        shared[version] = connect_readonly(version)  # closed by page_connection
    yield shared[version]


@st.cache_data(show_spinner=False, max_entries=512)
def _cached_query(version: DbVersion, sql: str, params: tuple[Any, ...]) -> pl.DataFrame:
    with _borrow(version) as con:
        return con.sql(sql, params=list(params) or None).pl()


def query(sql: str, *params: Any) -> pl.DataFrame:
    """Run a page's query (``?`` placeholders for ``params``) and cache the result."""
    return _cached_query(db_version(), sql, tuple(params))


@st.cache_data(show_spinner=False, max_entries=128)
def _cached_set(
    version: DbVersion,
    slices: tuple[tuple[str, str], ...],
    queries: tuple[tuple[str, str], ...],
    params: tuple[Any, ...],
) -> dict[str, pl.DataFrame]:
    with open_readonly(version) as con:
        for name, sql in slices:
            con.execute(f"CREATE TEMP TABLE {name} AS {sql}", list(params) or None)
        return {key: con.sql(sql).pl() for key, sql in queries}


def query_set(
    slices: dict[str, str], queries: dict[str, str], *params: Any
) -> dict[str, pl.DataFrame]:
    """Several aggregations over the same slices of expensive views, computed once.

    Each slice (``name -> SELECT ...`` with ``$1``... placeholders for ``params``) becomes
    a temporary table of one connection; ``queries`` then aggregate those tables in
    DuckDB. Use it when a page asks a view several questions about the same run: the
    view is evaluated once instead of once per question.
    """
    return _cached_set(db_version(), tuple(slices.items()), tuple(queries.items()), params)


@st.cache_data(show_spinner=False, max_entries=16)
def _relations(version: DbVersion) -> dict[str, str]:
    with _borrow(version) as con:
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
