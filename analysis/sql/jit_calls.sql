-- jit_calls: one row per (run, jitted function) whose top-level calls were steps that name
-- the function (`ember record`'s automatic steps of `jax.jit`, `jax.pmap`, `nnx.jit` and
-- `equinox.filter_jit` functions): how many calls JAX served from its in-memory cache.
--
-- A call is a miss when a `jit` span (a compile or a load of a program) of the program's own
-- ran inside its step, else a hit: JAX had the program in memory (a helper JAX compiled for the
-- call, such as pmap's `_multi_slice`, is not the function's: jit_functions.internal). Calls
-- made while JAX traced something, or inside another step, are part of the outer call's
-- program and are not counted. Traces older than ember.trace/5 name no function in their
-- steps: they have no rows here.
--
-- reads: jit_functions, spans
--
-- run_id    VARCHAR  the run
-- fun_name  VARCHAR  the jitted or pmapped function
-- calls     BIGINT   its top-level calls (its steps, open ones included)
-- hits      BIGINT   of them, those served from JAX's in-memory cache
-- misses    BIGINT   of them, those that compiled or loaded a program first (calls - hits)
-- compiles  BIGINT   programs XLA compiled during these calls
-- loads     BIGINT   programs JAX loaded from its persistent cache during these calls
WITH inside AS (
    SELECT jit_span.run_id, jit_span.parent_id AS step_id,
        count(*) FILTER (WHERE jit_span.end_attrs.persistent_cache IS DISTINCT FROM 'hit')
            AS compiles,
        count(*) FILTER (WHERE jit_span.end_attrs.persistent_cache = 'hit') AS loads
    FROM spans jit_span
    LEFT JOIN jit_functions f ON f.run_id = jit_span.run_id
        AND f.fun_name = jit_span.start_attrs.fun_name
    WHERE jit_span.span_kind = 'jit' AND jit_span.parent_id IS NOT NULL
        AND NOT coalesce(f.internal, false)
    GROUP BY jit_span.run_id, jit_span.parent_id
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
