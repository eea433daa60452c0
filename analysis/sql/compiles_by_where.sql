-- compiles_by_where: one row per (run, where): how many compiles a run made at each
-- segment position or of each jitted function (every row of `compiles`: segment, eager,
-- jit, JAX primitive), for the Compare page's "compiles per position".
--
-- reads: compiles
--
-- run_id      VARCHAR  the run
-- where       VARCHAR  the position as text, or the jitted function's name when it has none
-- compiles    BIGINT   compiles there
-- compile_ns  BIGINT   their total time (ns; 0 when none was recorded)
SELECT run_id, coalesce(CAST(position AS VARCHAR), fun_name) AS "where",
    count(*) AS compiles,
    CAST(coalesce(sum(compile_ns), 0) AS BIGINT) AS compile_ns
FROM compiles
GROUP BY run_id, "where"
