-- cache_what_if: one row per (run, source, position, cache size): how many compiles the
-- position's key sequence would have cost with a per-position LRU cache of that size.
--
-- The lookups (cache_lookups) are replayed by LRU stack distance: a lookup hits an LRU
-- cache of size s exactly when fewer than s other keys were used since the last lookup of
-- its key. The distance is a window over the lookups in between (a bit set of keys where a
-- position has at most 64 keys, a distinct count otherwise). Sizes run from 1 to the
-- number of distinct keys (a cache that big never compiles a key twice).
--
-- reads: cache_lookups
--
-- run_id                            VARCHAR  the run
-- source                            VARCHAR  the model source (its path or Hub address)
-- position                          BIGINT   the segment position (index in the sorted graph)
-- cache_size                        BIGINT   the size replayed
-- lookups                           BIGINT   lookups at this position (hits + misses as recorded)
-- distinct_keys                     BIGINT   keys used at this position (the fewest compiles
--                                            possible)
-- compiles                          BIGINT   compiles this size would cost
-- recompiles                        BIGINT   compiles - distinct_keys (the avoidable ones)
-- actual_cache_size                 BIGINT   the size the run used (from its evict events; NULL if
--                                            nothing was evicted)
-- actual_compiles                   BIGINT   compiles the run recorded here (misses)
-- is_actual                         BOOLEAN  cache_size = actual_cache_size
-- saved_compiles                    BIGINT   actual_compiles - compiles (negative: this size would
--                                            cost more)
-- fixes_thrash                      BOOLEAN  true for sizes with no avoidable compile (recompiles =
--                                            0)
-- smallest_size_without_recompiles  BIGINT   the smallest size of this position with fixes_thrash
--                                            (the same on each of its rows)
WITH keys AS (
    -- the keys of each position, ranked (a window over a few keys, not over every lookup)
    SELECT run_id, source, position, key,
        row_number() OVER (PARTITION BY run_id, source, position ORDER BY key) AS key_rank,
        count(key) OVER (PARTITION BY run_id, source, position) AS distinct_keys
    FROM (SELECT DISTINCT run_id, source, position, key FROM cache_lookups)
),
l AS (
    SELECT c.run_id, c.source, c.position, c.seq, c.key, c.prev_seq, c.action,
        k.key_rank, k.distinct_keys
    FROM cache_lookups c
    JOIN keys k ON k.run_id = c.run_id AND k.source IS NOT DISTINCT FROM c.source
        AND k.position IS NOT DISTINCT FROM c.position AND k.key IS NOT DISTINCT FROM c.key
),
dist AS (
    SELECT run_id, source, position, prev_seq,
        bit_count(bit_or(CAST(1 AS UBIGINT) << CAST(key_rank - 1 AS UBIGINT)) OVER (
            PARTITION BY run_id, source, position ORDER BY seq
            ROWS BETWEEN coalesce(seq - prev_seq - 1, 0) PRECEDING AND 1 PRECEDING
        )) AS d
    FROM l WHERE distinct_keys <= 64
    UNION ALL
    SELECT run_id, source, position, prev_seq,
        count(DISTINCT key) OVER (
            PARTITION BY run_id, source, position ORDER BY seq
            ROWS BETWEEN coalesce(seq - prev_seq - 1, 0) PRECEDING AND 1 PRECEDING
        ) AS d
    FROM l WHERE distinct_keys > 64
),
histogram AS (
    SELECT run_id, source, position, d AS stack_distance, count(*) AS n
    FROM dist WHERE prev_seq IS NOT NULL GROUP BY ALL
),
per_position AS (
    SELECT run_id, source, position,
        count(*) AS lookups,
        any_value(distinct_keys) AS distinct_keys,
        count(*) FILTER (WHERE action = 'miss') AS actual_compiles
    FROM l GROUP BY ALL
),
actual AS (
    SELECT run_id, source, position, max(cache_size) AS actual_cache_size
    FROM cache WHERE action = 'evict' GROUP BY ALL
),
sizes AS (
    SELECT p.*, s.cache_size
    FROM per_position p, range(1, greatest(p.distinct_keys, 1) + 1) AS s(cache_size)
),
replay AS (
    SELECT s.run_id, s.source, s.position, s.cache_size,
        any_value(s.lookups) AS lookups,
        any_value(s.distinct_keys) AS distinct_keys,
        any_value(s.actual_compiles) AS actual_compiles,
        any_value(s.distinct_keys) + coalesce(sum(h.n) FILTER (WHERE h.stack_distance >= s.cache_size), 0)
            AS compiles
    FROM sizes s
    LEFT JOIN histogram h ON h.run_id = s.run_id AND h.source IS NOT DISTINCT FROM s.source
        AND h.position = s.position
    GROUP BY s.run_id, s.source, s.position, s.cache_size
)
SELECT
    s.run_id, s.source, s.position, s.cache_size,
    s.lookups,
    s.distinct_keys,
    CAST(s.compiles AS BIGINT) AS compiles,
    CAST(s.compiles - s.distinct_keys AS BIGINT) AS recompiles,
    a.actual_cache_size,
    s.actual_compiles,
    s.cache_size IS NOT DISTINCT FROM a.actual_cache_size AS is_actual,
    CAST(s.actual_compiles - s.compiles AS BIGINT) AS saved_compiles,
    s.compiles = s.distinct_keys AS fixes_thrash,
    min(CASE WHEN s.compiles = s.distinct_keys THEN s.cache_size END)
        OVER (PARTITION BY s.run_id, s.source, s.position) AS smallest_size_without_recompiles
FROM replay s
LEFT JOIN actual a ON a.run_id = s.run_id AND a.source IS NOT DISTINCT FROM s.source
    AND a.position = s.position
