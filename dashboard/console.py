"""The read-only SQL console: which statements it runs, and the messages when it refuses.

Two layers. First the statement is parsed by DuckDB and anything but one SELECT (or
EXPLAIN of one) is refused with a message that says why and what to do instead. Then it
runs on a connection opened ``read_only`` with ``enable_external_access=false`` and
``lock_configuration=true`` (see ``db.open_readonly``), so whatever slips past the first
layer (a table function reading a file, for instance) is stopped by DuckDB itself; its
permission errors are translated into the same kind of message.

The server is shared, so each query runs in a child process (forked from a small fork
server, ~0.1 s) whose memory is capped (``MEMORY_BYTES``: ``RLIMIT_DATA`` for the process
and DuckDB's ``memory_limit``) and which uses at most ``THREADS`` threads. DuckDB's
``memory_limit`` alone does not bound a query: ``SELECT repeat('x', 1500000000)`` is not
held by its buffer manager and took the server from 249 MiB to 5.2 GB. Over the cap the
query fails with a message saying so; the server's own memory is not touched.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import resource
import threading
from dataclasses import dataclass
from multiprocessing import context, forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.connection import Connection
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from .db import DbVersion, open_readonly

__all__ = [
    "MAX_BYTES",
    "MAX_ROWS",
    "MEMORY_BYTES",
    "THREADS",
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
_BATCH_ROWS = 64
"""Rows DuckDB hands over at a time: small, so that a batch of wide rows (1 MB each) stays
well inside the query's memory cap."""
TIMEOUT_S = 30.0
"""A console query is interrupted after this many seconds."""
MEMORY_BYTES = 1 << 30
"""Memory one console query may use (beyond what its process starts with)."""
THREADS = 2
"""DuckDB threads of one console query (the server's other users keep the rest)."""

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


def _over_memory(memory_bytes: int) -> str:
    return (
        f"the query needed more than the console's {memory_bytes / 2**20:,.0f} MiB of memory "
        "and was stopped; add a LIMIT, select fewer or shorter columns, or aggregate."
    )


def _explain(e: duckdb.Error, version: DbVersion, memory_bytes: int = MEMORY_BYTES) -> str:
    text = str(e)
    if isinstance(e, duckdb.OutOfMemoryException) or "out of memory" in text.lower():
        return _over_memory(memory_bytes)
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
    memory_bytes: int = MEMORY_BYTES,
    threads: int = THREADS,
) -> ConsoleResult:
    """Check and run one console statement on a locked read-only connection, in a child
    process with at most ``memory_bytes`` of memory and ``threads`` threads.

    The result keeps at most ``max_rows`` rows and ``max_bytes`` bytes; the rows after are
    never fetched. Raises ``ConsoleRefused`` with a message for the user when the statement
    is refused, DuckDB rejects it (including its own permission errors), or it runs out of
    memory or time.
    """
    check_statement(sql)
    limits = _Limits(max_rows, max_bytes, timeout_s, memory_bytes, threads)
    table, cut = _in_child(version, sql, limits)
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    cut_by = "bytes" if cut else None
    if frame.height > max_rows:
        frame, cut_by = frame.head(max_rows), "rows"
    return ConsoleResult(frame, cut_by is not None, cut_by)


@dataclass(frozen=True)
class _Limits:
    max_rows: int
    max_bytes: int
    timeout_s: float
    memory_bytes: int
    threads: int


_context: Any = None


