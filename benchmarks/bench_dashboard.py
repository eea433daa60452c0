"""Time to first render of the dashboard's pages on a large database, in headless Chromium.

    .venv/bin/python benchmarks/bench_dashboard.py [--records 10000000] [--keep DIR]
    .venv/bin/python benchmarks/bench_dashboard.py --db big.duckdb     # reuse a database

Builds the database once (``ember.analysis.synthetic`` traces, two runs of records/2 each,
ingested by ``ember.analysis.ingest``), starts ``ember dashboard`` on it, and opens each
page in headless Debian Chromium (``tests/dashboard/install_browser.sh``). Prints, per page,
the seconds from navigation to the page's values on screen with every chart and table
drawn: cold (Streamlit's caches empty, a fresh server) and warm (the same URL again).
Reference: the same page's queries run directly in DuckDB. Heavy: run it once.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ember.analysis.ingest import ingest
from ember.analysis.synthetic import write_trace
from tests.dashboard.browser import CHROMIUM, chromium, dashboard_server

# path, query, a text that is on screen once the page has its values
PAGES = [
    ("", "", "Largest peak memory"),
    ("recompiles", "?run=bench-1", "What if the cache were bigger"),
    ("cache", "?run=bench-1", "Thrashing positions"),
    ("memory", "?run=bench-1", "Peak of live tensors"),
    ("calls", "?run=bench-1", "By input shapes"),
    ("compare", "?run=bench-1&other=bench-2", "Latency by input shapes"),
    ("sql", "", "SQL console"),
]

IDLE = """() => !document.querySelector('[data-testid="stStatusWidget"]')
    && !document.querySelector('[data-testid="stSkeleton"]')
    && [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
        .every(c => c.querySelector('canvas, svg'))
    && [...document.querySelectorAll('[data-testid="stDataFrame"]')]
        .filter(d => d.checkVisibility()).every(d => d.querySelector('canvas'))"""


def build(work: Path, records: int) -> Path:
    db = work / "ember.duckdb"
    half = records // 2
    for i in (1, 2):
        trace = work / f"run{i}.jsonl"
        t0 = time.perf_counter()
        n = write_trace(trace, half, run_id=f"bench-{i}", seed=i)
        print(f"generated {n:,} records in {time.perf_counter() - t0:.1f} s", flush=True)
        t0 = time.perf_counter()
        summary = ingest([trace], db)
        print(
            f"ingested {summary.records:,} records in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        trace.unlink()
    return db


def render(page, url: str, text: str) -> float:
    t0 = time.perf_counter()
    page.goto(url)
    failed = page.get_by_test_id("stException")
    page.get_by_text(text).first.or_(failed.first).wait_for(timeout=600_000)
    if failed.count():
        raise SystemExit(f"{url}: the page failed: {failed.first.inner_text()[:500]}")
    page.wait_for_function(IDLE, timeout=600_000)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--db", type=Path, help="an existing database to open instead")
    ap.add_argument("--keep", type=Path, help="build the database here and keep it")
    args = ap.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is missing: run `bash tests/dashboard/install_browser.sh`")
    work = args.keep or Path(tempfile.mkdtemp(prefix="ember-bench-dashboard-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        db = args.db or build(work, args.records)
        import duckdb

        with duckdb.connect(str(db), read_only=True) as con:
            total = sum(
                con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("span_start", "span_end", "cache", "memory", "device_memory", "hub")
            )
        print(f"database {db}: {total:,} records, {db.stat().st_size / 2**20:,.0f} MiB")
        print(f"{'page':<12} {'cold (s)':>9} {'warm (s)':>9}")
        with dashboard_server(db, startup_timeout=120) as base, chromium() as browser:
            page = browser.new_page()
            for path, query, text in PAGES:
                url = f"{base}/{path}{query}"
                cold = render(page, url, text)
                warm = render(page, url, text)
                print(f"{path or 'runs':<12} {cold:9.2f} {warm:9.2f}", flush=True)
    finally:
        if args.keep is None and args.db is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
