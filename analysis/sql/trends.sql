-- trends: one row per (model, trend metric, run), in the order the model's runs started:
-- each model's history of run_summary's headline numbers (compiles, recompiles,
-- evictions, graph breaks, warm p50/p99, compile time, peak memory), for charts and for
-- the change points `ember trends` finds (analysis/trends.py; a series keyed by another
-- tag, such as branch, is read from trend_points).
--
-- series     the model tag, else the run's name (scenario tag or entrypoint)
-- metric, unit, exact, context   as in trend_points
-- run_index  1 for the series' first run of the metric, 2 for the next, ... (by start,
--            then run id)
-- runs       how many runs the series has a value of the metric for
-- run_id, started_at, tags   the run
-- value      its value (DOUBLE)
-- previous   the value of the run before it in the series (NULL for the first)
SELECT coalesce(model, name) AS series, metric, unit, exact, context,
    row_number() OVER w AS run_index,
    count(*) OVER (PARTITION BY coalesce(model, name), metric) AS runs,
    run_id, started_at, tags, value,
    lag(value) OVER w AS previous
FROM trend_points
WINDOW w AS (PARTITION BY coalesce(model, name), metric ORDER BY started_at, run_id)
