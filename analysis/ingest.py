"""Ingest JSONL traces into DuckDB: typed, validated, idempotent per file.

How one file goes in (each file is one transaction):

1. The first line must be ``meta``: it names the run and the schema version. A newer
   version, a missing or invalid meta, an empty file or a run id that another file
   already brought are refused as a whole (``ingested_files.status = 'refused'``).
2. DuckDB reads the file once with ``read_json`` and the column types derived from the
   pydantic models (``schema_types.READ_COLUMNS``) into a staging table. This is the fast
   path: no Python per line.
3. SQL checks generated from the same models (``checks.row_problem_sql``) find what the
   typed read does not check (required fields, allowed values, fields of another kind,
   a second meta, a span_end without its span_start). Only those rows are mapped back
   to line numbers and explained by pydantic; they go to ``rejected_lines``.
4. When DuckDB refuses the file (a line that is not JSON, not UTF-8, a value of the
   wrong type, a line over 16 MB), every line is checked by pydantic (the slow path:
   only such files pay for it), the valid ones are read by DuckDB as in 2, the others
   rejected with pydantic's explanation. Files of an older schema version take the same
   path, through ``ember.schemas.MIGRATIONS``.

What the fast path does not see (``ember validate`` and ``ingest(strict=True)``, which
run pydantic on every line, do): a field no record kind has (DuckDB's typed read skips
keys it was not asked for), a JSON number or boolean given for a text field (DuckDB
casts it to its text), and a fraction given for an integer field other than ``ts_ns``
(DuckDB rounds it; ``ts_ns`` is read as JSON and must be a JSON integer). Everything
else pydantic checks is checked: types of numbers, lists and objects, required fields,
allowed values, non-negative ints, fields of another kind or span kind, and the schema's
limits (``ember.schemas.records``: line size, nesting, 64-bit integers), which
``ember validate`` applies too (``parse_line``).

Idempotent: ``ingested_files`` keeps how many bytes of each file were read. The same
file again is skipped; a file that grew (a run still recording) is continued from its
last complete line; a file that was replaced (its first line changed, or it shrank) is
ingested again and replaces its old rows. A last line without a newline is a write cut
short: it is rejected as truncated and read again if the file grows.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import duckdb
import pyarrow as pa
from pydantic import ValidationError

from ember.schemas import (
    MIGRATIONS,
    RECORD,
    SCHEMA_VERSION,
    Migrations,
    TraceVersionError,
    check_version,
    explain,
    parse_schema_id,
)
from ember.schemas.records import MAX_LINE_BYTES, MAX_NESTING
from ember.schemas.validate import BadLine, parse_line

from .checks import maybe_too_deep_sql, row_invalid_sql, row_problem_sql
from .db import (
    DEFAULT_DB,
    DERIVED_COLUMNS,
    RECORD_TABLES,
    RUNS_COLUMNS,
    Connection,
    _record_columns,
    connect,
)
from .schema_types import READ_COLUMNS, field_defaults, sql_literal

__all__ = ["MAX_LINE_BYTES", "FileResult", "IngestSummary", "expand_paths", "ingest"]


RAW_PREFIX_CHARS = 200
# DuckDB's own limit on one JSON object; lines over MAX_LINE_BYTES never reach it (see
# _find_long_line), so it only has to be large enough
_DUCKDB_OBJECT_SIZE = MAX_LINE_BYTES + 4096
_CONTROL = {c: f"\\x{c:02x}" for c in range(32) if c != 9}


FileStatus = Literal["ok", "partial", "refused", "unchanged", "busy"]
"""What became of a file: all of it read, read but for a partial last line, refused as a
whole, already ingested as it is, or (a lake) being written by another ingester now."""


@dataclass
class FileResult:
    """What ingest did with one file."""

    path: str
    status: FileStatus
    records: int = 0
    rejected: int = 0
    message: str | None = None
    run_id: str | None = None
    bytes_read: int = 0
    seconds: float = 0.0
    continued: bool = False  # continued a file that grew
    replaced: bool = False  # the file changed since it was ingested: old rows replaced
    slow_path: bool = False  # DuckDB refused the file: every line went through pydantic


@dataclass
class IngestSummary:
    files: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    @property
    def rejected(self) -> int:
        return sum(f.rejected for f in self.files)

    @property
    def refused(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "refused"]

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


class _Refused(Exception):
    """The file cannot be ingested at all; the message says why and what to do."""


# ---------------------------------------------------------------- paths


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files as given, folders as their ``*.jsonl`` files (recursively), globs expanded.

    Raises FileNotFoundError naming a path that matches nothing.
    """
    out: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        text = str(raw)
        p = Path(text)
        if p.is_dir():
            found = sorted(x for x in p.rglob("*.jsonl") if x.is_file())
        elif p.is_file():
            found = [p]
        elif glob.has_magic(text):
            found = sorted(Path(x) for x in glob.glob(text, recursive=True) if Path(x).is_file())
            if not found:
                raise FileNotFoundError(f"{text}: the pattern matches no file")
        else:
            raise FileNotFoundError(f"{text}: no such file or folder")
        for f in found:
            r = f.resolve()
            if r not in seen:
                seen.add(r)
                out.append(r)
    return out


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


