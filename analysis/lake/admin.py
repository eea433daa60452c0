"""Looking after a lake: ``ember lake optimize``, ``vacuum``, ``check`` and ``upgrade``.

- ``optimize``: delta-rs ``optimize.compact()`` of every table (the small files that one
  trace per job leaves, within each partition), then a checkpoint of each log, so that a
  reader reads one Parquet checkpoint instead of thousands of commit files. Safe while
  ingesters append (Delta resolves a compaction against appends).
- ``vacuum``: delta-rs ``vacuum`` with a retention: removes the files no snapshot of the
  last ``retain`` hours lists (compacted-away files, files of ingesters killed before their
  commit). A reader or ingester that started more than ``retain`` hours ago may then miss
  files: keep it above the longest query.
- ``check``: every table's log loads, every listed file exists and has a Parquet footer,
  and how many rows belong to no committed ingest (orphans: ingesters killed between their
  rows and their ``_ingests`` commit); ``repair`` drops damaged files with the ingests whose
  runs they held (so the next ingest reads those traces again) and deletes orphan rows
  older than ``grace_s`` (younger ones may be an ingest whose commit is still coming).
- ``upgrade``: copies a lake of the old format (Parquet + ``_manifest/``) into a new Delta
  lake, reading only the parts its manifest entries name (orphaned parts of a killed
  ingester are left behind), the latest generation of each file; run twice, it adds
  nothing (the files' app transactions). The old lake is only read.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.analysis.lake.commit import (
    LakeState,
    append_rows,
    commit_ingests,
    damaged_log,
    ingest_age_s,
    new_ingest_id,
)
from ember.analysis.lake.lease import lease_ages_s, remove_leases
from ember.analysis.lake.location import local_lake_path
from ember.analysis.lake.table import (
    INGESTS,
    LAKE_TABLES,
    OLD_MANIFEST,
    FileRuns,
    LakeError,
    arrow_schema,
    create_lake,
    is_lake,
    is_old_lake,
    may_hold,
    run_key,
    run_ranges,
)


def _require_lake(lake: str | os.PathLike[str]) -> Path:
    from ember.analysis.lake.table import lake_problem

    root = local_lake_path(lake)
    problem = lake_problem(root, writing=False)
    if problem is not None or not is_lake(root):
        raise LakeError(problem or f"{root}: not a lake")
    return root


def _table(root: Path, name: str) -> Any:
    from deltalake import DeltaTable

    try:
        return DeltaTable(str(root / name))
    except Exception as exc:
        raise LakeError(damaged_log(root, name, exc)) from None


def optimize(lake: str | os.PathLike[str]) -> dict[str, dict[str, int]]:
    """Compact every table and checkpoint its log; per table, files removed and added."""
    root = _require_lake(lake)
    out = {}
    for name in (INGESTS, *LAKE_TABLES):
        dt = _table(root, name)
        metrics = dt.optimize.compact()
        dt = _table(root, name)
        dt.create_checkpoint()
        out[name] = {
            "removed": int(metrics.get("numFilesRemoved", 0)),
            "added": int(metrics.get("numFilesAdded", 0)),
        }
    return out


def vacuum(lake: str | os.PathLike[str], retain_hours: float) -> dict[str, int]:
    """Delete the files no snapshot of the last ``retain_hours`` needs; per table, how many
    files were actually deleted (a file already gone is not counted again).

    delta-rs takes whole hours: a fraction is rounded UP (0.9 keeps an hour), so a vacuum
    never deletes what a snapshot younger than ``retain_hours`` needs."""
    if retain_hours < 0:
        raise LakeError(f"--retain {retain_hours}: hours cannot be negative")
    root = _require_lake(lake)
    hours = math.ceil(retain_hours)
    out: dict[str, int] = {}
    for name in (INGESTS, *LAKE_TABLES):
        dt = _table(root, name)
        listed = dt.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False)
        present = [f for f in listed if (root / name / f).exists()]
        if present:
            dt.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False)
        out[name] = sum(1 for f in present if not (root / name / f).exists())
    return out


@dataclass
class CheckReport:
    """What ``check`` found (and, with ``repair``, did)."""

    damaged_logs: list[str] = field(default_factory=list)
    damaged_files: list[str] = field(default_factory=list)
    orphan_rows: dict[str, int] = field(default_factory=dict)
    repaired: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damaged_logs and not self.damaged_files


def _damaged(uri: str) -> str | None:
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(uri)
    except (OSError, ValueError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return None


def check(
    lake: str | os.PathLike[str], *, repair: bool = False, grace_s: float = 3600.0
) -> CheckReport:
    """Check every table of a lake (see the module doc)."""
    import duckdb

    root = _require_lake(lake)
    report = CheckReport()
    try:
        state = LakeState(root)
    except LakeError as exc:
        report.damaged_logs.append(str(exc))
        return report
    visible = {r["ingest"] for segs in state.streams.values() for r in segs}
    damaged: dict[str, FileRuns] = {}
    for name in LAKE_TABLES:
        try:
            dt = _table(root, name)
        except LakeError as exc:
            report.damaged_logs.append(str(exc))
            continue
        good = []
        ranges = run_ranges(dt)
        for uri in dt.file_uris():
            why = _damaged(uri)
            if why is None:
                good.append(uri)
                continue
            report.damaged_files.append(f"{uri}: {why}")
            damaged[uri] = ranges.get(uri, (None, None, None, None))
        if not good:
            continue
        con = duckdb.connect(":memory:")
        try:
            ids = con.execute(
                "SELECT _ingest, count(*) FROM read_parquet($f, hive_partitioning = false) "
                "GROUP BY _ingest",
                {"f": good},
            ).fetchall()
        finally:
            con.close()
        orphans = {i: n for i, n in ids if i not in visible}
        if orphans:
            report.orphan_rows[name] = sum(orphans.values())
        old = _abandoned(root, list(orphans), grace_s) if repair and orphans else []
        if old:
            dt.delete(" OR ".join(f"_ingest = '{i}'" for i in old))
            report.repaired.append(f"{name}: deleted {len(old)} orphan ingest(s)' rows")
    if repair and report.damaged_files:
        _drop_damaged(root, state, report, list(damaged.values()))
    return report


def _abandoned(root: Path, orphans: list[str], grace_s: float) -> list[str]:
    """The orphan ingests that will never commit (``lake_lease``): a lease older than
    ``grace_s`` by the storage's clock, or no lease and an id older than ``grace_s`` (an
    ingest that ended, or one of an Ember from before leases). Their leases are removed
    first, then ``_ingests`` read again: an ingest committed meanwhile is kept."""
    ages = lease_ages_s(root, orphans)
    old = [
        i
        for i, age in ages.items()
        if (age is None and ingest_age_s(i) > grace_s) or (age is not None and age > grace_s)
    ]
    if not old:
        return []
    remove_leases(root, old)
    committed = {r["ingest"] for segs in LakeState(root).streams.values() for r in segs}
    return [i for i in old if i not in committed]


def _drop_damaged(
    root: Path,
    state: LakeState,
    report: CheckReport,
    ranges: list[FileRuns],
) -> None:
    """Forget the ingests of the runs the damaged files may have held (by the ``run_id``
    statistics of the log: one run per file where the lake is partitioned by run, the runs
    of a range in a compacted file; their traces are read again by the next ingest), then
    remove the damaged files from their tables."""
    ingests = [
        r["ingest"]
        for segs in state.streams.values()
        for r in segs
        if r["run_id"] is not None
        and any(may_hold(fr, r["run_id"], r["run_date"]) for fr in ranges)
    ]
    if ingests:
        _table(root, INGESTS).delete(" OR ".join(f"ingest = '{i}'" for i in ingests))
        report.repaired.append(
            f"{INGESTS}: forgot {len(ingests)} ingest(s); ingest their traces again"
        )
    for line in report.damaged_files:
        uri = line.split(": ", 1)[0]
        os.unlink(uri)
        table = Path(uri).relative_to(root).parts[0]
        _table(root, table).repair()
        report.repaired.append(f"{table}: removed {uri}")


# ---------------------------------------------------------------- upgrade


def _old_entries(old: Path) -> list[list[dict[str, Any]]]:
    """The manifest entries that the old lake's readers should have read: per trace file,
    its refusal, or the entries of its latest generation (oldest first)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for name in sorted(os.listdir(old / OLD_MANIFEST)):
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            entry = json.loads((old / OLD_MANIFEST / name).read_bytes())
        except ValueError as exc:
            raise LakeError(
                f"{old / OLD_MANIFEST / name}: a damaged manifest entry ({exc}); move it aside "
                "and ingest that trace file into the new lake again"
            ) from None
        by_key.setdefault(entry["key"], []).append(entry)
    out = []
    for entries in by_key.values():
        entries.sort(key=lambda e: (e["ingested_at"], e["offset_bytes"]))
        live = [e for e in entries if e["status"] != "refused"]
        if not live:
            out.append(entries[-1:])
            continue
        gen = live[-1]["generation"]
        out.append(sorted((e for e in live if e["generation"] == gen), key=lambda e: e["start"]))
    return out


