-- jit_retraces: one row per (run, jitted function of the user's) that JAX traced again.
--
-- reads: compiles, jit_functions, recompiles
--
-- run_id      VARCHAR    the run
-- fun_name    VARCHAR    the jitted function's name
-- retraces    BIGINT     traces after the first that needed a program (compiled or loaded)
-- recompiles  BIGINT     those XLA compiled (run_summary.recompiles counts these)
-- loads       BIGINT     those whose program was loaded from JAX's persistent cache
-- compile_ns  BIGINT     their time (compiles and loads)
-- reasons     VARCHAR[]  why each one happened, in order (JAX's retrace reason, else
--                        recompiles.reason)
SELECT r.run_id, r.fun_name, count(*) AS retraces,
    count(*) FILTER (WHERE r.outcome = 'compile') AS recompiles,
    count(*) FILTER (WHERE r.outcome = 'load') AS loads,
    CAST(coalesce(sum(r.compile_ns), 0) AS BIGINT) AS compile_ns,
    list(coalesce(c.retrace_reason, r.reason) ORDER BY r.compile_index) AS reasons
FROM recompiles r
JOIN jit_functions j ON j.run_id = r.run_id AND j.fun_name = r.fun_name
LEFT JOIN compiles c ON c.run_id = r.run_id AND c.fun_name = r.fun_name
    AND c.compile_index = r.compile_index
WHERE r.fun_name IS NOT NULL AND NOT j.internal
GROUP BY ALL
