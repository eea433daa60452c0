"""The trace lake: validated records as hive-partitioned Parquet that many ingesters write.

Layout (one dataset per table, the same tables as the DuckDB file)::

    LAKE/_manifest/<filekey>-<start>-<id>.json      one entry per ingest of a trace file
    LAKE/_claims/<filekey>.claim                    exists while one ingester writes a file
    LAKE/<table>/run_date=YYYY-MM-DD/run_id=<id>/<filekey>-<start>-<id>.parquet

``<table>`` is ``runs``, each record kind (``span_start``, ``cache``, ...) and
``rejected_lines``. One ingest of one trace file writes one Parquet file per table that
has rows, each under a temporary name (``.<name>.tmp``, which no reader's glob matches)
renamed into place, and then its manifest entry (the same way): an entry names the trace
file, the bytes read (``start``, ``offset_bytes``), their digest, the lines, records and
rejected lines, and the parts it wrote. Why this layout: each record kind has its own
columns (a dataset per kind, not a ``kind=`` partition of one wide table); the date and the
run are the partitions every view filters or groups by; a part per ingested file means no
ingester ever writes a file that another one writes, so there is no lock on the lake.
The one exclusion is per trace file: ``_claims/<filekey>.claim`` is created with O_EXCL
while a file is ingested, so that two ingesters given the same trace file do not both
ingest it (the second skips it, ``status = 'busy'``); a claim older than ``stale_s`` or of
a dead process on this host is taken over (``ingest_plan.claim``). Which bytes of a
file to read is decided as for the DuckDB file (``ingest_plan.plan_file``), from the
manifest's entries instead of ``ingested_files``.

What is stored: the record's fields typed as the DuckDB tables are (``TABLE_COLUMNS``; a
JSON value is stored as its text) plus ``line``, the record's line in its trace file.
The columns that the DuckDB file computes at ingest (``cache.lookup_key``, the cache order
columns, the memory running sums, ``runs.started_at``) are computed when the lake is
read (``LAKE_TABLE_SQL``), ordered by ``ts_ns`` then ``line`` exactly as the DuckDB file
orders by ``ts_ns`` then file order: so every engine computes them the same way.

Validation is ingest's own (``ingest_read.stage`` and ``check``: the typed read, the SQL
checks, pydantic for the explanations), so the lake gets the same rows and the same
rejected-line reasons as the DuckDB file. Files are ingested in batches (``BATCH_FILES``):
a batch is read, checked and turned into Parquet with one query per step, then each file's
parts and entry are committed on their own, so each file is still one set of parts.
Re-ingest is idempotent: an unchanged file (same size and mtime as its last entry) costs
a ``stat``; a file that grew is continued from its last complete line (a new entry and new
parts); a replaced file (first line changed, or shrank) is ingested again and its old
parts and entries are removed.

``connect_lake(DIR)`` opens the lake in an in-memory DuckDB with the same tables and views
as the DuckDB file (``ember query/report/dashboard --db DIR``).
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import itertools
import json
import mmap
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import pyarrow.parquet as pq

from ember.schemas import MIGRATIONS, Migrations

from .db import (
    CACHE_ORDER_COLUMNS,
    DERIVED_COLUMNS,
    MEMORY_RUNNING_COLUMNS,
    RECORD_TABLES,
    RUNS_COLUMNS,
    VIEW_NAMES,
    Connection,
    _record_columns,
    view_sql,
)
from .ingest import _select_for
from .ingest_plan import (
    FileResult,
    IngestSummary,
    Previous,
    _iter_lines,
    _Plan,
    _read_range,
    _Refused,
    cannot_read,
    claim,
    expand_paths,
    run_taken,
    unchanged_result,
)
from .ingest_plan import plan_file as _plan_file
from .ingest_read import _FileIngest, check, stage
from .schema_types import READ_COLUMNS

__all__ = [
    "LAKE_TABLES",
    "MANIFEST",
    "connect_lake",
    "ingest_lake",
    "is_lake",
    "lake_columns",
    "manifest_entries",
]

MANIFEST = "_manifest"
CLAIMS = "_claims"
LAKE_TABLES: tuple[str, ...] = ("runs", *RECORD_TABLES, "rejected_lines")
"""The datasets of a lake, one folder each."""

REJECTED_COLUMNS: dict[str, str] = {
    "file": "VARCHAR",
    "line": "BIGINT",
    "byte_offset": "BIGINT",
    "reason": "VARCHAR",
    "raw": "VARCHAR",
    "ingested_at": "TIMESTAMP",
}


def _stored(t: str) -> str:
    """The type a column has in the Parquet files: JSON is stored as its text."""
    return re.sub(r"\bJSON\b", "VARCHAR", t)


def table_columns(table: str) -> dict[str, str]:
    """``{column: DuckDB type}`` of a lake table as the views see it (run_id first).

    The same columns and types as the DuckDB file's table, derived columns included.
    """
    if table == "runs":
        return dict(RUNS_COLUMNS)
    if table == "rejected_lines":
        return {
            **{k: v for k, v in REJECTED_COLUMNS.items() if k != "ingested_at"},
            "run_id": "VARCHAR",
            "ingested_at": "TIMESTAMP",
        }
    cols = dict(_record_columns(table))
    cols.update({c: t for c, (t, _) in DERIVED_COLUMNS.get(table, {}).items()})
    if table == "cache":
        cols.update(CACHE_ORDER_COLUMNS)
    if table == "memory":
        cols.update(MEMORY_RUNNING_COLUMNS)
    return cols


def lake_columns(table: str) -> dict[str, str]:
    """``{column: DuckDB type}`` of the Parquet files of a lake table.

    The record's own fields (JSON as text) and ``line``; not ``run_id`` and ``run_date``,
    which are the partitions, nor the columns computed when the lake is read.
    """
    if table == "runs":
        cols = {c: t for c, t in RUNS_COLUMNS.items() if c not in ("run_id", "started_at")}
    elif table == "rejected_lines":
        cols = dict(REJECTED_COLUMNS)
    else:
        cols = {c: t for c, t in _record_columns(table).items() if c != "run_id"}
        cols["line"] = "BIGINT"
    return {c: _stored(t) for c, t in cols.items()}


def is_lake(path: str | os.PathLike[str]) -> bool:
    """A folder written by ``ember ingest --lake`` (it has a manifest folder)."""
    return (Path(path) / MANIFEST).is_dir()


def file_key(path: str) -> str:
    """The name stem of a trace file's parts and manifest entries (its path's digest)."""
    return hashlib.sha1(path.encode()).hexdigest()[:16]


def _partition(run_id: str, run_date: str) -> str:
    return f"run_date={run_date}/run_id={quote(run_id, safe='')}"


def run_date(wall_time_ns: int | None) -> str:
    """The ``run_date`` partition of a run: the UTC date of its wall-clock anchor."""
    return datetime.fromtimestamp((wall_time_ns or 0) / 1e9, UTC).strftime("%Y-%m-%d")


def _write_atomic(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)


# ---------------------------------------------------------------- the manifest


def _entry_names(lake: Path) -> dict[str, list[str]]:
    """The names of the manifest entries of a lake, by file key (one listing)."""
    names_by_key: dict[str, list[str]] = {}
    for e in os.scandir(lake / MANIFEST):
        if e.name.endswith(".json") and not e.name.startswith("."):
            names_by_key.setdefault(e.name.split("-", 1)[0], []).append(e.name)
    return names_by_key


def manifest_entries(lake: str | os.PathLike[str]) -> dict[str, list[dict[str, Any]]]:
    """Every manifest entry of a lake, by file key, oldest first."""
    folder = Path(lake) / MANIFEST
    if not folder.is_dir():
        return {}
    return {k: _read_entries(folder, names) for k, names in _entry_names(Path(lake)).items()}


def _read_entries(folder: Path, names: Iterable[str]) -> list[dict[str, Any]]:
    entries = []
    for name in names:
        try:
            entries.append(json.loads((folder / name).read_bytes()))
        except FileNotFoundError:  # removed by a replacing ingest meanwhile
            continue
    entries.sort(key=lambda e: (e["ingested_at"], e["offset_bytes"]))
    return entries


def _entries_of(lake: Path, key: str) -> list[dict[str, Any]]:
    folder = lake / MANIFEST
    names = [
        e.name
        for e in os.scandir(folder)
        if e.name.startswith(key + "-") and e.name.endswith(".json")
    ]
    return _read_entries(folder, names)


def _state(entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the lake holds of one file: its latest entry that is not a refusal."""
    live = [e for e in entries if e["status"] != "refused"]
    if not live:
        return None
    gen = live[-1]["generation"]
    same = [e for e in live if e["generation"] == gen]
    return max(same, key=lambda e: e["offset_bytes"])


