-- evictions: one row per segment the cache threw away (a cache 'evict' event).
--
-- run_id, source, position   where (the compiled function and the segment position)
-- ts_ns, ts       when (ns since run start; absolute TIMESTAMP_NS, UTC)
-- call_span_id    the call whose new segment pushed it out
-- key, shapes_text  the evicted segment's key and argument shapes
-- cache_size      the size of the cache at that position (segments it keeps)
-- compiled_ns     when the evicted segment was compiled (ts_ns of its last miss)
-- hits            how often it was used (cache hits) between that compile and the eviction
-- lifetime_ns     eviction - compile
-- recompiled_ns   when the same key was compiled again after the eviction (NULL: never)
-- recompiled      true when it was (the eviction cost a compile: see cache_thrash)
WITH ev AS (
    SELECT
        c.run_id, c.source, c.position, c.ts_ns, c.span_id AS call_span_id,
        ember_key(c.key, c.shapes, c.statics) AS key,
        ember_shapes_text(c.shapes) AS shapes_text,
        c.cache_size
    FROM cache c
    WHERE c.action = 'evict'
),
x AS (
    SELECT
        ev.*,
        (SELECT max(l.ts_ns) FROM cache_lookups l
            WHERE l.run_id = ev.run_id AND l.source IS NOT DISTINCT FROM ev.source
            AND l.position = ev.position AND l.key = ev.key AND l.action = 'miss'
            AND l.ts_ns <= ev.ts_ns) AS compiled_ns,
        (SELECT min(l.ts_ns) FROM cache_lookups l
            WHERE l.run_id = ev.run_id AND l.source IS NOT DISTINCT FROM ev.source
            AND l.position = ev.position AND l.key = ev.key AND l.action = 'miss'
            AND l.ts_ns >= ev.ts_ns) AS recompiled_ns
    FROM ev
),
y AS (
    SELECT
        x.*,
        (SELECT count(*) FROM cache_lookups l
            WHERE l.run_id = x.run_id AND l.source IS NOT DISTINCT FROM x.source
            AND l.position = x.position AND l.key = x.key AND l.action = 'hit'
            AND l.ts_ns BETWEEN x.compiled_ns AND x.ts_ns) AS hits
    FROM x
)
SELECT
    y.run_id,
    y.source,
    y.position,
    y.ts_ns,
    ember_at(r.wall_time_ns, y.ts_ns) AS ts,
    y.call_span_id,
    y.key,
    y.shapes_text,
    y.cache_size,
    y.compiled_ns,
    y.hits,
    y.ts_ns - y.compiled_ns AS lifetime_ns,
    y.recompiled_ns,
    y.recompiled_ns IS NOT NULL AS recompiled
FROM y
LEFT JOIN runs r ON r.run_id = y.run_id
