-- trends: one row per (model, trend metric, run), in the order the model's runs started:
-- each model's history of run_summary's headline numbers (compiles, recompiles,
-- evictions, graph breaks, warm p50/p99, compile time, peak memory), for charts and for
-- the change points `ember trends` finds (analysis/trends.py; a series keyed by another
-- tag, such as branch, is read from trend_points).
--
-- reads: trend_points
--
-- series      VARCHAR       the model tag, else the run's name (scenario tag or entrypoint)
-- metric      VARCHAR       which headline number (as in `trend_points`): compiles | recompiles |
--                           evictions | breaks | warm_p50_ns | warm_p99_ns | compile_ns |
--                           peak_bytes
-- unit        VARCHAR       the metric's unit: count | ns | bytes
-- exact       BOOLEAN       true for counts (a change is a change); false for times and the peak
--                           (noisy)
-- context     VARCHAR       what the value must share with another run's to be compared:
--                           latency_kind for latencies, peak_source for the peak, else NULL
-- run_index   BIGINT        1 for the series' first run of the metric, 2 for the next, ... (by
--                           start, then run id)
-- runs        BIGINT        how many runs the series has a value of the metric for
-- run_id      VARCHAR       the run
-- started_at  TIMESTAMP_NS  when the run started (UTC): the series' order
-- tags        VARCHAR       the run's tags as JSON text
-- value       DOUBLE        its value (DOUBLE)
-- previous    DOUBLE        the value of the run before it in the series (NULL for the first)
SELECT coalesce(model, name) AS series, metric, unit, exact, context,
    row_number() OVER w AS run_index,
    count(*) OVER (PARTITION BY coalesce(model, name), metric) AS runs,
    run_id, started_at, tags, value,
    lag(value) OVER w AS previous
FROM trend_points
WINDOW w AS (PARTITION BY coalesce(model, name), metric ORDER BY started_at, run_id)
