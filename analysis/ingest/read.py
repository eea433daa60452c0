"""The two read paths of one planned range of a trace file into the staging table ``_stage``
(shared by the DuckDB-file ingest and the lake's DuckDB engine; ``ingest_plan`` says which
bytes to read, ``ingest`` and ``lake`` write what is staged).

1. The fast path: DuckDB reads the bytes once with ``read_json`` and the column types
   derived from the pydantic models (``STAGE_COLUMNS``: ``schema_types.READ_COLUMNS``, with
   the columns that hold objects as JSON text). No Python per line.
2. SQL checks generated from the same models (``checks.row_invalid_sql``) find what the
   typed read does not check (required fields, allowed values, fields of another kind,
   a second meta, a span_end without its span_start); what the objects hold is judged
   once per distinct object (a trace repeats them): their keys and JSON types by their
   ``json_structure`` (``checks.structure_fits``), which sees an unknown key inside an
   object that a typed read would drop, and their strings' allowed values
   (``checks.object_invalid_sql``). Only the rows found are mapped back to line numbers
   and explained by pydantic; they are rejected.
3. The slow path, when DuckDB refuses the bytes (a line that is not JSON, not UTF-8, a
   value of the wrong type, a line over 16 MB), for files of an older schema version
   (through ``ember.schemas.MIGRATIONS``) and with ``strict``: every line is checked by
   pydantic, the valid ones are read by DuckDB as in 1, the others rejected with
   pydantic's explanation.

One job (reading a planned range into ``_stage``), ~700 lines: the three steps share the
staging table, its line numbers and the rejected-line bookkeeping.
"""

from __future__ import annotations

import bisect
import contextlib
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

from ember.analysis.checks import (
    SCALAR_JSON_COLUMNS,
    STRUCT_COLUMNS,
    maybe_too_deep_sql,
    object_invalid_sql,
    row_invalid_sql,
    row_problem_sql,
    span_problems_sql,
    structure_fits,
)
from ember.analysis.ingest.plan import (
    RAW_PREFIX_CHARS,
    FilePlan,
    FileResult,
    Rejected,
    iter_lines,
    raw_text,
    read_extent,
    read_range,
)
from ember.analysis.schema_types import READ_COLUMNS, READ_TYPES, transform_structure
from ember.schemas import (
    RECORD,
    SCHEMA_VERSION,
    Migrations,
    TraceVersionError,
    explain,
)
from ember.schemas.records import MAX_LINE_BYTES, MAX_NESTING
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


def _copy_range(src: Path, start: int, end: int, dst: Path) -> None:
    with dst.open("wb") as fo:
        for buf in read_range(src, start, end):
            fo.write(buf)


