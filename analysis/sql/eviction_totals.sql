-- eviction_totals: one row per run that evicted segments from its cache.
--
-- run_id
-- evictions     evict events
-- recompiled    evicted segments compiled again later
-- cache_size    the cache size
-- positions     positions that evicted
SELECT run_id, count(*) AS evictions, count(*) FILTER (WHERE recompiled) AS recompiled,
    max(cache_size) AS cache_size, count(DISTINCT position) AS positions
FROM evictions GROUP BY ALL
