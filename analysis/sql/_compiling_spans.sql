-- _compiling_spans: one row per call (or step) span that compiled something on the way:
-- a segment cache miss in it or in a span inside it (a break compiles the program it runs
-- for its Loop or If there), or a jit compile in the step, also below a span of the user's
-- inside it. The one definition of "a call that compiled" that call_latency and
-- _latency_samples (and so run_summary's warm latency) read. The call or step is found
-- among the four spans above the miss (or jit span): Spark SQL has no recursive CTE.
--
-- run_id
-- span_id       the call (or step) span
WITH compiled_in AS (
    SELECT run_id, span_id FROM cache WHERE action = 'miss' AND span_id IS NOT NULL
    UNION
    SELECT run_id, parent_id AS span_id FROM span_start
    WHERE span_kind = 'jit' AND parent_id IS NOT NULL
)
SELECT DISTINCT c.run_id,
    CASE
        WHEN s1.span_kind IN ('call', 'step') THEN s1.span_id
        WHEN s2.span_kind IN ('call', 'step') THEN s2.span_id
        WHEN s3.span_kind IN ('call', 'step') THEN s3.span_id
        WHEN s4.span_kind IN ('call', 'step') THEN s4.span_id
    END AS span_id
FROM compiled_in c
JOIN span_start s1 ON s1.run_id = c.run_id AND s1.span_id = c.span_id
LEFT JOIN span_start s2 ON s2.run_id = s1.run_id AND s2.span_id = s1.parent_id
LEFT JOIN span_start s3 ON s3.run_id = s2.run_id AND s3.span_id = s2.parent_id
LEFT JOIN span_start s4 ON s4.run_id = s3.run_id AND s4.span_id = s3.parent_id
WHERE coalesce(s1.span_kind IN ('call', 'step'), false)
    OR coalesce(s2.span_kind IN ('call', 'step'), false)
    OR coalesce(s3.span_kind IN ('call', 'step'), false)
    OR coalesce(s4.span_kind IN ('call', 'step'), false)