def _columns_sql(columns: dict[str, str]) -> str:
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in columns.items()) + "}"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# The columns that hold objects are staged as JSON text (``checks.STRUCT_COLUMNS``): a typed
# read drops the keys it was not asked for inside an object (pydantic refuses them), and
# building a STRUCT of every field of every span kind for every row was a third of the read.
STAGE_COLUMNS: dict[str, str] = {
    c: "JSON" if c in STRUCT_COLUMNS else t for c, t in READ_COLUMNS.items()
}
_READ_COLUMNS_SQL = _columns_sql(STAGE_COLUMNS)
# the staged rows with their objects as the STRUCTs of the typed read, for the messages of
# the SQL checks (``row_problem_sql``) on the few rows pydantic does not explain
_TYPED_STAGE = (
    "(SELECT rowid, * REPLACE ("
    + ", ".join(
        f"json_transform({_q(c)}, '{transform_structure(READ_TYPES[c])}') AS {_q(c)}"
        for c in STRUCT_COLUMNS
    )
    + ") FROM _stage) AS _stage"
)
_PROBLEM_SQL = row_problem_sql()
# the checks of a row's own columns; what its objects hold is checked once per distinct
# object (``_OBJECTS_SQL``)
_INVALID_SQL = row_invalid_sql(text=True)
_MAYBE_DEEP_SQL = maybe_too_deep_sql(
    MAX_NESTING,
    {
        c: t
        for c, t in READ_TYPES.items()
        if c not in STRUCT_COLUMNS and c not in SCALAR_JSON_COLUMNS
    },
)
# What json_structure does not show: an integer over 2**63 - 1 (json_transform reads it as
# NULL; rows with 19 digits in a row in their objects go to parse_line, which has the
# 64-bit rule) and a null item of a list (merged away: [null, 1] is ["UBIGINT"]; a null
# list item follows a '[' or a ',', an object's null value a ':')
_NOT_IN_STRUCTURE_SQL = " OR ".join(
    f"regexp_matches({_q(c)}, '[0-9]{{19}}|[\\[,]\\s*null')" for c in STRUCT_COLUMNS
)
_STRUCTURES = ", ".join(f"CAST(json_structure({_q(c)}) AS VARCHAR)" for c in STRUCT_COLUMNS)
_OBJECT_COLUMNS = ("kind", "span_kind", *STRUCT_COLUMNS)
_STRUCTURE_NAMES = tuple(f"_s_{c}" for c in STRUCT_COLUMNS)
# Each distinct object of a batch (its record's kind and span kind and the JSON text of its
# STRUCT_COLUMNS; a trace repeats its objects, the same shapes and sources call after
# call), once: its structures (``structure_fits`` judges each distinct one, a few dozen
# even where every object differs), whether a string in it is not an allowed value
# (``object_invalid_sql``: ``invalid``), and whether it may nest too deeply or hold what
# its structure does not show (``maybe``: pydantic decides those)
_STRUCTURE_COLUMNS = ", ".join(
    f"CAST(json_structure({_q(c)}) AS VARCHAR) AS {n}"
    for c, n in zip(STRUCT_COLUMNS, _STRUCTURE_NAMES, strict=True)
)
_OBJECTS_SELECT = f"""
SELECT *, {_STRUCTURE_COLUMNS},
    coalesce({object_invalid_sql()}, false) AS invalid,
    coalesce({maybe_too_deep_sql(MAX_NESTING, {c: "JSON" for c in STRUCT_COLUMNS})}
        OR {_NOT_IN_STRUCTURE_SQL}, false) AS maybe
FROM (SELECT DISTINCT {", ".join(_q(c) for c in _OBJECT_COLUMNS)} FROM _stage)
"""
# the groups of distinct objects by structure, straight from ``_stage``: a valid batch (the
# usual case) needs nothing more, and keeping each object's text in a table was a third of
# the cost where most objects are distinct (a compile-heavy trace)
_STRUCTURE_GROUPS_SQL = (
    f"SELECT kind, span_kind, {', '.join(_STRUCTURE_NAMES)}, bool_or(invalid OR maybe) "
    f"FROM ({_OBJECTS_SELECT}) GROUP BY ALL"
)
# the same objects kept (``_objects``), to find the staged rows of those found wrong
_DISTINCT_OBJECTS_SQL = f"CREATE OR REPLACE TEMP TABLE _objects AS {_OBJECTS_SELECT}"
# the staged rows of the objects found wrong: flagged, or of a structure that does not fit
# (``$kind``, ``$span_kind`` and ``$_s_<column>``: the misfits, in lists)
_GROUP_NAMES = ("kind", "span_kind", *_STRUCTURE_NAMES)
_MISFITS = ", ".join(f"unnest(CAST(${n} AS VARCHAR[])) AS {n}" for n in _GROUP_NAMES)
_SAME_GROUP = " AND ".join(f"m.{n} IS NOT DISTINCT FROM o.{n}" for n in _GROUP_NAMES)
_SAME_OBJECT = " AND ".join(f"s.{_q(c)} IS NOT DISTINCT FROM o.{_q(c)}" for c in _OBJECT_COLUMNS)
_OBJECT_ROWS_SQL = f"""
SELECT s.rowid, o.invalid FROM (
    SELECT * FROM _objects AS o WHERE invalid OR maybe
        OR EXISTS (SELECT 1 FROM (SELECT {_MISFITS}) AS m WHERE {_SAME_GROUP})
) AS o
JOIN _stage AS s ON {_SAME_OBJECT}
"""

