-- recompile_reasons: one row per (run, change, arg, dim): the recompiles of a run grouped
-- by the part of the key that changed first (the Recompiles page's "why it compiled
-- again"); compiles of primitives JAX ran outside jit are left out (grouped apart).
--
-- reads: recompiles
--
-- run_id      VARCHAR  the run
-- change      VARCHAR  what changed first, as in `recompiles.change` (shape, dtype, static,
--                      after_eviction, jit:<what>, ...)
-- arg         VARCHAR  the argument or static value of that first change ('input_ids'); NULL where
--                      it names none
-- dim         BIGINT   the dimension (0-based) of that first change when it is a shape change; NULL
--                      for other changes and for a JAX retrace (it names whole shapes)
-- recompiles  BIGINT   recompiles with this change
-- compile_ns  BIGINT   their total compile time (ns; 0 when none was recorded)
-- example     VARCHAR  one of their reasons (the first in text order)
SELECT run_id, change, arg, dim, count(*) AS recompiles,
    CAST(coalesce(sum(compile_ns), 0) AS BIGINT) AS compile_ns,
    min(reason) AS example
FROM recompiles WHERE NOT outside_jit
GROUP BY run_id, change, arg, dim
