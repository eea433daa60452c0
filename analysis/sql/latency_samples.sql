-- latency_samples: one row per span whose duration run_summary's latency is made of: the
-- run's calls when it made any, else the steps of its main step label (the rule of
-- run_summary.latency_of and latency_step).
--
-- A run's main step label is the one with the most finished steps (the first to finish, of
-- labels with as many): a training loop's `train_step`, not the `eval_step` it runs every
-- N steps; a median over both would describe neither.
--
-- reads: _compiling_spans
--
-- run_id       VARCHAR  the run
-- span_id      BIGINT   the call (or step) span
-- span_kind    VARCHAR  'call' or 'step'
-- step         VARCHAR  the step's label (the run's main step label); NULL for a call
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
),
main_steps AS (
    SELECT run_id, step FROM (
        SELECT run_id, attrs.step AS step,
            row_number() OVER (PARTITION BY run_id ORDER BY count(*) DESC, min(ts_ns)) AS rank
        FROM span_end
        WHERE span_kind = 'step' AND duration_ns IS NOT NULL
        GROUP BY run_id, attrs.step
    ) labels
    WHERE rank = 1
)
SELECT s.run_id, s.span_id, s.span_kind,
    CASE WHEN s.span_kind = 'step' THEN s.attrs.step END AS step,
    s.ts_ns, s.duration_ns, s.status,
    c.span_id IS NOT NULL AS compiled,
    coalesce(c.loaded, false) AS loaded
FROM span_end s
JOIN kinds k ON k.run_id = s.run_id AND s.span_kind = k.latency_of
LEFT JOIN main_steps m ON m.run_id = s.run_id
LEFT JOIN _compiling_spans c ON c.run_id = s.run_id AND c.span_id = s.span_id
WHERE s.duration_ns IS NOT NULL
    AND (s.span_kind = 'call' OR s.attrs.step = m.step)
