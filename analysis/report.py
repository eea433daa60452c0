"""``ember report``: the findings a person needs first, as polars frames from the views.

Each finding is one query over the views; ``findings()`` returns them in the order a
person reads them: what ran, why it recompiled, which positions thrash and the cache
size that fixes them, what padding to buckets would save, the memory peak and when, the
slowest calls, and what ingest rejected.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from .db import Connection

__all__ = ["Finding", "findings"]


@dataclass
class Finding:
    title: str
    frame: pl.DataFrame
    empty_text: str


def _where(run_id: str | None, alias: str = "") -> tuple[str, list[str]]:
    if run_id is None:
        return "", []
    col = f"{alias}.run_id" if alias else "run_id"
    return f"WHERE {col} = ?", [run_id]


def findings(con: Connection, run_id: str | None = None, limit: int = 10) -> list[Finding]:
    """The report's findings for one run (or every run), most important first."""
    where, params = _where(run_id)
    out: list[Finding] = []
    out.append(
        Finding(
            "Runs",
            con.sql(
                f"""
                SELECT r.run_id, r.started_at, r.entrypoint, r.phase, r.backend,
                    json_extract_string(r.tags, '$.model') AS model,
                    f.records, f.rejected, f.status
                FROM runs r LEFT JOIN ingested_files f ON f.file = r.file
                {_where(run_id, "r")[0]}
                ORDER BY r.started_at
                """,
                params,
            ),
            "no runs in the database: ingest traces with `ember ingest`",
        )
    )
    out.append(
        Finding(
            "Top recompile reasons",
            con.sql(
                f"""
                SELECT
                    coalesce(CAST(position AS VARCHAR), fun_name) AS "where",
                    change, arg, dim,
                    count(*) AS recompiles,
                    round(sum(compile_ns) / 1e6, 1) AS compile_ms,
                    list(DISTINCT new_value ORDER BY new_value)[1:8] AS new_values,
                    any_value(reason ORDER BY compile_index) AS example
                FROM recompiles {where}
                GROUP BY ALL
                ORDER BY recompiles DESC, compile_ms DESC NULLS LAST
                LIMIT {int(limit)}
                """,
                params,
            ),
            "no recompiles: every position compiled once",
        )
    )
    out.append(
        Finding(
            "Thrashing positions (compiled again after eviction)",
            con.sql(
                f"""
                WITH t AS (
                    SELECT run_id, source, position,
                        count(*) AS thrashing_keys,
                        sum(wasted_compiles) AS wasted_compiles,
                        round(sum(wasted_compile_ns) / 1e6, 1) AS wasted_compile_ms,
                        max(cache_size) AS cache_size
                    FROM cache_thrash {where} GROUP BY ALL
                ),
                fix AS (
                    SELECT run_id, source, position, min(cache_size) AS cache_size_that_fixes
                    FROM cache_what_if WHERE fixes_thrash GROUP BY ALL
                )
                SELECT t.position, t.thrashing_keys, t.wasted_compiles, t.wasted_compile_ms,
                    t.cache_size, fix.cache_size_that_fixes, t.source, t.run_id
                FROM t LEFT JOIN fix ON fix.run_id = t.run_id
                    AND fix.source IS NOT DISTINCT FROM t.source AND fix.position = t.position
                ORDER BY t.wasted_compiles DESC
                LIMIT {int(limit)}
                """,
                params,
            ),
            "no thrashing: no key was compiled again after an eviction",
        )
    )
    out.append(
        Finding(
            "Padding to power-of-two buckets would save",
            con.sql(
                f"""
                SELECT position, arg, dim, distinct_sizes, pow2_buckets, saved_compiles,
                    sizes[1:8] AS sizes, pow2_sizes
                FROM shape_buckets
                WHERE saved_compiles > 0 {"AND run_id = ?" if run_id else ""}
                ORDER BY saved_compiles DESC LIMIT {int(limit)}
                """,
                params,
            ),
            "no dimension would compile less with buckets",
        )
    )
    out.append(
        Finding(
            "Memory peak",
            con.sql(
                f"""
                SELECT device, series, peak_bytes, round(peak_bytes / 2^20, 2) AS peak_mib,
                    peak_at, round(peak_ts_ns / 1e9, 3) AS peak_s_into_run, span_id,
                    CAST(by_category AS VARCHAR) AS by_category, run_id
                FROM peak_memory {where}
                ORDER BY peak_bytes DESC LIMIT {int(limit)}
                """,
                params,
            ),
            "no memory records (record device memory with ember.runtime.memory)",
        )
    )
    out.append(
        Finding(
            "Slowest calls (by p99)",
            con.sql(
                f"""
                SELECT shapes_text, calls, errors,
                    round(p50_ns / 1e6, 2) AS p50_ms, round(p90_ns / 1e6, 2) AS p90_ms,
                    round(p99_ns / 1e6, 2) AS p99_ms, compiling_calls,
                    round(p50_warm_ns / 1e6, 2) AS p50_warm_ms, source, run_id
                FROM call_latency {where}
                ORDER BY p99_ns DESC LIMIT {int(limit)}
                """,
                params,
            ),
            "no calls recorded",
        )
    )
    rej_where = "" if run_id is None else "WHERE run_id = ?"
    out.append(
        Finding(
            "Rejected lines",
            con.sql(
                f"""
                SELECT file, line, reason FROM rejected_lines {rej_where}
                ORDER BY file, line LIMIT {int(limit)}
                """,
                params,
            ),
            "no rejected lines",
        )
    )
    return out
