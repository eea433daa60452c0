"""Trends at 1,000 runs: the change points found against the runs where the synthetic
history's levels were shifted, the time to find them, and the Trends page's first render.

    .venv/bin/python benchmarks/bench_trends.py [--runs 1000] [--records 120] [--repeat 3]

Writes a CI history of one model (``ember.analysis.synthetic.write_history``: recompiles,
evictions and compile time jump at ``--recompile-step``; calls take twice as long from
``--latency-step``; noise otherwise), ingests it, then:

- reference: the ``trends`` view read whole in DuckDB (what every trend starts from);
- Ember: ``series_points`` + ``change_points`` (PELT and the tests of each side), and which
  runs it names for each metric against the shifted ones;
- the dashboard: ``/trends`` in headless Chromium, cold (a fresh server, Streamlit's
  caches empty) and warm (the same URL again), from navigation to every chart drawn.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ember.analysis import connect, ingest
from ember.analysis.synthetic import write_history
from ember.analysis.trends import change_points, series_points
from tests.dashboard.browser import CHROMIUM, chromium, dashboard_server

IDLE = """() => !document.querySelector('[data-testid="stStatusWidget"]')
    && !document.querySelector('[data-testid="stSkeleton"]')
    && document.querySelectorAll('[data-testid="stVegaLiteChart"]').length >= 1
    && [...document.querySelectorAll('[data-testid="stVegaLiteChart"]')]
        .every(c => c.querySelector('canvas, svg'))"""


def build(work: Path, runs: int, records: int, recompile_step: int, latency_step: int) -> Path:
    t0 = time.perf_counter()
    tags = {"model": "bert-tiny", "branch": "main"}
    paths = write_history(
        work / "traces",
        runs,
        records=records,
        recompile_step_at=recompile_step,
        latency_step_at=latency_step,
        tags=tags,
    )
    t1 = time.perf_counter()
    db = work / "trends.duckdb"
    summary = ingest(paths, db)
    print(
        f"{runs:,} runs, {summary.records:,} records: written in {t1 - t0:.1f} s, "
        f"ingested in {time.perf_counter() - t1:.1f} s",
        flush=True,
    )
    shutil.rmtree(work / "traces")
    return db


def detect(db: Path, repeat: int) -> None:
    view, ember = [], []
    with connect(db, read_only=True) as con:
        for _ in range(repeat):
            t0 = time.perf_counter()
            con.sql("SELECT * FROM trends")
            t1 = time.perf_counter()
            found = change_points(series_points(con.sql))
            t2 = time.perf_counter()
            view.append(t1 - t0)
            ember.append(t2 - t1)
    print(f"trends view read whole (reference): median {statistics.median(view):.2f} s")
    print(f"points + change points (Ember):     median {statistics.median(ember):.2f} s")
    for c in found:
        print(f"  {c.metric:<12} run {c.index:>4} ({c.run_id})  {c.before:.4g} -> {c.after:.4g}")


def _render(page, url: str) -> float:
    t0 = time.perf_counter()
    page.goto(url)
    page.get_by_text("change point").first.wait_for(timeout=300_000)
    page.wait_for_function(IDLE, timeout=300_000)
    failed = page.get_by_test_id("stException")
    if failed.count():
        raise SystemExit(f"the Trends page failed: {failed.first.inner_text()[:500]}")
    return time.perf_counter() - t0


def render(db: Path, repeat: int) -> None:
    with dashboard_server(db, startup_timeout=120) as base, chromium() as browser:
        page = browser.new_page()
        cold = _render(page, f"{base}/trends")
        print(f"Trends page, cold (a fresh server: imports, queries, PELT): {cold:.2f} s")
        warm = [_render(page, f"{base}/trends") for _ in range(repeat)]
        print(
            f"Trends page, warm: median {statistics.median(warm):.2f} s "
            f"({', '.join(f'{w:.2f}' for w in warm)})",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--records", type=int, default=120)
    ap.add_argument("--recompile-step", type=int, default=300)
    ap.add_argument("--latency-step", type=int, default=700)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--db", type=Path, help="an existing database to open instead")
    ap.add_argument("--skip-browser", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ember-bench-trends-"))
    try:
        db = args.db or build(work, args.runs, args.records, args.recompile_step, args.latency_step)
        print(f"shifted: recompiles at run {args.recompile_step}, latency at {args.latency_step}")
        detect(db, args.repeat)
        if not args.skip_browser and Path(CHROMIUM).exists():
            render(db, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
