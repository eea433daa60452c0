-- eviction_sites: one row per (run, position) whose segment cache evicted.
--
-- run_id, position
-- n             evict events at the position
-- cache_size    the cache size there (segments it keeps)
-- recompiled    evicted segments compiled again later
SELECT run_id, position, count(*) AS n, max(cache_size) AS cache_size,
    count(*) FILTER (WHERE recompiled) AS recompiled
FROM evictions GROUP BY ALL
