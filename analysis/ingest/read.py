"""The ``_stage`` read of one planned range of a trace file (the lake's DuckDB engine, and the
DuckDB-file ingest where its split read, ``ingest.kinds``, does not apply: a continued file or
piece, an older schema version, ``strict``); ``ingest_plan`` says which bytes to read,
``ingest`` and ``lake`` write what is staged.

1. The check: every line of the range goes through the checks compiled from the pydantic
   models (``FileIngest.scan``, ``ingest.line_check``: msgspec, a chunk of lines in a few
   C calls); pydantic judges and explains the lines they refuse, and those it rejects too
   are left out.
2. The fast path: DuckDB reads the bytes once with ``read_json`` and the column types
   derived from the models (``STAGE_COLUMNS``: ``schema_types.READ_COLUMNS``, with the
   columns that hold objects as JSON text); where a line was rejected, a copy of the range
   without it. What no line shows alone (a second meta, the span ids) is one query over the
   staged rows (``check``).
3. The slow path, when DuckDB refuses the bytes, for files of an older schema version
   (through ``ember.schemas.MIGRATIONS``) and with ``strict``: every line is checked by
   pydantic, the valid ones are read by DuckDB as in 2, the others rejected with
   pydantic's explanation.

One job (reading a planned range into ``_stage``): the three steps share the staging table,
its line numbers and the rejected-line bookkeeping.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import json
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
from pydantic import ValidationError

from ember.analysis.checks import STRUCT_COLUMNS, span_problems_sql
from ember.analysis.ingest.line_check import check_lines
from ember.analysis.ingest.plan import (
    RAW_PREFIX_CHARS,
    FilePlan,
    FileResult,
    Rejected,
    iter_lines,
    locate_lines,
    raw_text,
    read_extent,
    read_range,
)
from ember.analysis.schema_types import READ_COLUMNS
from ember.schemas import (
    RECORD,
    SCHEMA_VERSION,
    Migrations,
    TraceVersionError,
    explain,
)
from ember.schemas.records import MAX_LINE_BYTES
from ember.schemas.validate import BadLine, parse_line

# find_long_line), so it only has to be large enough
_DUCKDB_OBJECT_SIZE = MAX_LINE_BYTES + 4096
# ---------------------------------------------------------------- work folders

_WORK_PREFIXES = ("ember-ingest-", "ember-lake-")
_LOCK = ".in-use"
_cleaned = False


@contextlib.contextmanager
def work_dir(prefix: str) -> Iterator[Path]:
    """A temporary folder for one file's ingest (the slow path's copy of the file goes here),
    removed afterwards. It holds a lock while in use, so that a folder left by a killed
    ingest (kill -9 runs no cleanup) is known to be stale: the first ingest of a process
    removes those (``clean_stale_work_dirs``)."""
    global _cleaned
    if not _cleaned:
        _cleaned = True
        clean_stale_work_dirs()
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with (tmp / _LOCK).open("w") as lock:
            _try_lock(lock)
            yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _try_lock(f: Any) -> bool | None:
    """Take an exclusive lock on an open file without waiting: False if another process holds
    it, None where there are no such locks (not POSIX)."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def clean_stale_work_dirs(root: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the work folders of ingests that were killed; returns the ones removed.

    A folder is stale when no process holds its lock (the kernel lets go of a killed
    process's locks) and it is more than a few seconds old (its owner takes the lock just
    after making it). A folder without a lock file (from an older Ember) or where there are
    no locks (not POSIX) is stale after a day.
    """
    base = Path(root if root is not None else tempfile.gettempdir())
    removed: list[Path] = []
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(_WORK_PREFIXES)]
    except OSError:
        return removed
    for d in candidates:
        try:
            if not d.is_dir() or d.is_symlink():
                continue
            age = time.time() - d.stat().st_mtime
            held: bool | None = None
            lock_path = d / _LOCK
            if lock_path.exists():
                with lock_path.open("a") as lock:
                    got = _try_lock(lock)
                held = None if got is None else not got
            if held or age < (5.0 if held is False else 86400.0):
                continue
        except OSError:
            continue
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            removed.append(d)
    return removed


def find_long_line(path: Path, start: int, end: int) -> int | None:
    """The offset of a line longer than MAX_LINE_BYTES in ``[start, end)``, else None.

    Jumps from line start to the last line start within the next MAX_LINE_BYTES bytes (a
    backward search from there finds it at once), so a file costs a few searches per
    16 MB, not a pass over its bytes.
    """
    if end - start <= MAX_LINE_BYTES:
        return None
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos = start
        while end - pos > MAX_LINE_BYTES:
            window_end = pos + MAX_LINE_BYTES + 1
            if m.find(b"\n", pos, window_end) < 0:
                return pos
            pos = m.rfind(b"\n", pos, window_end) + 1
    return None


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off: decoding a chunk makes ~10 lists a record,
    which set it off every few hundred records to scan what is alive (a quarter of the
    check's time); the records hold no cycles, so they are freed as they go anyway."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def line_chunks(path: Path, start: int, end: int, size: int | None = None) -> Iterator[bytes]:
    """The bytes ``[start, end)`` of a file in chunks of whole lines of about ``size`` bytes
    (``CHUNK_BYTES`` by default; ``end`` is a line's end; a line longer than a chunk is one
    chunk)."""
    size = CHUNK_BYTES if size is None else size
    with path.open("rb") as f:
        pos = start
        f.seek(pos)
        while pos < end:
            buf = f.read(min(size, end - pos))
            if not buf:
                return
            if pos + len(buf) < end:
                cut = buf.rfind(b"\n") + 1
                if cut:
                    f.seek(pos + cut)
                    buf = buf[:cut]
                else:
                    buf += f.readline(end - pos - len(buf))
            pos += len(buf)
            yield buf


def _copy_range(src: Path, start: int, end: int, dst: Path) -> None:
    with dst.open("wb") as fo:
        for buf in read_range(src, start, end):
            fo.write(buf)


def _columns_sql(columns: dict[str, str]) -> str:
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in columns.items()) + "}"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# The columns that hold objects are staged as JSON text (``checks.STRUCT_COLUMNS``; the inserts
# turn them into their kind's STRUCTs): building a STRUCT of every field of every span kind for
# every row of the batch was a third of the read (the split read, ``ingest.kinds``, reads each
# kind with its own table's types instead)
STAGE_COLUMNS: dict[str, str] = {
    c: "JSON" if c in STRUCT_COLUMNS else t for c, t in READ_COLUMNS.items()
}
CHUNK_BYTES = 8 << 20
"""The compiled check reads a range in chunks of whole lines of about this size (its memory:
the chunk and its decoded records)."""

# the rows whose span id is a second one or has no start, per staged file (``_f``), after
# the span records stored before a continued file (``_prior_spans``: ``_f``, ``kind``,
# ``span_id``): ``checks.span_problems_sql``
# (span_id is staged as JSON: compared as the integer it is)
_SPAN_STAGE = "(SELECT rowid, _f, kind, TRY_CAST(span_id AS BIGINT) AS span_id FROM _stage)"
_SPAN_PROBLEMS_SQL = (
    "SELECT rowid, reason FROM ("
    + span_problems_sql(_SPAN_STAGE, "rowid", "_prior_spans", "_f")
    + ")"
)

# what no line says alone: a second meta (the line check refuses one too) and the span ids
_CHECKS_SQL = f"""
SELECT rowid, 'a second ''meta'' record; one file is one run'
FROM _stage
WHERE kind = 'meta' AND NOT (rowid IN (SELECT first_row FROM _files WHERE from_start))
UNION ALL
{_SPAN_PROBLEMS_SQL}
"""


def read_json_sql(path: Path, columns: dict[str, str], ignore_errors: bool = False) -> str:
    """DuckDB's typed read of a JSONL file with these ``columns`` (name -> type)."""
    p = str(path).replace("'", "''")
    extra = ", ignore_errors = true" if ignore_errors else ""
    return (
        f"SELECT * FROM read_json('{p}', format = 'newline_delimited', "
        f"columns = {_columns_sql(columns)}, maximum_object_size = {_DUCKDB_OBJECT_SIZE}{extra})"
    )


