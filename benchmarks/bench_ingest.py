"""Ingest and view speed, side by side with a raw typed DuckDB ``read_json``.

    .venv/bin/python benchmarks/bench_ingest.py [--records 5000000] [--threads 2] [--keep DIR]

1. Generates a realistic trace (``ember.analysis.synthetic``: calls, cache hits/misses/
   evictions, segment compiles, breaks, memory alloc/free, device memory readings).
2. Raw: ``CREATE TABLE AS SELECT * FROM read_json(file, columns=<types from the schema>)``
   into a fresh database file, closed (checkpointed): what DuckDB alone does with the
   same types and no validation.
3. Ember: ``ember.analysis.ingest`` of the same file into a fresh database (validated,
   per-kind tables, bookkeeping), closed.
4. Views: a second run of the same size is ingested (2 x records in the database) and
   each view is timed by ``bench_views.time_views`` (``count(*)`` and one run read in full;
   ``bench_views.py`` does the same on a 10 M-record database it keeps).

Prints seconds, records/s and the ratio Ember / raw (target >= 0.6x and >= 2 M records/s
on 2 cores; each view <= 1 s on 10 M records). Heavy: run it once, not in a loop.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from ember.analysis import connect, ingest
from ember.analysis.ingest import _read_json_sql
from ember.analysis.schema_types import READ_COLUMNS
from ember.analysis.synthetic import write_trace

sys.path.insert(0, str(Path(__file__).parent))
from bench_views import time_views


def _raw(path: Path, db: Path, threads: int) -> float:
    t0 = time.perf_counter()
    con = duckdb.connect(str(db))
    con.execute(f"SET threads = {threads}")
    con.execute("SET enable_progress_bar = false")
    con.execute(f"CREATE TABLE raw AS {_read_json_sql(path)}")
    con.close()
    return time.perf_counter() - t0


def _parse_only(path: Path, threads: int) -> float:
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    con.execute("SET enable_progress_bar = false")
    cols = ", ".join(f'count("{c}")' for c in READ_COLUMNS)
    t0 = time.perf_counter()
    con.execute(f"SELECT {cols} FROM ({_read_json_sql(path)})").fetchall()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep the files")
    ap.add_argument("--skip-views", action="store_true")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="ember-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        trace = work / "run1.jsonl"
        t0 = time.perf_counter()
        n = write_trace(trace, args.records, run_id="bench-1", seed=1)
        gen_s = time.perf_counter() - t0
        size_mb = trace.stat().st_size / 2**20
        print(f"generated {n:,} records ({size_mb:,.0f} MB) in {gen_s:.1f} s")

        raw_db = work / "raw.duckdb"
        cpu0 = time.process_time()
        raw_s = _raw(trace, raw_db, args.threads)
        raw_cpu = time.process_time() - cpu0
        raw_db.unlink()
        print(
            f"raw typed read_json : {raw_s:6.2f} s  {n / raw_s / 1e6:5.2f} M records/s"
            "  (CREATE TABLE AS, one wide table, no checks)"
        )
        parse_s = _parse_only(trace, args.threads)
        print(
            f"  (parse only       : {parse_s:6.2f} s  {n / parse_s / 1e6:5.2f} M records/s,"
            " every column read, nothing stored)"
        )

        ember_db = work / "ember.duckdb"
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        summary = ingest([trace], ember_db, threads=args.threads)
        ember_s = time.perf_counter() - t0
        ember_cpu = time.process_time() - cpu0
        assert summary.records == n, summary
        assert summary.rejected == 0, summary
        print(f"ember ingest        : {ember_s:6.2f} s  {n / ember_s / 1e6:5.2f} M records/s")
        ratio = raw_s / ember_s
        print(f"ember / raw speed   : {ratio:.2f}x   (target >= 0.6x, >= 2 M records/s)")
        # CPU seconds (all threads) say the same when other processes share the cores
        print(
            f"cpu seconds         : raw {raw_cpu:.1f}, ember {ember_cpu:.1f} "
            f"({raw_cpu / ember_cpu:.2f}x; {n / ember_cpu / 1e6:.2f} M records per CPU-second)"
        )

        if args.skip_views:
            return
        trace2 = work / "run2.jsonl"
        write_trace(trace2, args.records, run_id="bench-2", seed=2)
        trace.unlink()
        ingest([trace2], ember_db, threads=args.threads)
        trace2.unlink()
        with connect(ember_db, threads=args.threads) as con:
            time_views(con)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