# ---------------------------------------------------------------- reading helpers


def _raw_text(raw: bytes) -> str:
    """The start of a line as text: undecodable bytes and control characters escaped."""
    text = raw[: RAW_PREFIX_CHARS * 4].decode("utf-8", "backslashreplace")
    return text.translate(_CONTROL)[:RAW_PREFIX_CHARS]


def _first_line(path: Path, size: int) -> bytes:
    """The first non-blank line, without its newline (b"" when there is none)."""
    with path.open("rb") as f:
        offset = 0
        while offset < size:
            line = f.readline(MAX_LINE_BYTES + 1)
            offset += len(line)
            if line.strip():
                if len(line) > MAX_LINE_BYTES:
                    raise _Refused(
                        f"the first line is over {MAX_LINE_BYTES // 2**20} MB; it must be the "
                        f"'meta' record (is this an Ember trace?)"
                    )
                return line.rstrip(b"\r\n")
    return b""


def _read_extent(plan: _Plan) -> tuple[int, int, _Rejected | None]:
    """What of ``plan``'s bytes to read: ``(end, lines, truncated)``.

    ``end`` is the offset after the last complete line, or the file's end when its last line is a
    whole record without its newline (a hand-made file); ``lines`` counts the lines before ``end``;
    ``truncated`` is the rejected partial last line (the writer stopped mid-line), read again
    when the file grows. Shared by the DuckDB ingest and the Spark ingest of the lake.
    """
    end, tail, tail_length = _end_of_complete_lines(plan.path, plan.start, plan.size)
    lines = _count_lines(plan.path, plan.start, end)
    if not tail.strip():
        return end, lines, None
    if tail_length <= MAX_LINE_BYTES:
        try:
            if isinstance(parse_line(tail), dict):
                return plan.size, lines + 1, None
        except BadLine:
            pass
    line = plan.base_line + lines + 1
    reason = (
        f"truncated last line {line}: no newline at the end of the file (the writer "
        f"stopped mid-line); it is read again if the file grows"
    )
    return end, lines, _Rejected(line, end, reason, _raw_text(tail))


def _end_of_complete_lines(path: Path, start: int, size: int) -> tuple[int, bytes, int]:
    """Where the complete lines in ``[start, size)`` end, and the partial line after them.

    Returns ``(end, tail, tail_length)``: ``end`` is the offset after the last newline
    (``start`` if there is none), ``tail`` the first bytes after it (all of them when the
    tail is at most MAX_LINE_BYTES long) and ``tail_length`` its full length.
    """
    with path.open("rb") as f:
        pos = size
        end = start
        while pos > start:
            step = min(1 << 20, pos - start)
            pos -= step
            f.seek(pos)
            i = f.read(step).rfind(b"\n")
            if i >= 0:
                end = pos + i + 1
                break
        f.seek(end)
        tail_length = size - end
        tail = f.read(tail_length if tail_length <= MAX_LINE_BYTES else RAW_PREFIX_CHARS * 4)
    return end, tail, tail_length


def _count_lines(path: Path, start: int, end: int) -> int:
    if end <= start:
        return 0
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return (
            m[start:end].count(b"\n") if end - start < (1 << 26) else _count_chunks(m, start, end)
        )


def _count_chunks(m: mmap.mmap, start: int, end: int) -> int:
    n = 0
    step = 1 << 26
    for a in range(start, end, step):
        n += m[a : min(a + step, end)].count(b"\n")
    return n


