-- thrash_positions: one row per (run, source, position) that compiled keys again after
-- evicting them, with the cache size that would not have.
--
-- reads: cache_thrash, cache_what_if
--
-- run_id            VARCHAR  the run
-- source            VARCHAR  the model source (its path or Hub address)
-- position          BIGINT   the segment position (index in the sorted graph)
-- keys              BIGINT   keys compiled again after eviction here
-- wasted            BIGINT   compiles a large enough cache would have saved
-- wasted_ns         BIGINT   their time
-- cache_size        BIGINT   the cache size the run used
-- keys_at_position  BIGINT   distinct keys compiled here (a cache this big keeps them all)
-- fixes             BIGINT   the smallest cache size that compiles each key once (cache_what_if)
WITH t AS (
    SELECT run_id, source, position, count(*) AS keys,
        CAST(sum(wasted_compiles) AS BIGINT) AS wasted, CAST(sum(wasted_compile_ns) AS BIGINT) AS wasted_ns,
        max(cache_size) AS cache_size, max(keys_at_position) AS keys_at_position
    FROM cache_thrash GROUP BY ALL
),
fix AS (
    SELECT run_id, source, position, min(cache_size) AS fixes
    FROM cache_what_if WHERE fixes_thrash GROUP BY ALL
)
SELECT t.*, fix.fixes FROM t LEFT JOIN fix ON fix.run_id = t.run_id
    AND fix.source IS NOT DISTINCT FROM t.source AND fix.position = t.position