# ---------------------------------------------------------------- planning


def _previous(state: dict[str, Any] | None) -> Previous | None:
    if state is None:
        return None
    return Previous(
        state["run_id"],
        state["offset_bytes"],
        state["lines"],
        state["first_line_hash"],
        state["schema_version"],
        state["size"],
        state["mtime_ns"],
    )


@dataclass
class _LakePlan:
    plan: _Plan
    key: str
    generation: str
    run_date: str
    previous: dict[str, Any] | None  # the entry continued from, or the state replaced


def plan_file(
    lake: Path,
    path: Path,
    entries: list[dict[str, Any]],
    migrations: Migrations = MIGRATIONS,
) -> _LakePlan | FileResult:
    """What to read of ``path``, from its manifest entries (``_Refused`` if nothing)."""
    key = file_key(str(path))
    state = _state(entries)
    plan = _plan_file(
        path,
        _previous(state),
        migrations,
        lambda run_id: _run_owner(lake, run_id, key),
        store="lake",
    )
    if isinstance(plan, FileResult):
        return plan
    if plan.continued:
        assert state is not None
        return _LakePlan(plan, key, state["generation"], state["run_date"], state)
    assert plan.meta is not None
    generation = uuid.uuid4().hex[:12]
    return _LakePlan(plan, key, generation, run_date(plan.meta.get("wall_time_ns")), state)