def _iter_lines(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(byte offset, line without newline)`` of every line in ``[start, end)``."""
    with path.open("rb") as f:
        f.seek(start)
        offset = start
        while offset < end:
            line = f.readline(min(end - offset, MAX_LINE_BYTES + 2))
            if not line:
                break
            if len(line) > MAX_LINE_BYTES + 1 and not line.endswith(b"\n"):
                # an over-long line: skip to its end without keeping it in memory
                rest = 0
                while True:
                    more = f.readline(1 << 20)
                    rest += len(more)
                    if not more or more.endswith(b"\n"):
                        break
                yield offset, line[: MAX_LINE_BYTES + 1]
                offset += len(line) + rest
                continue
            yield offset, line.rstrip(b"\r\n") if line.endswith(b"\n") else line
            offset += len(line)


def _find_long_line(path: Path, start: int, end: int) -> int | None:
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


def _copy_range(src: Path, start: int, end: int, dst: Path) -> None:
    with src.open("rb") as fi, dst.open("wb") as fo:
        fi.seek(start)
        remaining = end - start
        while remaining > 0:
            buf = fi.read(min(remaining, 1 << 22))
            if not buf:
                break
            fo.write(buf)
            remaining -= len(buf)


def _columns_sql(columns: dict[str, str]) -> str:
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in columns.items()) + "}"


_READ_COLUMNS_SQL = _columns_sql(READ_COLUMNS)
_PROBLEM_SQL = row_problem_sql()
_INVALID_SQL = row_invalid_sql()
_MAYBE_DEEP_SQL = maybe_too_deep_sql(MAX_NESTING)

# Span ids are unique in a run. Rejected: a second span_start of an id (in the file, or
# after the rows of its run already stored) and a second span_end of an id (in the file, or
# the end of a span_start rejected as a second one), which is what concatenated traces
# have; and a span_end before any span_start of its id. Equality joins on the first row of
# each id: the earlier NOT EXISTS (... s.rowid < e.rowid) compared every start of an id
# with every end of it, quadratic in the copies of a duplicated id.
_SPAN_PROBLEMS_SQL = """
SELECT x.rowid, 'a second ' || x.kind || ' of span_id ' || x.span_id
    || ' (span ids are unique in a run; were two traces concatenated?)', true
FROM _stage AS x
LEFT JOIN (
    -- the ids seen more than once (a hash aggregate: a valid file has none to join)
    SELECT kind, span_id, min(rowid) AS first FROM _stage
    WHERE kind IN ('span_start', 'span_end') GROUP BY ALL HAVING count(*) > 1
) AS d ON d.kind = x.kind AND d.span_id = x.span_id
WHERE x.rowid <> d.first
    OR (x.kind = 'span_start'
        AND x.span_id IN (SELECT span_id FROM span_start WHERE run_id = $run_id))
UNION ALL
SELECT e.rowid, CASE WHEN s.first < e.rowid
        THEN 'a second span_end of span_id ' || e.span_id
            || ' (span ids are unique in a run; were two traces concatenated?)'
        ELSE 'span_end without a span_start (span_id ' || e.span_id || ')' END, true
FROM _stage AS e
LEFT JOIN (
    SELECT span_id, min(rowid) AS first FROM _stage WHERE kind = 'span_start' GROUP BY span_id
) AS s ON s.span_id = e.span_id
WHERE e.kind = 'span_end' AND CASE
    WHEN e.span_id IN (SELECT span_id FROM span_start WHERE run_id = $run_id)
        -- started before this file: its start here, if any, was rejected as a second one
        THEN s.first < e.rowid
    ELSE s.first IS NULL OR s.first > e.rowid END
"""


def _read_json_sql(path: Path, ignore_errors: bool = False) -> str:
    p = str(path).replace("'", "''")
    extra = ", ignore_errors = true" if ignore_errors else ""
    return (
        f"SELECT * FROM read_json('{p}', format = 'newline_delimited', "
        f"columns = {_READ_COLUMNS_SQL}, maximum_object_size = {_DUCKDB_OBJECT_SIZE}{extra})"
    )


def _explain_line(raw: bytes, *, expect_meta: bool) -> str | None:
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


# ---------------------------------------------------------------- the per-file state


@dataclass
class _Plan:
    path: Path
    size: int
    start: int  # byte offset to read from
    base_line: int  # lines before ``start``
    first_hash: str
    run_id: str
    version: int
    meta: dict[str, Any] | None  # the meta record when reading from the start
    replaced_run: str | None = None  # rows to delete first (a replaced file)
    continued: bool = False


def _previous(con: duckdb.DuckDBPyConnection, file: str) -> dict[str, Any] | None:
    rows = con.execute(
        "SELECT run_id, status, offset_bytes, lines, first_line_hash, schema_version "
        "FROM ingested_files WHERE file = ?",
        [file],
    ).fetchall()
    if not rows:
        return None
    keys = ("run_id", "status", "offset_bytes", "lines", "first_line_hash", "schema_version")
    return dict(zip(keys, rows[0], strict=True))


def _parse_meta(first: bytes, migrations: Migrations) -> tuple[dict[str, Any], int]:
    try:
        data = parse_line(first)
    except BadLine as exc:
        raise _Refused(f"line 1: {exc}; the first line must be the 'meta' record") from exc
    if not isinstance(data, dict) or data.get("kind") != "meta":
        raise _Refused(
            "missing 'meta': the first record must be 'meta' (schema, run id, wall-clock "
            "anchor); is this an Ember trace? Record it with ember.recorder.record()"
        )
    try:
        version = parse_schema_id(data.get("schema"))
        check_version(version)
    except TraceVersionError as exc:
        raise _Refused(str(exc)) from exc
    if version != SCHEMA_VERSION:
        try:
            data = migrations.upgrade(dict(data), version)
        except (TraceVersionError, KeyError, TypeError, ValueError) as exc:
            raise _Refused(f"cannot upgrade the meta record: {exc}") from exc
    try:
        meta = RECORD.validate_python(data)
    except ValidationError as exc:
        raise _Refused(f"line 1: invalid 'meta' record: {explain(exc)}") from exc
    return meta.model_dump(mode="json", by_alias=True), version


def _plan(con: duckdb.DuckDBPyConnection, path: Path, migrations: Migrations) -> _Plan | FileResult:
    file = str(path)
    size = path.stat().st_size
    if size == 0:
        raise _Refused("empty file: no 'meta' record (is the run still starting?)")
    first = _first_line(path, size)
    if not first:
        raise _Refused("the file has only blank lines: no 'meta' record")
    first_hash = hashlib.sha1(first).hexdigest()
    prev = _previous(con, file)
    if prev is not None and prev["status"] != "refused" and prev["first_line_hash"] == first_hash:
        if size == prev["offset_bytes"]:
            return FileResult(file, "unchanged", run_id=prev["run_id"], message="already ingested")
        if size > prev["offset_bytes"]:
            return _Plan(
                path,
                size,
                prev["offset_bytes"],
                prev["lines"],
                first_hash,
                prev["run_id"],
                prev["schema_version"],
                None,
                continued=True,
            )
    meta, version = _parse_meta(first, migrations)
    run_id = meta["run_id"]
    replaced = prev["run_id"] if prev is not None and prev["status"] != "refused" else None
    other = con.execute(
        "SELECT file FROM runs WHERE run_id = ? AND file <> ?", [run_id, file]
    ).fetchall()
    if other:
        raise _Refused(
            f"run {run_id} is already in the database from {other[0][0]}; one run is one file. "
            f"If this file is a copy, skip it; if it is another run, record it with a new run id"
        )
    return _Plan(path, size, 0, 0, first_hash, run_id, version, meta, replaced_run=replaced)


# ---------------------------------------------------------------- stage and checks


@dataclass
class _Rejected:
    line: int
    offset: int
    reason: str
    raw: str


class _FileIngest:
    """Reads one planned file into the staging table and finds the rows to reject."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        plan: _Plan,
        migrations: Migrations,
        tmp: Path,
        strict: bool = False,
    ):
        self.con = con
        self.plan = plan
        self.migrations = migrations
        self.strict = strict
        self.tmp = tmp
        self.rejected: list[_Rejected] = []
        # stage rowid -> (line, offset) when the slow path wrote the staged lines itself
        self.line_map: list[tuple[int, int]] | None = None
        self.slow_path = False
        self.end = plan.start
        self.lines_read = 0
        self.partial: str | None = None

    def run(self) -> None:
        plan = self.plan
        end, lines, truncated = _read_extent(plan)
        if truncated is not None:
            self.partial = truncated.reason
            self.rejected.append(truncated)
        self.end = end
        self.lines_read = lines
        if end <= plan.start:
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE _stage AS {_read_json_sql_empty()}")
            return
        if (
            self.strict
            or plan.version != SCHEMA_VERSION
            or _find_long_line(plan.path, plan.start, end) is not None
        ):
            self._slow_path(end)
        else:
            self._fast_path(end)
        self._check_rows()

    def _fast_path(self, end: int) -> None:
        """DuckDB reads exactly the bytes ``[start, end)``; the slow path if it refuses them.

        A whole file is read in place, and only kept if the file has not grown meanwhile:
        a recorder still appending may have added lines after ``end`` that DuckDB read too,
        while ``offset_bytes`` says ``end`` (the next ingest would read them again). Then,
        and for a file continued from an offset, DuckDB reads a copy of the range.
        """
        plan = self.plan
        if plan.start == 0 and end == plan.size:
            try:
                self.con.execute(
                    f"CREATE OR REPLACE TEMP TABLE _stage AS {_read_json_sql(plan.path)}"
                )
                if plan.path.stat().st_size == plan.size:
                    return
            except duckdb.Error:
                if plan.path.stat().st_size == plan.size:
                    self._slow_path(end)
                    return
        src = self.tmp / "range.jsonl"
        _copy_range(plan.path, plan.start, end, src)
        try:
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE _stage AS {_read_json_sql(src)}")
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
            for offset, raw in _iter_lines(plan.path, plan.start, end):
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
                    self.rejected.append(_Rejected(number, offset, reason, _raw_text(raw)))
                    continue
                out.write(raw)
                out.write(b"\n")
                line_map.append((number, offset))
        self.line_map = line_map
        if not line_map:
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE _stage AS {_read_json_sql_empty()}")
            return
        try:
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE _stage AS {_read_json_sql(clean)}")
        except duckdb.Error:
            # pydantic accepted a value DuckDB cannot hold (an int over 2**63?): read what
            # DuckDB can and reject the rest
            lenient = _read_json_sql(clean, ignore_errors=True)
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE _stage AS {lenient}")
            bad = [
                r[0]
                for r in self.con.execute("SELECT rowid FROM _stage WHERE kind IS NULL").fetchall()
            ]
            for rowid in bad:
                line, offset = line_map[rowid]
                self.rejected.append(
                    _Rejected(
                        line,
                        offset,
                        "DuckDB cannot read a value of this record (a number out of range?)",
                        self._raw_at(offset),
                    )
                )
            if bad:
                self.con.execute("DELETE FROM _stage WHERE kind IS NULL")

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
            return _raw_text(f.readline(RAW_PREFIX_CHARS * 4))

    # -- checks the typed read does not do
    def _check_rows(self) -> None:
        plan = self.plan
        meta_ok = "rowid = 0" if plan.start == 0 else "false"
        problems = self.con.execute(
            f"""
            SELECT rowid, CASE WHEN kind = 'meta' AND NOT ({meta_ok})
                THEN 'a second ''meta'' record; one file is one run' END, true
            FROM _stage
            WHERE (kind = 'meta' AND NOT ({meta_ok})) OR {_INVALID_SQL}
            UNION ALL
            {_SPAN_PROBLEMS_SQL}
            UNION ALL
            -- rows that may nest too deeply: parse_line decides, and keeps those that do not
            SELECT rowid, NULL, false FROM _stage WHERE {_MAYBE_DEEP_SQL}
            """,
            {"run_id": plan.run_id},
        ).fetchall()
        if not problems:
            return
        by_row: dict[int, str | None] = {}
        invalid: set[int] = set()
        for rowid, problem, is_invalid in problems:
            if by_row.get(rowid) is None:
                by_row[rowid] = problem
            if is_invalid:
                invalid.add(rowid)
        located = self._locate(sorted(by_row))
        unexplained = []
        rejected_rows = []
        for rowid, (line, offset, raw) in located.items():
            reason = by_row[rowid]
            if reason is None:
                reason = _explain_line(raw, expect_meta=rowid == 0 and plan.start == 0)
            if reason is None:
                if rowid in invalid:  # pydantic accepts what the typed read's checks refused
                    unexplained.append(rowid)
                continue
            self.rejected.append(_Rejected(line, offset, reason, _raw_text(raw)))
            rejected_rows.append(rowid)
        if unexplained:
            # the full messages of the SQL checks, for these few rows only
            for rowid, reason in self.con.execute(
                f"SELECT rowid, {_PROBLEM_SQL} FROM _stage "
                f"WHERE rowid IN (SELECT unnest(?::BIGINT[]))",
                [unexplained],
            ).fetchall():
                line, offset, raw = located[rowid]
                reason = reason or "refused by the typed read's checks"
                self.rejected.append(_Rejected(line, offset, reason, _raw_text(raw)))
                rejected_rows.append(rowid)
        self.rejected.sort(key=lambda r: r.line)
        if rejected_rows:
            self.con.execute(
                "DELETE FROM _stage WHERE rowid IN (SELECT unnest(?::BIGINT[]))",
                [sorted(rejected_rows)],
            )

    def _locate(self, rowids: list[int]) -> dict[int, tuple[int, int, bytes]]:
        """Line number, offset and bytes of the staged rows ``rowids`` (sorted)."""
        out: dict[int, tuple[int, int, bytes]] = {}
        if self.line_map is not None:
            with self.plan.path.open("rb") as f:
                for rowid in rowids:
                    line, offset = self.line_map[rowid]
                    f.seek(offset)
                    out[rowid] = (line, offset, f.readline(MAX_LINE_BYTES + 1).rstrip(b"\r\n"))
            return out
        # the fast path staged the file as it is: row n is the n-th non-blank line
        wanted = iter(rowids)
        target = next(wanted, None)
        ordinal = -1
        number = self.plan.base_line
        for offset, raw in _iter_lines(self.plan.path, self.plan.start, self.end):
            number += 1
            if not raw.strip():
                continue
            ordinal += 1
            if ordinal == target:
                out[target] = (number, offset, raw)
                target = next(wanted, None)
                if target is None:
                    break
        return out


