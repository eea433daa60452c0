-- cache_positions: one row per (run, source, position) the segment cache was looked up at:
-- its hits, misses and evictions.
--
-- reads: cache_lookups, evictions
--
-- run_id                   VARCHAR  the run
-- source                   VARCHAR  the model source (its path or Hub address)
-- position                 BIGINT   the segment position (index in the sorted graph)
-- hits                     BIGINT   lookups here that found a compiled segment (cache hits)
-- misses                   BIGINT   lookups here that found none and compiled one (cache misses)
-- hit_rate                 DOUBLE   hits / (hits + misses)
-- evictions                BIGINT   segments the cache threw away here
-- evicted_then_recompiled  BIGINT   of them, compiled again later
-- distinct_keys            BIGINT   different keys looked up here
-- cache_size               BIGINT   the cache size (from the evictions; NULL without any)
WITH l AS (
    SELECT run_id, source, position, count(*) FILTER (WHERE action = 'hit') AS hits,
        count(*) FILTER (WHERE action = 'miss') AS misses,
        count(DISTINCT key) AS keys
    FROM cache_lookups GROUP BY ALL
),
e AS (
    SELECT run_id, source, position, count(*) AS evictions, max(cache_size) AS cache_size,
        count(*) FILTER (WHERE recompiled) AS evicted_then_recompiled
    FROM evictions GROUP BY ALL
)
SELECT l.run_id, l.source, l.position, l.hits, l.misses,
    l.hits / greatest(l.hits + l.misses, 1) AS hit_rate,
    coalesce(e.evictions, 0) AS evictions,
    coalesce(e.evicted_then_recompiled, 0) AS evicted_then_recompiled,
    l.keys AS distinct_keys, e.cache_size
FROM l LEFT JOIN e ON e.run_id = l.run_id AND e.source IS NOT DISTINCT FROM l.source
    AND e.position = l.position
