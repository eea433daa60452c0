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
import pyarrow as pa

from .db import DbVersion, open_readonly

__all__ = [
    "MAX_BYTES",
    "MAX_ROWS",
    "ConsoleRefused",
    "ConsoleResult",
    "check_statement",
    "run_console_query",
    "to_csv",
]

MAX_ROWS = 100_000
"""Rows a console result keeps (the rest is reported as cut off)."""
MAX_BYTES = 32 * 2**20
"""Bytes (in Arrow, as the page sends them) a console result keeps; the rows after are cut
off. Rows alone do not bound it: 2,000 rows of 1 MB text made a 1.9 GB frame, past
Streamlit's 200 MB message limit, and the server kept it (and its CSV) in memory."""
_BATCH_ROWS = 256
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
    cut_by: str | None = None  # "rows" (MAX_ROWS) or "bytes" (MAX_BYTES) when truncated

    @property
    def note(self) -> str:
        """What the page says about the rows left out ("" when none were)."""
        if self.cut_by == "bytes":
            size = self.frame.estimated_size()
            return (
                f" (cut off after {self.frame.height:,} rows, {size / 2**20:.1f} MB: the "
                f"console keeps {MAX_BYTES // 2**20} MB; select fewer or shorter columns, or "
                f"add a LIMIT)"
            )
        if self.cut_by == "rows":
            return f" (cut off at {self.frame.height:,} rows; add a LIMIT or aggregate)"
        return ""


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


def _read_capped(reader: pa.RecordBatchReader, max_bytes: int) -> tuple[pa.Table, bool]:
    """The batches of ``reader`` up to ``max_bytes`` bytes, and whether rows were left out.
    Reading stops there, so DuckDB computes no more of the result."""
    batches: list[pa.RecordBatch] = []
    size = 0
    for batch in reader:
        if size + batch.nbytes > max_bytes:
            # the rows of this batch that still fit (a slice's nbytes counts its rows only)
            lo, hi = 0, batch.num_rows
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if size + batch.slice(0, mid).nbytes <= max_bytes:
                    lo = mid
                else:
                    hi = mid - 1
            # take() copies those rows: a slice would keep the whole batch's buffers alive
            batches.append(batch.take(pa.array(range(lo), type=pa.int64())))
            return pa.Table.from_batches(batches, schema=reader.schema), True
        batches.append(batch)
        size += batch.nbytes
    return pa.Table.from_batches(batches, schema=reader.schema), False


def run_console_query(
    version: DbVersion,
    sql: str,
    *,
    max_rows: int = MAX_ROWS,
    max_bytes: int = MAX_BYTES,
    timeout_s: float = TIMEOUT_S,
) -> ConsoleResult:
    """Check and run one console statement on a locked read-only connection.

    The result keeps at most ``max_rows`` rows and ``max_bytes`` bytes; the rows after are
    never fetched. Raises ``ConsoleRefused`` with a message for the user when the statement
    is refused or DuckDB rejects it (including its own permission errors).
    """
    check_statement(sql)
    with open_readonly(version) as con:
        timer = threading.Timer(timeout_s, con.interrupt)
        timer.start()
        try:
            relation = con.sql(sql)
            if relation is None:  # not a query after all; nothing to show
                raise ConsoleRefused(f"the statement returned no rows. {_HINT}")
            # one row past the limit tells a result of exactly max_rows from a longer one
            reader = relation.limit(max_rows + 1).to_arrow_reader(_BATCH_ROWS)
            table, cut = _read_capped(reader, max_bytes)
            del reader
        except duckdb.Error as e:
            raise ConsoleRefused(_explain(e, version)) from None
        finally:
            timer.cancel()
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    cut_by = "bytes" if cut else None
    if frame.height > max_rows:
        frame, cut_by = frame.head(max_rows), "rows"
    return ConsoleResult(frame, cut_by is not None, cut_by)


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
