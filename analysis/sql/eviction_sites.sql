-- eviction_sites: one row per (run, position) whose segment cache evicted.
--
-- reads: evictions
--
-- run_id      VARCHAR  the run
-- position    BIGINT   the segment position (index in the sorted graph)
-- n           BIGINT   evict events at the position
-- cache_size  BIGINT   the cache size there (segments it keeps)
-- recompiled  BIGINT   evicted segments compiled again later
SELECT run_id, position, count(*) AS n, max(cache_size) AS cache_size,
    count(*) FILTER (WHERE recompiled) AS recompiled
FROM evictions GROUP BY ALL