def _read_json_sql_empty() -> str:
    cols = ", ".join(f'NULL::{t} AS "{c}"' for c, t in READ_COLUMNS.items())
    return f"SELECT {cols} WHERE false"


# ---------------------------------------------------------------- writing


def _select_for(kind: str, cols: dict[str, str]) -> str:
    defaults = field_defaults(kind)
    parts = []
    for c, t in cols.items():
        if c == "run_id" and kind != "meta":
            parts.append("$run_id")
            continue
        if READ_COLUMNS.get(c) == "JSON" and t != "JSON":
            expr = f"json_extract_string(\"{c}\", '$')" if t == "VARCHAR" else f'CAST("{c}" AS {t})'
        else:
            expr = f'"{c}"'
        if c in defaults:
            expr = f"coalesce({expr}, {sql_literal(defaults[c], t)})"
        parts.append(expr)
    return ", ".join(parts)


def _insert_sql(kind: str) -> str:
    select = f"SELECT {_select_for(kind, _record_columns(kind))} FROM _stage WHERE kind = '{kind}'"
    derived = DERIVED_COLUMNS.get(kind)
    if not derived:
        return f"INSERT INTO {kind} {select}"
    # the derived columns are computed from the typed record columns, once, here
    names = ", ".join(f'"{c}"' for c in _record_columns(kind))
    exprs = ", ".join(expr for _, expr in derived.values())
    return f"INSERT INTO {kind} SELECT *, {exprs} FROM ({select}) AS record({names})"