def claim_file(
    lake: Path,
    path: Path,
    entries: list[dict[str, Any]],
    stale_s: float,
    claims: contextlib.ExitStack,
) -> FileResult | None:
    """Claim one file of a lake ingest into ``claims`` (None), or say why not.

    The cheap answer first: a file whose size and mtime did not change since ``entries``
    (the manifest read when the ingest began) is ``unchanged`` after a ``stat``, without a
    claim; one another ingester has claimed is ``busy``."""
    file = str(path)
    try:
        st = path.stat()
    except OSError as exc:
        return FileResult(file, "refused", message=cannot_read(exc))
    previous = _previous(_state(entries))
    if previous is not None and previous.unchanged(st):
        return unchanged_result(file, previous)
    if not claims.enter_context(claim(lake / CLAIMS, file_key(file), stale_s)):
        return FileResult(file, "busy", message="another ingester is writing this file now")
    return None


def plan_claimed(
    lake: Path, path: Path, entries: list[dict[str, Any]], migrations: Migrations
) -> _LakePlan | FileResult:
    """Plan a claimed file from its entries read after the claim (another ingester may have
    just done it); a refusal is written to the manifest."""
    t0 = time.perf_counter()
    file = str(path)
    try:
        return plan_file(lake, path, entries, migrations)
    except _Refused as exc:
        refuse_file(lake, path, str(exc), entries)
        return FileResult(file, "refused", message=str(exc), seconds=time.perf_counter() - t0)
    except OSError as exc:
        msg = cannot_read(exc)
        refuse_file(lake, path, msg, entries)
        return FileResult(file, "refused", message=msg, seconds=time.perf_counter() - t0)


def claim_and_plan(
    lake: Path,
    path: Path,
    entries: list[dict[str, Any]],
    migrations: Migrations,
    stale_s: float,
    claims: contextlib.ExitStack,
) -> _LakePlan | FileResult:
    """Plan one file of a lake ingest, holding its claim in ``claims`` if it is to be read
    (``claim_file``, then ``plan_claimed`` on its entries read again)."""
    refused = claim_file(lake, path, entries, stale_s, claims)
    if refused is not None:
        return refused
    return plan_claimed(lake, path, _entries_of(lake, file_key(str(path))), migrations)


def _run_owner(lake: Path, run_id: str, key: str) -> str | None:
    """The file that brought ``run_id`` into the lake, if not the file ``key``."""
    part = f"run_id={quote(run_id, safe='')}"
    for d in (lake / "runs").glob(f"run_date=*/{part}"):
        for f in d.glob("*.parquet"):
            if not f.name.startswith(key + "-"):
                try:
                    rows = pq.read_table(f, columns=["file"]).column("file").to_pylist()
                except (OSError, ValueError):
                    continue
                return rows[0] if rows else f.name
    return None


# ---------------------------------------------------------------- writing a batch


def _line_sql(con: duckdb.DuckDBPyConnection, works: list[_FileIngest]) -> str:
    """SQL of each staged row's line number in its file.

    The fast path staged every non-blank line in order: without blank lines, row n of a
    file is line ``base + n + 1``; the lines of the other files (blank lines, the slow
    path's line map) are listed in ``_lines``."""
    listed: list[tuple[int, int]] = []
    for w in works:
        plan = w.plan
        if w.first_row < 0:
            continue
        if w.line_map is not None:
            listed += [(w.first_row + i, line) for i, (line, _) in enumerate(w.line_map)]
        elif _has_blank(w):
            number = plan.base_line
            rid = w.first_row
            for _, raw in _iter_lines(plan.path, plan.start, w.end):
                number += 1
                if raw.strip():
                    listed.append((rid, number))
                    rid += 1
    con.execute("CREATE OR REPLACE TEMP TABLE _lines (rid BIGINT, line BIGINT)")
    if listed:
        con.executemany("INSERT INTO _lines VALUES (?, ?)", listed)
    return (
        "coalesce((SELECT line FROM _lines WHERE rid = _stage.rowid), "
        "rowid - CAST($firsts AS BIGINT[])[_f + 1] + CAST($bases AS BIGINT[])[_f + 1] + 1)"
    )


_BLANK = re.compile(rb"(?:\A|\n)[ \t\r\f\v]*\n")


