-- compile_payback: one row per segment compile: what the compile cost against the calls
-- that reused the compiled segment before it was evicted (or the run ended). Compiles ahead
-- of time (`compiles.ahead_of_time`) are left out: calls reach them without a cache lookup.
--
-- reads: cache_events, compiles
--
-- run_id                VARCHAR       the run
-- source                VARCHAR       the model source (its path or Hub address)
-- position              BIGINT        the segment position compiled (index in the sorted graph)
-- key                   VARCHAR       the compiled segment's cache key (as in `compiles.key`)
-- shapes_text           VARCHAR       its argument shapes as text, 'input_ids[1,17]:int64'
-- compile_index         BIGINT        1 for the first compile at this position, then 2, 3... (as in
--                                     `compiles`)
-- ts_ns                 BIGINT        when the lookup that compiled it missed (ns since the run
--                                     started)
-- ts                    TIMESTAMP_NS  ts_ns as an absolute time (TIMESTAMP_NS, UTC)
-- compile_ns            BIGINT        time of the compile (segment_compile span)
-- reuses                BIGINT        cache hits of this key at this position until it was evicted
-- evicted_ns            BIGINT        when it was evicted (NULL: kept to the end of the run)
-- lifetime_ns           BIGINT        evicted_ns (or the last cache event at this position) - ts_ns
-- compile_ns_per_reuse  DOUBLE        compile_ns / reuses (NULL when never reused)
-- paid_back             BOOLEAN       reused at least once
WITH life AS (
    SELECT run_id, source, position, key, life,
        min(ts_ns) FILTER (WHERE action = 'miss') AS compiled_ns,
        count(*) FILTER (WHERE action = 'hit') AS reuses,
        min(ts_ns) FILTER (WHERE action = 'evict') AS evicted_ns
    FROM cache_events
    WHERE life > 0
    GROUP BY ALL
),
last_event AS (
    SELECT run_id, source, position, max(ts_ns) AS last_ns FROM cache GROUP BY ALL
)
SELECT
    c.run_id, c.source, c.position, c.key, c.shapes_text, c.compile_index,
    c.ts_ns, c.ts, c.compile_ns,
    coalesce(l.reuses, 0) AS reuses,
    l.evicted_ns,
    coalesce(l.evicted_ns, e.last_ns) - c.ts_ns AS lifetime_ns,
    c.compile_ns / nullif(coalesce(l.reuses, 0), 0) AS compile_ns_per_reuse,
    coalesce(l.reuses, 0) > 0 AS paid_back
FROM compiles c
LEFT JOIN life l ON l.run_id = c.run_id AND l.source IS NOT DISTINCT FROM c.source
    AND l.position = c.position AND l.key = c.key AND l.compiled_ns = c.ts_ns
LEFT JOIN last_event e ON e.run_id = c.run_id AND e.source IS NOT DISTINCT FROM c.source
    AND e.position = c.position
WHERE c.position IS NOT NULL AND NOT c.ahead_of_time
