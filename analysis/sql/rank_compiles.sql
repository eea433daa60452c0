-- rank_compiles: one row per (job, rank, program) that rank compiled: a jitted function (by
-- name) or an ONNX segment (source and position), with how often and how long. The rows of
-- one program side by side are what rank_divergence compares.
--
-- reads: compiles, job_ranks
--
-- job_id           VARCHAR       the job (job_ranks)
-- rank             BIGINT        the rank (NULL when its run said none)
-- run_id           VARCHAR       the rank's run
-- program          VARCHAR       what was compiled: the jitted function's name, else
--                                'SOURCE@POSITION' for a segment
-- fun_name         VARCHAR       the jitted function (NULL for a segment)
-- source           VARCHAR       the segment's model (NULL for a jit compile)
-- position         BIGINT        the segment's position (NULL for a jit compile)
-- outside_jit      BOOLEAN       JAX's own compile of a primitive run outside jit (compiles);
--                                NULL for segments
-- compiles         BIGINT        how many times this rank compiled it
-- loads            BIGINT        of those, how many came from the disk / persistent cache
--                                (disk_cache 'hit')
-- disk_misses      BIGINT        of those, how many missed the disk / persistent cache
-- compile_ns       BIGINT        their time, summed (ns)
-- first_ts_ns      BIGINT        when the rank first compiled it (ns since its run started)
-- last_ts_ns       BIGINT        when it last did
-- reasons          VARCHAR[]     why it compiled again, in order: the retrace reason of each
--                                compile after the first (NULL when compiled once)
-- last_reason      VARCHAR       the last of them (NULL when compiled once)
SELECT
    j.job_id,
    j.rank,
    c.run_id,
    coalesce(c.fun_name, concat(coalesce(c.source, '?'), '@', CAST(c.position AS VARCHAR)))
        AS program,
    c.fun_name,
    c.source,
    c.position,
    any_value(c.outside_jit) AS outside_jit,
    count(*) AS compiles,
    count(*) FILTER (WHERE c.disk_cache = 'hit') AS loads,
    count(*) FILTER (WHERE c.disk_cache = 'miss') AS disk_misses,
    CAST(coalesce(sum(c.compile_ns), 0) AS BIGINT) AS compile_ns,
    min(c.ts_ns) AS first_ts_ns,
    max(c.ts_ns) AS last_ts_ns,
    list(coalesce(c.retrace_reason, c.jax_explanation, 'unknown') ORDER BY c.compile_index)
        FILTER (WHERE c.compile_index > 1) AS reasons,
    arg_max(coalesce(c.retrace_reason, c.jax_explanation, 'unknown'), c.compile_index)
        FILTER (WHERE c.compile_index > 1) AS last_reason
FROM compiles c
JOIN job_ranks j ON j.run_id = c.run_id
GROUP BY j.job_id, j.rank, c.run_id, c.fun_name, c.source, c.position