def _insert_cache_sql() -> str:
    """The cache rows with their derived columns and order columns (``CACHE_ORDER_COLUMNS``).

    The views number events per (run, source, position) by ts_ns, then file order; doing
    that here, once per file, spares every query a sort of all cache events. A continued
    file numbers on from the rows of its run already stored (``prior_*``). Rows go in in
    file order, as in every other table. The windows sort narrow rows (the staging row
    id and the columns they need) and are joined back by row id: sorting the whole
    record, shapes and all, three times was most of the cost.
    """
    cols = _record_columns("cache")
    names = ", ".join(f'"{c}"' for c in cols)
    derived = ", ".join(f"{expr} AS {c}" for c, (_, expr) in DERIVED_COLUMNS["cache"].items())
    select = f"SELECT {_select_for('cache', cols)}, rowid FROM _stage WHERE kind = 'cache'"
    out = ", ".join(f"r.{c}" for c in [*cols, *DERIVED_COLUMNS["cache"]])
    return f"""
INSERT INTO cache
WITH record AS (
    SELECT *, {derived} FROM ({select}) AS r({names}, _rid)
),
w AS (
    SELECT _rid, source, position, lookup_key,
        row_number() OVER p AS ord_here,
        -- lookups so far, over the same sort as ord_here (one sort, not two)
        CASE WHEN action IN ('hit', 'miss')
            THEN sum(CAST(action IN ('hit', 'miss') AS BIGINT)) OVER p END AS seq_here,
        sum(CAST(action = 'miss' AS BIGINT)) OVER k AS life_here,
        sum(CAST(action = 'hit' AS BIGINT)) OVER k AS hits_here,
        sum(CAST(action = 'evict' AS BIGINT)) OVER k AS evictions_here
    FROM (SELECT _rid, source, position, lookup_key, action, ts_ns FROM record)
    WINDOW p AS (PARTITION BY source, position ORDER BY ts_ns, _rid
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW),
        k AS (PARTITION BY source, position, lookup_key ORDER BY ts_ns, _rid
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
),
w2 AS (
    SELECT *,
        CASE WHEN seq_here IS NOT NULL THEN lag(seq_here) OVER (
            PARTITION BY source, position, lookup_key, seq_here IS NULL ORDER BY seq_here
        ) END AS prev_here
    FROM w
),
prior_position AS (
    SELECT source, position, max(ord) AS ord, max(seq) AS seq
    FROM cache WHERE run_id = $run_id GROUP BY ALL
),
prior_key AS (
    SELECT source, position, lookup_key, max(seq) AS seq,
        count(*) FILTER (WHERE action = 'miss') AS misses,
        count(*) FILTER (WHERE action = 'hit') AS hits,
        count(*) FILTER (WHERE action = 'evict') AS evictions
    FROM cache WHERE run_id = $run_id GROUP BY ALL
)
SELECT {out},
    w.ord_here + coalesce(p.ord, 0),
    w.seq_here + coalesce(p.seq, 0),
    CASE WHEN w.seq_here IS NOT NULL THEN coalesce(w.prev_here + coalesce(p.seq, 0), k.seq) END,
    w.life_here + coalesce(k.misses, 0),
    w.hits_here + coalesce(k.hits, 0),
    w.evictions_here + coalesce(k.evictions, 0)
FROM record AS r
JOIN w2 AS w ON w._rid = r._rid
LEFT JOIN prior_position p ON p.source IS NOT DISTINCT FROM w.source
    AND p.position IS NOT DISTINCT FROM w.position
LEFT JOIN prior_key k ON k.source IS NOT DISTINCT FROM w.source
    AND k.position IS NOT DISTINCT FROM w.position
    AND k.lookup_key IS NOT DISTINCT FROM w.lookup_key
ORDER BY r._rid
"""