def _has_blank(work: _FileIngest) -> bool:
    plan = work.plan
    if work.end <= plan.start:
        return False
    with plan.path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        return _BLANK.search(m, max(plan.start - 1, 0), work.end) is not None


def _select_sql(kind: str, line_sql: str) -> str:
    cols = _record_columns(kind)
    select = _select_for(kind, cols, "NULL")
    # the stored columns: the record's (not run_id) with JSON as text, then line
    names = [c for c in cols if c != "run_id"]
    types = lake_columns(kind)
    inner = f"SELECT {select}, {line_sql} AS line, _f FROM _stage WHERE kind = '{kind}'"
    outer = ", ".join(f'CAST("{c}" AS {types[c]}) AS "{c}"' for c in names)
    all_names = ", ".join(f'"{c}"' for c in cols)
    return f"SELECT {outer}, line, _f FROM ({inner}) AS r({all_names}, line, _f) ORDER BY _f, line"


def _runs_sql() -> str:
    cols = {c: t for c, t in RUNS_COLUMNS.items() if c not in ("started_at", "file")}
    select = _select_for("meta", cols)
    types = lake_columns("runs")
    names = ", ".join(f'"{c}"' for c in cols)
    outer = ", ".join(f'CAST("{c}" AS {types[c]}) AS "{c}"' for c in cols if c != "run_id")
    return (
        f"SELECT {outer}, CAST($files AS VARCHAR[])[_f + 1] AS file, _f FROM (SELECT {select}, "
        f"_f FROM _stage WHERE kind = 'meta') AS r({names}, _f) ORDER BY _f"
    )


def _by_file(table: Any, n: int) -> list[Any]:
    """A pyarrow table sorted by ``_f`` as ``n`` tables, one per file (without ``_f``)."""
    fs = table.column("_f").to_pylist()
    bounds = [bisect.bisect_left(fs, f) for f in range(n + 1)]
    rest = table.drop_columns(["_f"])
    return [rest.slice(a, b - a) for a, b in itertools.pairwise(bounds)]


def _stage_output(con: duckdb.DuckDBPyConnection, works: list[_FileIngest]) -> list[dict[str, Any]]:
    """Each staged file's lake tables (table -> pyarrow.Table), from one query per table."""
    outputs: list[dict[str, Any]] = [{} for _ in works]
    params: dict[str, list[Any]] = {
        "firsts": [w.first_row for w in works],
        "bases": [w.plan.base_line for w in works],
    }
    line_sql = _line_sql(con, works)
    kinds = [
        r[0]
        for r in con.execute("SELECT DISTINCT kind FROM _stage WHERE kind <> 'meta'").fetchall()
    ]
    queries: list[tuple[str, str, dict[str, list[Any]]]] = [
        ("runs", _runs_sql(), {"files": [str(w.plan.path) for w in works]})
    ]
    queries += [(k, _select_sql(k, line_sql), params) for k in RECORD_TABLES if k in kinds]
    for table, sql, args in queries:
        t = con.sql(sql, params=args).to_arrow_table()
        if not t.num_rows:
            continue
        for out, piece in zip(outputs, _by_file(t, len(works)), strict=True):
            if piece.num_rows:
                out[table] = piece
    for w, out in zip(works, outputs, strict=True):
        if w.rejected:
            out["rejected_lines"] = rejected_table(str(w.plan.path), w.rejected)
    return outputs


def rejected_table(file: str, rejected: list[Any]) -> Any:
    """The rejected lines of one file as a pyarrow table of ``lake_columns('rejected_lines')``."""
    import pyarrow as pa

    now = datetime.now(UTC).replace(tzinfo=None)
    return pa.table(
        {
            "file": pa.array([file] * len(rejected), pa.string()),
            "line": pa.array([r.line for r in rejected], pa.int64()),
            "byte_offset": pa.array([r.offset for r in rejected], pa.int64()),
            "reason": pa.array([r.reason for r in rejected], pa.string()),
            "raw": pa.array([r.raw for r in rejected], pa.string()),
            "ingested_at": pa.array([now] * len(rejected), pa.timestamp("us")),
        }
    )


