-- cache_what_if: one row per (run, source, position, cache size): how many compiles the
-- position's key sequence would have cost with a per-position LRU cache of that size.
--
-- The lookups (cache_lookups) are replayed by LRU stack distance: a lookup hits an LRU
-- cache of size s exactly when fewer than s other keys were used since the last lookup of
-- its key. Sizes run from 1 to the number of distinct keys (which never re-compiles).
--
-- run_id, source, position   where
-- cache_size        the size replayed
-- lookups           lookups at this position (hits + misses as recorded)
-- distinct_keys     keys used at this position (the fewest compiles possible)
-- compiles          compiles this size would cost
-- recompiles        compiles - distinct_keys (the avoidable ones)
-- actual_cache_size the size the run used (from its evict events; NULL if nothing was evicted)
-- actual_compiles   compiles the run recorded here (misses)
-- is_actual         cache_size = actual_cache_size
-- saved_compiles    actual_compiles - compiles (negative: this size would cost more)
-- fixes_thrash      true for sizes with no avoidable compile (recompiles = 0)
WITH l AS (
    SELECT run_id, source, position, seq, key, prev_seq, action FROM cache_lookups
),
dist AS (
    -- distinct keys used strictly between the previous lookup of this key and this one:
    -- the lookups in between that are the last of their key before this lookup
    SELECT
        a.run_id, a.source, a.position, a.seq,
        CASE WHEN a.prev_seq IS NULL THEN NULL ELSE (
            SELECT count(DISTINCT b.key) FROM l b
            WHERE b.run_id = a.run_id AND b.source IS NOT DISTINCT FROM a.source
                AND b.position = a.position AND b.seq > a.prev_seq AND b.seq < a.seq
        ) END AS stack_distance
    FROM l a
),
per_position AS (
    SELECT
        run_id, source, position,
        count(*) AS lookups,
        count(*) FILTER (WHERE stack_distance IS NULL) AS distinct_keys
    FROM dist GROUP BY ALL
),
actual AS (
    SELECT
        p.run_id, p.source, p.position,
        (SELECT max(c.cache_size) FROM cache c WHERE c.action = 'evict' AND c.run_id = p.run_id
            AND c.source IS NOT DISTINCT FROM p.source AND c.position = p.position)
            AS actual_cache_size,
        (SELECT count(*) FROM l WHERE l.action = 'miss' AND l.run_id = p.run_id
            AND l.source IS NOT DISTINCT FROM p.source AND l.position = p.position)
            AS actual_compiles
    FROM per_position p
),
sizes AS (
    SELECT p.*, s.cache_size
    FROM per_position p, range(1, greatest(p.distinct_keys, 1) + 1) AS s(cache_size)
),
replay AS (
    SELECT s.*, s.distinct_keys + (
        SELECT count(*) FROM dist d
        WHERE d.run_id = s.run_id AND d.source IS NOT DISTINCT FROM s.source
            AND d.position = s.position AND d.stack_distance >= s.cache_size
    ) AS compiles
    FROM sizes s
)
SELECT
    s.run_id, s.source, s.position, s.cache_size,
    s.lookups,
    s.distinct_keys,
    s.compiles,
    s.compiles - s.distinct_keys AS recompiles,
    a.actual_cache_size,
    a.actual_compiles,
    s.cache_size IS NOT DISTINCT FROM a.actual_cache_size AS is_actual,
    a.actual_compiles - s.compiles AS saved_compiles,
    s.compiles = s.distinct_keys AS fixes_thrash
FROM replay s
JOIN actual a ON a.run_id = s.run_id AND a.source IS NOT DISTINCT FROM s.source
    AND a.position = s.position
