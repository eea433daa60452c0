-- _compiling_spans: one row per call (or step) span that compiled something on the way:
-- a segment cache miss in the call, also one inside a break of the call (a break compiles
-- the program it runs for its Loop or If there), or a jit compile in the step. The one
-- definition of "a call that compiled" that call_latency and _latency_samples (and so
-- run_summary's warm latency) read.
--
-- run_id
-- span_id       the call (or step) span
SELECT DISTINCT m.run_id, coalesce(b.parent_id, m.span_id) AS span_id
FROM cache m
LEFT JOIN span_start b ON b.run_id = m.run_id AND b.span_id = m.span_id
    AND b.span_kind = 'break'
WHERE m.action = 'miss' AND m.span_id IS NOT NULL
UNION
SELECT DISTINCT run_id, parent_id AS span_id FROM span_start
WHERE span_kind = 'jit' AND parent_id IS NOT NULL
