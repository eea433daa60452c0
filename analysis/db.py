"""The database: tables (from the schema), views (from ``sql/*.sql``), and ``connect()``.

Tables
------
- one per record kind, named after the kind (``span_start``, ``span_end``, ``cache``,
  ``hub``, ``op``, ``tensor``, ``memory``, ``device_memory``, ``gradient``, ``edge``):
  ``run_id`` first, then the record's fields with the types of ``schema_types``;
- derived columns, computed once per ingest so that views do not rebuild them per query
  (``DERIVED_COLUMNS``): ``cache.lookup_key`` (``ember_key(key, shapes, statics)``) and
  ``cache.shapes_text`` (``ember_shapes_text(shapes)``), after the record's own columns;
- ``runs``: one row per run, the ``meta`` record plus the file it came from and
  ``started_at`` (the wall-clock anchor as a TIMESTAMP);
- ``ingested_files``: one row per file ingest has seen (how far it read, what it found);
- ``rejected_lines``: one row per line ingest refused (file, line, reason, raw start).

Concurrency: DuckDB lets one process write a database file; while it does, no other
process can open the file, not even to read, and while any process reads it, none can
write. ``connect(wait=...)`` retries for a while and then raises ``DatabaseBusyError``,
which names the process and whether it reads or writes. Ingest writes each file in one
transaction, so a reader that gets in between two files sees whole files only. Waiting
processes leave a marker next to the database so that neither side starves the other:
readers do not start while an ingest waits, and an ingest lets a waiting reader in before
its next file (``open_database``). An ingest waits ``INGEST_WAIT_S`` (60 s) by default, longer
than a dashboard query may run.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from ember.schemas import RECORD_KINDS

from .derived import (
    CACHE_ORDER_COLUMNS,
    MEMORY_RUNNING_COLUMNS,
    cache_order_sql,
    memory_sums_sql,
)
from .schema_types import TABLE_COLUMNS
from .views import RETIRED_VIEWS, VIEW_NAMES

__all__ = [
    "INGEST_WAIT_S",
    "QUERY_WAIT_S",
    "RECORD_TABLES",
    "VIEW_NAMES",
    "Connection",
    "DatabaseBusyError",
    "DatabasePathError",
    "check_database_path",
    "connect",
    "table_ddl",
    "view_sql",
]

DEFAULT_DB = "ember.duckdb"

RECORD_TABLES: tuple[str, ...] = tuple(k for k in RECORD_KINDS if k != "meta")
"""The table of each record kind except ``meta`` (which becomes ``runs``)."""


class DatabaseBusyError(RuntimeError):
    """Another process holds the database (DuckDB allows one writer process at a time)."""


class DatabasePathError(ValueError):
    """The database path is not a file DuckDB can open: a folder, a FIFO, a device, or a
    place where no file can be made."""


def check_database_path(path: str | os.PathLike[str]) -> None:
    """Refuse a database path that is not a regular file before DuckDB opens it (DuckDB
    waits forever on a FIFO and reports a folder as an IO error in the middle of a write)."""
    p = Path(path)
    if p.is_dir():
        raise DatabasePathError(
            f"{p} is a folder, not a database file: give the DuckDB file to write or read "
            "(a folder is a lake: `ember ingest --lake DIR`, `--db DIR` to read it)"
        )
    if p.exists() and not p.is_file():
        kind = "a FIFO" if p.is_fifo() else "not a regular file"
        raise DatabasePathError(f"{p} is {kind}: give a DuckDB database file")
    if not p.exists() and not p.parent.is_dir():
        raise DatabasePathError(
            f"{p}: cannot make a database there ({p.parent} is not a folder); give a path in "
            "an existing folder"
        )


def _require_database_file(duck: duckdb.DuckDBPyConnection, path: str) -> None:
    """Refuse (closing ``duck``) a connection DuckDB made in memory for an existing data
    file: it opens a ``.jsonl``, ``.csv`` or ``.parquet`` path as an in-memory database
    with a view of the file, so an ingest into ``--db trace.jsonl`` said it stored its
    records and kept none, and a reader failed with a bare "Catalog Error"."""
    row = duck.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone()
    if row is not None and row[0] is None:
        duck.close()
        raise DatabasePathError(_data_file(path))


def _data_file(path: str) -> str:
    return (
        f"{path} is a data file (DuckDB reads it as a table), not a DuckDB database: "
        "give the database file (e.g. --db ember.duckdb); to ingest this file, pass it "
        f"as a trace: `ember ingest {path} --db ember.duckdb`"
    )


DERIVED_COLUMNS: dict[str, dict[str, tuple[str, str]]] = {
    # table -> column -> (type, SQL over the record's columns); ingest fills them, and
    # ``init_schema`` adds and fills them in a database made before they existed
    "cache": {
        "lookup_key": ("VARCHAR", "ember_key(key, shapes, statics)"),
        "shapes_text": ("VARCHAR", "ember_shapes_text(shapes)"),
    },
}


def _fill_sql(table: str, columns: dict[str, str], computed: str) -> str:
    """UPDATE ``table``'s ``columns`` from ``computed`` (a SELECT of them with ``rid``)."""
    sets = ", ".join(f"{c} = w.{c}" for c in columns)
    return f"UPDATE {table} SET {sets}\nFROM ({computed}) AS w\nWHERE {table}.rowid = w.rid"


