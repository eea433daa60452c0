"""Ingest speed: many small files, one big file against raw DuckDB, Spark against DuckDB.

    .venv/bin/python benchmarks/bench_ingest.py [--small 300] [--records 300000]
        [--shapes repetitive,compile,memory] [--repeat 1] [--spark-files 2]
        [--spark-records 20000] [--threads 2] [--skip-spark] [--views] [--keep DIR]

Only the big file, three times (raw and Ember in turn; the median ratio):
``--small 0 --skip-spark --repeat 3``.

The three measurements of issue 16's "done when", each on fresh files and databases:

1. **Small files** (item 4): ``--small`` traces of 2 records each (a meta and a
   device_memory reading, one per job), ingested into a fresh DuckDB file and into a fresh
   Delta lake (``ingest_lake``), in files/s; then the same files again (unchanged: stat and
   bookkeeping only), in files/s. Targets: >= 100 files/s first, >= 1,000 files/s again.
   Then the lake's read latency (open, and three queries; medians of three) before and
   after ``ember lake optimize`` (``lake_admin.optimize``: compaction and a checkpoint).
2. **One big file** (item 5), of each shape in ``--shapes`` (``ember.analysis.synthetic``,
   issue 26): ``repetitive`` (a few input lengths, mostly cache hits: ``write_trace``),
   ``compile`` (a sweep of input lengths through a model with a break and a segment cache
   of 2, every call compiling and evicting at both segments, the sweep repeated with later
   timestamps and fresh span ids: ``write_compile_trace``; most objects are distinct) and
   ``memory`` (a profiled run: memory alloc/free and op records: ``write_memory_trace``),
   ``--records`` records each, read by DuckDB alone (``CREATE TABLE AS SELECT * FROM
   read_json(file, columns=<types from the schema>)`` into a fresh database file, closed:
   no checks, one wide table) and by ``ember.analysis.ingest`` (validated, per-kind tables,
   bookkeeping, closed), each in a fresh process (its peak RSS; wall and CPU seconds of the
   read itself, not the process's start), in MB/s and records/s side by side. Target:
   Ember >= 0.8x raw on each shape.
3. **Spark** (items 2 and 6): ``--spark-files`` traces of ``--spark-records`` records into a
   fresh lake with DuckDB (``ingest_lake``, 1 and ``--threads`` threads) and with Spark
   ``local[1]`` and ``local[2]`` (``ingest_spark``); the Spark session's start (the JVM,
   once) and a warm-up ingest of one small file (the JVM's first job loads and compiles
   its classes) are timed apart from the measured ingest.

``--views`` also ingests a second big run and times every view (``bench_views.time_views``).
Wall seconds measure to the end of each call (everything is synchronous: the databases
are closed, the lake's commits made); CPU seconds of this process are printed for the big
file, which say more than wall time when other processes share the cores. The machine's
load average (``os.getloadavg``) is printed before each part: numbers measured at a load
above the core count are noisy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from ember.analysis import connect, ingest
from ember.analysis.lake import connect_lake, ingest_lake, optimize
from ember.analysis.schema_types import READ_COLUMNS
from ember.analysis.synthetic import write_compile_trace, write_memory_trace, write_trace
from ember.schemas import SCHEMA_ID

sys.path.insert(0, str(Path(__file__).parent))
from bench_views import time_views

_SMALL = (
    '{{"kind":"meta","schema":"{schema}","run_id":"small-{i}","wall_time_ns":{wall},'
    '"host":"bench","pid":{i},"versions":{{"python":"3.11.9"}},"backend":"cpu",'
    '"devices":["TFRT_CPU_0"],"entrypoint":"bench_ingest","phase":"infer"}}\n'
    '{{"kind":"device_memory","ts_ns":1000,"span_id":null,"device":"cpu:0",'
    '"source":"live_arrays","used_bytes":{i},"rss_bytes":300000000}}\n'
)


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def _section(title: str) -> None:
    print(f"\n== {title}  [{_load()}]", flush=True)


def write_small(folder: Path, n: int) -> list[Path]:
    """``n`` traces of 2 records each (one job's run: its meta and one reading)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    wall = 1_764_403_200_000_000_000
    for i in range(n):
        p = folder / f"job-{i:06d}.jsonl"
        p.write_text(_SMALL.format(schema=SCHEMA_ID, i=i, wall=wall + i))
        paths.append(p)
    return paths


def _rate(n: int, seconds: float) -> str:
    return f"{seconds:7.2f} s  {n / seconds:8,.0f} files/s"


def bench_small(work: Path, n: int, threads: int) -> None:
    _section(f"{n:,} small files (2 records each)")
    folder = work / "small"
    write_small(folder, n)
    db = work / "small.duckdb"
    lake = work / "small-lake"
    # pyarrow imports pandas on its first array from Python values (the lake's commit makes
    # some): seconds where bytecode is not cached (PYTHONDONTWRITEBYTECODE), once a process
    import pyarrow as pa

    pa.array([0])
    for name, run in (
        ("DuckDB file", lambda: ingest([folder], db, threads=threads)),
        ("lake (DuckDB)", lambda: ingest_lake([folder], lake, threads=threads)),
    ):
        t0 = time.perf_counter()
        first = run()
        first_s = time.perf_counter() - t0
        assert first.records == 2 * n, (name, first.records)
        assert first.rejected == 0, (name, first.rejected)
        t0 = time.perf_counter()
        again = run()
        again_s = time.perf_counter() - t0
        assert all(f.status == "unchanged" for f in again.files), name
        print(f"{name:14}: first {_rate(n, first_s)}   again (unchanged) {_rate(n, again_s)}")
    print("targets       : first >= 100 files/s, again >= 1,000 files/s")
    bench_lake_views(lake)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(lake, ignore_errors=True)
    db.unlink(missing_ok=True)


LAKE_QUERIES = {
    "open (connect_lake)": None,
    "runs": "SELECT count(*) FROM runs",
    "cache_lookups": "SELECT count(*) FROM cache_lookups",
    "run_summary": "SELECT count(*) FROM run_summary",
}


def _time_lake(lake: Path, repeat: int = 3) -> dict[str, float]:
    """Median seconds to open the lake and to run each query (a fresh connection each)."""
    out: dict[str, list[float]] = {k: [] for k in LAKE_QUERIES}
    for _ in range(repeat):
        t0 = time.perf_counter()
        with connect_lake(lake) as con:
            out["open (connect_lake)"].append(time.perf_counter() - t0)
            for name, sql in LAKE_QUERIES.items():
                if sql is None:
                    continue
                t0 = time.perf_counter()
                con.sql(sql)
                out[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in out.items()}


def bench_lake_views(lake: Path) -> None:
    """View latency over the small-file lake before and after ``ember lake optimize``."""
    from deltalake import DeltaTable

    def files() -> int:
        return sum(len(DeltaTable(str(lake / t)).file_uris()) for t in ("runs", "cache"))

    before_files = files()
    before = _time_lake(lake)
    t0 = time.perf_counter()
    optimize(lake)
    took = time.perf_counter() - t0
    after = _time_lake(lake)
    print(f"lake optimize : {took:.2f} s; runs + cache files {before_files:,} -> {files():,}")
    for name in LAKE_QUERIES:
        print(f"  {name:20}: before {before[name]:6.2f} s   after optimize {after[name]:6.2f} s")


def _read_json_sql(path: Path) -> str:
    """DuckDB's own typed read of a trace: the schema's column types (``READ_COLUMNS``, objects
    as STRUCTs), as a user would write it; not ingest's staging read."""
    cols = "{" + ", ".join(f"'{k}': '{v}'" for k, v in READ_COLUMNS.items()) + "}"
    return (
        f"SELECT * FROM read_json('{path}', format = 'newline_delimited', columns = {cols}, "
        f"maximum_object_size = {32 * 2**20})"
    )


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


# the shapes of a big trace (``ember.analysis.synthetic``): how much of it repeats decides how
# much ingest's checks of distinct objects cost
SHAPES = {
    "repetitive": write_trace,  # a few input lengths, mostly cache hits
    "compile": write_compile_trace,  # a sweep of lengths, a compile and eviction every call
    "memory": write_memory_trace,  # a profiled run: memory alloc/free and op records
}


def _one(which: str, trace: Path, db: Path, threads: int) -> None:
    """In a child process (``--one``): one read of ``trace`` into ``db``, closed; prints its
    wall and CPU seconds (the process's, DuckDB's threads included; not its start)."""
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    if which == "raw":
        _raw(trace, db, threads)
    else:
        summary = ingest([trace], db, threads=threads)
        assert summary.rejected == 0, summary
    print(time.perf_counter() - t0, time.process_time() - cpu0)


def _measured(which: str, trace: Path, db: Path, threads: int) -> tuple[float, float, float]:
    """``(wall s, CPU s, peak RSS GB)`` of one read in a fresh process (its own peak RSS,
    which holds the ~0.1 GB of the imports too)."""
    cmd = [sys.executable, __file__, "--one", which, str(trace), str(db), str(threads)]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    out = child.stdout.read() if child.stdout else ""
    _, status, usage = os.wait4(child.pid, 0)
    if status != 0:
        raise SystemExit(f"{which} read of {trace} failed ({status})")
    db.unlink(missing_ok=True)
    wall, cpu = (float(x) for x in out.split()[-2:])
    return wall, cpu, usage.ru_maxrss / 2**20


def bench_big(
    work: Path, records: int, threads: int, repeat: int = 1, shape: str = "repetitive"
) -> tuple[Path, int]:
    trace = work / f"{shape}.jsonl"
    t0 = time.perf_counter()
    n = SHAPES[shape](trace, records, run_id=f"bench-{shape}", seed=1)
    mb = trace.stat().st_size / 1e6
    _section(
        f"one big file, {shape}: {n:,} records, {mb:,.0f} MB "
        f"(generated in {time.perf_counter() - t0:.1f} s)"
    )

    def line(name: str, s: float, cpu: float | None = None, rss: float | None = None) -> None:
        extra = f"  cpu {cpu:5.1f} s" if cpu is not None else ""
        extra += f"  peak RSS {rss:4.2f} GB" if rss is not None else ""
        rate = f"{mb / s:6.1f} MB/s  {n / s / 1e6:5.2f} M records/s"
        print(f"{name:22}: {s:6.2f} s  {rate}{extra}", flush=True)

    # first: it loads DuckDB's JSON reader and the file into the page cache
    line("parse only", _parse_only(trace, threads))
    walls: list[float] = []
    cpus: list[float] = []
    for i in range(repeat):
        # raw and Ember in turn, each in a fresh process (its peak RSS) on a fresh database
        # file: a load that comes and goes weighs on both
        if repeat > 1:
            print(f"-- run {i + 1} of {repeat}  [{_load()}]")
        raw_s, raw_cpu, raw_rss = _measured("raw", trace, work / "raw.duckdb", threads)
        line("raw DuckDB read_json", raw_s, raw_cpu, raw_rss)
        ember_s, ember_cpu, ember_rss = _measured("ember", trace, work / "big.duckdb", threads)
        line("ember ingest (DuckDB)", ember_s, ember_cpu, ember_rss)
        print(
            f"ember / raw           : {raw_s / ember_s:.2f}x wall, {raw_cpu / ember_cpu:.2f}x CPU "
            f"(target >= 0.8x)"
        )
        walls.append(raw_s / ember_s)
        cpus.append(raw_cpu / ember_cpu)
    if repeat > 1:
        print(
            f"ember / raw, {shape}, median of {repeat}: {statistics.median(walls):.2f}x wall "
            f"({min(walls):.2f}-{max(walls):.2f}), {statistics.median(cpus):.2f}x CPU "
            f"({min(cpus):.2f}-{max(cpus):.2f})"
        )
    return trace, n


def bench_spark(work: Path, files: int, records: int, threads: int) -> None:
    folder = work / "spark-in"
    folder.mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(files):
        total += write_trace(folder / f"run{i}.jsonl", records, run_id=f"spark-{i}", seed=10 + i)
    mb = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
    _section(f"Spark vs DuckDB: {files} files, {total:,} records, {mb:,.0f} MB into a fresh lake")

    def line(name: str, s: float, note: str = "") -> None:
        print(
            f"{name:22}: {s:6.2f} s  {mb / s:6.1f} MB/s  {total / s / 1e6:5.2f} M records/s{note}"
        )

    for t in sorted({1, threads}):
        lake = work / f"lake-duckdb-{t}"
        t0 = time.perf_counter()
        s = ingest_lake([folder], lake, threads=t)
        line(f"DuckDB, {t} thread(s)", time.perf_counter() - t0)
        assert s.records == total, s
        shutil.rmtree(lake)
    try:
        from ember.analysis.lake.spark.job import ingest_spark, spark_session
    except ImportError as exc:
        print(f"Spark: not measured ({exc}; pip install pyspark)")
        return
    spark_s: dict[int, float] = {}
    for workers in (1, 2):
        master = f"local[{workers}]"
        t0 = time.perf_counter()
        spark = spark_session(master, app="bench_ingest")
        # one small ingest first: the first job of a JVM loads and compiles its classes
        # (tens of seconds here), which is not what N workers change
        ingest_spark(
            write_small(work / "warm-up", 1), work / f"warm-up-lake-{workers}", spark=spark
        )
        start_s = time.perf_counter() - t0
        try:
            lake = work / f"lake-spark-{workers}"
            t0 = time.perf_counter()
            s = ingest_spark([folder], lake, spark=spark)
            spark_s[workers] = time.perf_counter() - t0
            line(
                f"Spark {master}",
                spark_s[workers],
                f"  (+ {start_s:.1f} s session start and a warm-up ingest)",
            )
            assert s.records == total, s
            shutil.rmtree(lake)
        finally:
            spark.stop()
    shutil.rmtree(folder)
    # T(N) = F + X / N through the two points: X the part that N workers share, F the rest
    # (stages' start, the driver's planning, explaining and renaming); see the README
    x = 2 * (spark_s[1] - spark_s[2])
    f = spark_s[1] - x
    if f < 0:
        print(
            f"fit T(N) = F + X/N  : none (local[2] more than twice as fast: F = {f:.1f} s; noise)"
        )
    else:
        print(
            f"fit T(N) = F + X/N  : F = {f:.1f} s, X = {x:.1f} s "
            f"(T(8) ~ {f + x / 8:.1f} s if the fixed part stays; noisy when the load is high)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", type=int, default=300, help="small files (0: skip)")
    ap.add_argument(
        "--records", type=int, default=300_000, help="records in the big file (0: skip)"
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="measure the big file this many times (median)"
    )
    ap.add_argument("--spark-files", type=int, default=2)
    ap.add_argument("--spark-records", type=int, default=20_000, help="records per Spark file")
    ap.add_argument("--skip-spark", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--views", action="store_true", help="time every view on 2 big runs")
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep the files")
    ap.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"big-file shapes, comma-separated, of {', '.join(SHAPES)}",
    )
    ap.add_argument("--one", nargs=4, help=argparse.SUPPRESS)  # the child of ``_measured``
    args = ap.parse_args()
    if args.one:
        which, trace, db, threads = args.one
        _one(which, Path(trace), Path(db), int(threads))
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="ember-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    print(f"bench_ingest: {_load()}; duckdb {duckdb.__version__}, threads {args.threads}")
    try:
        if args.small:
            bench_small(work, args.small, args.threads)
        for shape in args.shapes.split(",") if args.records else []:
            trace, _ = bench_big(work, args.records, args.threads, args.repeat, shape)
            if shape != "repetitive":
                trace.unlink()
                continue
            if args.views:
                _section("views on 2 runs")
                trace2 = work / "run2.jsonl"
                write_trace(trace2, args.records, run_id="bench-2", seed=2)
                db = work / "views.duckdb"
                ingest([trace, trace2], db, threads=args.threads)
                with connect(db, threads=args.threads) as con:
                    time_views(con)
            trace.unlink()
        if not args.skip_spark and args.spark_files:
            bench_spark(work, args.spark_files, args.spark_records, args.threads)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\ndone in {time.perf_counter() - started:.0f} s  [{_load()}]")


if __name__ == "__main__":
    main()
