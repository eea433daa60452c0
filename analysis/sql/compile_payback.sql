-- compile_payback: one row per segment compile: what the compile cost against the calls
-- that reused the compiled segment before it was evicted (or the run ended).
--
-- run_id, source, position, key, shapes_text, compile_index, ts_ns, ts   as in `compiles`
-- compile_ns      time of the compile (segment_compile span)
-- reuses          cache hits of this key at this position until it was evicted
-- evicted_ns      when it was evicted (NULL: kept to the end of the run)
-- lifetime_ns     evicted_ns (or the last lookup at this position) - ts_ns
-- compile_ns_per_reuse   compile_ns / reuses (NULL when never reused)
-- paid_back       reused at least once
WITH c AS (
    SELECT run_id, source, position, key, shapes_text, compile_index, ts_ns, ts, compile_ns
    FROM compiles WHERE position IS NOT NULL
),
ev AS (
    SELECT c.*, (
        SELECT min(e.ts_ns) FROM cache e
        WHERE e.action = 'evict' AND e.run_id = c.run_id
            AND e.source IS NOT DISTINCT FROM c.source AND e.position = c.position
            AND ember_key(e.key, e.shapes, e.statics) = c.key AND e.ts_ns >= c.ts_ns
    ) AS evicted_ns
    FROM c
),
r AS (
    SELECT ev.*,
    (SELECT count(*) FROM cache_lookups l
        WHERE l.action = 'hit' AND l.run_id = ev.run_id
            AND l.source IS NOT DISTINCT FROM ev.source AND l.position = ev.position
            AND l.key = ev.key AND l.ts_ns >= ev.ts_ns
            AND (ev.evicted_ns IS NULL OR l.ts_ns <= ev.evicted_ns)) AS reuses,
    (SELECT max(l.ts_ns) FROM cache_lookups l
        WHERE l.run_id = ev.run_id AND l.source IS NOT DISTINCT FROM ev.source
            AND l.position = ev.position) AS last_lookup_ns
    FROM ev
)
SELECT
    r.run_id, r.source, r.position, r.key, r.shapes_text, r.compile_index,
    r.ts_ns, r.ts, r.compile_ns,
    r.reuses,
    r.evicted_ns,
    coalesce(r.evicted_ns, r.last_lookup_ns) - r.ts_ns AS lifetime_ns,
    r.compile_ns / nullif(r.reuses, 0) AS compile_ns_per_reuse,
    r.reuses > 0 AS paid_back
FROM r