def _read_json_sql(path: Path, ignore_errors: bool = False) -> str:
    return read_json_sql(path, STAGE_COLUMNS, ignore_errors)


def _stage_sql(f: int, select: str) -> str:
    """Append the rows of ``select`` (the typed read's columns) to ``_stage`` as file ``f``."""
    return f"INSERT INTO _stage SELECT {int(f)}::INTEGER AS _f, * FROM ({select})"


def explain_line(raw: bytes, *, expect_meta: bool) -> str | None:
    """Pydantic's explanation of one line, or None when pydantic accepts it."""
    try:
        data = parse_line(raw)
    except BadLine as exc:
        return str(exc)
    if not isinstance(data, dict):
        return "a record must be a JSON object"
    if data.get("kind") == "meta" and not expect_meta:
        return "a second 'meta' record; one file is one run"
    try:
        RECORD.validate_python(data)
    except ValidationError as exc:
        return explain(exc)
    return None


# ---------------------------------------------------------------- one file's staged rows


@dataclass(eq=False)
class FileIngest:
    """One planned file in the staging table: file ``f`` of a batch, its rows appended to
    ``_stage`` (``_f = f``), and the lines rejected."""

    con: duckdb.DuckDBPyConnection
    plan: FilePlan
    migrations: Migrations
    tmp: Path
    strict: bool = False
    f: int = 0
    rejected: list[Rejected] = field(default_factory=list, init=False)
    # staged row (rowid - first_row) -> (line, offset) when the slow path wrote the
    # staged lines itself
    line_map: list[tuple[int, int]] | None = field(default=None, init=False)
    slow_path: bool = field(default=False, init=False)
    end: int = field(init=False)
    lines_read: int = field(default=0, init=False)
    partial: str | None = field(default=None, init=False)
    first_row: int = field(default=-1, init=False)  # its first staged rowid (-1: none staged)
    # the ordinals (among the non-blank lines of the range) of the lines the check (``scan``)
    # rejected; None before the scan
    refused: set[int] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.end = self.plan.start

    def extent(self, count: bool = True) -> None:
        """Where its complete lines end (``end``, ``lines_read``, a truncated last line);
        ``count``: False where the caller counts the lines as it reads them and sets
        ``lines_read`` itself (``read_extent``)."""
        plan = self.plan
        end, lines, truncated = read_extent(plan, count)
        if truncated is not None:
            self.partial = truncated.reason
            self.rejected.append(truncated)
        self.end = end
        if lines is not None:
            self.lines_read = lines

    @property
    def whole(self) -> bool:
        """A small file read as it is, from the start to its end, on the fast path: it can be
        read in one ``read_json`` with others (``stage``)."""
        plan = self.plan
        return (
            plan.start == 0
            and self.end == plan.size
            and not self.strict
            and self.migrations.reads_as_is(plan.version)
            and plan.size <= SMALL_FILE
        )

    @property
    def checkable(self) -> bool:
        """Whether its lines go through the compiled check (``scan``): a file of this schema
        version, not ``strict`` (pydantic on every line, the slow path)."""
        return not self.strict and self.migrations.reads_as_is(self.plan.version)

    def scan(self) -> None:
        """Check every line of the planned range with the checks compiled from the models
        (``ingest.line_check``), a chunk of whole lines at a time; the lines it refuses
        are judged by pydantic, which rejects them with its explanation (and keeps those
        it accepts). Sets ``refused``."""
        plan = self.plan
        self.refused = set()
        ordinal = 0  # non-blank lines before the chunk
        number = plan.base_line  # lines before the chunk
        offset = plan.start
        with no_gc():
            for chunk in line_chunks(plan.path, plan.start, self.end):
                records, bad = check_lines(chunk, meta_ok=plan.start == 0 and ordinal == 0)
                if bad:
                    self._judge(chunk, offset, number, ordinal, set(bad))
                ordinal += records
                number += chunk.count(b"\n")
                offset += len(chunk)

    def _judge(self, chunk: bytes, offset: int, number: int, ordinal: int, bad: set[int]) -> None:
        """Pydantic's verdict on the lines of ``chunk`` the check refused (``bad``: their
        ordinals among its non-blank lines); ``offset``, ``number`` and ``ordinal``: the
        chunk's byte offset, the lines and the non-blank lines before it."""
        assert self.refused is not None
        i = -1
        for line in chunk.split(b"\n"):
            number += 1
            if line.strip():
                i += 1
                if i in bad:
                    raw = line.rstrip(b"\r")
                    first = self.plan.start == 0 and ordinal + i == 0
                    reason = explain_line(raw, expect_meta=first)
                    if reason is not None:
                        self.rejected.append(Rejected(number, offset, reason, raw_text(raw)))
                        self.refused.add(ordinal + i)
            offset += len(line) + 1

    def read(self) -> None:
        """Stage this file alone: checked, then the fast path (the lines as they are), a
        clean copy without the lines rejected, or the slow path (pydantic on every line)
        when it is ``strict``, of an older version or DuckDB refuses it."""
        plan = self.plan
        if self.end <= plan.start:
            return
        if not self.checkable or find_long_line(plan.path, plan.start, self.end) is not None:
            self._slow_path(self.end)
            return
        if self.refused is None:
            self.scan()
        if self.refused:
            self._clean_path(self.end)
        else:
            self._fast_path(self.end)

    def _stage(self, select: str) -> None:
        self.con.execute(_stage_sql(self.f, select))
        (first,) = self.con.execute(
            "SELECT coalesce(min(rowid), -1) FROM _stage WHERE _f = ?", [self.f]
        ).fetchall()[0]
        self.first_row = first

    def _unstage(self) -> None:
        self.con.execute("DELETE FROM _stage WHERE _f = ?", [self.f])
        self.first_row = -1

    def _fast_path(self, end: int) -> None:
        """DuckDB reads exactly the bytes ``[start, end)``; the slow path if it refuses them.

        A whole file (not a piece of one, ``first_piece``) is read in place, and only kept
        if the file has not grown meanwhile:
        a recorder still appending may have added lines after ``end`` that DuckDB read too,
        while ``offset_bytes`` says ``end`` (the next ingest would read them again). Then,
        and for a file continued from an offset, DuckDB reads a copy of the range.
        """
        plan = self.plan
        if plan.start == 0 and end == plan.size and not plan.more:
            try:
                self._stage(_read_json_sql(plan.path))
                if plan.path.stat().st_size == plan.size:
                    return
                self._unstage()
            except duckdb.InterruptException:
                raise  # Ctrl-C: stop, never read again another way
            except duckdb.Error:
                if plan.path.stat().st_size == plan.size:
                    self._slow_path(end)
                    return
        src = self.tmp / "range.jsonl"
        _copy_range(plan.path, plan.start, end, src)
        try:
            self._stage(_read_json_sql(src))
        except duckdb.InterruptException:
            raise
        except duckdb.Error:
            self._slow_path(end)

    # -- the slow path: pydantic on every line, DuckDB on the valid ones
    def _slow_path(self, end: int) -> None:
        plan = self.plan
        self.slow_path = True
        clean = self.tmp / "clean.jsonl"
        line_map: list[tuple[int, int]] = []
        number = plan.base_line
        seen_meta = plan.start > 0
        with clean.open("wb") as out:
            for offset, raw in iter_lines(plan.path, plan.start, end):
                number += 1
                if not raw.strip():
                    continue
                try:
                    data = parse_line(raw)
                except BadLine as exc:
                    reason: str | None = str(exc)
                else:
                    reason, raw = self._check_parsed(data, raw, seen_meta)
                    if reason is None and isinstance(data, dict) and data.get("kind") == "meta":
                        seen_meta = True
                if reason is not None:
                    self.rejected.append(Rejected(number, offset, reason, raw_text(raw)))
                    continue
                out.write(raw)
                out.write(b"\n")
                line_map.append((number, offset))
        self._stage_clean(clean, line_map)

    def _clean_path(self, end: int) -> None:
        """Stage a copy of the range without the lines ``scan`` rejected."""
        plan = self.plan
        refused = self.refused or set()
        clean = self.tmp / "clean.jsonl"
        line_map: list[tuple[int, int]] = []
        number = plan.base_line
        ordinal = -1
        with clean.open("wb") as out:
            for offset, raw in iter_lines(plan.path, plan.start, end):
                number += 1
                if not raw.strip():
                    continue
                ordinal += 1
                if ordinal in refused:
                    continue
                out.write(raw)
                out.write(b"\n")
                line_map.append((number, offset))
        self._stage_clean(clean, line_map)

    def _stage_clean(self, clean: Path, line_map: list[tuple[int, int]]) -> None:
        """Stage the checked lines written to ``clean`` (``line_map``: their line numbers and
        offsets); where DuckDB cannot read a value of one, the others."""
        self.line_map = line_map
        if not line_map:
            return
        try:
            self._stage(_read_json_sql(clean))
        except duckdb.InterruptException:
            raise
        except duckdb.Error:
            # pydantic accepted a value DuckDB cannot hold (an int over 2**63?): read what
            # DuckDB can and reject the rest
            self._stage(_read_json_sql(clean, ignore_errors=True))
            bad = [
                r[0] - self.first_row
                for r in self.con.execute(
                    "SELECT rowid FROM _stage WHERE _f = ? AND kind IS NULL", [self.f]
                ).fetchall()
            ]
            for ordinal in bad:
                line, offset = line_map[ordinal]
                self.rejected.append(
                    Rejected(
                        line,
                        offset,
                        "DuckDB cannot read a value of this record (a number out of range?)",
                        self._raw_at(offset),
                    )
                )
            if bad:
                self.con.execute("DELETE FROM _stage WHERE _f = ? AND kind IS NULL", [self.f])

    def _check_parsed(self, data: Any, raw: bytes, seen_meta: bool) -> tuple[str | None, bytes]:
        if not isinstance(data, dict):
            return "a record must be a JSON object", raw
        if data.get("kind") == "meta" and seen_meta:
            return "a second 'meta' record; one file is one run", raw
        if self.plan.version != SCHEMA_VERSION:
            try:
                data = self.migrations.upgrade(data, self.plan.version)
            except (TraceVersionError, KeyError, TypeError, ValueError) as exc:
                return f"cannot upgrade from {self.plan.version}: {exc}", raw
            raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            RECORD.validate_python(data)
        except ValidationError as exc:
            return explain(exc), raw
        return None, raw

    def _raw_at(self, offset: int) -> str:
        with self.plan.path.open("rb") as f:
            f.seek(offset)
            return raw_text(f.readline(RAW_PREFIX_CHARS * 4))

    def locate(self, rowids: list[int]) -> dict[int, tuple[int, int, bytes]]:
        """Line number, offset and bytes of its staged rows ``rowids`` (sorted)."""
        out: dict[int, tuple[int, int, bytes]] = {}
        if self.line_map is not None:
            with self.plan.path.open("rb") as f:
                for rowid in rowids:
                    line, offset = self.line_map[rowid - self.first_row]
                    f.seek(offset)
                    out[rowid] = (line, offset, f.readline(MAX_LINE_BYTES + 1).rstrip(b"\r\n"))
            return out
        # the fast path staged the file as it is: row n is the n-th non-blank line
        return locate_lines(self.plan, self.end, rowids, self.first_row)

    @property
    def message(self) -> str | None:
        """The result's message: the truncated last line, or how many lines were rejected."""
        if self.partial or not self.rejected:
            return self.partial
        return f"{len(self.rejected)} line(s) rejected; see rejected_lines"

    def result(self, records: int, seconds: float) -> FileResult:
        plan = self.plan
        return FileResult(
            str(plan.path),
            "partial" if self.partial else "ok",
            records=records,
            rejected=len(self.rejected),
            message=self.message,
            run_id=plan.run_id,
            bytes_read=self.end - plan.start,
            seconds=seconds,
            continued=plan.continued,
            replaced=plan.replaced_run is not None,
            slow_path=self.slow_path,
        )


