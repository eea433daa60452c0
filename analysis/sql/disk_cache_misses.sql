-- disk_cache_misses: one row per compile that looked in a persistent (disk) cache and did
-- not find its program there: a segment compiled with a cache_dir, or a jitted function
-- compiled while JAX's persistent compilation cache was on (not the jit compiles inside a
-- segment's compile: those are the segment's own program, its row already).
--
-- reads: spans
--
-- run_id       VARCHAR  the run
-- source       VARCHAR  the model source (its path or Hub address); NULL for a jitted function
-- position     BIGINT   the segment's graph position (NULL for a jitted function)
-- fun_name     VARCHAR  the jitted function (NULL for a segment)
-- span_id      BIGINT   the segment_compile (or jit) span
-- ts_ns        BIGINT   when the compile started (ns since run start)
-- compile_ns   BIGINT   how long it took (ns): what the miss cost
-- shapes_text  VARCHAR  the segment's argument shapes
-- changed      BOOLEAN  true when the cache held the same segment (position, argument shapes,
--                       static values) under another key: the key parts listed in `reason` changed
-- reason       VARCHAR  the key parts that changed (`jaxlib 0.10.1 -> 0.10.2; model 1a.. -> 3c..`),
--                       else why there was nothing to find: 'new key: not in this cache (a first
--                       run fills it; a new shape or static value)'
-- model        VARCHAR  the key's model part: a digest of the model's bytes (first 16 hex); NULL
--                       for a jitted function (JAX's key has the program itself instead)
-- ember        VARCHAR  the key's Ember version; NULL for a jitted function
-- runtime      VARCHAR  the key's digest of ember.runtime's sources (first 16 hex); NULL for a
--                       jitted function
-- jax          VARCHAR  the key's JAX version
-- jaxlib       VARCHAR  the key's jaxlib version
-- backend      VARCHAR  the key's JAX platform: cpu | gpu | tpu
-- device       VARCHAR  the key's device kind (JAX's device_kind: 'cpu', 'NVIDIA H100 80GB HBM3')
-- xla_flags    VARCHAR  the key's XLA_FLAGS environment variable ('' when unset)
SELECT
    s.run_id,
    s.source,
    s.position,
    CASE WHEN s.span_kind = 'jit' THEN s.start_attrs.fun_name END AS fun_name,
    s.span_id,
    s.start_ns AS ts_ns,
    s.duration_ns AS compile_ns,
    CASE WHEN s.span_kind = 'segment_compile' THEN ember_shapes_text(s.start_attrs.shapes) END
        AS shapes_text,
    s.end_attrs.disk_miss IS NOT NULL AS changed,
    coalesce(
        s.end_attrs.disk_miss,
        'new key: not in this cache (a first run fills it; a new shape or static value)'
    ) AS reason,
    s.end_attrs.disk_key.model AS model,
    s.end_attrs.disk_key.ember AS ember,
    s.end_attrs.disk_key.runtime AS runtime,
    s.end_attrs.disk_key.jax AS jax,
    s.end_attrs.disk_key.jaxlib AS jaxlib,
    s.end_attrs.disk_key.backend AS backend,
    s.end_attrs.disk_key.device AS device,
    s.end_attrs.disk_key.xla_flags AS xla_flags
FROM spans s
LEFT JOIN span_start p ON p.run_id = s.run_id AND p.span_id = s.parent_id
WHERE (s.span_kind = 'segment_compile' AND s.end_attrs.disk_cache = 'miss'
        AND s.end_attrs.compiled IS DISTINCT FROM false)
    OR (s.span_kind = 'jit' AND s.end_attrs.persistent_cache = 'miss'
        AND p.span_kind IS DISTINCT FROM 'segment_compile')