def commit_file(
    lake: Path,
    lp: _LakePlan,
    tables: dict[str, Any],
    *,
    records: int,
    rejected: int,
    status: str,
    message: str | None,
    end: int,
    lines: int,
    engine: str,
) -> None:
    """Rename one file's parts into the lake, then write its manifest entry.

    ``tables`` maps a lake table to a pyarrow table or to Parquet files already written
    (a path or a list of paths, renamed into place). A replaced file's old parts and
    entries go last.
    """
    plan = lp.plan
    stem = f"{lp.key}-{plan.start:015d}-{uuid.uuid4().hex[:8]}"
    part_dir = _partition(plan.run_id, lp.run_date)
    parts = []
    for table, data in tables.items():
        pieces = data if isinstance(data, list) else [data]
        for n, piece in enumerate(pieces):
            name = f"{stem}.parquet" if len(pieces) == 1 else f"{stem}-{n}.parquet"
            target = lake / table / part_dir / name
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.tmp")
            if isinstance(piece, (str, Path)):
                shutil.move(str(piece), tmp)
            else:
                pq.write_table(piece, tmp, compression="zstd")
            os.replace(tmp, target)
            parts.append(str(target.relative_to(lake)))
    digest = hashlib.sha1()
    for buf in _read_range(plan.path, plan.start, end):
        digest.update(buf)
    entry = {
        "file": str(plan.path),
        "key": lp.key,
        "generation": lp.generation,
        "engine": engine,
        "host": socket.gethostname(),
        "run_id": plan.run_id,
        "run_date": lp.run_date,
        "status": status,
        "message": message,
        "start": plan.start,
        "offset_bytes": end,
        "base_line": plan.base_line,
        "lines": plan.base_line + lines,
        "records": records,
        "rejected": rejected,
        "digest": "sha1:" + digest.hexdigest(),
        "first_line_hash": plan.first_hash,
        "schema_version": plan.version,
        "size": plan.size,
        "mtime_ns": plan.mtime_ns,
        "ingested_at": time.time(),
        "parts": parts,
    }
    _write_atomic(lake / MANIFEST / f"{stem}.json", json.dumps(entry, indent=1).encode())
    if plan.replaced_run is not None or (plan.start == 0 and lp.previous is not None):
        _remove_generation(lake, lp.key, keep=lp.generation)


def _remove_generation(lake: Path, key: str, keep: str) -> None:
    """Remove the parts and entries of a replaced file (every generation but ``keep``)."""
    for entry in _entries_of(lake, key):
        if entry["generation"] == keep:
            continue
        for part in entry.get("parts", []):
            with contextlib.suppress(FileNotFoundError):
                (lake / part).unlink()
        for name in os.listdir(lake / MANIFEST):
            if name.startswith(f"{key}-{entry['start']:015d}-") and name.endswith(".json"):
                try:
                    if json.loads((lake / MANIFEST / name).read_bytes())["generation"] != keep:
                        (lake / MANIFEST / name).unlink()
                except FileNotFoundError:
                    pass


def refuse_file(lake: Path, path: Path, message: str, entries: list[dict[str, Any]]) -> None:
    """Record a refused file in the manifest (not when an earlier ingest of it is kept)."""
    if _state(entries) is not None:
        return  # a file ingested before and unreadable now keeps its rows
    key = file_key(str(path))
    try:
        st = path.stat()
        size, mtime = st.st_size, st.st_mtime_ns
    except OSError:
        size, mtime = None, None
    entry: dict[str, Any] = {
        "file": str(path),
        "key": key,
        "generation": "",
        "engine": "",
        "host": socket.gethostname(),
        "run_id": None,
        "run_date": None,
        "status": "refused",
        "message": message,
        "start": 0,
        "offset_bytes": 0,
        "base_line": 0,
        "lines": 0,
        "records": 0,
        "rejected": 0,
        "digest": None,
        "first_line_hash": None,
        "schema_version": None,
        "size": size,
        "mtime_ns": mtime,
        "ingested_at": time.time(),
        "parts": [],
    }
    for old in entries:
        if old["status"] == "refused":
            for name in os.listdir(lake / MANIFEST):
                if name.startswith(f"{key}-") and name.endswith(".json"):
                    with contextlib.suppress(FileNotFoundError):
                        (lake / MANIFEST / name).unlink()
            break
    _write_atomic(lake / MANIFEST / f"{key}-{0:015d}-refused.json", json.dumps(entry).encode())


# ---------------------------------------------------------------- ingest


def _prepare_prior_spans(
    con: duckdb.DuckDBPyConnection, lake: Path, batch: list[_LakePlan]
) -> None:
    """``_prior_spans`` for the checks: the span ids already in the lake of each continued
    file's run, by its place in the batch."""
    reads = []
    for f, lp in enumerate(batch):
        if lp.plan.start == 0:
            continue
        d = lake / "span_start" / _partition(lp.plan.run_id, lp.run_date)
        parts = sorted(str(p) for p in d.glob("*.parquet"))
        if parts:
            lit = "[" + ", ".join(_lit(p) for p in parts) + "]"
            reads.append(f"SELECT {f}::INTEGER AS _f, span_id FROM read_parquet({lit})")
    reads.append("SELECT NULL::INTEGER AS _f, NULL::BIGINT AS span_id WHERE false")
    con.execute(f"CREATE OR REPLACE TEMP VIEW _prior_spans AS {' UNION ALL '.join(reads)}")


