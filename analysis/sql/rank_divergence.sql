-- rank_divergence: one row per (job, program) whose ranks did not all compile it alike: some
-- ranks compiled it and others did not, some recompiled it and others did not, or some missed
-- the persistent cache where the others loaded it. In a data-parallel job every rank waits at
-- the next collective for the slowest one, so the slowest rank's compile time minus the
-- median rank's is the time the others waited. JAX's own compiles of primitives run outside
-- jit (rank_compiles.outside_jit) are left out: they follow the same shapes as the program.
--
-- reads: job_ranks, rank_compiles
--
-- job_id              VARCHAR   the job
-- program             VARCHAR   the jitted function or segment (rank_compiles.program)
-- divergence          VARCHAR   'compiled on some ranks only' | 'recompiled on some ranks only'
--                               | 'persistent-cache misses on some ranks only'
-- ranks               BIGINT    the job's ranks compared (recorded, with a rank)
-- divergent_ranks     BIGINT[]  the ranks that compiled it more often (or missed the cache more
--                               often) than the fewest did, in order
-- fewest_compiles     BIGINT    the fewest compiles of it on one rank (0: some never did)
-- most_compiles       BIGINT    the most on one rank
-- slowest_rank        BIGINT    the rank that spent the most time compiling it (the lowest of
--                               ranks that spent as long)
-- slowest_compile_ns  BIGINT    that rank's compile time (ns)
-- median_compile_ns   BIGINT    the median rank's compile time (ns; a rank that did not
--                               compile it counts 0)
-- waited_ns           BIGINT    slowest_compile_ns - median_compile_ns: how long the other
--                               ranks waited for the slowest (ns)
-- reason              VARCHAR   why the rank that compiled most compiled again: its last
--                               retrace reason ('x dim 0: 64 -> 61'); NULL when it compiled
--                               once (the others never did)
-- at_ts_ns            BIGINT    when that rank last compiled it (ns since its run started)
WITH ranks AS (
    SELECT DISTINCT job_id, rank, run_id FROM job_ranks WHERE rank IS NOT NULL
),
programs AS (
    SELECT DISTINCT job_id, program
    FROM rank_compiles
    WHERE NOT coalesce(outside_jit, false)
),
grid AS (
    SELECT p.job_id, p.program, r.rank,
        coalesce(c.compiles, 0) AS compiles,
        coalesce(c.compile_ns, 0) AS compile_ns,
        coalesce(c.disk_misses, 0) AS disk_misses,
        c.last_reason,
        c.last_ts_ns,
        -- 1 for the slowest rank; of ranks as slow, the lowest (arg_max picked any of them)
        row_number() OVER (PARTITION BY p.job_id, p.program
            ORDER BY coalesce(c.compile_ns, 0) DESC, r.rank) AS slowness
    FROM programs p
    JOIN ranks r ON r.job_id = p.job_id
    LEFT JOIN rank_compiles c
        ON c.job_id = p.job_id AND c.program = p.program AND c.run_id = r.run_id
),
per AS (
    SELECT job_id, program, count(*) AS ranks,
        min(compiles) AS fewest_compiles, max(compiles) AS most_compiles,
        min(disk_misses) AS fewest_misses, max(disk_misses) AS most_misses,
        max(compile_ns) AS slowest_compile_ns,
        CAST(round(quantile_cont(compile_ns, 0.5)) AS BIGINT) AS median_compile_ns,
        min(rank) FILTER (WHERE slowness = 1) AS slowest_rank,
        arg_max(last_reason, compiles) AS reason,
        arg_max(last_ts_ns, compiles) AS at_ts_ns
    FROM grid
    GROUP BY job_id, program
    HAVING count(*) > 1
        AND (min(compiles) < max(compiles) OR min(disk_misses) < max(disk_misses))
),
divergent AS (
    SELECT g.job_id, g.program, list(g.rank ORDER BY g.rank) AS divergent_ranks
    FROM grid g
    JOIN per p ON p.job_id = g.job_id AND p.program = g.program
    WHERE g.compiles > p.fewest_compiles OR g.disk_misses > p.fewest_misses
    GROUP BY g.job_id, g.program
)
SELECT
    p.job_id,
    p.program,
    CASE
        WHEN p.fewest_compiles = 0 THEN 'compiled on some ranks only'
        WHEN p.fewest_compiles < p.most_compiles THEN 'recompiled on some ranks only'
        ELSE 'persistent-cache misses on some ranks only'
    END AS divergence,
    p.ranks,
    d.divergent_ranks,
    p.fewest_compiles,
    p.most_compiles,
    p.slowest_rank,
    p.slowest_compile_ns,
    p.median_compile_ns,
    p.slowest_compile_ns - p.median_compile_ns AS waited_ns,
    p.reason,
    p.at_ts_ns
FROM per p
JOIN divergent d ON d.job_id = p.job_id AND d.program = p.program
