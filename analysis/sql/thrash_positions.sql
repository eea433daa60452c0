-- thrash_positions: one row per (run, source, position) that compiled keys again after
-- evicting them, with the cache size that would not have.
--
-- run_id, source, position
-- keys          keys compiled again after eviction here
-- wasted        compiles a large enough cache would have saved
-- wasted_ns     their time
-- cache_size    the cache size the run used
-- fixes         the smallest cache size that compiles each key once (cache_what_if)
-- keys_at_position   distinct keys compiled here (a cache this big keeps them all)
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
