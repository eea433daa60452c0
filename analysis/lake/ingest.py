"""The trace lake: validated records as Delta tables (``deltalake``) that many ingesters write.

``ember ingest TRACES --lake DIR`` writes one Delta table per record table (``runs``, each
record kind, ``rejected_lines``; see ``lake_table`` for the layout and the partitions) and
one row per ingest of a trace file's bytes in the ``_ingests`` table; ``lake_commit`` says
how a file's rows become visible in one commit, exactly once per file content, also when
ingesters race or are killed. ``connect_lake(DIR)`` (``lake_read``) opens the lake in an
in-memory DuckDB with the same tables and views as the DuckDB file (``ember
query/report/dashboard --db DIR``); ``lake_admin`` has ``ember lake optimize/vacuum/check/
upgrade``; ``lake_spark`` the Spark ingest and reader.

What is stored: the record's fields typed as the DuckDB tables are (``table_columns``; a
JSON value is stored as its text), ``line`` (the record's line in its trace file),
``run_id`` and ``_ingest``. The columns that the DuckDB file computes at ingest
(``cache.lookup_key``, the cache order columns, the memory running sums,
``runs.started_at``) are computed when the lake is read (``lake_table_sql``), ordered by
``ts_ns`` then ``line`` exactly as the DuckDB file orders by ``ts_ns`` then file order: so
every engine computes them the same way.

Validation is ingest's own (``ingest_read.stage`` and ``check``), so the lake gets the same
rows and the same rejected-line reasons as the DuckDB file. Files are ingested in batches
(``BATCH_FILES``, ``BATCH_BYTES``): a batch is planned from one snapshot of ``_ingests``,
read, checked and turned into Arrow with one query per step, appended with one commit per
table, and made visible with one commit of its ``_ingests`` rows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import duckdb

from ember.analysis.ingest.batch import batch_then_each
from ember.analysis.ingest.plan import FileResult, IngestSummary, expand_paths
from ember.analysis.ingest.read import FileIngest, check, stage, work_dir
from ember.analysis.lake.commit import (
    LakePlan,
    LakeState,
    append_rows,
    commit_ingests,
    file_digest,
    ingest_row,
    plan_or_refuse,
    refusal_row,
    refuse_in_batch,
)
from ember.analysis.lake.lease import IngestLease
from ember.analysis.lake.location import local_lake_path
from ember.analysis.lake.read import attach_lake as attach_lake
from ember.analysis.lake.read import connect_lake as connect_lake
from ember.analysis.lake.read import ingested_files as ingested_files
from ember.analysis.lake.read import lake_table_sql as lake_table_sql
from ember.analysis.lake.table import INGESTS as INGESTS
from ember.analysis.lake.table import LAKE_TABLES as LAKE_TABLES
from ember.analysis.lake.table import REJECTED_COLUMNS as REJECTED_COLUMNS
from ember.analysis.lake.table import LakeError as LakeError
from ember.analysis.lake.table import create_lake, lake_problem
from ember.analysis.lake.table import is_lake as is_lake
from ember.analysis.lake.table import lake_columns as lake_columns
from ember.analysis.lake.table import read_columns_sql as read_columns_sql
from ember.analysis.lake.table import run_date as run_date
from ember.analysis.lake.table import run_key as run_key
from ember.analysis.lake.table import table_columns as table_columns
from ember.analysis.lake.write import prepare_prior_spans, stage_output
from ember.analysis.lake.write import rejected_table as rejected_table
from ember.schemas import MIGRATIONS, Migrations

__all__ = [
    "LAKE_TABLES",
    "LakeError",
    "connect_lake",
    "ingest_lake",
    "ingested_files",
    "is_lake",
    "lake_columns",
    "open_lake_for_writing",
]

BATCH_FILES = 256
"""At most this many trace files are read, checked and written in one batch."""
BATCH_BYTES = 64 << 20
"""... and at most this many bytes (a larger file is a batch of its own)."""


def open_lake_for_writing(lake: str | os.PathLike[str]) -> Path:
    """The lake's folder, made a lake if it is new; ``LakeError`` if it cannot be one."""
    root = local_lake_path(lake)
    problem = lake_problem(root, writing=True)
    if problem is not None:
        raise LakeError(problem)
    create_lake(root)
    return root


def ingest_lake(
    paths: Iterable[str | os.PathLike[str]],
    lake: str | os.PathLike[str],
    *,
    on_file: Callable[[FileResult], None] | None = None,
    migrations: Migrations = MIGRATIONS,
    strict: bool = False,
    threads: int | None = None,
) -> IngestSummary:
    """Ingest trace files, folders or globs into the lake folder ``lake`` (with DuckDB).

    Safe to run on many processes and machines at once against one lake (see
    ``lake_commit``); a file that fails does not fail its batch-mates."""
    root = open_lake_for_writing(lake)
    files = expand_paths(paths)
    summary = IngestSummary()
    t0 = time.perf_counter()
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET enable_progress_bar = false")
        if threads:
            con.execute(f"SET threads = {int(threads)}")
        i = 0
        while i < len(files):
            results = _ingest_batch(con, root, files[i:], migrations, strict)
            i += len(results)
            for result in results:
                summary.files.append(result)
                if on_file is not None:
                    on_file(result)
    finally:
        con.close()
    summary.seconds = time.perf_counter() - t0
    return summary