# the rows whose span id is a second one or has no start, per staged file (``_f``), after
# the span ids stored before a continued file (``_prior_spans``): ``checks.span_problems_sql``
# (span_id is staged as JSON, to see its JSON type: compared as the integer it is)
_SPAN_STAGE = "(SELECT rowid, _f, kind, TRY_CAST(span_id AS BIGINT) AS span_id FROM _stage)"
_SPAN_PROBLEMS_SQL = (
    "SELECT rowid, reason, true FROM ("
    + span_problems_sql(_SPAN_STAGE, "rowid", "_prior_spans", "_f")
    + ")"
)

_CHECKS_SQL = f"""
SELECT rowid, CASE WHEN kind = 'meta' AND NOT (rowid IN (SELECT first_row FROM _files
        WHERE from_start)) THEN 'a second ''meta'' record; one file is one run' END, true
FROM _stage
WHERE (kind = 'meta' AND NOT (rowid IN (SELECT first_row FROM _files WHERE from_start)))
    OR {_INVALID_SQL}
UNION ALL
{_SPAN_PROBLEMS_SQL}
UNION ALL
-- rows whose own JSON values may nest too deeply: pydantic decides, and keeps those that do
-- not (the objects: ``_OBJECTS_SQL``)
SELECT rowid, NULL, false FROM _stage WHERE {_MAYBE_DEEP_SQL}
"""


def _read_json_sql(path: Path, ignore_errors: bool = False) -> str:
    p = str(path).replace("'", "''")
    extra = ", ignore_errors = true" if ignore_errors else ""
    return (
        f"SELECT * FROM read_json('{p}', format = 'newline_delimited', "
        f"columns = {_READ_COLUMNS_SQL}, maximum_object_size = {_DUCKDB_OBJECT_SIZE}{extra})"
    )


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


def _fits(kind: str | None, span_kind: str | None, column: str, structure: str | None) -> bool:
    if structure is None:
        return True
    try:
        parsed = json.loads(structure)
    except RecursionError:  # nested deeper than Python parses: parse_line decides
        return False
    return structure_fits(kind, span_kind, column, parsed)


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

    def __post_init__(self) -> None:
        self.end = self.plan.start

    def extent(self) -> None:
        """Where its complete lines end (``end``, ``lines_read``, a truncated last line)."""
        plan = self.plan
        end, lines, truncated = read_extent(plan)
        if truncated is not None:
            self.partial = truncated.reason
            self.rejected.append(truncated)
        self.end = end
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

    def read(self) -> None:
        """Stage this file alone: the fast path, or the slow path when DuckDB refuses it."""
        plan = self.plan
        if self.end <= plan.start:
            return
        if (
            self.strict
            or not self.migrations.reads_as_is(plan.version)
            or find_long_line(plan.path, plan.start, self.end) is not None
        ):
            self._slow_path(self.end)
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
        wanted = iter(rowids)
        target = next(wanted, None)
        ordinal = self.first_row - 1
        number = self.plan.base_line
        for offset, raw in iter_lines(self.plan.path, self.plan.start, self.end):
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
    together = [w for w in works if w.whole]
    _read_together(con, together, tmp)
    for w in works:
        if not w.whole:
            w.read()
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _files AS SELECT * FROM (SELECT unnest($f) AS f, "
        "unnest($file) AS file, unnest($run_id) AS run_id, unnest($start) AS start, "
        "unnest($start) = 0 AS from_start, unnest($first_row) AS first_row)",
        {
            "f": [w.f for w in works],
            "file": [str(w.plan.path) for w in works],
            "run_id": [w.plan.run_id for w in works],
            "start": [w.plan.start for w in works],
            "first_row": [w.first_row for w in works],
        },
    )
    return works


