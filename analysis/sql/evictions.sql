-- evictions: one row per segment the cache threw away (a cache 'evict' event).
--
-- reads: cache_events
--
-- run_id         VARCHAR       the run
-- source         VARCHAR       the model source (its path or Hub address)
-- position       BIGINT        the segment position whose cache evicted it (index in the sorted
--                              graph)
-- ts_ns          BIGINT        when it was evicted (ns since the run started)
-- ts             TIMESTAMP_NS  ts_ns as an absolute time (TIMESTAMP_NS, UTC)
-- call_span_id   BIGINT        the call whose new segment pushed it out
-- key            VARCHAR       the evicted segment's cache key (as in `cache_lookups.key`)
-- shapes_text    VARCHAR       the evicted segment's argument shapes as text,
--                              'input_ids[1,17]:int64'
-- cache_size     BIGINT        the size of the cache at that position (segments it keeps)
-- compiled_ns    BIGINT        when the evicted segment was compiled (ts_ns of its last miss)
-- hits           BIGINT        how often it was used (cache hits) between that compile and the
--                              eviction
-- lifetime_ns    BIGINT        eviction - compile
-- recompiled_ns  BIGINT        when the same key was compiled again after the eviction (NULL:
--                              never)
-- recompiled     BOOLEAN       true when it was (the eviction cost a compile: see cache_thrash)
SELECT
    e.run_id,
    e.source,
    e.position,
    e.ts_ns,
    ember_at(r.wall_time_ns, e.ts_ns) AS ts,
    e.call_span_id,
    e.key,
    e.shapes_text,
    e.cache_size,
    e.life_start_ns AS compiled_ns,
    e.hits_in_life AS hits,
    e.ts_ns - e.life_start_ns AS lifetime_ns,
    e.next_miss_ns AS recompiled_ns,
    e.next_miss_ns IS NOT NULL AS recompiled
FROM cache_events e
LEFT JOIN runs r ON r.run_id = e.run_id
WHERE e.action = 'evict'
