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

What is stored: the record's fields typed as the DuckDB tables are (``table_columns``; a
JSON value is stored as its text) plus ``line``, the record's line in its trace file.
The columns that the DuckDB file computes at ingest (``cache.lookup_key``, the cache order
columns, the memory running sums, ``runs.started_at``) are computed when the lake is
read (``lake_table_sql``), ordered by ``ts_ns`` then ``line`` exactly as the DuckDB file
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

This module is the DuckDB ingest's driver (batches, claims, commits on threads) and the
lake's front: its names are importable from here. The jobs live in ``lake_manifest``
(layout, columns, manifest entries, claims and plans, ``commit_file``), ``lake_write``
(a staged batch to each file's tables) and ``lake_read`` (``connect_lake``, the views).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb

from ember.schemas import MIGRATIONS, Migrations

from .ingest_plan import (
    FileResult,
    IngestSummary,
    expand_paths,
    run_taken,
)
from .ingest_read import _FileIngest, check, stage
from .lake_manifest import CLAIMS as CLAIMS
from .lake_manifest import LAKE_TABLES as LAKE_TABLES
from .lake_manifest import MANIFEST as MANIFEST
from .lake_manifest import REJECTED_COLUMNS as REJECTED_COLUMNS
from .lake_manifest import (
    _entry_names,
    _LakePlan,
    _read_entries,
    claim_file,
    plan_claimed,
    refuse_file,
)
from .lake_manifest import _partition as _partition
from .lake_manifest import claim_and_plan as claim_and_plan
from .lake_manifest import commit_file as commit_file
from .lake_manifest import file_key as file_key
from .lake_manifest import is_lake as is_lake
from .lake_manifest import lake_columns as lake_columns
from .lake_manifest import manifest_entries as manifest_entries
from .lake_manifest import plan_file as plan_file
from .lake_manifest import read_columns_sql as read_columns_sql
from .lake_manifest import run_date as run_date
from .lake_manifest import table_columns as table_columns
from .lake_read import attach_lake as attach_lake
from .lake_read import connect_lake as connect_lake
from .lake_read import lake_table_sql as lake_table_sql
from .lake_write import _prepare_prior_spans, _stage_output
from .lake_write import rejected_table as rejected_table

__all__ = [
    "LAKE_TABLES",
    "MANIFEST",
    "connect_lake",
    "ingest_lake",
    "is_lake",
    "lake_columns",
    "manifest_entries",
]

# ---------------------------------------------------------------- ingest


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
