-- recompiles: one row per program after the first at a position (or of a jitted function),
-- with the part of the key that changed since the previous one there. `outcome` says whether
-- XLA compiled it ('compile': a recompile) or a persistent cache had it ('load').
--
-- reads: compiles
--
-- run_id                VARCHAR       the run
-- source                VARCHAR       the model source (its path or Hub address); NULL for a jitted
--                                     function
-- position              BIGINT        the segment position compiled again (NULL for a jitted
--                                     function)
-- fun_name              VARCHAR       the jitted function compiled again (NULL for a segment)
-- compile_index         BIGINT        which compile at this position / of this function: 2, 3...
--                                     (as in `compiles`; never 1 here)
-- ts_ns                 BIGINT        when this compile began (ns since the run started;
--                                     `compiles.ts_ns`)
-- ts                    TIMESTAMP_NS  ts_ns as an absolute time (TIMESTAMP_NS, UTC)
-- call_span_id          BIGINT        the call that compiled again (for a jit compile the span it
--                                     ran in, NULL at the top)
-- key                   VARCHAR       this compile's cache key (as in `compiles.key`; a jitted
--                                     function's name)
-- shapes_text           VARCHAR       this compile's argument shapes as text,
--                                     'input_ids[1,23]:int64' (NULL for a jitted function)
-- compile_ns            BIGINT        how long this compile took (ns; NULL if no compile span
--                                     matched)
-- previous_key          VARCHAR       the key of the previous compile at this position
-- previous_shapes_text  VARCHAR       the shapes of the previous compile at this position
-- after_eviction        BOOLEAN       true when this exact key was compiled before here and the
--                                     cache evicted it since (the cache was too small for the keys
--                                     in use: see cache_what_if)
-- change                VARCHAR       what changed first: shape | rank | dtype | static | new_arg |
--                                     removed_arg | after_eviction | same_key (compiled before,
--                                     never evicted: another compiled model of the same source) |
--                                     jit:<what> | outside_jit (JAX compiled a primitive it ran
--                                     outside jit again: see outside_jit) | recompile_limit
--                                     (torch.compile refused to compile the frame again: it runs
--                                     eagerly from then on, torch's eviction) | other
-- arg                   VARCHAR       the input (argument or static value) that changed
-- dim                   BIGINT        the dimension (0-based) for a shape change (a torch.compile
--                                     recompile's too), else NULL
-- old_value             VARCHAR       the first change's value before, as text: a size ('17'), a
--                                     dtype, a rank, a static value, a shape JAX names
--                                     ('f32[32,8]'); NULL for a new argument
-- new_value             VARCHAR       the first change's value after, as text ('23'); NULL for a
--                                     removed argument
-- changes               STRUCT[]      every change, as a list of {change, arg, dim, old_value,
--                                     new_value}
-- reason                VARCHAR       for a person: 'input_ids dim 1: 17 -> 23', several joined by
--                                     '; ', prefixed 're-compile after eviction: ' when
--                                     after_eviction ('recompile limit reached, runs eagerly from
--                                     now: ' at torch's limit); what JAX reported
--                                     (jax_explanation) when the key looks unchanged; a
--                                     control-flow condition reads 'If_0 condition: True -> False'
-- outside_jit           BOOLEAN       true: a compile of a primitive JAX ran outside jit (not the
--                                     user's jit; `compiles.outside_jit`), grouped apart by the
--                                     report
-- compiled              BOOLEAN       as in `compiles`: false for a segment that runs eagerly
--                                     (fewer than 20 nodes after a break), which compiles nothing
-- outcome               VARCHAR       as in `compiles`: 'compile' | 'load' (this program came
--                                     from a persistent cache: a retrace, not a recompile) |
--                                     'eager build'; run_summary.recompiles counts 'compile' rows
WITH c0 AS MATERIALIZED (
    SELECT
        *,
        lag(key) OVER w AS previous_key,
        lag(shapes) OVER w AS previous_shapes,
        lag(statics) OVER w AS previous_statics,
        lag(shapes_text) OVER w AS previous_shapes_text,
        CASE WHEN position IS NOT NULL THEN lag(ts_ns) OVER same_key END AS same_key_before_ns,
        CASE WHEN position IS NOT NULL THEN lag(evictions_before) OVER same_key END
            AS evictions_at_key_before
    FROM compiles
    WINDOW w AS (PARTITION BY run_id, source, position, fun_name ORDER BY compile_index),
        same_key AS (PARTITION BY run_id, source, position, key ORDER BY compile_index)
),
c AS MATERIALIZED (
    -- after an eviction: the cache evicted this key between its previous compile here and
    -- this one (the evictions counted at ingest went up since)
    SELECT
        c0.*,
        c0.same_key_before_ns IS NOT NULL AS key_seen_before,
        c0.same_key_before_ns IS NOT NULL
            AND coalesce(c0.evictions_before > c0.evictions_at_key_before, false)
            AS after_eviction
    FROM c0
),
re AS (
    SELECT
        *,
        list_transform(shapes, lambda a: a.name)
            = list_transform(previous_shapes, lambda a: a.name) AS same_names
    FROM c
    WHERE compile_index > 1
),
paired AS (
    -- each argument beside the previous compile's: the same arguments in the same order
    -- (the usual case) pair by position; otherwise by name, an argument with no twin
    -- being new (prev NULL) or gone (arg NULL). Lists, not unnest and joins: each CTE is
    -- read once, so Spark (which inlines a CTE at each use) plans `compiles` once
    SELECT
        *,
        CASE
            WHEN position IS NULL THEN NULL
            WHEN same_names THEN list_transform(range(len(shapes)),
                lambda i: {'arg': shapes[i + 1], 'prev': previous_shapes[i + 1]})
            ELSE list_concat(
                coalesce(flatten(list_transform(shapes, lambda a:
                    CASE
                        WHEN len(coalesce(list_filter(previous_shapes,
                            lambda p: p.name = a.name), [])) = 0
                            -- a typed NULL: an argument of the same type
                            THEN [{'arg': a, 'prev': CASE WHEN false THEN a END}]
                        ELSE list_transform(list_filter(previous_shapes,
                            lambda p: p.name = a.name), lambda p: {'arg': a, 'prev': p})
                    END)), []),
                coalesce(list_transform(list_filter(previous_shapes, lambda p:
                    len(coalesce(list_filter(shapes, lambda a: a.name = p.name), [])) = 0),
                    lambda p: {'arg': CASE WHEN false THEN p END, 'prev': p}), [])
            )
        END AS pairs
    FROM re
),
changed AS (
    -- every change as {ord, arg, dim, change, old_value, new_value}: new and removed
    -- arguments, dtype, rank, then per-dimension size changes, statics, what JAX said.
    -- A candidate whose change is NULL did not happen and is dropped
    SELECT
        *,
        list_concat(
            coalesce(flatten(list_transform(pairs, lambda pr: list_filter(list_concat(
                [
                    {'ord': 0, 'arg': pr.arg.name, 'dim': NULL::BIGINT,
                        'change': CASE WHEN pr.prev IS NULL THEN 'new_arg' END,
                        'old_value': NULL::VARCHAR,
                        'new_value': coalesce('[' || array_to_string(pr.arg.shape, ',') || ']', '')
                            || coalesce(':' || pr.arg.dtype, '')},
                    {'ord': 4, 'arg': pr.prev.name, 'dim': NULL::BIGINT,
                        'change': CASE WHEN pr.arg IS NULL THEN 'removed_arg' END,
                        'old_value': coalesce('[' || array_to_string(pr.prev.shape, ',') || ']', ''),
                        'new_value': NULL::VARCHAR},
                    {'ord': 1, 'arg': pr.arg.name, 'dim': NULL::BIGINT,
                        'change': CASE WHEN pr.arg IS NOT NULL AND pr.prev IS NOT NULL
                            AND pr.prev.dtype IS DISTINCT FROM pr.arg.dtype THEN 'dtype' END,
                        'old_value': pr.prev.dtype, 'new_value': pr.arg.dtype},
                    {'ord': 2, 'arg': pr.arg.name, 'dim': NULL::BIGINT,
                        'change': CASE WHEN pr.arg IS NOT NULL AND pr.prev IS NOT NULL
                            AND len(pr.prev.shape) IS DISTINCT FROM len(pr.arg.shape)
                            THEN 'rank' END,
                        'old_value': CAST(len(pr.prev.shape) AS VARCHAR),
                        'new_value': CAST(len(pr.arg.shape) AS VARCHAR)}
                ],
                list_transform(range(CASE
                    WHEN pr.arg IS NOT NULL AND pr.prev IS NOT NULL
                        AND len(pr.prev.shape) = len(pr.arg.shape)
                        AND pr.prev.shape <> pr.arg.shape
                        THEN len(pr.arg.shape)
                    ELSE 0
                END), lambda i: {'ord': 3, 'arg': pr.arg.name, 'dim': i,
                    'change': CASE WHEN pr.prev.shape[i + 1] IS DISTINCT FROM pr.arg.shape[i + 1]
                        THEN 'shape' END,
                    'old_value': CAST(pr.prev.shape[i + 1] AS VARCHAR),
                    'new_value': CAST(pr.arg.shape[i + 1] AS VARCHAR)})
            ), lambda ch: ch.change IS NOT NULL))), []),
            -- a static value that differs from the previous compile's of the same name
            -- (or that it did not have)
            coalesce(CASE WHEN position IS NOT NULL THEN flatten(list_transform(statics,
                lambda cu: list_transform(list_filter(
                    CASE
                        WHEN len(coalesce(list_filter(previous_statics,
                            lambda p: p.name = cu.name), [])) = 0 THEN [NULL::VARCHAR]
                        ELSE list_transform(list_filter(previous_statics,
                            lambda p: p.name = cu.name), lambda p: CAST(p.value AS VARCHAR))
                    END,
                    lambda o: o IS DISTINCT FROM CAST(cu.value AS VARCHAR)),
                    lambda o: {'ord': 5, 'arg': cu.name, 'dim': NULL::BIGINT,
                        'change': 'static', 'old_value': o,
                        'new_value': CAST(cu.value AS VARCHAR)}))) END, []),
            coalesce(CASE WHEN fun_name IS NOT NULL THEN list_transform(jit_changes,
                lambda ch: {'ord': 6, 'arg': ch.arg, 'dim': ch.dim,
                    'change': 'jit:' || ch.what, 'old_value': ch.old, 'new_value': ch.new}) END, [])
        ) AS all_changes
    FROM paired
),
sorted_changes AS (
    -- list_sort of (ord, arg, dim, ...) structs orders the changes; NULL when none
    SELECT
        *,
        CASE WHEN len(all_changes) > 0 THEN list_transform(list_sort(all_changes), lambda ch: {
            'change': ch.change, 'arg': ch.arg, 'dim': ch.dim,
            'old_value': ch.old_value, 'new_value': ch.new_value
        }) END AS changes
    FROM changed
),
grouped AS (
    SELECT
        *,
        array_to_string(list_transform(changes, lambda ch:
            CASE
                WHEN ch.change IN ('shape', 'jit:shape') AND ch.dim IS NOT NULL
                    -- a JAX retrace names whole shapes (dim NULL); torch names the dim
                    THEN ch.arg || ' dim ' || ch.dim || ': ' || ch.old_value || ' -> ' || ch.new_value
                WHEN ch.change = 'new_arg' THEN ch.arg || ': new argument ' || ch.new_value
                WHEN ch.change = 'removed_arg'
                    THEN ch.arg || ': argument gone (was ' || ch.old_value || ')'
                WHEN ch.change = 'static' AND ch.arg LIKE '% condition'
                    -- a control-flow condition the segment specialises on (If_0 condition)
                    THEN ch.arg || ': '
                        || coalesce(replace(replace(ch.old_value, 'true', 'True'), 'false', 'False'), '(none)')
                        || ' -> ' || replace(replace(ch.new_value, 'true', 'True'), 'false', 'False')
                WHEN ch.change = 'static' THEN 'static ' || ch.arg || ': '
                    || coalesce(ch.old_value, '(none)') || ' -> ' || ch.new_value
                ELSE ch.arg || ' ' || replace(ch.change, 'jit:', '') || ': '
                    || coalesce(ch.old_value, '?') || ' -> ' || coalesce(ch.new_value, '?')
            END), '; ') AS reason_text
    FROM sorted_changes
)
SELECT
    re.run_id,
    re.source,
    re.position,
    re.fun_name,
    re.compile_index,
    re.ts_ns,
    re.ts,
    re.call_span_id,
    re.key,
    re.shapes_text,
    re.compile_ns,
    re.previous_key,
    re.previous_shapes_text,
    re.after_eviction,
    CASE
        WHEN re.after_eviction THEN 'after_eviction'
        WHEN re.recompile_limit_hit THEN 'recompile_limit'
        WHEN re.key_seen_before THEN 'same_key'
        WHEN re.outside_jit AND re.changes IS NULL THEN 'outside_jit'
        ELSE coalesce(re.changes[1].change, 'other')
    END AS change,
    re.changes[1].arg AS arg,
    re.changes[1].dim AS dim,
    re.changes[1].old_value AS old_value,
    re.changes[1].new_value AS new_value,
    coalesce(re.changes, []) AS changes,
    CASE
        WHEN re.after_eviction THEN 're-compile after eviction: '
        WHEN re.recompile_limit_hit THEN 'recompile limit reached, runs eagerly from now: '
        WHEN re.key_seen_before THEN 'compiled before and never evicted (another compiled '
            || 'model of the same source?): '
        ELSE ''
    END
        || coalesce(
            re.reason_text,
            re.retrace_reason,
            CASE WHEN re.outside_jit THEN 'JAX compiled ' || re.fun_name
                || ' (run outside jit) again' || coalesce(': ' || re.jax_explanation, '') END,
            re.jax_explanation,
            CASE WHEN re.key = re.previous_key THEN 'same key as the previous compile'
                 ELSE 'key changed: ' || coalesce(re.previous_key, '?') || ' -> ' || re.key END
        ) AS reason,
    coalesce(re.outside_jit, false) AS outside_jit,
    re.compiled,
    re.outcome
FROM grouped re
