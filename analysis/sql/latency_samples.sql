-- latency_samples: one row per span whose duration run_summary's latency is made of: the
-- run's calls when it made any, else its steps (the rule of run_summary.latency_of).
--
-- reads: _compiling_spans
--
-- run_id       VARCHAR  the run
-- span_id      BIGINT   the call (or step) span
-- span_kind    VARCHAR  'call' or 'step'
-- ts_ns        BIGINT   when the span ended (ns since run start): the order of the samples
-- duration_ns  BIGINT   how long it took (ns)
-- status       VARCHAR  ok | error (a call that raised)
-- compiled     BOOLEAN  whether it compiled something on the way (_compiling_spans: a segment cache
--                       miss in the call or one of its breaks, a jit compile in the step); the
--                       others that did not fail are the warm samples (run_summary's warm_*)
-- loaded       BOOLEAN  of those, whether every program it needed came from a disk cache (it loaded
--                       them and compiled nothing: _compiling_spans.loaded)
WITH kinds AS (
    SELECT run_id,
        CASE WHEN count(*) FILTER (WHERE span_kind = 'call') > 0 THEN 'call' ELSE 'step' END
            AS latency_of
    FROM span_end WHERE span_kind IN ('call', 'step') GROUP BY run_id
)
SELECT s.run_id, s.span_id, s.span_kind, s.ts_ns, s.duration_ns, s.status,
    c.span_id IS NOT NULL AS compiled,
    coalesce(c.loaded, false) AS loaded
FROM span_end s
JOIN kinds k ON k.run_id = s.run_id AND s.span_kind = k.latency_of
LEFT JOIN _compiling_spans c ON c.run_id = s.run_id AND c.span_id = s.span_id
WHERE s.duration_ns IS NOT NULL
