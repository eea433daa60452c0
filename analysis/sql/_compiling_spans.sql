-- _compiling_spans: one row per call (or step) span that compiled something on the way:
-- a segment cache miss in it or in a span inside it (a break compiles the program it runs
-- for its Loop or If there), or a jit compile in the step, also below a span of the user's
-- inside it. The one definition of "a call that compiled" that call_latency and
-- latency_samples (and so run_summary's warm latency) read. The call or step is found
-- among the four spans above the miss (or jit span): Spark SQL has no recursive CTE.
--
-- reads: spans
--
-- run_id   VARCHAR  the run
-- span_id  BIGINT   the call (or step) span
-- loaded   BOOLEAN  true when every program it needed came from a disk cache (each of its segment
--                   compiles says disk_cache 'hit', each jit compile persistent_cache 'hit'): it
--                   loaded, it did not compile
WITH compiled_in AS (
    -- loaded: NULL for a miss (its segment_compile span says whether it loaded)
    SELECT run_id, span_id, 'miss' AS what, CAST(NULL AS BOOLEAN) AS loaded
    FROM cache WHERE action = 'miss' AND span_id IS NOT NULL
    UNION ALL
    SELECT run_id, parent_id AS span_id, span_kind AS what,
        coalesce(end_attrs.disk_cache = 'hit' AND end_attrs.compiled IS DISTINCT FROM false,
            false) AS loaded
    FROM spans WHERE span_kind = 'segment_compile' AND parent_id IS NOT NULL
    UNION ALL
    SELECT run_id, parent_id AS span_id, span_kind AS what,
        coalesce(end_attrs.persistent_cache = 'hit', false) AS loaded
    FROM spans WHERE span_kind = 'jit' AND parent_id IS NOT NULL
),
in_calls AS (
    SELECT c.run_id, c.what, c.loaded,
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
)
SELECT run_id, span_id,
    -- every compile span loaded, and no miss without a compile span that loaded
    count(*) FILTER (WHERE loaded) > 0
        AND count(*) FILTER (WHERE NOT loaded) = 0
        AND count(*) FILTER (WHERE what = 'miss')
            <= count(*) FILTER (WHERE what = 'segment_compile' AND loaded) AS loaded
FROM in_calls
GROUP BY run_id, span_id