def _insert_memory_sql() -> str:
    """The memory rows with their running live bytes (``MEMORY_RUNNING_COLUMNS``).

    Running sums per (device, category) and per device, by ts_ns then file order; a
    continued file adds the sums of the rows of its run already stored.
    """
    cols = _record_columns("memory")
    names = ", ".join(f'"{c}"' for c in cols)
    select = f"SELECT {_select_for('memory', cols)}, rowid FROM _stage WHERE kind = 'memory'"
    out = ", ".join(f"w.{c}" for c in cols)
    delta = "CASE WHEN action = 'alloc' THEN bytes ELSE -bytes END"
    return f"""
INSERT INTO memory
WITH w AS (
    SELECT *,
        sum({delta}) OVER (PARTITION BY device, category ORDER BY ts_ns, _rid
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS category_here,
        sum({delta}) OVER (PARTITION BY device ORDER BY ts_ns, _rid
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS device_here
    FROM ({select}) AS r({names}, _rid)
),
prior_category AS (
    SELECT device, category, sum({delta}) AS live
    FROM memory WHERE run_id = $run_id GROUP BY ALL
),
prior_device AS (
    SELECT device, sum({delta}) AS live FROM memory WHERE run_id = $run_id GROUP BY ALL
)
SELECT {out},
    CAST(w.category_here + coalesce(pc.live, 0) AS BIGINT),
    CAST(w.device_here + coalesce(pd.live, 0) AS BIGINT)
FROM w
LEFT JOIN prior_category pc ON pc.device IS NOT DISTINCT FROM w.device
    AND pc.category IS NOT DISTINCT FROM w.category
LEFT JOIN prior_device pd ON pd.device IS NOT DISTINCT FROM w.device
ORDER BY w._rid
"""