# ---------------------------------------------------------------- a batch of files


SMALL_FILE = 1 << 20
"""Whole files up to this size are read together: one ``read_json`` of their bytes put end to
end (DuckDB's typed read costs ~10 ms a file to set up, more than a small file's rows)."""


def _read_together(con: duckdb.DuckDBPyConnection, works: list[FileIngest], tmp: Path) -> None:
    """Stage small whole files with one ``read_json`` of their bytes put end to end; where
    DuckDB refuses them, each half is tried again, down to single files (read alone: the
    slow path), so a bad file costs its batch-mates a few reads, never their rows."""
    if len(works) <= 1:
        for w in works:
            w.read()
        return
    joined = tmp / "together.jsonl"
    lo, hi, alone = [], [], []
    rows = 0
    with joined.open("wb") as out:
        for w in works:
            data = b"".join(read_range(w.plan.path, 0, w.plan.size))
            if len(data) != w.plan.size:  # replaced or cut since it was planned
                alone.append(w)
                continue
            n = sum(1 for line in data.split(b"\n") if line.strip())
            lo.append(rows)
            rows += n
            hi.append(rows)
            out.write(data)
            if not data.endswith(b"\n"):
                out.write(b"\n")
    together = [w for w in works if w not in alone]
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE _together AS {_read_json_sql(joined)}")
        (read,) = con.execute("SELECT count(*) FROM _together").fetchall()[0]
        if read != rows:  # not one row per non-blank line: read them one by one
            raise duckdb.Error(f"{read} rows for {rows} lines")
    except duckdb.InterruptException:
        raise
    except duckdb.Error:
        half = len(together) // 2
        _read_together(con, together[:half], tmp)
        _read_together(con, together[half:], tmp)
    else:
        # each file's rows are a range of the joined rows: staged in order
        con.execute(
            "INSERT INTO _stage SELECT r.f, t.* FROM _together AS t "
            "JOIN (SELECT unnest($f) AS f, unnest($lo) AS lo, unnest($hi) AS hi) AS r "
            "ON t.rowid >= r.lo AND t.rowid < r.hi ORDER BY t.rowid",
            {"f": [w.f for w in together], "lo": lo, "hi": hi},
        )
        firsts = dict(
            con.execute(
                "SELECT _f, min(rowid) FROM _stage WHERE _f IN (SELECT unnest($fs)) GROUP BY _f",
                {"fs": [w.f for w in together]},
            ).fetchall()
        )
        for w in together:
            w.first_row = firsts.get(w.f, -1)
    finally:
        con.execute("DROP TABLE IF EXISTS _together")
    for w in alone:
        w.read()


