-- recompile_causes: one row per (run, place, change): why a segment position or a jitted
-- function compiled again, for the recompiles run_summary counts (compiled segments and
-- the user's jitted functions; not eager segments, not loads from a persistent cache, not
-- JAX's own primitives). Each recompile counts once, under its first change (the order of
-- `recompiles.changes`); the other inputs that changed with it are in `also`, so the rows'
-- n add up to run_summary.recompiles.
--
-- reads: cache_lookups, recompiles
--
-- run_id    VARCHAR  the run
-- position  BIGINT   the segment position (NULL for a jitted function)
-- fun_name  VARCHAR  the jitted function (NULL for a segment)
-- change    VARCHAR  what changed: shape, dtype, rank, static, new_arg, removed_arg,
--                    after_eviction, same_key, other, or 'jit:...' (what JAX said)
-- arg       VARCHAR  the argument or static value that changed ('input_ids'); NULL where the change
--                    names none (same_key, other)
-- dim       BIGINT   the dimension (0-based) of a shape change; NULL for other changes and for a
--                    JAX retrace (it names whole shapes)
-- n         BIGINT   recompiles with this cause
-- example   VARCHAR  the reason of the first of them, in words
-- lookups   BIGINT   cache lookups at the position (NULL for a jitted function)
-- also      VARCHAR[]  the other inputs that changed in the same recompiles ('y dim 0'),
--                    empty when only one did
WITH r AS (
    -- recompiles.compiled and .outside_jit are compiles' row and jit_functions' internal
    -- for the function: the columns read here, without joining those views again
    SELECT run_id, position, fun_name, compile_index, reason,
        {'change': change, 'arg': arg, 'dim': dim} AS ch,
        -- the changes after the first (a filter, not a slice or an empty-list literal,
        -- so that the view reads the same in Spark's dialect)
        list_transform(
            list_filter(changes, lambda c: NOT after_eviction AND c IS DISTINCT FROM changes[1]),
            lambda c: coalesce(c.arg, c.change) || coalesce(' dim ' || c.dim, '')) AS also
    FROM recompiles
    WHERE outcome = 'compile' AND NOT outside_jit
),
lookups AS (
    SELECT run_id, position, count(*) AS lookups FROM cache_lookups GROUP BY ALL
)
SELECT r.run_id, r.position, r.fun_name, r.ch.change AS change, r.ch.arg AS arg,
    r.ch.dim AS dim, count(*) AS n, any_value(r.reason ORDER BY r.compile_index) AS example,
    any_value(l.lookups) AS lookups,
    list_distinct(flatten(list(r.also))) AS also
FROM r LEFT JOIN lookups l ON l.run_id = r.run_id AND l.position = r.position
GROUP BY ALL