_COMMIT_THREADS = 4
BATCH_FILES = 256
"""At most this many trace files are read, checked and written in one batch."""
BATCH_BYTES = 64 << 20
"""... and at most this many bytes (a larger file is a batch of its own)."""


def ingest_lake(
    paths: Iterable[str | os.PathLike[str]],
    lake: str | os.PathLike[str],
    *,
    on_file: Callable[[FileResult], None] | None = None,
    migrations: Migrations = MIGRATIONS,
    strict: bool = False,
    stale_s: float = 600.0,
    threads: int | None = None,
) -> IngestSummary:
    """Ingest trace files, folders or globs into the lake folder ``lake`` (with DuckDB).

    One in-memory DuckDB does the whole ingest, in batches (``BATCH_FILES``,
    ``BATCH_BYTES``): a batch's files are read, checked and turned into Parquet together
    (one query per step, not per file), and each file's parts are renamed into the lake
    when its batch is done (see the module doc); a file that fails does not fail its
    batch-mates. Safe to run on many processes and machines at once against one lake.
    """
    root = Path(lake)
    (root / MANIFEST).mkdir(parents=True, exist_ok=True)
    files = expand_paths(paths)
    summary = IngestSummary()
    t0 = time.perf_counter()
    known = manifest_entries(root)
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET enable_progress_bar = false")
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        i = 0
        while i < len(files):
            results = _ingest_batch(con, root, files[i:], known, migrations, strict, stale_s)
            i += len(results)
            for result in results:
                summary.files.append(result)
                if on_file is not None:
                    on_file(result)
    finally:
        con.close()
    summary.seconds = time.perf_counter() - t0
    return summary


def _ingest_batch(
    con: duckdb.DuckDBPyConnection,
    lake: Path,
    paths: list[Path],
    known: dict[str, list[dict[str, Any]]],
    migrations: Migrations,
    strict: bool,
    stale_s: float,
) -> list[FileResult]:
    """Claim and plan the first files of ``paths`` and ingest them as one batch; their
    results, in order (at least one file). The manifest folder is listed once for the batch
    after its files are claimed (not once per file: a lake holds many entries)."""
    results: list[FileResult | Path] = []
    claimed = 0
    size = 0
    with contextlib.ExitStack() as claims:
        for path in paths:
            if claimed >= BATCH_FILES or (claimed and size >= BATCH_BYTES):
                break
            t0 = time.perf_counter()
            why = claim_file(lake, path, known.get(file_key(str(path)), []), stale_s, claims)
            if why is None:
                claimed += 1
                with contextlib.suppress(OSError):
                    size += path.stat().st_size
                results.append(path)
            else:
                why.seconds = time.perf_counter() - t0
                results.append(why)
        names = _entry_names(lake) if claimed else {}
        planned: list[FileResult | _LakePlan] = []
        runs: dict[str, str] = {}  # run id -> the file of this batch that brings it
        for item in results:
            if isinstance(item, FileResult):
                planned.append(item)
                continue
            file = str(item)
            key = file_key(file)
            entries = _read_entries(lake / MANIFEST, names.get(key, []))
            lp = plan_claimed(lake, item, entries, migrations)
            if isinstance(lp, _LakePlan) and lp.plan.start == 0:
                # one run is one file, within a batch too
                other = runs.setdefault(lp.plan.run_id, file)
                if other != file:
                    exc = run_taken(lp.plan.run_id, other, "lake")
                    refuse_file(lake, item, str(exc), entries)
                    lp = FileResult(file, "refused", message=str(exc))
            planned.append(lp)
        batch = [r for r in planned if isinstance(r, _LakePlan)]
        done = iter(_ingest_planned(con, lake, batch, migrations, strict) if batch else [])
        return [r if isinstance(r, FileResult) else next(done) for r in planned]


