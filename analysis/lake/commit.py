"""What the lake holds of each trace file, what to read of it, and the commit of a batch.

**The commit.** Delta commits one table at a time, and a trace file's rows go into many
tables. So a file's rows are written first, each row tagged with the ingest's id
(``_ingest``), one append per table for a whole batch; then one append to ``_ingests``
names the batch's ingests. That last commit is the only one that counts: a reader sees a
row when its ``_ingest`` is in the ``_ingests`` snapshot it read first (``visible_sql``).
An ingester killed before it leaves rows that no reader sees (``ember lake check`` counts
them, ``--repair`` deletes them) and Parquet files that no snapshot lists (``vacuum``
removes them); run again, it ingests the file anew under a new id.

**Exactly once.** A file is what its first line is: ``fid = sha1(first line)`` (the
``meta`` record: run id, wall-clock anchor, host, pid), the same for byte-identical copies
at other paths. The ``_ingests`` commit carries one Delta application transaction per
file, ``Transaction("ember:" + fid, seq)``: ``seq`` 1 for the bytes from the start, +1 for
each continuation. Two ingesters that read the same file (or copies of it) from the same
snapshot both commit ``seq`` for the same app id; delta-rs lets the first one in and fails
the second (``CommitFailedError``, concurrent transaction): the loser reads the log again,
sees the file's ``seq`` committed and reports the file ``unchanged``; its rows stay
invisible. A file that grew continues from the offset its last committed ingest ends at.

**A file replaced at its path** (another first line: re-recorded): the new ingest names the
old fid in ``replaces`` and the old file's ingests its snapshot held in ``hides``; from
that commit on, readers hide those ingests' rows, so the swap is as atomic as any commit.
What is hidden is what the replacing ingest saw, not what is older by a clock: machines'
clocks differ, and a replacement stamped earlier than the ingest it replaces must still
win (rows of lakes written before ``hides`` existed are decided by ``ingested_at``). A file
with the same first line that is now *shorter* than what was read (rewritten, not appended)
is refused: its rows stay as they were.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ember.analysis.ingest.plan import (
    FilePlan,
    FileResult,
    Previous,
    Refused,
    cannot_read,
    first_line,
    read_range,
    run_taken,
)
from ember.analysis.ingest.plan import plan_file as _plan_file
from ember.analysis.lake.table import (
    INGESTS,
    LakeError,
    arrow_schema,
    read_delta,
    run_date,
    run_key,
)
from ember.schemas import MIGRATIONS, Migrations

LIVE = ("ok", "partial")
COMMIT_TRIES = 8


def app_id(fid: str) -> str:
    """The Delta application transaction id of a trace file's ingests."""
    return f"ember:{fid}"


def new_ingest_id() -> str:
    """An ingest's id: its start time (hex ns, so ``lake check`` can tell an old orphan
    from one whose commit is still coming) and 64 random bits."""
    return f"{time.time_ns():016x}{uuid.uuid4().hex[:16]}"


def ingest_age_s(ingest: str) -> float:
    """Seconds since the ingest ``ingest`` started (from its id)."""
    try:
        return time.time() - int(ingest[:16], 16) / 1e9
    except ValueError:
        return float("inf")


def visible_sql(ingests: str) -> str:
    """SQL of the ids of the ingests whose rows a reader sees, from the ``_ingests`` rows
    ``ingests``: committed (ok or partial) and not of a file replaced at its path since."""
    return (
        f"SELECT i.ingest FROM {ingests} i WHERE i.status IN ('ok', 'partial') AND NOT EXISTS "
        f"(SELECT 1 FROM {ingests} x WHERE x.replaces = i.fid AND x.status IN ('ok', 'partial') "
        "AND (list_contains(string_split(x.hides, ' '), i.ingest) "
        "OR (x.hides IS NULL AND x.ingested_at > i.ingested_at)))"
    )


