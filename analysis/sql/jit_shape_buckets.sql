-- jit_shape_buckets: one row per (run, jitted function, argument, dimension) whose size
-- changed between the function's traces: the sizes it was compiled for, and how many
-- compiles padding that dimension would save. The JAX (and torch.compile) counterpart of
-- shape_buckets, which is per segment position.
--
-- The sizes come from the recompiles' recorded changes (compiles.jit_changes): a shape change
-- of JAX ('f32[128,784]' -> 'f32[104,784]') gives each dimension whose size differs, one of
-- torch names its dim. The first compile's size is the first change's old one. A function's
-- in-memory cache is unbounded: padding saves compiles, a cache size would not.
--
-- reads: compiles
--
-- run_id          VARCHAR   the run
-- fun_name        VARCHAR   the jitted function
-- arg             VARCHAR   its argument as the change names it (`x`, `batch['x']`)
-- dim             BIGINT    the dimension whose size changed (0-based)
-- distinct_sizes  BIGINT    sizes the function was compiled for in this dimension
-- min_size        BIGINT    the smallest of them
-- max_size        BIGINT    the largest of them
-- sizes           BIGINT[]  the sizes, ascending
-- compiles        BIGINT    the function's programs (compiles and loads)
-- pow2_buckets    BIGINT    distinct sizes after padding up to the next power of two
-- pow2_sizes      BIGINT[]  those bucket sizes
-- saved_compiles  BIGINT    distinct_sizes - pow2_buckets: compiles padding to powers of two
--                           saves (other dimensions may still differ)
-- ragged          BOOLEAN   two sizes, the smaller first seen after the larger: a last batch
--                           smaller than the others; padding it to max_size or dropping it
--                           saves one compile
WITH shaped AS (
    SELECT c.run_id, c.fun_name, c.compile_index, u.ch.arg AS arg, u.ch.dim AS dim,
        u.ch.old AS old, u.ch.new AS new,
        string_split(regexp_extract(u.ch.old, '\[([^\]]*)\]', 1), ',') AS old_dims,
        string_split(regexp_extract(u.ch.new, '\[([^\]]*)\]', 1), ',') AS new_dims
    FROM compiles c, unnest(c.jit_changes) AS u(ch)
    WHERE c.fun_name IS NOT NULL AND NOT coalesce(c.outside_jit, false)
        AND u.ch.what = 'shape'
),
sizes AS (
    -- torch names the dimension: old and new are its sizes
    SELECT run_id, fun_name, compile_index, arg, dim,
        TRY_CAST(old AS BIGINT) AS old_size, TRY_CAST(new AS BIGINT) AS new_size
    FROM shaped WHERE dim IS NOT NULL
    UNION ALL
    SELECT run_id, fun_name, compile_index, arg, d.i - 1 AS dim,
        TRY_CAST(old_dims[d.i] AS BIGINT) AS old_size,
        TRY_CAST(new_dims[d.i] AS BIGINT) AS new_size
    FROM shaped, range(1, len(new_dims) + 1) AS d(i)
    WHERE dim IS NULL AND len(old_dims) = len(new_dims) AND old_dims[d.i] <> new_dims[d.i]
),
seen AS (
    -- each size and the compile it was first seen at (the old one: the compile before)
    SELECT run_id, fun_name, arg, dim, size, min(seen_at) AS first_at FROM (
        SELECT run_id, fun_name, arg, dim, old_size AS size, compile_index - 1 AS seen_at
        FROM sizes WHERE old_size IS NOT NULL AND new_size IS NOT NULL
        UNION ALL
        SELECT run_id, fun_name, arg, dim, new_size AS size, compile_index AS seen_at
        FROM sizes WHERE old_size IS NOT NULL AND new_size IS NOT NULL
    ) both_sizes
    GROUP BY run_id, fun_name, arg, dim, size
),
per_dim AS (
    SELECT run_id, fun_name, arg, dim,
        count(*) AS distinct_sizes,
        min(size) AS min_size,
        max(size) AS max_size,
        list(size ORDER BY size) AS sizes,
        list(DISTINCT CASE WHEN size <= 1 THEN size
            ELSE TRY_CAST(pow(2, ceil(log2(size))) AS BIGINT) END) AS pow2_list,
        arg_min(size, first_at) AS first_size
    FROM seen GROUP BY run_id, fun_name, arg, dim
),
n AS (
    SELECT run_id, fun_name, count(*) AS compiles
    FROM compiles
    WHERE fun_name IS NOT NULL AND NOT coalesce(outside_jit, false)
        AND outcome IN ('compile', 'load')
    GROUP BY run_id, fun_name
)
SELECT p.run_id, p.fun_name, p.arg, p.dim,
    p.distinct_sizes, p.min_size, p.max_size, p.sizes,
    n.compiles,
    len(p.pow2_list) AS pow2_buckets,
    list_sort(p.pow2_list) AS pow2_sizes,
    p.distinct_sizes - len(p.pow2_list) AS saved_compiles,
    p.distinct_sizes = 2 AND p.first_size = p.max_size AS ragged
FROM per_dim p
JOIN n ON n.run_id = p.run_id AND n.fun_name = p.fun_name
WHERE p.distinct_sizes > 1
