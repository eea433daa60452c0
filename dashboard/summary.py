"""One row per run (tags, start, calls, compiles, evictions, latency, peak memory) from the
``run_summary`` view, shared by every page and the run picker. Aggregated in DuckDB: a page
gets one small frame however many records the database holds.
"""

from __future__ import annotations

import polars as pl

from . import db

__all__ = ["run_ids", "run_labels", "run_row", "run_summary", "tag_keys", "what_if"]


def run_summary() -> pl.DataFrame:
    """Every run with its counts (the ``run_summary`` view), newest first; durations also
    in ms for display."""
    return db.query(
        """
        SELECT *, compile_ns / 1e6 AS compile_ms, p50_ns / 1e6 AS p50_ms,
            p99_ns / 1e6 AS p99_ms, warm_p50_ns / 1e6 AS warm_p50_ms,
            warm_p99_ns / 1e6 AS warm_p99_ms
        FROM run_summary ORDER BY started_at DESC, run_id
        """
    )


def run_row(run: str) -> dict:
    """The ``run_summary`` row of one run (durations also in ms), or ``{}``."""
    frame = db.query(
        """
        SELECT *, compile_ns / 1e6 AS compile_ms, p50_ns / 1e6 AS p50_ms,
            p90_ns / 1e6 AS p90_ms, p99_ns / 1e6 AS p99_ms, warm_p50_ns / 1e6 AS warm_p50_ms
        FROM run_summary WHERE run_id = ?
        """,
        run,
    )
    return frame.row(0, named=True) if frame.height else {}


def run_ids() -> list[str]:
    """Run ids, newest first."""
    return db.query("SELECT run_id FROM runs ORDER BY started_at DESC, run_id")["run_id"].to_list()


def run_labels() -> dict[str, str]:
    """A readable name per run for pickers and charts: its scenario (or model, or
    entrypoint), its start time and the first 8 characters of its id."""
    frame = db.query(
        """
        SELECT run_id,
            coalesce(json_extract_string(tags, '$.scenario'), json_extract_string(tags, '$.model'),
                     entrypoint, 'run')
            || ' · ' || strftime(started_at, '%m-%d %H:%M:%S') || ' · ' || left(run_id, 8)
            AS label
        FROM runs
        """
    )
    return dict(frame.iter_rows())


def tag_keys() -> list[str]:
    """Every tag name used by some run."""
    frame = db.query(
        "SELECT DISTINCT unnest(json_keys(tags)) AS k FROM runs WHERE tags IS NOT NULL ORDER BY k"
    )
    return frame["k"].to_list()


def what_if(run: str) -> dict[str, pl.DataFrame]:
    """``cache_what_if`` of one run, evaluated once for the Recompiles and Cache pages:
    ``what_if`` (compiles per position and cache size) and ``advice`` (per position, the
    smallest size that compiles every key once)."""
    return db.query_set(
        {"w": "SELECT * FROM cache_what_if WHERE run_id = $1"},
        {
            "what_if": """
                SELECT CAST(position AS VARCHAR) AS position, cache_size, compiles, recompiles,
                    actual_cache_size, actual_compiles, is_actual, fixes_thrash, distinct_keys
                FROM w ORDER BY w.position, cache_size""",
            # one row per position (every position has a size 1)
            "advice": """
                SELECT CAST(position AS VARCHAR) AS position,
                    actual_cache_size AS cache_size_used,
                    actual_compiles AS compiles_recorded,
                    smallest_size_without_recompiles,
                    distinct_keys AS compiles_at_that_size
                FROM w WHERE cache_size = 1 ORDER BY w.position""",
        },
        run,
    )
