-- _recompile_causes: one row per (run, place, change): why a segment position or a jitted
-- function compiled again, for the recompiles run_summary counts (compiled segments and
-- the user's jitted functions; not eager segments, not JAX's own primitives). A recompile
-- after an eviction counts once, as that cause; any other counts once for each change it
-- names (a recompile where two inputs changed is in two rows).
--
-- run_id
-- position      the segment position (NULL for a jitted function)
-- fun_name      the jitted function (NULL for a segment)
-- change        what changed: shape, dtype, rank, static, new_arg, removed_arg,
--               after_eviction, same_key, other, or 'jit:...' (what JAX said)
-- arg, dim      the argument and dimension that changed (NULL where the change has none)
-- n             recompiles with this cause
-- example       the reason of the first of them, in words
-- lookups       cache lookups at the position (NULL for a jitted function)
WITH r AS (
    SELECT r.run_id, r.position, r.fun_name, r.compile_index, r.reason,
        unnest(CASE WHEN r.after_eviction OR len(r.changes) = 0
            THEN [{'change': r.change, 'arg': r.arg, 'dim': r.dim}]
            ELSE list_transform(r.changes, lambda c: {'change': c.change, 'arg': c.arg,
                'dim': c.dim}) END) AS ch
    FROM recompiles r
    LEFT JOIN compiles c ON c.run_id = r.run_id AND c.source IS NOT DISTINCT FROM r.source
        AND c.position IS NOT DISTINCT FROM r.position
        AND c.fun_name IS NOT DISTINCT FROM r.fun_name AND c.compile_index = r.compile_index
    LEFT JOIN _jit_functions j ON j.run_id = r.run_id AND j.fun_name = r.fun_name
    WHERE c.compiled IS DISTINCT FROM false AND NOT coalesce(j.internal, false)
),
lookups AS (
    SELECT run_id, position, count(*) AS lookups FROM cache_lookups GROUP BY ALL
)
SELECT r.run_id, r.position, r.fun_name, r.ch.change AS change, r.ch.arg AS arg,
    r.ch.dim AS dim, count(*) AS n, any_value(r.reason ORDER BY r.compile_index) AS example,
    any_value(l.lookups) AS lookups
FROM r LEFT JOIN lookups l ON l.run_id = r.run_id AND l.position = r.position
GROUP BY ALL