_INSERTS = {kind: _insert_sql(kind) for kind in RECORD_TABLES}
_INSERTS["cache"] = _insert_cache_sql()
_INSERTS["memory"] = _insert_memory_sql()
_RUN_COLS = {c: t for c, t in RUNS_COLUMNS.items() if c not in ("started_at", "file")}
_INSERT_RUN = (
    f"INSERT INTO runs ({', '.join(chr(34) + c + chr(34) for c in _RUN_COLS)}, started_at, file) "
    f"SELECT {_select_for('meta', _RUN_COLS)}, make_timestamp_ns(wall_time_ns), $file "
    f"FROM _stage WHERE kind = 'meta'"
)


def _delete_run(con: duckdb.DuckDBPyConnection, run_id: str, file: str) -> None:
    for table in (*RECORD_TABLES, "runs"):
        con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
    con.execute("DELETE FROM rejected_lines WHERE file = ?", [file])


def _write(
    con: duckdb.DuckDBPyConnection, plan: _Plan, work: _FileIngest, message: str | None
) -> int:
    file = str(plan.path)
    con.execute("BEGIN TRANSACTION")
    try:
        if plan.replaced_run is not None:
            _delete_run(con, plan.replaced_run, file)
        elif plan.start == 0:
            con.execute("DELETE FROM rejected_lines WHERE file = ?", [file])
        else:
            # a partial last line rejected before is read again now
            con.execute(
                "DELETE FROM rejected_lines WHERE file = ? AND byte_offset >= ?", [file, plan.start]
            )
        records = 0
        if plan.start == 0:
            (metas,) = con.execute("SELECT count(*) FROM _stage WHERE kind = 'meta'").fetchall()[0]
            if metas:
                con.execute(_INSERT_RUN, {"file": file})
                records += metas
        for kind in RECORD_TABLES:
            cur = con.execute(_INSERTS[kind], {"run_id": plan.run_id})
            records += cur.fetchall()[0][0]
        if work.rejected:
            # one Arrow table, not executemany: that inserts row by row (36 k rejected
            # lines took 90 s)
            rejected = pa.table(
                {
                    "line": [r.line for r in work.rejected],
                    "byte_offset": [r.offset for r in work.rejected],
                    "reason": [r.reason for r in work.rejected],
                    "raw": [r.raw for r in work.rejected],
                }
            )
            con.register("_rejected", rejected)
            try:
                con.execute(
                    "INSERT INTO rejected_lines SELECT $file, line, byte_offset, reason, raw, "
                    "$run_id, now()::TIMESTAMP FROM _rejected",
                    {"file": file, "run_id": plan.run_id},
                )
            finally:
                con.unregister("_rejected")
        status = "partial" if work.partial else "ok"
        rejected_total = con.execute(
            "SELECT count(*) FROM rejected_lines WHERE file = ?", [file]
        ).fetchall()[0][0]
        con.execute(
            """
            INSERT INTO ingested_files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now()::TIMESTAMP)
            ON CONFLICT (file) DO UPDATE SET
                run_id = excluded.run_id, status = excluded.status, message = excluded.message,
                offset_bytes = excluded.offset_bytes, lines = excluded.lines,
                records = CASE WHEN ? THEN ingested_files.records ELSE 0 END + excluded.records,
                rejected = excluded.rejected,
                first_line_hash = excluded.first_line_hash,
                schema_version = excluded.schema_version,
                ingested_at = excluded.ingested_at
            """,
            [
                file,
                plan.run_id,
                status,
                message,
                work.end,
                plan.base_line + work.lines_read,
                records,
                rejected_total,
                plan.first_hash,
                plan.version,
                plan.continued,
            ],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return records


def _refuse(con: duckdb.DuckDBPyConnection, path: Path, message: str) -> None:
    file = str(path)
    prev = _previous(con, file)
    if prev is not None and prev["status"] != "refused":
        # a file that was ingested before and is unreadable now keeps its rows
        return
    con.execute(
        """
        INSERT INTO ingested_files VALUES (?, NULL, 'refused', ?, 0, 0, 0, 0, NULL, NULL,
            now()::TIMESTAMP)
        ON CONFLICT (file) DO UPDATE SET status = 'refused', message = excluded.message,
            ingested_at = excluded.ingested_at
        """,
        [file, message],
    )


def ingest_file(
    con: Connection, path: Path, migrations: Migrations = MIGRATIONS, *, strict: bool = False
) -> FileResult:
    """Ingest one file on an open connection (see the module doc).

    ``strict`` sends every line through pydantic (the slow path): it also rejects what the
    typed read does not see (a field no kind has, a number given for a text field).
    """
    t0 = time.perf_counter()
    duck = con.duck
    try:
        plan = _plan(duck, path, migrations)
    except _Refused as exc:
        _refuse(duck, path, str(exc))
        return FileResult(str(path), "refused", message=str(exc), seconds=time.perf_counter() - t0)
    except OSError as exc:
        msg = f"cannot read the file: {exc.strerror or exc}"
        _refuse(duck, path, msg)
        return FileResult(str(path), "refused", message=msg, seconds=time.perf_counter() - t0)
    if isinstance(plan, FileResult):
        plan.seconds = time.perf_counter() - t0
        return plan
    try:
        with work_dir("ember-ingest-") as tmp:
            work = _FileIngest(duck, plan, migrations, tmp, strict)
            work.run()
            message = work.partial
            if work.rejected and not message:
                message = f"{len(work.rejected)} line(s) rejected; see rejected_lines"
            records = _write(duck, plan, work, message)
    finally:
        duck.execute("DROP TABLE IF EXISTS _stage")
    return FileResult(
        str(path),
        "partial" if work.partial else "ok",
        records=records,
        rejected=len(work.rejected),
        message=message,
        run_id=plan.run_id,
        bytes_read=work.end - plan.start,
        seconds=time.perf_counter() - t0,
        continued=plan.continued,
        replaced=plan.replaced_run is not None,
        slow_path=work.slow_path,
    )


def ingest(
    paths: Iterable[str | os.PathLike[str]],
    db: str | os.PathLike[str] = DEFAULT_DB,
    *,
    on_file: Callable[[FileResult], None] | None = None,
    migrations: Migrations = MIGRATIONS,
    threads: int | None = None,
    wait: float | None = None,
    strict: bool = False,
) -> IngestSummary:
    """Ingest trace files, folders or globs into the database ``db``.

    The database is opened for each file and closed after it, so that other processes
    (a dashboard) can read between files; ``on_file`` is called after each file. Opening
    waits up to ``wait`` seconds for readers and other writers to let go (by default
    ``INGEST_WAIT_S``, longer than a dashboard query may run).
    """
    files = expand_paths(paths)
    summary = IngestSummary()
    t0 = time.perf_counter()
    for path in files:
        with connect(db, wait=wait, threads=threads) as con:
            result = ingest_file(con, path, migrations, strict=strict)
        summary.files.append(result)
        if on_file is not None:
            on_file(result)
    summary.seconds = time.perf_counter() - t0
    return summary