# by table: the columns computed from a run's rows in order, the columns they are computed
# from, and the SQL that computes them (``analysis.derived``)
_ORDERED_SOURCES = {
    "memory": (
        MEMORY_RUNNING_COLUMNS,
        "run_id, device, category, action, bytes, ts_ns",
        memory_sums_sql,
    ),
    "cache": (
        CACHE_ORDER_COLUMNS,
        "run_id, source, position, lookup_key, action, ts_ns",
        cache_order_sql,
    ),
}
ORDERED_TABLES = tuple(_ORDERED_SOURCES)
"""The tables with columns computed from their run's rows in order (``analysis.derived``)."""


def refill_ordered_sql(table: str, where: str = "") -> str:
    """UPDATE of ``table``'s columns computed from its run's rows in order (the cache order
    columns, the memory running sums) over the rows ``where`` selects (whole runs; "": all),
    from their ts_ns and rowid (file order): only the columns they are computed from are
    read (an upgraded table has the computed ones, NULL)."""
    columns, read, computed = _ORDERED_SOURCES[table]
    src = f"(SELECT rowid AS rid, {read} FROM {table}{f' WHERE {where}' if where else ''}) AS m"
    return _fill_sql(table, columns, computed(src, "rid"))


_FILL_MEMORY_RUNNING = refill_ordered_sql("memory")
_FILL_CACHE_ORDER = refill_ordered_sql("cache")


def record_columns(kind: str) -> dict[str, str]:
    cols = {k: v for k, v in TABLE_COLUMNS[kind].items() if k != "kind"}
    return {"run_id": "VARCHAR", **cols}


RUNS_COLUMNS: dict[str, str] = {
    **{k: v for k, v in TABLE_COLUMNS["meta"].items() if k != "kind"},
    "started_at": "TIMESTAMP_NS",
    "file": "VARCHAR",
}


