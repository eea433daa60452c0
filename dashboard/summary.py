"""One row per run (tags, start, calls, compiles, evictions, peak memory), shared by the
Runs and Compare pages and the run picker. Aggregated in DuckDB: a page gets one small
frame however many records the database holds.
"""

from __future__ import annotations

import polars as pl

from . import db

__all__ = ["RUN_SUMMARY_SQL", "run_summary", "run_ids", "run_labels", "tag_keys", "what_if"]

RUN_SUMMARY_SQL = """
WITH span_stats AS (
    SELECT run_id,
        count(*) FILTER (WHERE span_kind = 'call') AS calls,
        count(*) FILTER (WHERE span_kind = 'call' AND status = 'error') AS failed_calls,
        count(*) FILTER (WHERE span_kind = 'segment_compile') AS compiles,
        sum(duration_ns) FILTER (WHERE span_kind = 'segment_compile') AS compile_ns,
        quantile_cont(duration_ns, 0.5) FILTER (WHERE span_kind = 'call') AS call_p50_ns
    FROM span_end GROUP BY run_id
),
cache_stats AS (
    SELECT run_id,
        count(*) FILTER (WHERE action = 'hit') AS hits,
        count(*) FILTER (WHERE action = 'miss') AS misses,
        count(*) FILTER (WHERE action = 'evict') AS evictions
    FROM cache GROUP BY run_id
),
tensor_peak AS (
    SELECT run_id, max(live) AS peak_tensor_bytes FROM (
        SELECT run_id, sum(CASE action WHEN 'alloc' THEN bytes ELSE -bytes END)
            OVER (PARTITION BY run_id, device ORDER BY ts_ns
                  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS live
        FROM memory
    ) GROUP BY run_id
),
device_peak AS (
    SELECT run_id, max(coalesce(peak_bytes, used_bytes)) AS peak_device_bytes
    FROM device_memory GROUP BY run_id
)
SELECT
    r.run_id,
    r.started_at,
    r.tags ->> 'model' AS model,
    r.phase,
    r.host,
    r.backend,
    CAST(r.tags AS VARCHAR) AS tags,
    coalesce(s.calls, 0) AS calls,
    coalesce(s.failed_calls, 0) AS failed_calls,
    coalesce(s.compiles, 0) AS compiles,
    coalesce(c.evictions, 0) AS evictions,
    CASE WHEN c.hits + c.misses > 0 THEN round(c.hits / (c.hits + c.misses), 4) END AS hit_rate,
    s.compile_ns / 1e6 AS compile_ms,
    s.call_p50_ns / 1e6 AS call_p50_ms,
    CAST(greatest(t.peak_tensor_bytes, d.peak_device_bytes) AS BIGINT) AS peak_memory_bytes,
    r.entrypoint,
    r.file
FROM runs r
LEFT JOIN span_stats s USING (run_id)
LEFT JOIN cache_stats c USING (run_id)
LEFT JOIN tensor_peak t USING (run_id)
LEFT JOIN device_peak d USING (run_id)
ORDER BY r.started_at DESC, r.run_id
"""


def run_summary() -> pl.DataFrame:
    """Every run with its counts, newest first."""
    return db.query(RUN_SUMMARY_SQL)


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
            "advice": """
                SELECT CAST(position AS VARCHAR) AS position,
                    any_value(actual_cache_size) AS cache_size_used,
                    any_value(actual_compiles) AS compiles_recorded,
                    min(cache_size) FILTER (WHERE fixes_thrash)
                        AS smallest_size_without_recompiles,
                    any_value(distinct_keys) AS compiles_at_that_size
                FROM w GROUP BY w.position ORDER BY w.position""",
        },
        run,
    )
