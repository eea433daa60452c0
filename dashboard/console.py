"""The read-only SQL console: which statements it runs, and the messages when it refuses.

Two layers. First the statement is parsed by DuckDB and anything but one SELECT (or
EXPLAIN of one) is refused with a message that says why and what to do instead. Then it
runs on a connection opened ``read_only`` with ``enable_external_access=false`` and
``lock_configuration=true`` (see ``db.open_readonly``), so whatever slips past the first
layer (a table function reading a file, for instance) is stopped by DuckDB itself; its
permission errors are translated into the same kind of message.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import duckdb
import polars as pl

from .db import DbVersion, open_readonly

__all__ = [
    "ConsoleRefused",
    "ConsoleResult",
    "check_statement",
    "run_console_query",
    "to_csv",
]

MAX_ROWS = 100_000
"""Rows a console result keeps (the rest is reported as cut off)."""
TIMEOUT_S = 30.0
"""A console query is interrupted after this many seconds."""

_ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}

_HINT = "Write a SELECT over the views, e.g. SELECT * FROM runs LIMIT 10."

# StatementType name -> why the console refuses it
_REFUSALS: dict[str, str] = {
    "INSERT": "the SQL console is read-only: INSERT would write to the database.",
    "UPDATE": "the SQL console is read-only: UPDATE would write to the database.",
    "DELETE": "the SQL console is read-only: DELETE would write to the database.",
    "CREATE": "the SQL console is read-only: CREATE would write to the database.",
    "DROP": "the SQL console is read-only: DROP would write to the database.",
    "ALTER": "the SQL console is read-only: ALTER would write to the database.",
    "VACUUM": "the SQL console is read-only: VACUUM would write to the database.",
    "ANALYZE": "the SQL console is read-only: ANALYZE would write to the database.",
    "MERGE_INTO": "the SQL console is read-only: MERGE would write to the database.",
    "UPDATE_EXTENSIONS": "extensions cannot be installed or updated from the SQL console.",
    "ATTACH": "ATTACH is refused: the console only reads the dashboard's own database.",
    "DETACH": "DETACH is refused: the console only reads the dashboard's own database.",
    "COPY": (
        "COPY is refused: the console neither reads nor writes files. "
        "Use the 'Download CSV' button to save a result."
    ),
    "EXPORT": (
        "EXPORT DATABASE is refused: the console writes no files. "
        "Use `ember export --parquet DIR` on the command line."
    ),
    "COPY_DATABASE": "COPY FROM DATABASE is refused: the console writes nothing.",
    "LOAD": "INSTALL and LOAD are refused: extensions cannot be loaded from the SQL console.",
    "SET": "SET/RESET/USE are refused: the console's settings are locked.",
    "VARIABLE_SET": "SET VARIABLE is refused: the console's settings are locked.",
    "PRAGMA": (
        "PRAGMA is refused in the console; use the table-function form instead, "
        "e.g. SELECT * FROM pragma_table_info('runs')."
    ),
    "CALL": (
        "CALL is refused in the console; use the table function in a SELECT instead, "
        "e.g. SELECT * FROM duckdb_views()."
    ),
    "TRANSACTION": "transactions are refused: the console runs one SELECT at a time.",
    "PREPARE": "PREPARE/EXECUTE are refused: the console runs one SELECT at a time.",
    "EXECUTE": "PREPARE/EXECUTE are refused: the console runs one SELECT at a time.",
    "MULTI": "this statement is refused: the console runs one plain SELECT at a time.",
}


class ConsoleRefused(ValueError):
    """A statement the console will not run; ``str()`` is the message for the user."""


@dataclass(frozen=True)
class ConsoleResult:
    """What a console query returned: the rows kept and whether more were cut off."""

    frame: pl.DataFrame
    truncated: bool


def check_statement(sql: str) -> None:
    """Raise ``ConsoleRefused`` unless ``sql`` is exactly one SELECT or EXPLAIN."""
    if not sql.strip():
        raise ConsoleRefused(f"the query is empty. {_HINT}")
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.ParserException as e:
        raise ConsoleRefused(f"the query does not parse: {e}") from None
    if not statements:
        raise ConsoleRefused(f"the query has no statement. {_HINT}")
    if len(statements) > 1:
        raise ConsoleRefused(
            f"the console runs one statement at a time; this has {len(statements)}. "
            "Remove the extra ';'-separated statements."
        )
    kind = statements[0].type
    if kind not in _ALLOWED:
        why = _REFUSALS.get(
            kind.name, f"{kind.name} statements are refused: the console is read-only."
        )
        raise ConsoleRefused(f"{why} {_HINT}")


def _explain(e: duckdb.Error, version: DbVersion) -> str:
    text = str(e)
    if isinstance(e, duckdb.PermissionException) or "disabled by configuration" in text:
        return (
            "reading or writing files is disabled in the SQL console: it only sees the "
            f"tables and views of {version.path}. ({text})"
        )
    if "configuration has been locked" in text:
        return f"the console's settings are locked and cannot be changed. ({text})"
    if "read-only mode" in text:
        return f"the SQL console is read-only. ({text})"
    if isinstance(e, duckdb.InterruptException):
        return f"the query ran longer than {TIMEOUT_S:.0f} s and was stopped; add a LIMIT."
    return text


def run_console_query(
    version: DbVersion, sql: str, *, max_rows: int = MAX_ROWS, timeout_s: float = TIMEOUT_S
) -> ConsoleResult:
    """Check and run one console statement on a locked read-only connection.

    Raises ``ConsoleRefused`` with a message for the user when the statement is refused
    or DuckDB rejects it (including its own permission errors).
    """
    check_statement(sql)
    with open_readonly(version) as con:
        timer = threading.Timer(timeout_s, con.interrupt)
        timer.start()
        try:
            relation = con.sql(sql)
            if relation is None:  # not a query after all; nothing to show
                raise ConsoleRefused(f"the statement returned no rows. {_HINT}")
            frame = relation.limit(max_rows + 1).pl()
        except duckdb.Error as e:
            raise ConsoleRefused(_explain(e, version)) from None
        finally:
            timer.cancel()
    truncated = frame.height > max_rows
    return ConsoleResult(frame.head(max_rows), truncated)


def to_csv(frame: pl.DataFrame) -> str:
    """The frame as CSV; list and struct cells become JSON text (CSV has no nesting)."""
    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    if nested:
        frame = frame.with_columns(
            pl.Series(
                name,
                [None if v is None else json.dumps(v, default=str) for v in frame[name].to_list()],
                dtype=pl.String,
            )
            for name in nested
        )
    return frame.write_csv()
