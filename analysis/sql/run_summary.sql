-- run_summary: one row per run: the headline numbers, defined once. `ember report`,
-- `ember run`'s summary and every dashboard page read them here; nothing else counts them.
--
-- reads: compiles, jit_calls, latency_samples, peak_memory
--
-- run_id                     VARCHAR        the run's id (`runs.run_id`, the trace's meta)
-- name                       VARCHAR        the run's readable name: its scenario tag, else model
--                                           tag, else entrypoint
-- started_at                 TIMESTAMP_NS?  when the run started (UTC; `runs.started_at`, from
--                                           meta.wall_time_ns)
-- model                      VARCHAR?       the model tag
-- phase                      VARCHAR?       infer | train (`runs.phase`)
-- host                       VARCHAR?       the host name the run ran on (`runs.host`)
-- backend                    VARCHAR?       JAX's platform: cpu | gpu | tpu (`runs.backend`, else
--                                           the process record's: a recorder that waits for
--                                           the program to start JAX reads it there)
-- tags                       VARCHAR?       the tags as JSON text
-- entrypoint                 VARCHAR?       the command that ran it, its arguments joined, unless
--                                           the program named one (`runs.entrypoint`)
-- file                       VARCHAR?       the trace file the run was read from (`runs.file`)
-- sync                       BOOLEAN?       true: work spans end when their results are ready;
--                                           false: at dispatch (`runs.sync`; a v1 trace is false)
-- calls                      BIGINT         finished model calls (call spans that ended, ok or
--                                           error)
-- failed_calls               BIGINT         calls that raised
-- steps                      BIGINT         finished step spans (JAX bridge)
-- compiles                   BIGINT         programs XLA compiled (`compiles.outcome` 'compile'):
--                                           of segments and of the user's jitted functions; a
--                                           program loaded from a persistent cache is a load
-- compile_ns                 BIGINT         the total time of the compiles counted in `compiles`
--                                           (ns)
-- loads                      BIGINT         programs read from a persistent or disk cache instead of
--                                           compiled (`compiles.outcome` 'load'): segments and the
--                                           user's jitted functions
-- load_ns                    BIGINT         the total time of those loads (ns)
-- eager_compiles             BIGINT         segments built to run eagerly (node by node: short
--                                           segments after a break); a cache miss that compiled
--                                           nothing
-- eager_compile_ns           BIGINT         their total build time (ns)
-- recompiles                 BIGINT         compiles (as above, loads not counted) after the first
--                                           program at the same position / of the same function
-- recompiled_after_eviction  BIGINT         recompiles of a key the cache had evicted (see
--                                           evictions)
-- jax_compiles               BIGINT         compiles of primitives JAX ran outside jit (see
--                                           jit_functions); their loads are in jax_loads
-- jax_loads                  BIGINT         programs of primitives run outside jit that JAX loaded
--                                           from its persistent cache
-- jax_primitives             BIGINT         how many different primitives (or JAX helpers) those
--                                           compiles were of
-- jax_compile_ns             BIGINT         the total time of JAX's compiles of primitives run
--                                           outside jit (ns)
-- compiled_keys              BIGINT         different keys compiled, over every compile (segment,
--                                           eager, jitted function, JAX primitive)
-- hits                       BIGINT         calls served from memory: segment cache hits, and
--                                           jitted calls JAX served from its in-memory cache
--                                           (jit_calls)
-- misses                     BIGINT         segment cache misses, and jitted calls that compiled
--                                           or loaded a program first (jit_calls)
-- evictions                  BIGINT         segment cache evictions
-- hit_rate                   DOUBLE?        hits / (hits + misses); NULL without lookups
-- disk_hits                  BIGINT         programs (segments, jitted functions, primitives) loaded
--                                           from a persistent cache: loads + jax_loads
-- disk_misses                BIGINT         programs looked up in a persistent cache and not found
--                                           there (they were compiled)
-- breaks                     BIGINT         graph break nodes run (break spans)
-- graph_break                BOOLEAN?       whether the compiled model has a graph break (compile
--                                           span), NULL if unknown
-- latency_of                 VARCHAR?       'call' when the run made calls, else 'step' when it had
--                                           steps, else NULL
-- latency_kind               VARCHAR?       'to results' (spans end when results are ready) |
--                                           'dispatch only' (spans end when JAX dispatched the
--                                           work: recorded with sync off, or a v1 trace)
-- latency_step               VARCHAR?       when latency_of is 'step': the step label the latency
--                                           describes, the run's main one (the most steps:
--                                           latency_samples); NULL otherwise
-- latency_spans              BIGINT         how many finished spans the latency describes: the
--                                           calls, else the main step label's steps
-- p50_ns                     DOUBLE?        the median call (else main step) duration (ns)
-- p90_ns                     DOUBLE?        the 90th percentile call (else main step) duration
-- p99_ns                     DOUBLE?        the 99th percentile call (else main step) duration
-- mean_ns                    DOUBLE?        the mean call (else main step) duration (ns)
-- compiling_calls            BIGINT         calls (else main steps) that compiled something on the
--                                           way (a segment cache miss, a jit compile) other than
--                                           loading it from a disk cache; p50_ns and the other
--                                           percentiles include them
-- loaded_calls               BIGINT         calls (else main steps) that missed the in-memory cache
--                                           but loaded every program they needed from a disk cache
--                                           (compiled nothing): not warm, not compiling
-- warm_calls                 BIGINT         calls (else main steps) that missed nothing and did not
--                                           fail: the steady state
-- warm_p50_ns                DOUBLE?        the median duration of the warm calls; NULL when there
--                                           are none
-- warm_p99_ns                DOUBLE?        the 99th percentile of the warm calls; NULL when there
--                                           are none
-- total_call_ns              BIGINT?        time in calls (else steps), summed
-- wall_ns                    BIGINT?        from the run's start to its last finished span (ns)
-- peak_tensor_bytes          BIGINT?        tensor accounting: highest live bytes from alloc/free
--                                           records
-- peak_device_bytes          BIGINT?        device readings: the device allocator's peak (or used)
--                                           bytes (memory_stats: GPU, TPU)
-- peak_live_arrays_bytes     BIGINT?        CPU readings: highest bytes of live JAX arrays
-- peak_rss_bytes             BIGINT?        the process's highest resident set
-- planned_peak_bytes         BIGINT?        the most XLA planned for one run of a compiled segment
--                                           (arguments + outputs + scratch - aliased,
--                                           memory_analysis)
-- peak_bytes                 BIGINT?        the headline peak (bytes): the device's own peak (else
--                                           used) reading, else on the CPU the process's RSS, else
--                                           tensors, else live arrays (peak_source says which);
--                                           NULL without memory data
-- peak_source                VARCHAR?       which reading peak_bytes is: 'device peak' | 'device
--                                           used' | 'RSS' | 'tensors' | 'live arrays'; NULL without
--                                           memory data
WITH
-- each CTE that counts has one row a run (runs LEFT JOIN what it counts): a run without
-- such records counts 0 there, so the SELECT below lists its columns as they are
ends AS (
    SELECT r.run_id,
        count(*) FILTER (WHERE span_kind = 'call') AS calls,
        count(*) FILTER (WHERE span_kind = 'call' AND status = 'error') AS failed_calls,
        count(*) FILTER (WHERE span_kind = 'step') AS steps,
        count(*) FILTER (WHERE span_kind = 'break') AS breaks,
        bool_or(attrs.graph_break) FILTER (WHERE span_kind = 'compile') AS graph_break,
        quantile_cont(duration_ns, 0.5) FILTER (WHERE span_kind = 'call') AS call_p50_ns,
        quantile_cont(duration_ns, 0.9) FILTER (WHERE span_kind = 'call') AS call_p90_ns,
        quantile_cont(duration_ns, 0.99) FILTER (WHERE span_kind = 'call') AS call_p99_ns,
        avg(duration_ns) FILTER (WHERE span_kind = 'call') AS call_mean_ns,
        sum(duration_ns) FILTER (WHERE span_kind = 'call') AS call_total_ns,
        sum(duration_ns) FILTER (WHERE span_kind = 'step') AS step_total_ns,
        max(ts_ns) AS wall_ns,
        -- summed as DECIMAL: four 64-bit sizes can overflow a BIGINT (NULL then)
        TRY_CAST(max(
            CAST(coalesce(attrs.memory.argument_bytes, 0) AS DECIMAL(38, 0))
            + coalesce(attrs.memory.output_bytes, 0)
            + coalesce(attrs.memory.temp_bytes, 0) - coalesce(attrs.memory.alias_bytes, 0)
        ) FILTER (WHERE span_kind = 'segment_compile' AND attrs.memory IS NOT NULL) AS BIGINT)
            AS planned_peak_bytes
    FROM runs r LEFT JOIN span_end s ON s.run_id = r.run_id GROUP BY r.run_id
),
cache_counts AS (
    SELECT r.run_id,
        count(*) FILTER (WHERE action = 'hit') AS hits,
        count(*) FILTER (WHERE action = 'miss') AS misses,
        count(*) FILTER (WHERE action = 'evict') AS evictions
    FROM runs r LEFT JOIN cache c ON c.run_id = r.run_id GROUP BY r.run_id
),
jit_call_counts AS (
    SELECT r.run_id,
        CAST(coalesce(sum(j.hits), 0) AS BIGINT) AS hits,
        CAST(coalesce(sum(j.misses), 0) AS BIGINT) AS misses
    FROM runs r LEFT JOIN jit_calls j ON j.run_id = r.run_id GROUP BY r.run_id
),
comp AS (
    -- compiles.outside_jit is jit_functions.internal for the function (read here rather
    -- than joining jit_functions again)
    SELECT c.run_id,
        coalesce(c.outside_jit, false) AS internal,
        c.outcome = 'eager build' AS eager,
        c.outcome = 'load' AS loaded,
        c.compile_index, c.compile_ns, c.disk_cache, c.position, c.fun_name, c.key
    FROM compiles c
),
comp_counts AS (
    -- a run without compiles: one row of NULLs here, which no filter below lets through
    SELECT r.run_id,
        count(*) FILTER (WHERE NOT internal AND NOT eager AND NOT loaded) AS compiles,
        CAST(coalesce(sum(compile_ns) FILTER (WHERE NOT internal AND NOT eager AND NOT loaded),
            0) AS BIGINT) AS compile_ns,
        count(*) FILTER (WHERE NOT internal AND loaded) AS loads,
        CAST(coalesce(sum(compile_ns) FILTER (WHERE NOT internal AND loaded), 0) AS BIGINT)
            AS load_ns,
        count(*) FILTER (WHERE eager) AS eager_compiles,
        CAST(coalesce(sum(compile_ns) FILTER (WHERE eager), 0) AS BIGINT) AS eager_compile_ns,
        count(*) FILTER (WHERE NOT internal AND NOT eager AND NOT loaded AND compile_index > 1)
            AS recompiles,
        count(*) FILTER (WHERE internal AND NOT loaded) AS jax_compiles,
        count(*) FILTER (WHERE internal AND loaded) AS jax_loads,
        count(DISTINCT fun_name) FILTER (WHERE internal) AS jax_primitives,
        CAST(coalesce(sum(compile_ns) FILTER (WHERE internal AND NOT loaded), 0) AS BIGINT)
            AS jax_compile_ns,
        count(DISTINCT key) AS compiled_keys,
        count(*) FILTER (WHERE loaded) AS disk_hits,
        count(*) FILTER (WHERE disk_cache = 'miss' AND NOT eager) AS disk_misses
    FROM runs r LEFT JOIN comp k ON k.run_id = r.run_id GROUP BY r.run_id
),
missed_after_eviction AS (
    -- a miss of a key compiled here before, evicted since its previous miss (the cache's
    -- eviction count of the key, kept at ingest, went up); eager positions left out
    SELECT m.run_id
    FROM (
        SELECT run_id, position, evictions,
            lag(evictions) OVER (PARTITION BY run_id, source, position, lookup_key
                ORDER BY seq) AS evictions_at_previous_miss
        FROM cache WHERE action = 'miss'
    ) m
    ANTI JOIN (
        SELECT DISTINCT run_id, attrs.position AS position FROM span_end
        WHERE span_kind = 'segment_compile' AND attrs.compiled = false
    ) eager ON eager.run_id = m.run_id AND eager.position = m.position
    WHERE m.evictions > m.evictions_at_previous_miss
),
after_eviction AS (
    SELECT r.run_id, count(m.run_id) AS recompiled_after_eviction
    FROM runs r LEFT JOIN missed_after_eviction m ON m.run_id = r.run_id GROUP BY r.run_id
),
warm AS (
    SELECT r.run_id,
        count(*) FILTER (WHERE compiled AND NOT loaded) AS compiling_calls,
        count(*) FILTER (WHERE loaded) AS loaded_calls,
        count(*) FILTER (WHERE warm) AS warm_calls,
        quantile_cont(duration_ns, 0.5) FILTER (WHERE warm) AS warm_p50_ns,
        quantile_cont(duration_ns, 0.99) FILTER (WHERE warm) AS warm_p99_ns,
        -- the main step label's steps only (latency_samples): not a median of two functions
        any_value(step) AS latency_step,
        count(s.span_id) AS latency_spans,
        quantile_cont(duration_ns, 0.5) FILTER (WHERE span_kind = 'step') AS step_p50_ns,
        quantile_cont(duration_ns, 0.9) FILTER (WHERE span_kind = 'step') AS step_p90_ns,
        quantile_cont(duration_ns, 0.99) FILTER (WHERE span_kind = 'step') AS step_p99_ns,
        avg(duration_ns) FILTER (WHERE span_kind = 'step') AS step_mean_ns
    FROM runs r LEFT JOIN (
        SELECT *, NOT compiled AND status IS DISTINCT FROM 'error' AS warm
        FROM latency_samples
    ) s ON s.run_id = r.run_id GROUP BY r.run_id
),
process_backends AS (
    SELECT run_id, any_value(backend) AS backend FROM process GROUP BY run_id
),
peaks AS (
    SELECT run_id,
        max(peak_bytes) FILTER (WHERE series = 'tensors') AS peak_tensor_bytes,
        max(peak_bytes) FILTER (WHERE source = 'memory_stats' AND series = 'peak')
            AS device_peak,
        max(peak_bytes) FILTER (WHERE source = 'memory_stats' AND series = 'used')
            AS device_used,
        max(peak_bytes) FILTER (WHERE source = 'live_arrays' AND series IN ('used', 'peak'))
            AS peak_live_arrays_bytes,
        max(peak_bytes) FILTER (WHERE series = 'rss') AS peak_rss_bytes
    FROM peak_memory GROUP BY run_id
)
SELECT
    r.run_id,
    coalesce(r.tags ->> 'scenario', r.tags ->> 'model', r.entrypoint) AS name,
    r.started_at,
    r.tags ->> 'model' AS model,
    r.phase,
    r.host,
    coalesce(r.backend, pb.backend) AS backend,
    CAST(r.tags AS VARCHAR) AS tags,
    r.entrypoint,
    r.file,
    r.sync,
    e.calls,
    e.failed_calls,
    e.steps,
    k.compiles,
    k.compile_ns,
    k.loads,
    k.load_ns,
    k.eager_compiles,
    k.eager_compile_ns,
    k.recompiles,
    a.recompiled_after_eviction,
    k.jax_compiles,
    k.jax_loads,
    k.jax_primitives,
    k.jax_compile_ns,
    k.compiled_keys,
    c.hits + j.hits AS hits,
    c.misses + j.misses AS misses,
    c.evictions,
    CASE WHEN c.hits + j.hits + c.misses + j.misses > 0
        THEN (c.hits + j.hits) / (c.hits + j.hits + c.misses + j.misses) END AS hit_rate,
    k.disk_hits,
    k.disk_misses,
    e.breaks,
    e.graph_break,
    CASE WHEN e.calls > 0 THEN 'call' WHEN e.steps > 0 THEN 'step' END AS latency_of,
    CASE WHEN e.calls > 0 OR e.steps > 0
        THEN CASE WHEN r.sync THEN 'to results' ELSE 'dispatch only' END END AS latency_kind,
    CASE WHEN e.calls = 0 AND e.steps > 0 THEN w.latency_step END AS latency_step,
    w.latency_spans,
    CASE WHEN e.calls > 0 THEN e.call_p50_ns ELSE w.step_p50_ns END AS p50_ns,
    CASE WHEN e.calls > 0 THEN e.call_p90_ns ELSE w.step_p90_ns END AS p90_ns,
    CASE WHEN e.calls > 0 THEN e.call_p99_ns ELSE w.step_p99_ns END AS p99_ns,
    CASE WHEN e.calls > 0 THEN e.call_mean_ns ELSE w.step_mean_ns END AS mean_ns,
    w.compiling_calls,
    w.loaded_calls,
    w.warm_calls,
    w.warm_p50_ns,
    w.warm_p99_ns,
    CAST(CASE WHEN e.calls > 0 THEN e.call_total_ns ELSE e.step_total_ns END AS BIGINT)
        AS total_call_ns,
    e.wall_ns,
    p.peak_tensor_bytes,
    coalesce(p.device_peak, p.device_used) AS peak_device_bytes,
    p.peak_live_arrays_bytes,
    p.peak_rss_bytes,
    e.planned_peak_bytes,
    coalesce(p.device_peak, p.device_used, p.peak_rss_bytes, p.peak_tensor_bytes,
        p.peak_live_arrays_bytes) AS peak_bytes,
    CASE
        WHEN p.device_peak IS NOT NULL THEN 'device peak'
        WHEN p.device_used IS NOT NULL THEN 'device used'
        WHEN p.peak_rss_bytes IS NOT NULL THEN 'RSS'
        WHEN p.peak_tensor_bytes IS NOT NULL THEN 'tensors'
        WHEN p.peak_live_arrays_bytes IS NOT NULL THEN 'live arrays'
    END AS peak_source
FROM runs r
LEFT JOIN ends e ON e.run_id = r.run_id
LEFT JOIN cache_counts c ON c.run_id = r.run_id
LEFT JOIN jit_call_counts j ON j.run_id = r.run_id
LEFT JOIN comp_counts k ON k.run_id = r.run_id
LEFT JOIN after_eviction a ON a.run_id = r.run_id
LEFT JOIN warm w ON w.run_id = r.run_id
LEFT JOIN peaks p ON p.run_id = r.run_id
LEFT JOIN process_backends pb ON pb.run_id = r.run_id
