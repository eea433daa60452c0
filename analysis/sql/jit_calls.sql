-- jit_calls: one row per (run, jitted function) whose top-level calls were steps that name
-- the function (`ember record`'s automatic steps of `jax.jit`, `jax.pmap`, `nnx.jit` and
-- `equinox.filter_jit` functions): how many calls JAX served from its in-memory cache.
--
-- A call is a miss when a `jit` span (a compile or a load of a program) ran inside its step,
-- else a hit: JAX had the program in memory and neither compiled nor loaded anything. Calls
-- made while JAX traced something, or inside another step, are part of the outer call's
-- program and are not counted. Traces older than ember.trace/5 name no function in their
-- steps: they have no rows here.
--
-- reads: spans
--
-- run_id    VARCHAR  the run
-- fun_name  VARCHAR  the jitted or pmapped function
-- calls     BIGINT   its top-level calls (its steps, open ones included)
-- hits      BIGINT   of them, those served from JAX's in-memory cache
-- misses    BIGINT   of them, those that compiled or loaded a program first (calls - hits)
-- compiles  BIGINT   programs XLA compiled during these calls
-- loads     BIGINT   programs JAX loaded from its persistent cache during these calls
WITH inside AS (
    SELECT run_id, parent_id AS step_id,
        count(*) FILTER (WHERE end_attrs.persistent_cache IS DISTINCT FROM 'hit') AS compiles,
        count(*) FILTER (WHERE end_attrs.persistent_cache = 'hit') AS loads
    FROM spans
    WHERE span_kind = 'jit' AND parent_id IS NOT NULL
    GROUP BY run_id, parent_id
)
SELECT step_span.run_id,
    step_span.start_attrs.fun_name AS fun_name,
    count(*) AS calls,
    count(*) FILTER (WHERE inside.step_id IS NULL) AS hits,
    count(inside.step_id) AS misses,
    CAST(coalesce(sum(inside.compiles), 0) AS BIGINT) AS compiles,
    CAST(coalesce(sum(inside.loads), 0) AS BIGINT) AS loads
FROM spans step_span
LEFT JOIN inside ON inside.run_id = step_span.run_id AND inside.step_id = step_span.span_id
WHERE step_span.span_kind = 'step' AND step_span.start_attrs.fun_name IS NOT NULL
GROUP BY step_span.run_id, step_span.start_attrs.fun_name