def stage(
    con: duckdb.DuckDBPyConnection,
    plans: list[FilePlan],
    migrations: Migrations,
    tmp: Path,
    strict: bool = False,
) -> list[FileIngest]:
    """Stage a batch of planned files in ``_stage`` (file ``f`` of ``plans`` as ``_f = f``)
    and describe them in ``_files`` (``f``, ``file``, ``run_id``, ``start``, ``from_start``,
    ``first_row``). Whole files are read together (``_read_together``), the others one by
    one. The store then creates ``_prior_spans`` and calls ``check``."""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _stage AS SELECT 0::INTEGER AS _f, * "
        f"FROM ({_read_json_sql_empty()})"
    )
    works = [FileIngest(con, plan, migrations, tmp, strict, f) for f, plan in enumerate(plans)]
    for w in works:
        w.extent()
        if w.whole:
            w.scan()
    # whole small files whose lines all passed the check are read together
    together = [w for w in works if w.whole and not w.refused]
    _read_together(con, together, tmp)
    for w in works:
        if w not in together:
            w.read()
    files_table(con, works, [w.first_row for w in works])
    return works


def check(con: duckdb.DuckDBPyConnection, works: list[FileIngest]) -> None:
    """Find the staged rows to reject that no line shows alone (a second meta, the span
    ids: one query for the batch), add them to each file's ``rejected`` and delete them from
    ``_stage``. Each line itself was checked before it was staged (``FileIngest.scan``)."""
    problems = con.execute(_CHECKS_SQL).fetchall()
    if not problems:
        return
    by_row: dict[int, str] = {}
    for rowid, problem in problems:
        # a row with two reasons (a second span_end of an id that has no start) says the
        # first in text order, as the Spark ingest does
        before = by_row.get(rowid)
        if before is None or problem < before:
            by_row[rowid] = problem
    staged = sorted((w.first_row, w) for w in works if w.first_row >= 0)
    starts = [first for first, _ in staged]
    rows_of: dict[int, list[int]] = {}
    for rowid in sorted(by_row):
        i = bisect.bisect_right(starts, rowid) - 1
        rows_of.setdefault(i, []).append(rowid)
    for i, rowids in rows_of.items():
        w = staged[i][1]
        for rowid, (line, offset, raw) in w.locate(rowids).items():
            w.rejected.append(Rejected(line, offset, by_row[rowid], raw_text(raw)))
        w.rejected.sort(key=lambda r: r.line)
    con.execute("DELETE FROM _stage WHERE rowid IN (SELECT unnest(?::BIGINT[]))", [sorted(by_row)])


def _read_json_sql_empty() -> str:
    cols = ", ".join(f'NULL::{t} AS "{c}"' for c, t in STAGE_COLUMNS.items())
    return f"SELECT {cols} WHERE false"


def files_table(
    con: duckdb.DuckDBPyConnection, works: list[FileIngest], first_rows: list[int]
) -> None:
    """``_files``: one row per file of the batch (its number ``f``, path, run, start, and the
    stage's row of its first line; -1 where rows are numbered per kind)."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _files AS SELECT * FROM (SELECT unnest($f) AS f, "
        "unnest($file) AS file, unnest($run_id) AS run_id, unnest($start) AS start, "
        "unnest($start) = 0 AS from_start, unnest($first_row) AS first_row)",
        {
            "f": [w.f for w in works],
            "file": [str(w.plan.path) for w in works],
            "run_id": [w.plan.run_id for w in works],
            "start": [w.plan.start for w in works],
            "first_row": first_rows,
        },
    )
