-- compiles: one row per program a run needed and did not find in memory: a compile, a load
-- from a persistent cache or an eager build (`outcome` says which), of a segment (a cache miss, or a segment compiled ahead of
-- time when the model was compiled) or of a jitted function (a 'jit' span from the JAX
-- bridge), in order per position / function.
--
-- reads: cache_lookups, jit_functions, spans
--
-- run_id            VARCHAR       the run
-- source            VARCHAR       the model source (its path or Hub address); NULL for a jit
--                                 compile and for a model loaded from memory (a ModelProto or
--                                 bytes)
-- position          BIGINT        the segment's graph position (NULL for a jit compile)
-- fun_name          VARCHAR       the jitted function (NULL for a segment)
-- compile_index     BIGINT        1 for the first compile at this position / of this function, then
--                                 2, 3...
-- ts_ns             BIGINT        when the compile began (ns since the run started): the cache
--                                 lookup that missed; for a compile ahead of time or a jit compile,
--                                 its span's start
-- ts                TIMESTAMP_NS  ts_ns as an absolute time (TIMESTAMP_NS, UTC)
-- call_span_id      BIGINT        the call that compiled (for a compile ahead of time: the compile
--                                 span)
-- key               VARCHAR       the segment's cache key, as recorded ('0cd6cfade450c3a9') or
--                                 built from shapes and statics (ember_key); for a jit compile the
--                                 function's name
-- shapes            STRUCT[]      the segment's argument shapes, a list of {name, shape, dtype,
--                                 sequence} (NULL for a jit compile)
-- statics           STRUCT[]      the static values the segment was specialised on (part of its
--                                 key), a list of {name, value}; NULL for a compile ahead of time
--                                 and a jit compile
-- shapes_text       VARCHAR       the argument shapes as text, 'input_ids[1,17]:int64' (NULL for a
--                                 jit compile)
-- compile_ns        BIGINT        duration of the segment_compile (or jit) span; NULL if none
--                                 matched
-- compiled          BOOLEAN       false when the segment runs eagerly (fewer than 20 nodes after a
--                                 break)
-- disk_cache        VARCHAR       hit | miss | NULL: whether the program came from the disk cache
-- stop              VARCHAR       where the segment stops: a break position or 'end'
-- jit_changes       STRUCT[]      for jit compiles, what JAX (or torch) said changed (list of {arg,
--                                 what, old, new, dim}; dim: the dimension of a one-dimension
--                                 shape change)
-- retrace_reason    VARCHAR       for jit compiles, JAX's explanation
-- jax_explanation   VARCHAR       for jit compiles, JAX's own words when Ember could not type them
-- recompile_limit_hit  BOOLEAN    a torch.compile compile refused at the frame's recompile limit:
--                                 the frame runs eagerly from then on (torch's analogue of an
--                                 eviction)
-- outside_jit       BOOLEAN       for jit compiles: JAX's own compile of a primitive (or helper)
--                                 run outside jit (see jit_functions); NULL for segments
-- evictions_before  BIGINT        how many times the cache evicted this key at this position before
--                                 this compile (NULL for a jit compile)
-- ahead_of_time     BOOLEAN       true: compiled while the model was compiled, for its own input
--                                 shapes, with no cache lookup (calls at those shapes then skip the
--                                 cache: no hits)
-- outcome           VARCHAR       what the row is, in the words of docs/concepts/compilation.md:
--                                 'compile' (XLA built the program) | 'load' (the program was read
--                                 from a persistent or disk cache: disk_cache 'hit', nothing
--                                 compiled) | 'eager build' (a short segment set up to run op by
--                                 op: compiled false). Every count of compiles reads this column
WITH misses AS (
    SELECT
        run_id, source, position, ts_ns, call_span_id, key, shapes, statics, shapes_text, seq,
        evictions
    FROM cache_lookups
    WHERE action = 'miss'
),
seg AS (
    SELECT
        span_row.run_id,
        span_row.span_id,
        span_row.source,
        span_row.start_attrs.key AS key,
        span_row.start_attrs.shapes AS shapes,
        span_row.parent_id,
        span_row.start_ns,
        span_row.position,
        span_row.duration_ns,
        span_row.end_attrs.compiled AS compiled,
        span_row.end_attrs.disk_cache AS disk_cache,
        span_row.end_attrs.stop AS stop
    FROM spans span_row
    WHERE span_row.span_kind = 'segment_compile'
),
matched AS (
    -- each miss, and the segment_compile span that followed it at its position
    SELECT
        m.run_id,
        m.source,
        m.position,
        m.ts_ns,
        m.call_span_id,
        m.key,
        m.shapes,
        m.statics,
        m.shapes_text,
        m.evictions AS evictions_before,
        false AS ahead_of_time,
        g.span_id AS seg_span_id,
        m.seq
    FROM misses m
    ASOF LEFT JOIN seg g
        ON g.run_id = m.run_id
        AND g.position = m.position
        AND g.start_ns >= m.ts_ns
),
segment_compiles AS (
    -- each miss with the segment_compile span it led to, and each span no miss led to
    -- (compiled with the model, ahead of any call: ahead_of_time), in the columns of a
    -- compile; one join that reads `matched` and `seg` once each (Spark plans a CTE again
    -- at each use)
    SELECT
        coalesce(m.run_id, g.run_id) AS run_id,
        CASE WHEN m.run_id IS NULL THEN g.source ELSE m.source END AS source,
        CASE WHEN m.run_id IS NULL THEN g.position ELSE m.position END AS position,
        CAST(NULL AS VARCHAR) AS fun_name,
        CASE WHEN m.run_id IS NULL THEN g.start_ns ELSE m.ts_ns END AS ts_ns,
        CASE WHEN m.run_id IS NULL THEN g.parent_id ELSE m.call_span_id END AS call_span_id,
        CASE WHEN m.run_id IS NULL THEN g.key ELSE m.key END AS key,
        CASE WHEN m.run_id IS NULL THEN g.shapes ELSE m.shapes END AS shapes,
        m.statics,
        CASE WHEN m.run_id IS NULL THEN ember_shapes_text(g.shapes) ELSE m.shapes_text END
            AS shapes_text,
        g.duration_ns AS compile_ns,
        g.compiled,
        g.disk_cache,
        g.stop,
        CAST(NULL AS STRUCT("arg" VARCHAR, "what" VARCHAR, "old" VARCHAR, "new" VARCHAR,
            "dim" BIGINT)[])
            AS jit_changes,
        CAST(NULL AS VARCHAR) AS retrace_reason,
        CAST(NULL AS VARCHAR) AS jax_explanation,
        CAST(NULL AS BOOLEAN) AS recompile_limit_hit,
        CASE WHEN m.run_id IS NULL THEN CAST(0 AS BIGINT) ELSE m.evictions_before END
            AS evictions_before,
        m.run_id IS NULL AS ahead_of_time,
        CASE WHEN m.run_id IS NULL THEN g.span_id ELSE m.seg_span_id END AS seg_span_id,
        CASE WHEN m.run_id IS NULL THEN CAST(0 AS BIGINT) ELSE m.seq END AS seq
    FROM matched m
    FULL JOIN seg g ON g.run_id = m.run_id AND g.span_id = m.seg_span_id
),
jit_compiles AS (
    SELECT
        span_row.run_id,
        span_row.source,
        CAST(NULL AS BIGINT) AS position,
        span_row.start_attrs.fun_name AS fun_name,
        span_row.start_ns AS ts_ns,
        span_row.parent_id AS call_span_id,
        span_row.start_attrs.fun_name AS key,
        CAST(NULL AS STRUCT("name" VARCHAR, "shape" BIGINT[], "dtype" VARCHAR,
            "sequence" STRUCT("shape" BIGINT[], "dtype" VARCHAR)[])[]) AS shapes,
        CAST(NULL AS STRUCT("name" VARCHAR, "value" JSON)[]) AS statics,
        CAST(NULL AS VARCHAR) AS shapes_text,
        span_row.duration_ns AS compile_ns,
        true AS compiled,
        span_row.end_attrs.persistent_cache AS disk_cache,
        CAST(NULL AS VARCHAR) AS stop,
        span_row.end_attrs.changes AS jit_changes,
        span_row.end_attrs.retrace_reason AS retrace_reason,
        span_row.end_attrs.jax_explanation AS jax_explanation,
        span_row.end_attrs.recompile_limit_hit AS recompile_limit_hit,
        CAST(NULL AS BIGINT) AS evictions_before,
        false AS ahead_of_time,
        span_row.span_id AS seg_span_id,
        row_number() OVER (PARTITION BY span_row.run_id, span_row.start_attrs.fun_name ORDER BY span_row.start_ns)
            AS seq
    FROM spans span_row
    WHERE span_row.span_kind = 'jit'
),
all_compiles AS (
    SELECT * FROM segment_compiles
    UNION ALL
    SELECT * FROM jit_compiles
)
SELECT
    a.run_id,
    a.source,
    a.position,
    a.fun_name,
    row_number() OVER (
        PARTITION BY a.run_id, a.source, a.position, a.fun_name ORDER BY a.ts_ns, a.seq
    ) AS compile_index,
    a.ts_ns,
    ember_at(r.wall_time_ns, a.ts_ns) AS ts,
    a.call_span_id,
    a.key,
    a.shapes,
    a.statics,
    a.shapes_text,
    a.compile_ns,
    a.compiled,
    a.disk_cache,
    a.stop,
    a.jit_changes,
    a.retrace_reason,
    a.jax_explanation,
    coalesce(a.recompile_limit_hit, false) AS recompile_limit_hit,
    j.internal AS outside_jit,
    a.evictions_before,
    a.ahead_of_time,
    CASE
        WHEN a.compiled IS NOT DISTINCT FROM false AND a.position IS NOT NULL THEN 'eager build'
        WHEN a.disk_cache = 'hit' THEN 'load'
        ELSE 'compile'
    END AS outcome
FROM all_compiles a
LEFT JOIN runs r ON r.run_id = a.run_id
LEFT JOIN jit_functions j ON j.run_id = a.run_id AND j.fun_name = a.fun_name