def _ingest_planned(
    con: duckdb.DuckDBPyConnection,
    lake: Path,
    batch: list[_LakePlan],
    migrations: Migrations,
    strict: bool,
) -> list[FileResult]:
    """Read, check and write planned (and claimed) files together; if that fails before
    anything is committed, each file alone, so that one file's failure is not its
    batch-mates'."""
    t0 = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="ember-lake-"))
    try:
        works = stage(con, [lp.plan for lp in batch], migrations, tmp, strict)
        _prepare_prior_spans(con, lake, batch)
        check(con, works)
        outputs = _stage_output(con, works)
    except Exception:
        if len(batch) == 1:
            raise
        return [r for lp in batch for r in _ingest_planned(con, lake, [lp], migrations, strict)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        con.execute("DROP TABLE IF EXISTS _stage")

    def commit(lp: _LakePlan, w: _FileIngest, out: dict[str, Any]) -> FileResult:
        records = sum(t.num_rows for name, t in out.items() if name != "rejected_lines")
        result = w.result(records, 0.0)
        commit_file(
            lake,
            lp,
            out,
            records=records,
            rejected=len(w.rejected),
            status=result.status,
            message=result.message,
            end=w.end,
            lines=w.lines_read,
            engine="duckdb",
        )
        return result

    # each file's parts and entry are its own: written on a few threads (Parquet and the
    # file system let go of the GIL), the small files' cost
    with ThreadPoolExecutor(_COMMIT_THREADS) as pool:
        results = list(pool.map(commit, batch, works, outputs))
    seconds = (time.perf_counter() - t0) / len(batch)
    for r in results:
        r.seconds = seconds
    return results


# ---------------------------------------------------------------- reading


def _cache_sql(src: str) -> str:
    """The cache table from its stored columns: derived and order columns, as db.py's."""
    derived = ", ".join(f"{expr} AS {c}" for c, (_, expr) in DERIVED_COLUMNS["cache"].items())
    return f"""
SELECT *,
    CASE WHEN seq IS NOT NULL THEN lag(seq) OVER (
        PARTITION BY run_id, source, position, lookup_key, seq IS NULL ORDER BY seq
    ) END AS prev_seq
FROM (
    SELECT *,
        row_number() OVER (PARTITION BY run_id, source, position ORDER BY ts_ns, line) AS ord,
        CASE WHEN action IN ('hit', 'miss') THEN sum(CAST(action IN ('hit', 'miss') AS BIGINT))
            OVER (PARTITION BY run_id, source, position ORDER BY ts_ns, line
                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) END AS seq,
        sum(CAST(action = 'miss' AS BIGINT)) OVER k AS life,
        sum(CAST(action = 'hit' AS BIGINT)) OVER k AS hits_so_far,
        sum(CAST(action = 'evict' AS BIGINT)) OVER k AS evictions
    FROM (SELECT *, {derived} FROM {src}) AS c
    WINDOW k AS (PARTITION BY run_id, source, position, lookup_key ORDER BY ts_ns, line
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
) AS c
"""


def _memory_sql(src: str) -> str:
    delta = "CASE WHEN action = 'alloc' THEN bytes ELSE -bytes END"
    return f"""
SELECT *,
    CAST(sum({delta}) OVER (PARTITION BY run_id, device, category ORDER BY ts_ns, line
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS BIGINT) AS category_live_bytes,
    CAST(sum({delta}) OVER (PARTITION BY run_id, device ORDER BY ts_ns, line
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS BIGINT) AS device_live_bytes
FROM {src}
"""


def lake_table_sql(table: str, src: str) -> str:
    """SQL (DuckDB) of a lake table as the views see it, from its stored rows ``src``.

    ``src`` has the stored columns plus ``run_id``; the result has exactly the DuckDB
    file's columns, in its order, with its types. Ordered by ``line`` within a run.
    """
    cols = table_columns(table)
    if table == "cache":
        body = _cache_sql(src)
    elif table == "memory":
        body = _memory_sql(src)
    elif table == "runs":
        body = f"SELECT *, make_timestamp_ns(wall_time_ns) AS started_at FROM {src}"
    elif table == "rejected_lines":
        body = f"SELECT * FROM {src}"
    else:
        body = f"SELECT * FROM {src}"
    casts = ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t in cols.items())
    return f"SELECT {casts} FROM ({body}) AS t"


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _stored_view(con: duckdb.DuckDBPyConnection, lake: Path, table: str) -> str:
    """A view of the stored rows of one lake table (with run_id), or an empty one."""
    name = f"_lake_{table}"
    folder = lake / table
    has = folder.is_dir() and any(folder.glob("run_date=*/run_id=*/*.parquet"))
    if has:
        glob = _lit(str(folder / "run_date=*" / "run_id=*" / "*.parquet"))
        read = (
            f"read_parquet({glob}, hive_partitioning = true, "
            "hive_types = {'run_date': DATE, 'run_id': VARCHAR}, union_by_name = true)"
        )
        # a lake written by an older Ember may lack a column: NULL, typed
        have = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {read}").fetchall()}
        cols = {**lake_columns(table), "run_id": "VARCHAR"}
        select = ", ".join(
            f'"{c}"' if c in have else f'NULL::{t} AS "{c}"' for c, t in cols.items()
        )
        sql = f"SELECT {select} FROM {read}"
    else:
        cols = {**lake_columns(table), "run_id": "VARCHAR"}
        sql = "SELECT " + ", ".join(f'NULL::{t} AS "{c}"' for c, t in cols.items()) + " WHERE false"
    con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
    return name