def plan_batch(
    state: LakeState, paths: list[Path], migrations: Migrations, max_files: int, max_bytes: int
) -> list[FileResult | LakePlan]:
    """Plan the first files of ``paths`` (at least one) from one snapshot: a copy of a
    batch-mate is ``unchanged``, a second file of a batch-mate's run refused."""
    planned: list[FileResult | LakePlan] = []
    fids: dict[str, str] = {}
    runs: dict[str, str] = {}
    size = n = 0
    for path in paths:
        if n >= max_files or (n and size >= max_bytes):
            break
        lp = plan_or_refuse(state, path, migrations)
        if isinstance(lp, LakePlan):
            file = str(path)
            if lp.fid in fids:
                other = fids[lp.fid]
                if file_digest(path, lp.plan.start) != file_digest(Path(other), lp.plan.start):
                    lp = refuse_in_batch(lp, other)  # the same first line, other bytes
                else:
                    lp = FileResult(
                        file,
                        "unchanged",
                        run_id=lp.plan.run_id,
                        message=f"already in the lake: the same content as {other}",
                    )
            elif lp.plan.start == 0 and runs.setdefault(lp.plan.run_id, file) != file:
                lp = refuse_in_batch(lp, runs[lp.plan.run_id])
            else:
                fids[lp.fid] = file
                n += 1
                size += lp.plan.size - lp.plan.start
        planned.append(lp)
    return planned


def _ingest_batch(
    con: duckdb.DuckDBPyConnection,
    root: Path,
    paths: list[Path],
    migrations: Migrations,
    strict: bool,
) -> list[FileResult]:
    """Plan, read, write and commit the first files of ``paths``; their results in order."""
    state = LakeState(root)
    planned = plan_batch(state, paths, migrations, BATCH_FILES, BATCH_BYTES)
    batch = [p for p in planned if isinstance(p, LakePlan)]
    done = _ingest_planned(con, state, batch, migrations, strict) if batch else []
    results = iter(done)
    out = [p if isinstance(p, FileResult) else next(results) for p in planned]
    refusals = [r for r in (refusal_row(state, f) for f in out if f.status == "refused") if r]
    if refusals:
        commit_ingests(state, refusals)
    return out


_Staged = tuple[list[FileIngest], list[dict[str, Any]]]  # a batch's works and lake rows


def _ingest_planned(
    con: duckdb.DuckDBPyConnection,
    state: LakeState,
    batch: list[LakePlan],
    migrations: Migrations,
    strict: bool,
) -> list[FileResult]:
    """Read, check and write planned files together, then commit them; if reading or
    writing fails, each file alone (``batch_then_each``)."""

    def attempt(plans: list[LakePlan]) -> _Staged:
        try:
            # locked while in use: the folder of an ingester killed here is removed by the
            # next ingest (``clean_stale_work_dirs``)
            with work_dir("ember-lake-") as tmp:
                works = stage(con, [lp.plan for lp in plans], migrations, tmp, strict)
                prepare_prior_spans(con, state, plans)
                check(con, works)
                return works, stage_output(con, works, plans)
        finally:
            con.execute("DROP TABLE IF EXISTS _stage")

    def finish(plans: list[LakePlan], done: _Staged) -> list[FileResult]:
        return commit_batch(state, plans, *done, "duckdb")

    return batch_then_each(batch, attempt, finish)


def commit_batch(
    state: LakeState,
    batch: list[LakePlan],
    works: list[Any],
    outputs: list[dict[str, Any]],
    engine: str,
) -> list[FileResult]:
    """Append a batch's rows (one commit per table), then commit its ``_ingests`` rows;
    a file another ingester committed first is ``unchanged``. ``works`` give each file's
    result, end and lines read (``FileIngest`` or the Spark ingest's own). The batch's
    ingests are leased (``lake_lease``) from before the first row to after the commit;
    ``LakeError`` if a repair removed them meanwhile (nothing is committed)."""
    by_table: dict[str, list[Any]] = {}
    for out in outputs:
        for table, piece in out.items():
            by_table.setdefault(table, []).append(piece)
    results: list[FileResult] = []
    rows = []
    for lp, w, out in zip(batch, works, outputs, strict=True):
        records = sum(t.num_rows for name, t in out.items() if name != "rejected_lines")
        result = w.result(records, 0.0)
        results.append(result)
        rows.append(ingest_row(lp, result, w.end, w.lines_read, engine))
    with IngestLease(state.root, [lp.ingest for lp in batch]) as lease:
        for table, pieces in by_table.items():
            append_rows(state.root, table, pieces)
        lease.verify()
        lost = commit_ingests(state, rows)
    for lp, result in zip(batch, results, strict=True):
        if lp.ingest in lost:
            result.status = "unchanged"
            result.records = result.rejected = 0
            result.message = "another ingester committed this file's content first"
    return results