def _object_rows(con: duckdb.DuckDBPyConnection) -> list[tuple[int, None, bool]]:
    """Rows whose objects break the schema: ``(rowid, None, invalid)``.

    Each distinct object is judged once (``_DISTINCT_OBJECTS_SQL``): a value nested too
    deeply or one its structure does not show (pydantic decides: not ``invalid``), a string
    that is not an allowed value (``invalid``: the typed read's checks refuse it); and each
    distinct structure once, by ``checks.structure_fits``: a key or a JSON type its fields
    do not take. A trace has a few dozen structures. Only when one is found wrong are the
    objects kept (``_objects``) and joined back to their rows.
    """
    misfits = []
    flagged = False
    for g in con.execute(_STRUCTURE_GROUPS_SQL).fetchall():
        kind, span_kind, *structures, flag = g
        flagged |= bool(flag)
        if not all(
            _fits(kind, span_kind, c, st) for c, st in zip(STRUCT_COLUMNS, structures, strict=True)
        ):
            misfits.append(g[:-1])
    if not misfits and not flagged:
        return []
    params = {n: [m[i] for m in misfits] for i, n in enumerate(_GROUP_NAMES)}
    con.execute(_DISTINCT_OBJECTS_SQL)
    try:
        rows = con.execute(_OBJECT_ROWS_SQL, params).fetchall()
    finally:
        con.execute("DROP TABLE IF EXISTS _objects")
    return [(r[0], None, r[1]) for r in rows]


def check(con: duckdb.DuckDBPyConnection, works: list[FileIngest]) -> None:
    """Find the staged rows to reject (one query for the batch), explain them with pydantic,
    add them to each file's ``rejected`` and delete them from ``_stage``."""
    problems = con.execute(_CHECKS_SQL).fetchall()
    problems += _object_rows(con)
    if not problems:
        return
    by_row: dict[int, str | None] = {}
    invalid: set[int] = set()
    for rowid, problem, is_invalid in problems:
        # a row with two reasons (a second span_end of an id that has no start) says the
        # first in text order, as the Spark ingest does
        before = by_row.get(rowid)
        if before is None or (problem is not None and problem < before):
            by_row[rowid] = problem
        if is_invalid:
            invalid.add(rowid)
    staged = sorted((w.first_row, w) for w in works if w.first_row >= 0)
    starts = [first for first, _ in staged]
    rows_of: dict[int, list[int]] = {}
    for rowid in sorted(by_row):
        i = bisect.bisect_right(starts, rowid) - 1
        rows_of.setdefault(i, []).append(rowid)
    rejected_rows = []
    touched = []
    for i, rowids in rows_of.items():
        w = staged[i][1]
        touched.append(w)
        located = w.locate(rowids)
        unexplained = []
        for rowid, (line, offset, raw) in located.items():
            reason = by_row[rowid]
            if reason is None:
                reason = explain_line(raw, expect_meta=rowid == w.first_row and w.plan.start == 0)
            if reason is None:
                if rowid in invalid:  # pydantic accepts what the typed read's checks refused
                    unexplained.append(rowid)
                continue
            w.rejected.append(Rejected(line, offset, reason, raw_text(raw)))
            rejected_rows.append(rowid)
        if unexplained:
            # the full messages of the SQL checks, for these few rows only
            for rowid, reason in con.execute(
                f"SELECT rowid, {_PROBLEM_SQL} FROM {_TYPED_STAGE} "
                f"WHERE rowid IN (SELECT unnest(?::BIGINT[]))",
                [unexplained],
            ).fetchall():
                line, offset, raw = located[rowid]
                reason = reason or "refused by the typed read's checks"
                w.rejected.append(Rejected(line, offset, reason, raw_text(raw)))
                rejected_rows.append(rowid)
    for w in touched:
        w.rejected.sort(key=lambda r: r.line)
    if rejected_rows:
        con.execute(
            "DELETE FROM _stage WHERE rowid IN (SELECT unnest(?::BIGINT[]))",
            [sorted(rejected_rows)],
        )


def _read_json_sql_empty() -> str:
    cols = ", ".join(f'NULL::{t} AS "{c}"' for c, t in STAGE_COLUMNS.items())
    return f"SELECT {cols} WHERE false"
