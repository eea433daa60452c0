"""The trace lake's layout and manifest: paths, partitions, columns, entries, claims, plans.

See ``ember.analysis.lake`` for the layout and why it is so. This module owns what a lake
*is* on disk: the dataset folders (``LAKE_TABLES``) and the columns of their Parquet files
(``lake_columns``) and of their views (``table_columns``); a trace file's key and a run's
partition; the manifest entries (read by file key; written by ``commit_file`` after a
file's parts are renamed into place, or by ``refuse_file``); and the per-file claim and
plan of an ingest (``claim_file``, ``plan_claimed``, ``claim_and_plan``). The DuckDB ingest
(``lake``) and the Spark ingest (``lake_spark``) both commit through it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow.parquet as pq

from ember.schemas import MIGRATIONS, Migrations

from .db import (
    CACHE_ORDER_COLUMNS,
    DERIVED_COLUMNS,
    MEMORY_RUNNING_COLUMNS,
    RECORD_TABLES,
    RUNS_COLUMNS,
    _record_columns,
)
from .ingest_plan import (
    FileResult,
    Previous,
    _Plan,
    _read_range,
    _Refused,
    cannot_read,
    claim,
    unchanged_result,
)
from .ingest_plan import plan_file as _plan_file
from .schema_types import READ_COLUMNS

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


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def read_columns_sql() -> str:
    """The ``read_json`` columns (kept here so the Spark reader and the tests see one list)."""
    return ", ".join(f"{k} {v}" for k, v in READ_COLUMNS.items())


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
