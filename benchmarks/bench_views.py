"""Speed of every analysis view on a large database, against the 1 s target (issue 7).

    .venv/bin/python benchmarks/bench_views.py [--db /tmp/views10m.duckdb] [--records 10000000]
        [--threads 2] [--views spans,compiles] [--rebuild]

Builds the database once (two runs of ``records / 2`` realistic records each, from
``ember.analysis.synthetic``, ingested with ``ember.analysis.ingest``) and reuses it on
later runs: the machine is shared, so do not rebuild it for every measurement. Then, per
view in ``VIEW_NAMES``:

- ``count``:    ``SELECT count(*) FROM <view>`` (what a page's "how many" costs)
- ``filtered``: ``SELECT * FROM <view> WHERE run_id = ?`` fetched in full as a
  polars DataFrame (one run: what a dashboard page reads)

Prints seconds per view and flags those over the target (each view <= 1 s on 10 M records
on 2 cores). Heavy: run it once, not in a loop.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ember.analysis import VIEW_NAMES, Connection, connect, ingest
from ember.analysis.synthetic import write_trace

TARGET_S = 1.0


def build(db: Path, records: int, threads: int) -> None:
    """Generate two runs of ``records / 2`` records and ingest them into ``db``."""
    with tempfile.TemporaryDirectory(prefix="ember-bench-views-") as tmp:
        files = []
        for i in (1, 2):
            path = Path(tmp) / f"run{i}.jsonl"
            t0 = time.perf_counter()
            n = write_trace(path, records // 2, run_id=f"bench-{i}", seed=i)
            print(f"generated {n:,} records in {time.perf_counter() - t0:.1f} s")
            files.append(path)
        t0 = time.perf_counter()
        summary = ingest(files, db, threads=threads)
        s = time.perf_counter() - t0
        rate = summary.records / s / 1e6
        print(f"ingested {summary.records:,} records in {s:.1f} s ({rate:.2f} M/s)")


def _timed(fn) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=Path("/tmp/views10m.duckdb"))
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--views", default="", help="comma-separated subset of the views")
    ap.add_argument("--rebuild", action="store_true", help="delete and build the database")
    args = ap.parse_args()

    if args.rebuild and args.db.exists():
        args.db.unlink()
    if not args.db.exists():
        build(args.db, args.records, args.threads)
    views = [v for v in args.views.split(",") if v] or list(VIEW_NAMES)

    with connect(args.db, threads=args.threads) as con:  # writable: refreshes changed views
        time_views(con, views)


def time_views(con: Connection, views: list[str] | None = None) -> float:
    """Print count and filtered seconds per view; returns the slowest (seconds)."""
    total = con.duck.execute("SELECT sum(records) FROM ingested_files").fetchall()[0][0]
    run = con.duck.execute("SELECT min(run_id) FROM runs").fetchall()[0][0]
    print(f"views on {total:,} records, filtered to run {run!r} (target <= {TARGET_S:g} s)")
    print(f"  {'view':<16} {'count s':>8} {'rows':>11} {'filtered s':>11} {'rows':>11}")
    worst = 0.0
    for view in views or VIEW_NAMES:
        count_s, count_rows = _timed(
            lambda v=view: con.duck.execute(f"SELECT count(*) FROM {v}").fetchall()[0][0]
        )
        filt_s, table = _timed(lambda v=view: con.sql(f"SELECT * FROM {v} WHERE run_id = ?", [run]))
        worst = max(worst, count_s, filt_s)
        flag = "" if max(count_s, filt_s) <= TARGET_S else "   > target"
        print(
            f"  {view:<16} {count_s:8.2f} {count_rows:>11,} {filt_s:11.2f} "
            f"{table.height:>11,}{flag}",
            flush=True,
        )
    print(f"slowest: {worst:.2f} s ({worst / TARGET_S:.1f}x the {TARGET_S:g} s target)")
    return worst


if __name__ == "__main__":
    main()