def table_ddl() -> list[str]:
    """CREATE TABLE statements of every table (IF NOT EXISTS)."""
    stmts = []
    for kind in RECORD_TABLES:
        cols = {**record_columns(kind)}
        cols.update({c: t for c, (t, _) in DERIVED_COLUMNS.get(kind, {}).items()})
        if kind == "cache":
            cols.update(CACHE_ORDER_COLUMNS)
        if kind == "memory":
            cols.update(MEMORY_RUNNING_COLUMNS)
        text = ", ".join(f'"{c}" {t}' for c, t in cols.items())
        stmts.append(f"CREATE TABLE IF NOT EXISTS {kind} ({text})")
    run_cols = ", ".join(f'"{c}" {t}' for c, t in RUNS_COLUMNS.items())
    stmts.append(f"CREATE TABLE IF NOT EXISTS runs ({run_cols}, PRIMARY KEY (run_id))")
    stmts.append(
        """CREATE TABLE IF NOT EXISTS ingested_files (
            file VARCHAR PRIMARY KEY,   -- absolute path
            run_id VARCHAR,             -- NULL when the file was refused before its meta
            status VARCHAR,             -- ok | partial (a truncated last line) | refused
            message VARCHAR,            -- why refused or partial; NULL when ok
            offset_bytes BIGINT,        -- bytes read: the next ingest continues from here
            lines BIGINT,               -- lines read up to offset_bytes
            records BIGINT,             -- records stored from this file
            rejected BIGINT,            -- lines rejected from this file
            first_line_hash VARCHAR,    -- tells a grown file from a replaced one
            schema_version INTEGER,     -- the version the file was written with
            ingested_at TIMESTAMP,      -- last ingest (UTC)
            size_bytes BIGINT           -- the file's size when read: the same size again is
                                        -- unchanged, a last line cut short included
        )"""
    )
    stmts.append(
        """CREATE TABLE IF NOT EXISTS rejected_lines (
            file VARCHAR,               -- absolute path
            line BIGINT,                -- 1-based line number
            byte_offset BIGINT,         -- where the line starts in the file
            reason VARCHAR,             -- what is wrong, field by field
            raw VARCHAR,                -- the start of the line (200 chars, bad bytes escaped)
            run_id VARCHAR,
            ingested_at TIMESTAMP
        )"""
    )
    return stmts


def view_sql(name: str) -> str:
    """The text of ``analysis/sql/<name>.sql``."""
    return resources.files("ember.analysis").joinpath("sql", f"{name}.sql").read_text("utf-8")


def _create_views(con: duckdb.DuckDBPyConnection, defer: bool = False) -> None:
    """The macros and the views; ``defer``: without binding them (``_can_defer_binding``)."""
    con.execute(view_sql("macros"))
    for name in RETIRED_VIEWS:
        con.execute(f"DROP VIEW IF EXISTS {name}")
    option = " WITH (DEFER_BINDING)" if defer else ""
    for name in VIEW_NAMES:
        body = view_sql(name).strip().rstrip(";")
        con.execute(f"CREATE OR REPLACE VIEW {name}{option} AS\n{body}")


_DEFER_BINDING: dict[str, bool] = {}


