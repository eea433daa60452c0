-- call_windows: one row per (run, window count, window): a run's model calls cut into a
-- fixed number of equal time windows (10, 25, 50, 100 or 200 per run, for the Calls page's
-- "latency over time" and its slider), with the latency percentiles of the calls that
-- started in each window. Windows without calls have no row.
--
-- reads: spans
--
-- run_id   VARCHAR  the run
-- windows  INTEGER  how many windows the run is cut into (10, 25, 50, 100 or 200)
-- win      INTEGER  the window, 0 .. windows - 1 (by call start)
-- t_s      DOUBLE   the middle of the window, seconds since the run started
-- calls    BIGINT   finished calls that started in the window
-- p50_ns   DOUBLE   the median duration of those calls (ns, interpolated)
-- p90_ns   DOUBLE   their 90th percentile duration (ns, interpolated)
-- p99_ns   DOUBLE   their 99th percentile duration (ns, interpolated)
WITH n AS (
    SELECT 10 AS windows UNION ALL SELECT 25 UNION ALL SELECT 50
    UNION ALL SELECT 100 UNION ALL SELECT 200
),
c AS (
    SELECT run_id, start_ns, duration_ns FROM spans
    WHERE span_kind = 'call' AND duration_ns IS NOT NULL
),
b AS (
    SELECT run_id, min(start_ns) AS lo, greatest(max(start_ns) - min(start_ns), 1) AS width
    FROM c GROUP BY run_id
),
w AS (
    SELECT c.run_id, n.windows, c.duration_ns, b.lo, b.width,
        least(floor((c.start_ns - b.lo) * n.windows / b.width), n.windows - 1) AS win
    FROM c JOIN b ON b.run_id = c.run_id CROSS JOIN n
)
SELECT run_id, windows, CAST(win AS INTEGER) AS win,
    (min(lo) + (win + 0.5) * min(width) / windows) / 1e9 AS t_s,
    count(*) AS calls,
    quantile_cont(duration_ns, 0.5) AS p50_ns,
    quantile_cont(duration_ns, 0.9) AS p90_ns,
    quantile_cont(duration_ns, 0.99) AS p99_ns
FROM w GROUP BY run_id, windows, win
