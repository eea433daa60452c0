-- torch_compiles: one row per torch.compile frame compile (runs imported from TORCH_TRACE
-- logs: `ember import torch-trace`), with the facts only torch has. `compiles` and
-- `recompiles` hold these compiles too, beside segments and JAX jit compiles.
--
-- reads: spans
--
-- run_id               VARCHAR  the run
-- rank                 BIGINT   the process's rank in a torch.distributed job (NULL: not
--                               distributed)
-- compile_id           VARCHAR  torch's id: frame/compile ('0/1'), '_N' for attempt N
-- fun_name             VARCHAR  the compiled function ('f', 'torch_dynamo_resume_in_f_at_38' after
--                               a graph break, 'loss_fn (backward)' for its backward graph)
-- defined_at           VARCHAR  file:line of the function
-- ts_ns                BIGINT   when it started (ns since the run began)
-- compile_ns           BIGINT   how long it took, all phases (ns)
-- dynamo_ns            BIGINT   its Dynamo tracing time (ns; NULL when the log lacks it)
-- aot_ns               BIGINT   its AOTAutograd time (ns; NULL when the log lacks it)
-- inductor_ns          BIGINT   its Inductor (backend compile) time (ns; NULL when the log lacks
--                               it)
-- guard_count          BIGINT   guards torch installed on the frame
-- cache_size           BIGINT   compiled entries the frame had before this compile
-- fx_graph_cache       VARCHAR  hit | miss | NULL: whether Inductor's FX graph cache had the graph
--                               (hit: every graph of the compile; NULL: no lookup logged)
-- aot_autograd_cache   VARCHAR  hit | miss | NULL: the same for the AOTAutograd cache
-- cache_lookups        STRUCT[] each lookup: {cache: fx_graph | aotautograd, action: hit | miss |
--                               bypass, key: torch's cache key (NULL: the log lacks it),
--                               time_saved_ns: on a hit, the compile time it saved (torch's estimate)}
-- retrace_reason       VARCHAR  why it compiled again ('x dim 0: 8 -> 16', 'guard failed: ...')
-- failed               BOOLEAN  true: the compile failed (fail_type, fail_reason say why)
-- fail_type            VARCHAR  the failed compile's exception type
-- fail_reason          VARCHAR  the failed compile's reason
-- recompile_limit_hit  BOOLEAN  true: torch refused to compile the frame again (cache_size reached
--                               recompile_limit, given): the frame runs eagerly from then on,
--                               torch's analogue of a cache that evicts (every new input runs
--                               uncompiled)
-- recompile_limit      BIGINT   torch's recompile limit, when given
-- outcome              VARCHAR  for a person: 'compiled', 'compiled from the caches', 'failed:
--                               <fail_type>', or 'recompile limit (N) reached: runs eagerly from now'
SELECT
    s.run_id,
    TRY_CAST(json_extract_string(r.tags, '$.rank') AS BIGINT) AS rank,
    s.end_attrs.compile_id AS compile_id,
    s.start_attrs.fun_name AS fun_name,
    s.end_attrs.defined_at AS defined_at,
    s.start_ns AS ts_ns,
    s.duration_ns AS compile_ns,
    s.end_attrs.tracing_ns AS dynamo_ns,
    s.end_attrs.lowering_ns AS aot_ns,
    s.end_attrs.backend_compile_ns AS inductor_ns,
    s.end_attrs.guard_count AS guard_count,
    s.end_attrs.cache_size AS cache_size,
    s.end_attrs.persistent_cache AS fx_graph_cache,
    CASE
        -- NULL first: len(NULL) is NULL on DuckDB and -1 on Spark
        WHEN s.end_attrs.torch_caches IS NULL
            OR len(list_filter(s.end_attrs.torch_caches, lambda x: x.cache = 'aotautograd')) = 0
            THEN NULL
        WHEN len(list_filter(s.end_attrs.torch_caches,
            lambda x: x.cache = 'aotautograd' AND x.action <> 'hit')) = 0 THEN 'hit'
        ELSE 'miss'
    END AS aot_autograd_cache,
    s.end_attrs.torch_caches AS cache_lookups,
    s.end_attrs.retrace_reason AS retrace_reason,
    s.status = 'error' AS failed,
    s.error_kind AS fail_type,
    s.error_reason AS fail_reason,
    coalesce(s.end_attrs.recompile_limit_hit, false) AS recompile_limit_hit,
    s.end_attrs.recompile_limit AS recompile_limit,
    CASE
        WHEN coalesce(s.end_attrs.recompile_limit_hit, false)
            THEN 'recompile limit (' || coalesce(CAST(s.end_attrs.recompile_limit AS VARCHAR), '?')
                || ') reached: runs eagerly from now'
        WHEN s.status = 'error' THEN 'failed: ' || coalesce(s.error_kind, '?')
        WHEN s.end_attrs.torch_caches IS NOT NULL AND len(s.end_attrs.torch_caches) > 0
            AND len(list_filter(s.end_attrs.torch_caches,
            lambda x: x.action <> 'hit')) = 0 THEN 'compiled from the caches'
        ELSE 'compiled'
    END AS outcome
FROM spans s
LEFT JOIN runs r ON r.run_id = s.run_id
WHERE s.span_kind = 'jit' AND s.end_attrs.compile_id IS NOT NULL
