-- cache_thrash: one row per cache key that was compiled again after the cache evicted it
-- (the cache at its position was too small for the keys in use).
--
-- reads: compiles
--
-- run_id             VARCHAR  the run
-- source             VARCHAR  the model source (its path or Hub address)
-- position           BIGINT   the segment position (index in the sorted graph)
-- key                VARCHAR  the cache key compiled more than once here
-- shapes_text        VARCHAR  its argument shapes as text, 'input_ids[1,17]:int64'
-- compiles           BIGINT   how often it was compiled (>= 2)
-- evictions          BIGINT   how often it was evicted
-- wasted_compiles    BIGINT   compiles - 1: the compiles a large enough cache would have saved
-- wasted_compile_ns  BIGINT   the time of those compiles (all but the first)
-- first_compile_ns   BIGINT   ts_ns of its first compile (ns since the run started)
-- last_compile_ns    BIGINT   ts_ns of its last compile (ns since the run started)
-- cache_size         BIGINT   the cache size at this position (from its evict events)
-- keys_at_position   BIGINT   distinct keys compiled at this position (a cache this big keeps all)
WITH per_key AS (
    SELECT
        run_id, source, position, key,
        any_value(shapes_text) AS shapes_text,
        count(*) AS compiles,
        CAST(sum(compile_ns) - arg_min(compile_ns, compile_index) AS BIGINT) AS wasted_compile_ns,
        min(ts_ns) AS first_compile_ns,
        max(ts_ns) AS last_compile_ns
    FROM compiles
    WHERE position IS NOT NULL
    GROUP BY ALL
),
ev AS (
    SELECT run_id, source, position, ember_key(key, shapes, statics) AS key,
        count(*) AS evictions, max(cache_size) AS cache_size
    FROM cache WHERE action = 'evict' GROUP BY ALL
),
keys AS (
    SELECT run_id, source, position, count(*) AS keys_at_position
    FROM per_key GROUP BY ALL
),
sizes AS (
    SELECT run_id, source, position, max(cache_size) AS cache_size FROM ev GROUP BY ALL
)
SELECT
    p.run_id, p.source, p.position, p.key, p.shapes_text,
    p.compiles,
    coalesce(ev.evictions, 0) AS evictions,
    p.compiles - 1 AS wasted_compiles,
    p.wasted_compile_ns,
    p.first_compile_ns,
    p.last_compile_ns,
    sz.cache_size,
    k.keys_at_position
FROM per_key p
LEFT JOIN ev ON ev.run_id = p.run_id AND ev.source IS NOT DISTINCT FROM p.source
    AND ev.position = p.position AND ev.key = p.key
LEFT JOIN sizes sz ON sz.run_id = p.run_id AND sz.source IS NOT DISTINCT FROM p.source
    AND sz.position = p.position
LEFT JOIN keys k ON k.run_id = p.run_id AND k.source IS NOT DISTINCT FROM p.source
    AND k.position = p.position
WHERE p.compiles > 1
