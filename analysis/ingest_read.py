"""The two read paths of one planned range of a trace file into the staging table ``_stage``
(shared by the DuckDB-file ingest and the lake's DuckDB engine; ``ingest_plan`` says which
bytes to read, ``ingest`` and ``lake`` write what is staged).

1. The fast path: DuckDB reads the bytes once with ``read_json`` and the column types
   derived from the pydantic models (``STAGE_COLUMNS``: ``schema_types.READ_COLUMNS``, with
   the columns that hold objects as JSON text). No Python per line.
2. SQL checks generated from the same models (``checks.row_invalid_sql``) find what the
   typed read does not check (required fields, allowed values, fields of another kind,
   a second meta, a span_end without its span_start); the objects' keys and JSON types
   are judged once per distinct ``json_structure`` (``checks.structure_fits``), which sees
   an unknown key inside an object that a typed read would drop. Only the rows found are
   mapped back to line numbers and explained by pydantic; they are rejected.
3. The slow path, when DuckDB refuses the bytes (a line that is not JSON, not UTF-8, a
   value of the wrong type, a line over 16 MB), for files of an older schema version
   (through ``ember.schemas.MIGRATIONS``) and with ``strict``: every line is checked by
   pydantic, the valid ones are read by DuckDB as in 1, the others rejected with
   pydantic's explanation.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
from pydantic import ValidationError

from ember.schemas import (
    RECORD,
    SCHEMA_VERSION,
    Migrations,
    TraceVersionError,
    explain,
)
from ember.schemas.records import MAX_LINE_BYTES, MAX_NESTING
from ember.schemas.validate import BadLine, parse_line

from .checks import (
    STRUCT_COLUMNS,
    maybe_too_deep_sql,
    row_invalid_sql,
    row_problem_sql,
    structure_fits,
)
from .ingest_plan import (
    RAW_PREFIX_CHARS,
    _iter_lines,
    _Plan,
    _raw_text,
    _read_extent,
    _read_range,
    _Rejected,
)
from .schema_types import READ_COLUMNS, READ_TYPES, transform_structure

# _find_long_line), so it only has to be large enough
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
    with dst.open("wb") as fo:
        for buf in _read_range(src, start, end):
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
_INVALID_SQL = row_invalid_sql(text=True)
_MAYBE_DEEP_SQL = maybe_too_deep_sql(
    MAX_NESTING, {c: "JSON" if c in STRUCT_COLUMNS else t for c, t in READ_TYPES.items()}
)
# What json_structure does not show: an integer over 2**63 - 1 (json_transform reads it as
# NULL; rows with 19 digits in a row in their objects go to parse_line, which has the
# 64-bit rule) and a null item of a list (merged away: [null, 1] is ["UBIGINT"]; a null
# list item follows a '[' or a ',', an object's null value a ':')
_NOT_IN_STRUCTURE_SQL = " OR ".join(
    f"regexp_matches({_q(c)}, '[0-9]{{19}}|[\\[,]\\s*null')" for c in STRUCT_COLUMNS
)
_STRUCTURES = ", ".join(f"CAST(json_structure({_q(c)}) AS VARCHAR)" for c in STRUCT_COLUMNS)

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


def _fits(kind: str | None, span_kind: str | None, column: str, structure: str | None) -> bool:
    if structure is None:
        return True
    try:
        parsed = json.loads(structure)
    except RecursionError:  # nested deeper than Python parses: parse_line decides
        return False
    return structure_fits(kind, span_kind, column, parsed)


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
            -- rows that may nest too deeply, or hold an integer over 64 bits or a null list
            -- item in an object: pydantic decides, and keeps those that do not
            SELECT rowid, NULL, false FROM _stage
            WHERE {_MAYBE_DEEP_SQL} OR {_NOT_IN_STRUCTURE_SQL}
            """,
            {"run_id": plan.run_id},
        ).fetchall()
        problems += self._misfit_rows()
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
                f"SELECT rowid, {_PROBLEM_SQL} FROM {_TYPED_STAGE} "
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

    def _misfit_rows(self) -> list[tuple[int, None, bool]]:
        """Rows whose objects hold a key or a JSON type their fields do not take (pydantic
        decides): each distinct ``json_structure`` of a kind is judged once, by
        ``checks.structure_fits``; a trace has a few dozen."""
        groups = self.con.execute(
            f"SELECT DISTINCT kind, span_kind, {_STRUCTURES} FROM _stage"
        ).fetchall()
        misfits = [
            g
            for g in groups
            if not all(_fits(g[0], g[1], c, s) for c, s in zip(STRUCT_COLUMNS, g[2:], strict=True))
        ]
        if not misfits:
            return []
        names = ["kind", "span_kind", *(f"json_structure({_q(c)})" for c in STRUCT_COLUMNS)]
        one = " AND ".join(f"CAST({n} AS VARCHAR) IS NOT DISTINCT FROM ?" for n in names)
        where = " OR ".join(f"({one})" for _ in misfits)
        params = [v for g in misfits for v in g]
        rows = self.con.execute(f"SELECT rowid FROM _stage WHERE {where}", params).fetchall()
        return [(r[0], None, False) for r in rows]

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
    cols = ", ".join(f'NULL::{t} AS "{c}"' for c, t in STAGE_COLUMNS.items())
    return f"SELECT {cols} WHERE false"