_INGESTED_FILES_SQL = """
SELECT file, first(run_id ORDER BY ingested_at DESC) AS run_id,
    first(status ORDER BY offset_bytes DESC, ingested_at DESC) AS status,
    first(message ORDER BY offset_bytes DESC, ingested_at DESC) AS message,
    max(offset_bytes) AS offset_bytes, max(lines) AS lines,
    CAST(sum(records) AS BIGINT) AS records,
    CAST(NULL AS BIGINT) AS rejected,
    first(first_line_hash ORDER BY ingested_at DESC) AS first_line_hash,
    CAST(first(schema_version ORDER BY ingested_at DESC) AS INTEGER) AS schema_version,
    CAST(to_timestamp(max(ingested_at)) AS TIMESTAMP) AS ingested_at,
    CAST(first(size ORDER BY offset_bytes DESC, ingested_at DESC)
        FILTER (WHERE status <> 'refused') AS BIGINT) AS size_bytes
FROM {src} GROUP BY file
"""


def attach_lake(con: duckdb.DuckDBPyConnection, lake: str | os.PathLike[str]) -> None:
    """Create the lake's tables (as views over its Parquet) and the analysis views on ``con``."""
    root = Path(lake).resolve()
    con.execute(view_sql("macros"))
    for table in LAKE_TABLES:
        src = _stored_view(con, root, table)
        if table == "rejected_lines":
            continue
        con.execute(f"CREATE OR REPLACE VIEW {table} AS {lake_table_sql(table, src)}")
    # ingested_files from the manifest entries
    manifest = root / MANIFEST
    if any(n.endswith(".json") and not n.startswith(".") for n in os.listdir(manifest)):
        glob = _lit(str(manifest / "*.json"))
        entries = (
            f"(SELECT * FROM read_json({glob}, format = 'auto', union_by_name = true, "
            "columns = {'file': 'VARCHAR', 'run_id': 'VARCHAR', 'status': 'VARCHAR', "
            "'message': 'VARCHAR', 'offset_bytes': 'BIGINT', 'lines': 'BIGINT', "
            "'records': 'BIGINT', 'rejected': 'BIGINT', 'first_line_hash': 'VARCHAR', "
            "'schema_version': 'BIGINT', 'ingested_at': 'DOUBLE', 'size': 'BIGINT'}))"
        )
    else:
        entries = (
            "(SELECT NULL::VARCHAR AS file, NULL::VARCHAR AS run_id, NULL::VARCHAR AS status, "
            "NULL::VARCHAR AS message, NULL::BIGINT AS offset_bytes, NULL::BIGINT AS lines, "
            "NULL::BIGINT AS records, NULL::BIGINT AS rejected, NULL::VARCHAR AS "
            "first_line_hash, NULL::BIGINT AS schema_version, NULL::DOUBLE AS ingested_at, "
            "NULL::BIGINT AS size WHERE false)"
        )
    con.execute(f"CREATE OR REPLACE VIEW _lake_manifest AS SELECT * FROM {entries}")
    # a truncated last line rejected before is superseded once the file grew past it
    con.execute(
        f"""CREATE OR REPLACE VIEW rejected_lines AS
        SELECT {", ".join(f'r."{c}"' for c in table_columns("rejected_lines"))}
        FROM _lake_rejected_lines r
        LEFT JOIN (SELECT file, max(offset_bytes) AS offset_bytes FROM _lake_manifest
            GROUP BY file) m ON m.file = r.file
        WHERE NOT (r.reason LIKE 'truncated last line%'
            AND r.byte_offset < coalesce(m.offset_bytes, 0))"""
    )
    files = _INGESTED_FILES_SQL.format(src="_lake_manifest")
    con.execute(
        f"""CREATE OR REPLACE VIEW ingested_files AS
        SELECT f.* REPLACE (CAST(coalesce(r.n, 0) AS BIGINT) AS rejected)
        FROM ({files}) f
        LEFT JOIN (SELECT file, count(*) AS n FROM rejected_lines GROUP BY file) r
            ON r.file = f.file"""
    )
    for name in VIEW_NAMES:
        con.execute(f"CREATE OR REPLACE VIEW {name} AS\n{view_sql(name).strip().rstrip(';')}")


def connect_lake(lake: str | os.PathLike[str], *, threads: int | None = None) -> Connection:
    """Open a lake for reading: an in-memory DuckDB with the tables and views of an Ember
    database over the lake's Parquet (``FileNotFoundError`` if ``lake`` is not one)."""
    if not is_lake(lake):
        raise FileNotFoundError(
            f"{lake}: not a trace lake (no {MANIFEST}/ folder); write one with "
            f"`ember ingest TRACES --lake {lake}`"
        )
    duck = duckdb.connect(":memory:")
    duck.execute("SET enable_progress_bar = false")
    if threads:
        duck.execute(f"SET threads = {int(threads)}")
    attach_lake(duck, lake)
    return Connection(duck, str(lake), True)


def read_columns_sql() -> str:
    """The ``read_json`` columns (kept here so the Spark reader and the tests see one list)."""
    return ", ".join(f"{k} {v}" for k, v in READ_COLUMNS.items())
