-- shape_buckets: one row per (run, source, position, argument, dimension) whose size
-- changed between compiles: how many compiles padding that dimension to buckets would save.
--
-- reads: compiles
--
-- run_id                  VARCHAR   the run
-- source                  VARCHAR   the model source (its path or Hub address)
-- position                BIGINT    the segment position (index in the sorted graph)
-- arg                     VARCHAR   the segment argument's name ('input_ids')
-- dim                     BIGINT    the dimension of it whose size changed (0-based)
-- distinct_sizes          BIGINT    sizes compiled for this dimension
-- min_size                BIGINT    the smallest size of the dimension
-- max_size                BIGINT    the largest size of the dimension
-- sizes                   BIGINT[]  the sizes, ascending
-- compiles                BIGINT    compiles at this position
-- pow2_buckets            BIGINT    distinct sizes after padding up to the next power of two
-- pow2_sizes              BIGINT[]  those bucket sizes
-- saved_compiles          BIGINT    distinct_sizes - pow2_buckets: compiles saved by padding (at
--                                   least, with a cache big enough for the buckets; other dims may
--                                   still differ)
-- multiple_of_64_buckets  BIGINT    distinct sizes after padding up to a multiple of 64
WITH shape_sets AS (
    -- the per-dimension figures below do not depend on how often a shape set was compiled:
    -- unnest each distinct shape set once, not once per compile
    SELECT DISTINCT run_id, source, position, shapes
    FROM compiles WHERE position IS NOT NULL
),
dims AS (
    SELECT c.run_id, c.source, c.position, u_arg.arg.name AS arg, d.i - 1 AS dim,
        u_arg.arg.shape[d.i] AS size
    FROM shape_sets c, unnest(c.shapes) AS u_arg(arg), range(1, len(u_arg.arg.shape) + 1) AS d(i)
),
per_dim AS (
    SELECT run_id, source, position, arg, dim,
        count(DISTINCT size) AS distinct_sizes,
        min(size) AS min_size,
        max(size) AS max_size,
        list(DISTINCT size ORDER BY size) AS sizes,
        list(DISTINCT CASE WHEN size <= 1 THEN size
            ELSE TRY_CAST(pow(2, ceil(log2(size))) AS BIGINT) END) AS pow2_list,
        count(DISTINCT size // 64 + CAST(size % 64 > 0 AS BIGINT)) AS multiple_of_64_buckets
    FROM dims GROUP BY ALL
),
n AS (
    SELECT run_id, source, position, count(*) AS compiles
    FROM compiles WHERE position IS NOT NULL GROUP BY ALL
)
SELECT
    p.run_id, p.source, p.position, p.arg, p.dim,
    p.distinct_sizes, p.min_size, p.max_size, p.sizes,
    n.compiles,
    len(p.pow2_list) AS pow2_buckets,
    list_sort(p.pow2_list) AS pow2_sizes,
    p.distinct_sizes - len(p.pow2_list) AS saved_compiles,
    p.multiple_of_64_buckets
FROM per_dim p
JOIN n ON n.run_id = p.run_id AND n.source IS NOT DISTINCT FROM p.source
    AND n.position = p.position
WHERE p.distinct_sizes > 1
