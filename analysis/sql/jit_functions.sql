-- jit_functions: one row per (run, jitted function) seen by the JAX bridge, and whether it
-- is JAX's own compile of a primitive run outside jit.
--
-- JAX compiles the primitives a program runs eagerly (`_normal`, `_reduce_sum`,
-- `convert_element_type`, ...) through `jit` too. A function counts as JAX's own when the
-- JAX bridge marked a compile of it `outside_jit` (a primitive run op by op), or when none
-- of its compiles has a retrace reason, changes or a `defined_at` and none ran inside a call
-- or step span (JAX's own jitted helpers such as `_normal`, pmap's `_multi_slice`, and traces
-- without the mark), a step of another jitted function counting as none. JAX explains the cache misses of the user's functions only, so a
-- `defined_at` (from its explanation) marks the user's jit even when it compiled once outside
-- any step, as every function of a program recorded by `ember record` does. A torch.compile
-- frame (imported from TORCH_TRACE: it has a compile_id) is always the user's.
--
-- reads: spans
--
-- run_id      VARCHAR  the run
-- fun_name    VARCHAR  the jitted function's name
-- internal    BOOLEAN  true: a primitive JAX compiled for a run outside jit (not the user's jit)
-- compiles    BIGINT   its jit spans whose program XLA compiled
-- compile_ns  BIGINT   their total time (ns)
-- loads       BIGINT   its jit spans whose program JAX loaded from its persistent cache
--                      (persistent_cache 'hit': a load, not a compile)
SELECT jit_span.run_id, jit_span.start_attrs.fun_name AS fun_name,
    coalesce(bool_or(jit_span.end_attrs.outside_jit), false)
        OR bool_and(jit_span.end_attrs.retrace_reason IS NULL
            AND coalesce(len(jit_span.end_attrs.changes), 0) = 0
            AND jit_span.end_attrs.defined_at IS NULL
            AND parent_span.span_id IS NULL
            AND jit_span.end_attrs.compile_id IS NULL) AS internal,
    count(*) FILTER (WHERE jit_span.end_attrs.persistent_cache IS DISTINCT FROM 'hit')
        AS compiles,
    CAST(coalesce(sum(jit_span.duration_ns) FILTER (
        WHERE jit_span.end_attrs.persistent_cache IS DISTINCT FROM 'hit'), 0) AS BIGINT)
        AS compile_ns,
    count(*) FILTER (WHERE jit_span.end_attrs.persistent_cache = 'hit') AS loads
FROM spans jit_span
LEFT JOIN spans parent_span ON parent_span.run_id = jit_span.run_id
    AND parent_span.span_id = jit_span.parent_id
    AND parent_span.span_kind IN ('call', 'step')
    -- an automatic step of another function: a helper JAX compiled for that call (pmap's
    -- `_multi_slice`), not the user's (the user's nested jits are traced into the step's)
    AND (parent_span.start_attrs.fun_name IS NULL
        OR parent_span.start_attrs.fun_name = jit_span.start_attrs.fun_name)
WHERE jit_span.span_kind = 'jit'
GROUP BY ALL