def _old_parts(old: Path, entry: dict[str, Any], ingest: str) -> dict[str, Any]:
    """The rows of one old entry's parts, by table, as the new tables' columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables: dict[str, Any] = {}
    for part in entry.get("parts", []):
        table = part.split("/", 1)[0]
        t = pq.read_table(old / part)
        schema = arrow_schema(table)
        n = t.num_rows
        extra = {
            "run_id": entry["run_id"],
            "_ingest": ingest,
            "run_date": entry["run_date"],
            "run_key": run_key(entry["run_id"]),
        }
        cols = [
            t.column(f.name).cast(f.type)
            if f.name in t.column_names and f.name not in extra
            else pa.array([extra.get(f.name)] * n, f.type)
            for f in schema
        ]
        tables.setdefault(table, []).append(pa.Table.from_arrays(cols, schema=schema))
    return tables


UPGRADE_BATCH = 256
"""Trace files copied per commit."""


def upgrade(old_lake: str | os.PathLike[str], new_lake: str | os.PathLike[str]) -> int:
    """Copy an old-format lake into a Delta lake (see the module doc); the trace files
    copied (not counting those the new lake already has)."""
    from datetime import datetime

    old = local_lake_path(old_lake)
    if not is_old_lake(old):
        raise LakeError(f"{old}: not a lake of the old format (no {OLD_MANIFEST}/ folder)")
    new = local_lake_path(new_lake)
    create_lake(new)
    state = LakeState(new)
    copied = 0
    rows: list[dict[str, Any]] = []
    tables: dict[str, list[Any]] = {}

    def flush() -> None:
        for t, pieces in tables.items():
            append_rows(new, t, pieces)
        if rows:
            commit_ingests(state, rows)
        rows.clear()
        tables.clear()

    for n, entries in enumerate(_old_entries(old), start=1):
        before = len(rows)
        for seq, e in enumerate(entries, start=1):
            if e["status"] != "refused" and state.seqs.get(e["first_line_hash"], 0) >= seq:
                continue  # upgraded before
            ingest = new_ingest_id()
            row = {
                **dict.fromkeys(arrow_schema(INGESTS).names),
                **{k: e.get(k) for k in ("file", "status", "message", "run_id", "run_date")},
                **{k: e.get(k) for k in ("start", "offset_bytes", "base_line", "lines")},
                **{k: e.get(k) for k in ("records", "rejected", "digest", "schema_version")},
                **{k: e.get(k) for k in ("size", "mtime_ns", "engine", "host")},
                "ingest": ingest,
                "ingested_at": datetime.fromtimestamp(e["ingested_at"]),
            }
            if e["status"] != "refused":
                row.update(fid=e["first_line_hash"], seq=seq)
                for t, pieces in _old_parts(old, e, ingest).items():
                    tables.setdefault(t, []).extend(pieces)
            rows.append(row)
        copied += len(rows) > before
        if n % UPGRADE_BATCH == 0:
            flush()
    flush()
    return copied