@dataclass
class LakePlan:
    plan: FilePlan
    fid: str
    seq: int
    ingest: str
    run_date: str
    replaces: str | None = None
    hides: tuple[str, ...] = ()

    @property
    def run_key(self) -> str:
        return run_key(self.plan.run_id)


class LakeState:
    """The ``_ingests`` snapshot an ingest plans from (and commits against)."""

    def __init__(self, root: Path) -> None:
        from deltalake import DeltaTable

        self.root = root
        try:
            self.table = DeltaTable(str(root / INGESTS))
            rows = read_delta(self.table, INGESTS).to_pylist()
        except Exception as exc:  # delta-rs: a damaged log entry or checkpoint
            raise LakeError(damaged_log(root, INGESTS, exc)) from None
        hidden = _hidden(rows)
        self.seqs: dict[str, int] = {}  # the highest seq of each fid, hidden rows too
        for r in rows:
            if r["status"] in LIVE:
                self.seqs[r["fid"]] = max(self.seqs.get(r["fid"], 0), r["seq"])
        self.streams: dict[str, list[dict[str, Any]]] = {}
        self.last_by_file: dict[str, dict[str, Any]] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        # a path's last row: a hidden one before any that is not (clocks differ), then by time
        order = sorted(
            rows, key=lambda r: (r["ingest"] not in hidden, r["ingested_at"], r["seq"] or 0)
        )
        for r in order:
            self.last_by_file[r["file"]] = r
            if r["status"] in LIVE and r["ingest"] not in hidden:
                self.streams.setdefault(r["fid"], []).append(r)
                self.runs.setdefault(r["run_id"], r)
        for segs in self.streams.values():
            segs.sort(key=lambda r: r["seq"])

    def latest(self, fid: str) -> dict[str, Any] | None:
        segs = self.streams.get(fid)
        return segs[-1] if segs else None


def _hidden(rows: list[dict[str, Any]]) -> set[str]:
    """The ingests whose rows readers hide (``visible_sql``): those a live replacement
    names in ``hides``; for rows written before ``hides`` existed, the ingests of the
    replaced fid older than the replacement."""
    out: set[str] = set()
    legacy: dict[str, Any] = {}
    for x in rows:
        if x["status"] in LIVE and x["replaces"]:
            if x.get("hides") is not None:
                out.update(x["hides"].split())
            else:
                t = legacy.get(x["replaces"])
                legacy[x["replaces"]] = x["ingested_at"] if t is None else max(t, x["ingested_at"])
    out.update(
        r["ingest"] for r in rows if r["fid"] in legacy and legacy[r["fid"]] > r["ingested_at"]
    )
    return out