def _can_defer_binding(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether this DuckDB creates a view without binding it (``WITH (DEFER_BINDING)``,
    DuckDB 1.5 and later). Binding the views at creation was most of the cost of a new
    database (0.16 of 0.2 CPU-s: each view binds the views it reads again), and a query
    binds the views it reads anyway; a view that does not bind fails when queried rather
    than when created (the tests query every view)."""
    version = duckdb.__version__
    if version not in _DEFER_BINDING:
        try:
            con.execute("CREATE OR REPLACE TEMP VIEW _ember_probe WITH (DEFER_BINDING) AS SELECT 1")
            con.execute("DROP VIEW _ember_probe")
            _DEFER_BINDING[version] = True
        except duckdb.InterruptException:
            raise  # Ctrl-C, not an answer
        except duckdb.Error:
            _DEFER_BINDING[version] = False
    return _DEFER_BINDING[version]


def _add_derived_columns(con: duckdb.DuckDBPyConnection) -> None:
    """Add the derived columns a database made by an older Ember lacks, and fill them."""
    for table, cols in DERIVED_COLUMNS.items():
        have = {
            r[0]
            for r in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
                "AND schema_name = 'main' AND database_name = current_database()",
                [table],
            ).fetchall()
        }
        missing = {c: v for c, v in cols.items() if c not in have}
        for c, (t, _) in missing.items():
            con.execute(f'ALTER TABLE {table} ADD COLUMN "{c}" {t}')
        if missing:
            sets = ", ".join(f'"{c}" = {expr}' for c, (_, expr) in missing.items())
            con.execute(f"UPDATE {table} SET {sets}")
        if table == "cache" and not have.issuperset(CACHE_ORDER_COLUMNS):
            for c, t in CACHE_ORDER_COLUMNS.items():
                if c not in have:
                    con.execute(f'ALTER TABLE cache ADD COLUMN "{c}" {t}')
            con.execute(_FILL_CACHE_ORDER)


def _add_running_columns(con: duckdb.DuckDBPyConnection) -> None:
    """Add and fill the memory running sums a database made by an older Ember lacks."""
    have = {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = 'memory' "
            "AND schema_name = 'main' AND database_name = current_database()"
        ).fetchall()
    }
    if have.issuperset(MEMORY_RUNNING_COLUMNS):
        return
    for c, t in MEMORY_RUNNING_COLUMNS.items():
        if c not in have:
            con.execute(f'ALTER TABLE memory ADD COLUMN "{c}" {t}')
    con.execute(_FILL_MEMORY_RUNNING)


def _upgrade_columns(con: duckdb.DuckDBPyConnection) -> None:
    """Bring tables made by an older Ember to the current columns, so the views bind: a
    column the schema gained is added, a STRUCT that gained fields is widened (DuckDB keeps
    the old values, the new fields are NULL). A run ingested before ``runs.sync`` existed
    was a version-1 trace, whose spans ended at dispatch: its ``sync`` is false."""
    for stmt in table_ddl():
        m = re.match(r"CREATE TABLE IF NOT EXISTS (\w+) \(", stmt)
        if m is None:
            continue
        table = m.group(1)
        con.execute("DROP TABLE IF EXISTS _ember_expected")
        con.execute(stmt.replace(m.group(0), "CREATE TEMP TABLE _ember_expected (", 1))
        types = (
            "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = ? "
            "AND schema_name = ? AND database_name = current_database()"
        )
        want = dict(
            con.execute(
                types.replace("current_database()", "'temp'"), ["_ember_expected", "main"]
            ).fetchall()
        )
        have = dict(con.execute(types, [table, "main"]).fetchall())
        con.execute("DROP TABLE _ember_expected")
        for column, kind in want.items():
            if column not in have:
                con.execute(f'ALTER TABLE {table} ADD COLUMN "{column}" {kind}')
                if (table, column) == ("runs", "sync"):
                    con.execute("UPDATE runs SET sync = false")
            elif have[column] != kind and kind.startswith("STRUCT"):
                con.execute(f'ALTER TABLE {table} ALTER "{column}" TYPE {kind}')


def _schema_hash() -> str:
    text = "\n".join(table_ddl()) + view_sql("macros") + "".join(view_sql(v) for v in VIEW_NAMES)
    return hashlib.sha1(text.encode()).hexdigest()


def init_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the tables that do not exist yet and (re)create the views if they changed."""
    current = _schema_hash()
    try:
        rows = con.execute("SELECT hash FROM ember_schema").fetchall()
        row = rows[0] if rows else None
    except duckdb.CatalogException:
        row = None
    if row is not None and row[0] == current:
        return
    defer = _can_defer_binding(con)
    con.execute("BEGIN TRANSACTION")
    try:
        # a new database's tables are made with the current columns: nothing to upgrade
        # (comparing each table with the schema was a quarter of making one)
        new = (
            row is None
            and not con.execute(
                "SELECT 1 FROM duckdb_tables() WHERE database_name = current_database() LIMIT 1"
            ).fetchall()
        )
        for stmt in table_ddl():
            con.execute(stmt)
        con.execute(view_sql("macros"))
        if not new:
            _add_derived_columns(con)
            _add_running_columns(con)
            _upgrade_columns(con)
        _create_views(con, defer)
        con.execute("CREATE OR REPLACE TABLE ember_schema (hash VARCHAR)")
        con.execute("INSERT INTO ember_schema VALUES (?)", [current])
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # (none left after an interrupted COMMIT)
            con.execute("ROLLBACK")
        raise


# DuckDB says this when the process holding the file has it open read-only
_HELD_BY_READER = "would be able to open this database in read-only mode"

INGEST_WAIT_S = 60.0
"""How long ingest waits for the database by default: longer than a dashboard query may run
(its 30 s cap), so a person looking at runs never makes an ingest fail."""

QUERY_WAIT_S = 60.0
"""How long ``ember query`` waits by default for an ingest to let go of the database."""

# A process waiting for the database says so in a marker file next to it, touched at each
# try: readers do not start while a writer waits (else a busy dashboard starves ingest),
# and a writer lets a waiting reader in before it takes the file again for its next trace
# file (else a many-file ingest starves the reader). Fresh = touched in the last second.
_WAITING = {False: ".ember-writer-waiting", True: ".ember-reader-waiting"}
_FRESH_S = 1.0


def _marker(path: str, read_only: bool) -> Path:
    return Path(path + _WAITING[read_only])


def announce_waiting(path: str, read_only: bool) -> None:
    """Say that this process waits to open ``path`` (touch its marker; see ``open_database``)."""
    try:
        _marker(path, read_only).touch()
    except OSError:  # a read-only folder: waiting still works, only without priority
        pass


def withdraw_waiting(path: str, read_only: bool) -> None:
    """This process no longer waits for ``path``."""
    with contextlib.suppress(OSError):
        _marker(path, read_only).unlink(missing_ok=True)


def other_side_waiting(path: str, read_only: bool) -> bool:
    """Whether a process of the other kind (a writer, for a reader) waits for ``path``."""
    try:
        age = time.time() - _marker(path, not read_only).stat().st_mtime
    except OSError:
        return False
    return age < _FRESH_S


def lock_holder(message: str) -> tuple[str | None, str]:
    """From DuckDB's lock error: the holder's pid, and whether it reads or writes the file."""
    pid = _PID_RE.search(message)
    kind = "reader" if _HELD_BY_READER in message else "writer"
    return (pid.group(1) if pid else None), kind


def busy_message(path: str, message: str, waited: float, read_only: bool) -> str:
    """What to tell a person whose connection to ``path`` timed out behind another process."""
    pid, kind = lock_holder(message)
    who = f"process {pid}" if pid else "another process"
    if kind == "reader":
        held = (
            f"{path} is open for reading by {who} (a dashboard, `ember query` or a notebook "
            f"with connect(read_only=True)); DuckDB lets no process write while one reads"
        )
    else:
        held = (
            f"{path} is open for writing by {who} (an `ember ingest`?); DuckDB allows one "
            f"writer process at a time and no readers while it writes"
        )
    return (
        f"{held}; waited {waited:g}s. Try again when it has finished, or wait longer "
        f"(`--wait SECONDS` of ember ingest and ember query; wait= in Python)."
    )


_LOCK_RE = re.compile(r"lock", re.IGNORECASE)
# DuckDB writes a new file's three 4 KiB headers after creating it; a process opening the
# file in between is told it "is not a valid DuckDB database file".
_CREATING_S = 5.0


def _being_created(path: str, message: str) -> bool:
    """Whether ``message`` is DuckDB refusing a file that another process is creating now.

    Such a file was changed in the last few seconds: DuckDB creates it, then writes its
    headers, and a writer may also move a finished database into place (``os.replace``)
    between our attempt and this look, so its size says nothing. An old file that DuckDB
    refuses is not a database, and waiting won't help.
    """
    if "not a valid DuckDB database file" not in message:
        return False
    try:
        st = os.stat(path)
    except OSError:  # removed meanwhile: the next attempt says what is there
        return True
    return 0 <= time.time() - st.st_mtime < _CREATING_S


_PID_RE = re.compile(r"PID (\d+)")


def open_database(path: str, read_only: bool, wait: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + wait
    delay = 0.02
    announced = False
    try:
        if not read_only and path != ":memory:":
            # a reader waiting for the previous file's transaction to end goes first
            # (briefly: it withdraws once in, and a stuck marker goes stale)
            pause_until = min(deadline, time.monotonic() + 5.0)
            while other_side_waiting(path, read_only) and time.monotonic() < pause_until:
                time.sleep(0.05)
        while True:
            if read_only and other_side_waiting(path, read_only):
                text = "a writer is waiting"
            else:
                try:
                    return duckdb.connect(path, read_only=read_only)
                except duckdb.IOException as exc:
                    text = str(exc)
                    creating = _being_created(path, text)
                    if not (_LOCK_RE.search(text) or creating):
                        raise
                    if time.monotonic() >= deadline:
                        if creating:
                            raise
                        raise DatabaseBusyError(busy_message(path, text, wait, read_only)) from exc
            if time.monotonic() >= deadline:
                raise DatabaseBusyError(
                    f"{path}: an ingest waits to write it, and readers let it go first; "
                    f"waited {wait:g}s. Try again when it has finished, or wait longer "
                    f"(`--wait SECONDS` of ember ingest and ember query; wait= in Python)."
                )
            announce_waiting(path, read_only)
            announced = True
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
    finally:
        if announced:
            withdraw_waiting(path, read_only)


# DuckDB types polars cannot import ("could not import from month_day_nano_interval"):
# a query's columns of them are read as text (``Connection.sql``)
_TEXT_TYPES = frozenset({"interval", "union", "bit"})


class Connection:
    """An Ember database: ``.sql(query) -> polars.DataFrame``; ``.duck`` is the DuckDB one."""

    def __init__(self, duck: duckdb.DuckDBPyConnection, path: str, read_only: bool) -> None:
        self.duck = duck
        self.path = path
        self.read_only = read_only

    def sql(
        self,
        query: str,
        params: list[Any] | dict[str, Any] | None = None,
        *,
        as_text: Iterable[str] = (),
    ) -> pl.DataFrame:
        """Run one query; the result as a polars DataFrame. Columns of the DuckDB types
        polars cannot take (``INTERVAL``, ``UNION``, ``BIT``), and of those named in
        ``as_text`` (type ids: ``"blob"``, ``"map"``), come as DuckDB's text of them."""
        rel = self.duck.sql(query, params=params)
        if rel is None:  # a statement without a result
            return pl.DataFrame()
        text = _TEXT_TYPES.union(as_text)
        if any(t.id in text for t in rel.types):
            columns = []
            for name, kind in zip(rel.columns, rel.types, strict=True):
                q = '"' + name.replace('"', '""') + '"'
                columns.append(f"CAST({q} AS VARCHAR) AS {q}" if kind.id in text else q)
            rel = rel.project(", ".join(columns))
        return rel.pl()

    def execute(self, query: str, params: list[Any] | dict[str, Any] | None = None) -> Any:
        return self.duck.execute(query, params) if params is not None else self.duck.execute(query)

    def tables(self) -> list[str]:
        return [r[0] for r in self.duck.execute("SHOW TABLES").fetchall()]

    def close(self) -> None:
        self.duck.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(
    db: str | os.PathLike[str] = DEFAULT_DB,
    *,
    read_only: bool = False,
    wait: float | None = None,
    threads: int | None = None,
) -> Connection:
    """Open (or create) an Ember database.

    A writable connection creates missing tables and refreshes the views. A read-only
    one needs an existing database. While another process holds the file (an ingest
    writing it; for a writer, also any reader), opening waits up to ``wait`` seconds
    (``INGEST_WAIT_S`` for a writer, 10 s for a reader, by default), then raises
    ``DatabaseBusyError`` naming the process and whether it reads or writes.
    """
    if wait is None:
        wait = 10.0 if read_only else INGEST_WAIT_S
    path = str(db)
    if path != ":memory:":
        p = Path(path)
        if read_only and not p.exists():
            raise FileNotFoundError(
                f"{path}: no such database; create it with `ember ingest TRACE... --db {path}`"
            )
        check_database_path(p)
        path = str(p)
    try:
        duck = open_database(path, read_only, wait)
    except duckdb.CatalogException as exc:
        # a reader of a data file: DuckDB would make the in-memory database it refuses
        if read_only and "in-memory database in read-only mode" in str(exc):
            raise DatabasePathError(_data_file(path)) from None
        raise
    if path != ":memory:":
        _require_database_file(duck, path)
    duck.execute("SET enable_progress_bar = false")
    if threads:
        duck.execute(f"SET threads = {int(threads)}")
    if not read_only:
        init_schema(duck)
    return Connection(duck, path, read_only)
