-- tensor_samples: one row per (run, device, category, sample time): the live tensor bytes
-- of each category sampled on a time grid common to all categories of a run's device, so
-- the Memory page's stacked areas line up. The grid is every time a tensor row was recorded
-- when the device has at most 1500 of them (the dashboard's charts.MAX_POINTS), else 1501
-- evenly spaced times from the first to the last; each sample carries the category's last
-- value at or before it (0 before its first row).
--
-- reads: memory_timeline
--
-- run_id    VARCHAR  the run
-- device    VARCHAR  the device
-- category  VARCHAR  the tensor category (as in memory_timeline)
-- ts_ns     BIGINT   the sample time (ns since the run started)
-- t_s       DOUBLE   the same in seconds
-- bytes     BIGINT   the category's live bytes then
WITH t AS (
    SELECT run_id, device, category, ts_ns, CAST(bytes AS BIGINT) AS bytes
    FROM memory_timeline WHERE series = 'tensors'
),
span AS (
    SELECT run_id, device, min(ts_ns) AS lo, max(ts_ns) AS hi, count(*) AS n_rows
    FROM t GROUP BY run_id, device
),
grid AS (
    SELECT DISTINCT t.run_id, t.device, t.ts_ns
    FROM t JOIN span USING (run_id, device) WHERE span.n_rows <= 1500
    UNION ALL
    SELECT run_id, device, lo + CAST(floor((hi - lo) * r.i / 1500) AS BIGINT) AS ts_ns
    FROM span, range(0, 1501) r(i) WHERE span.n_rows > 1500
),
cats AS (SELECT DISTINCT run_id, device, category FROM t),
marks AS (
    -- the recorded rows and the grid points (bytes NULL) in one series per category
    SELECT run_id, device, category, ts_ns, bytes, 0 AS is_grid FROM t
    UNION ALL
    SELECT cats.run_id, cats.device, cats.category, grid.ts_ns, NULL AS bytes, 1 AS is_grid
    FROM cats JOIN grid ON grid.run_id = cats.run_id AND grid.device = cats.device
),
filled AS (
    -- each grid point takes the last recorded value at or before it (no ASOF join: the
    -- same SQL runs on Spark)
    SELECT run_id, device, category, ts_ns, is_grid,
        last_value(bytes IGNORE NULLS) OVER (
            PARTITION BY run_id, device, category ORDER BY ts_ns, is_grid
            ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) AS bytes
    FROM marks
)
SELECT run_id, device, category, ts_ns, ts_ns / 1e9 AS t_s, coalesce(bytes, 0) AS bytes
FROM filled WHERE is_grid = 1