def damaged_log(root: Path, table: str, exc: Exception) -> str:
    """The error for a Delta table delta-rs cannot load."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (
        f"{root / table}/_delta_log: the table's log cannot be read ({first}); a damaged "
        f"log entry or checkpoint: run `ember lake check {root}`, then restore the entry "
        "from a backup or remove the damaged last entry (a commit that never finished)"
    )


def _previous(row: dict[str, Any]) -> Previous:
    return Previous(
        row["run_id"],
        row["offset_bytes"],
        row["lines"],
        row["fid"],
        row["schema_version"],
        row["size"],
        row["mtime_ns"],
    )


def plan_lake_file(
    state: LakeState, path: Path, migrations: Migrations = MIGRATIONS
) -> LakePlan | FileResult:
    """What to read of ``path`` given the lake's snapshot (see the module doc). Raises
    ``Refused`` and ``OSError``."""
    file = str(path)
    st = path.stat()
    last = state.last_by_file.get(file)
    if last is not None and last["status"] in LIVE and state.latest(last["fid"]) is last:
        if (last["size"], last["mtime_ns"]) == (st.st_size, st.st_mtime_ns):
            return FileResult(file, "unchanged", run_id=last["run_id"], message="already ingested")
    if st.st_size == 0:
        raise Refused("empty file: no 'meta' record (is the run still starting?)")
    first = first_line(path, st.st_size)
    fid = hashlib.sha1(first).hexdigest() if first else ""
    latest = state.latest(fid) if fid else None
    if latest is not None and latest["file"] != file and not _same_bytes(path, state.streams[fid]):
        # the first line of a file in the lake, other bytes after it: not a copy
        raise run_taken(latest["run_id"], latest["file"], "lake")
    here = last if last is not None and state.latest(last["fid"] or "") is not None else None
    base = latest or here
    replaces = here["fid"] if latest is None and here is not None else None

    def run_owner(run_id: str) -> str | None:
        row = state.runs.get(run_id)
        if row is None or row["fid"] in (fid, replaces):
            return None
        return str(row["file"])

    plan = _plan_file(path, _previous(base) if base else None, migrations, run_owner, store="lake")
    if isinstance(plan, FileResult):
        if latest is not None and latest["file"] != file:
            plan.message = f"already in the lake: the same content as {latest['file']}"
        return plan
    if latest is not None and plan.start == 0:
        raise Refused(
            f"the file is shorter ({plan.size} bytes) than the {latest['offset_bytes']} bytes "
            "ingested before and starts with the same line: it was rewritten, not appended "
            "to; its rows in the lake stay. Record the run again under a new run id"
        )
    seq = state.seqs.get(fid, 0) + 1  # app transaction versions only grow
    date = (
        latest["run_date"]
        if latest is not None
        else run_date((plan.meta or {}).get("wall_time_ns"))
    )
    hides = tuple(r["ingest"] for r in state.streams.get(replaces, [])) if replaces else ()
    return LakePlan(plan, fid, seq, new_ingest_id(), date, replaces, hides)


def _same_bytes(path: Path, segments: list[dict[str, Any]]) -> bool:
    """Whether ``path`` holds the bytes the lake's ingests of another file read (their
    digests): a copy, or a copy that grew."""
    for seg in segments:
        digest = hashlib.sha1()
        n = 0
        for buf in read_range(path, seg["start"], seg["offset_bytes"]):
            digest.update(buf)
            n += len(buf)
        if n != seg["offset_bytes"] - seg["start"] or "sha1:" + digest.hexdigest() != seg["digest"]:
            return False
    return True


def file_digest(path: Path, start: int = 0) -> str:
    """sha1 of a file's bytes from ``start`` (to tell a copy from another file that begins
    with the same line)."""
    digest = hashlib.sha1()
    for buf in read_range(path, start, path.stat().st_size):
        digest.update(buf)
    return digest.hexdigest()


def plan_or_refuse(state: LakeState, path: Path, migrations: Migrations) -> LakePlan | FileResult:
    """``plan_lake_file``, a refusal as a ``FileResult``."""
    try:
        return plan_lake_file(state, path, migrations)
    except Refused as exc:
        return FileResult(str(path), "refused", message=str(exc))
    except OSError as exc:
        return FileResult(str(path), "refused", message=cannot_read(exc))


def refuse_in_batch(lp: LakePlan, other: str) -> FileResult:
    """A file whose run a batch-mate brings (one run is one file)."""
    return FileResult(
        str(lp.plan.path), "refused", message=str(run_taken(lp.plan.run_id, other, "lake"))
    )


# ---------------------------------------------------------------- rows of _ingests


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def ingest_row(
    lp: LakePlan, result: FileResult, end: int, lines: int, engine: str
) -> dict[str, Any]:
    """The ``_ingests`` row of one planned file's ingest."""
    plan = lp.plan
    digest = hashlib.sha1()
    for buf in read_range(plan.path, plan.start, end):
        digest.update(buf)
    return {
        "ingest": lp.ingest,
        "file": str(plan.path),
        "fid": lp.fid,
        "seq": lp.seq,
        "status": result.status,
        "message": result.message,
        "run_id": plan.run_id,
        "run_date": lp.run_date,
        "replaces": lp.replaces,
        "hides": " ".join(lp.hides) if lp.replaces else None,
        "start": plan.start,
        "offset_bytes": end,
        "base_line": plan.base_line,
        "lines": plan.base_line + lines,
        "records": result.records,
        "rejected": result.rejected,
        "digest": "sha1:" + digest.hexdigest(),
        "schema_version": plan.version,
        "size": plan.size,
        "mtime_ns": plan.mtime_ns,
        "engine": engine,
        "host": socket.gethostname(),
        "ingested_at": _now(),
    }


