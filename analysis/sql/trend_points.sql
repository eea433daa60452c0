-- trend_points: one row per (run, trend metric) with a value: run_summary's headline
-- numbers laid out long, so that a trend is one filter on `metric` (what `trends`,
-- `ember trends` and the dashboard's Trends page read).
--
-- reads: run_summary
--
-- run_id      VARCHAR       the run
-- started_at  TIMESTAMP_NS  when the run started (UTC; from run_summary)
-- model       VARCHAR       the run's model tag (NULL without one; from run_summary)
-- name        VARCHAR       the run's readable name: scenario tag, else model tag, else entrypoint
--                           (from run_summary)
-- tags        VARCHAR       the run's tags as JSON text (from run_summary)
-- metric      VARCHAR       compiles | recompiles | evictions | breaks (graph break nodes run) |
--                           warm_p50_ns | warm_p99_ns (latency of the calls that compiled nothing)
--                           | compile_ns (time in compiles) | peak_bytes (the run's headline peak)
-- unit        VARCHAR       count | ns | bytes
-- exact       BOOLEAN       true for counts, which the same workload repeats exactly (a change is a
--                           change); false for times and the peak, which vary from run to run
--                           (noisy)
-- value       DOUBLE        the run's value (DOUBLE); runs without one (no warm calls, no memory
--                           readings) have no row for that metric
-- context     VARCHAR       what the value must share with another run's to be compared with it:
--                           latency_kind for latencies, peak_source for the peak, else NULL
SELECT s.run_id, s.started_at, s.model, s.name, s.tags, m.metric, m.unit, m.exact,
    CAST(CASE m.metric
        WHEN 'compiles' THEN s.compiles
        WHEN 'recompiles' THEN s.recompiles
        WHEN 'evictions' THEN s.evictions
        WHEN 'breaks' THEN s.breaks
        WHEN 'warm_p50_ns' THEN s.warm_p50_ns
        WHEN 'warm_p99_ns' THEN s.warm_p99_ns
        WHEN 'compile_ns' THEN s.compile_ns
        WHEN 'peak_bytes' THEN s.peak_bytes
    END AS DOUBLE) AS value,
    CASE
        WHEN m.metric IN ('warm_p50_ns', 'warm_p99_ns') THEN s.latency_kind
        WHEN m.metric = 'peak_bytes' THEN s.peak_source
    END AS context
FROM run_summary s
CROSS JOIN (
    VALUES ('compiles', 'count', true), ('recompiles', 'count', true),
        ('evictions', 'count', true), ('breaks', 'count', true),
        ('warm_p50_ns', 'ns', false), ('warm_p99_ns', 'ns', false),
        ('compile_ns', 'ns', false), ('peak_bytes', 'bytes', false)
) AS m (metric, unit, exact)
WHERE CASE m.metric
    WHEN 'warm_p50_ns' THEN s.warm_p50_ns IS NOT NULL
    WHEN 'warm_p99_ns' THEN s.warm_p99_ns IS NOT NULL
    WHEN 'peak_bytes' THEN s.peak_bytes IS NOT NULL
    ELSE true
END