def _processes() -> Any:
    """The fork server the queries' processes start from (started on first use: a clean
    process, not a fork of the server's threads)."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(["ember.dashboard.console"])
    return _context


class _PopenWithoutMain(popen_forkserver.Popen):
    """The fork server's start of a process, without running the parent's ``__main__``
    again in the child: Streamlit (and AppTest) make the page script ``__main__``, and
    multiprocessing would run that script in the child. The child needs only this module.
    (``popen_forkserver.Popen._launch`` of Python 3.11, less ``init_main_*``.)"""

    def _launch(self, process_obj: Any) -> None:
        prep = spawn.get_preparation_data(process_obj._name)
        prep = {k: v for k, v in prep.items() if not k.startswith("init_main")}
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep, buf)
            reduction.dump(process_obj, buf)
        finally:
            context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        parent_w = os.dup(w)
        close = util.close_fds  # type: ignore[attr-defined]
        self.finalizer = util.Finalize(self, close, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _QueryProcess(context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _PopenWithoutMain(process_obj)


def _in_child(version: DbVersion, sql: str, limits: _Limits) -> tuple[pa.Table, bool]:
    """Run ``sql`` in a child process under ``limits``; its Arrow result and whether it
    was cut off."""
    receive, send = _processes().Pipe(duplex=False)
    child = _QueryProcess(target=_query_child, args=(send, version, sql, limits), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(limits.timeout_s + 10):  # the interrupt did not stop it
            raise ConsoleRefused(_explain(duckdb.InterruptException(), version))
        status, payload, cut = receive.recv()
    except EOFError:  # the child ended before answering
        child.join()
        if child.exitcode == -9:  # SIGKILL: the kernel's OOM killer
            raise ConsoleRefused(_over_memory(limits.memory_bytes)) from None
        raise ConsoleRefused(
            f"the query's process ended unexpectedly (exit code {child.exitcode}); "
            "the server log says why"
        ) from None
    finally:
        receive.close()
        if child.is_alive():
            child.kill()
        child.join()
    if status == "error":
        raise payload
    if status != "ok":
        raise ConsoleRefused(payload)
    with pa.ipc.open_stream(payload) as reader:
        return reader.read_all(), cut


def _query_child(send: Connection, version: DbVersion, sql: str, limits: _Limits) -> None:
    """In the child: cap the memory, run the query, send back ("ok", Arrow IPC bytes,
    cut), ("refused", message, False) or ("error", the exception, False)."""
    try:
        _cap_memory(limits.memory_bytes)
        table, cut = _run_query(version, sql, limits)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        send.send(("ok", sink.getvalue().to_pybytes(), cut))
    except ConsoleRefused as e:
        send.send(("refused", str(e), False))
    except MemoryError:
        send.send(("refused", _over_memory(limits.memory_bytes), False))
    except OSError as e:  # Arrow's "Out of Memory Error: ArrowBuffer: failed to allocate"
        over = "out of memory" in str(e).lower()
        message = _over_memory(limits.memory_bytes) if over else str(e)
        send.send(("refused", message, False))
    except Exception as e:  # the database busy or gone: raised again in the server
        send.send(("error", e, False))
    finally:
        send.close()


def _cap_memory(memory_bytes: int) -> None:
    """Let this process's data (heap and anonymous mappings) grow by ``memory_bytes``."""
    with open("/proc/self/status") as f:
        kib = next((int(line.split()[1]) for line in f if line.startswith("VmData:")), 0)
    cap = kib * 1024 + memory_bytes
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))


def _run_query(version: DbVersion, sql: str, limits: _Limits) -> tuple[pa.Table, bool]:
    settings = {"memory_limit": f"{limits.memory_bytes * 3 // 4}B", "threads": limits.threads}
    try:
        with open_readonly(version, limits=settings) as con:
            timer = threading.Timer(limits.timeout_s, con.interrupt)
            timer.start()
            try:
                relation = con.sql(sql)
                if relation is None:  # not a query after all; nothing to show
                    raise ConsoleRefused(f"the statement returned no rows. {_HINT}")
                # one row past the limit tells a result of exactly max_rows from a longer one
                reader = relation.limit(limits.max_rows + 1).to_arrow_reader(_BATCH_ROWS)
                return _read_capped(reader, limits.max_bytes)
            finally:
                timer.cancel()
    except duckdb.Error as e:
        raise ConsoleRefused(_explain(e, version, limits.memory_bytes)) from None


def to_csv(frame: pl.DataFrame) -> str:
    """The frame as CSV, as ``ember query --format csv`` writes it (``csv_text``)."""
    from ember.analysis.export import csv_text

    return csv_text(frame)