def refusal_row(state: LakeState, result: FileResult) -> dict[str, Any] | None:
    """The ``_ingests`` row of a refused file, or None when nothing new is to be said (a
    file whose earlier ingest the lake keeps, or the same refusal of the same file)."""
    last = state.last_by_file.get(result.path)
    if last is not None and last["status"] in LIVE and state.latest(last["fid"]) is not None:
        return None
    try:
        st = os.stat(result.path)
        size, mtime = st.st_size, st.st_mtime_ns
    except OSError:
        size, mtime = None, None
    if last is not None and (last["status"], last["message"], last["size"], last["mtime_ns"]) == (
        "refused",
        result.message,
        size,
        mtime,
    ):
        return None
    row = dict.fromkeys(arrow_schema(INGESTS).names)
    row.update(
        ingest=new_ingest_id(),
        file=result.path,
        status="refused",
        message=result.message,
        size=size,
        mtime_ns=mtime,
        host=socket.gethostname(),
        ingested_at=_now(),
    )
    return row


# ---------------------------------------------------------------- the commit


def append_rows(root: Path, table: str, pieces: list[Any]) -> None:
    """Append pyarrow tables to one lake table in one commit (no app transaction: the rows
    count once ``_ingests`` names their ingest)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    schema = arrow_schema(table)
    data = pa.concat_tables([p.select(schema.names).cast(schema) for p in pieces])
    # fresh arrays: delta-rs (arrow-rs) panics on some sliced nested arrays (a file's rows
    # are slices of the batch's)
    data = data.take(pa.array(range(data.num_rows), pa.int64()))
    try:
        # merge: a table an older Ember created lacks the optional fields added since
        # (ember.trace/3 is additive); the append adds them to the table's schema (rows
        # written before read them as NULL) instead of failing with SchemaMismatchError
        write_deltalake(str(root / table), data, mode="append", schema_mode="merge")
    except Exception as exc:  # delta-rs's errors are not one class
        from deltalake import DeltaTable

        try:
            DeltaTable(str(root / table))
        except Exception:
            raise LakeError(damaged_log(root, table, exc)) from None
        raise


def commit_ingests(state: LakeState, rows: list[dict[str, Any]]) -> set[str]:
    """Commit the ``_ingests`` rows of a batch, each file's with its app transaction;
    returns the ingests that lost (their file's ``seq`` was committed by another ingester
    first), which are left out. Retries after a conflict with the rest."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    lost: set[str] = set()
    table = state.table
    for _ in range(COMMIT_TRIES):
        rows = [r for r in rows if r["ingest"] not in lost]
        if not rows:
            return lost
        txns = [Transaction(app_id(r["fid"]), r["seq"]) for r in rows if r["fid"]]
        data = pa.Table.from_pylist(rows, schema=arrow_schema(INGESTS))
        # an _ingests table made before its `hides` column gets it (schema evolution)
        merge = "hides" not in table.schema().to_arrow().names
        try:
            write_deltalake(
                table,
                data,
                mode="append",
                schema_mode="merge" if merge else None,
                commit_properties=CommitProperties(app_transactions=txns),
            )
            return lost
        except CommitFailedError:
            table = DeltaTable(str(state.root / INGESTS))
            for r in rows:
                if r["fid"] and (table.transaction_version(app_id(r["fid"])) or 0) >= r["seq"]:
                    lost.add(r["ingest"])
    raise LakeError(
        f"{state.root / INGESTS}: the commit failed {COMMIT_TRIES} times while other "
        "ingesters committed; run the ingest again (what is committed stays)"
    )
