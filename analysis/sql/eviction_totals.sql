-- eviction_totals: one row per run that evicted segments from its cache.
--
-- reads: evictions
--
-- run_id      VARCHAR  the run
-- evictions   BIGINT   evict events
-- recompiled  BIGINT   evicted segments compiled again later
-- cache_size  BIGINT   the cache size
-- positions   BIGINT   positions that evicted
SELECT run_id, count(*) AS evictions, count(*) FILTER (WHERE recompiled) AS recompiled,
    max(cache_size) AS cache_size, count(DISTINCT position) AS positions
FROM evictions GROUP BY ALL
