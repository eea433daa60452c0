-- recompiles: one row per compile after the first at a position (or of a jitted function),
-- with the part of the key that changed since the previous compile there.
--
-- run_id, source, position, fun_name, compile_index, ts_ns, ts, call_span_id, key,
-- shapes_text, compile_ns   as in `compiles` (compile_index >= 2 here)
-- previous_key        the key of the previous compile at this position
-- previous_shapes_text
-- after_eviction      true when this exact key was compiled before here and the cache
--                     evicted it since (the cache was too small for the keys in use: see
--                     cache_what_if)
-- change              what changed first: shape | rank | dtype | static | new_arg |
--                     removed_arg | after_eviction | same_key (compiled before, never
--                     evicted: another compiled model of the same source) | jit:<what> |
--                     outside_jit (JAX compiled a primitive it ran outside jit again: see
--                     outside_jit) | other
-- arg                 the input (argument or static value) that changed
-- dim                 the dimension (0-based) for a shape change, else NULL
-- old_value, new_value  before -> after, as text (a size, a dtype, a static value)
-- changes             every change, as a list of {change, arg, dim, old_value, new_value}
-- reason              for a person: 'input_ids dim 1: 17 -> 23', several joined by '; ',
--                     prefixed 're-compile after eviction: ' when after_eviction; what JAX
--                     reported (jax_explanation) when the key looks unchanged; a
--                     control-flow condition reads 'If_0 condition: True -> False'
-- outside_jit         true: a compile of a primitive JAX ran outside jit (not the user's
--                     jit; `compiles.outside_jit`), grouped apart by the report
-- compiled            as in `compiles`: false for a segment that runs eagerly (fewer than
--                     20 nodes after a break), which compiles nothing
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
re AS MATERIALIZED (
    SELECT row_number() OVER () AS rid, * FROM c WHERE compile_index > 1
),
named AS (
    SELECT rid, shapes, previous_shapes,
        list_transform(shapes, lambda a: a.name)
            = list_transform(previous_shapes, lambda a: a.name) AS same_names
    FROM re WHERE position IS NOT NULL
),
cur_args AS (
    SELECT rid, unnest(shapes) AS arg FROM named WHERE NOT coalesce(same_names, false)
),
prev_args AS (
    SELECT rid, unnest(previous_shapes) AS arg FROM named WHERE NOT coalesce(same_names, false)
),
arg_pairs AS MATERIALIZED (
    -- the same arguments as the previous compile, in the same order (the usual case):
    -- paired by position; otherwise by name
    SELECT rid, unnest(shapes) AS arg, unnest(previous_shapes) AS prev
    FROM named WHERE same_names
    UNION ALL
    SELECT coalesce(cu.rid, pr.rid) AS rid, cu.arg AS arg, pr.arg AS prev
    FROM cur_args cu
    FULL JOIN prev_args pr ON pr.rid = cu.rid AND pr.arg.name = cu.arg.name
),
dims AS (
    SELECT rid, arg.name AS arg, unnest(range(len(arg.shape))) AS dim,
        unnest(arg.shape) AS new_size, unnest(prev.shape) AS old_size
    FROM arg_pairs
    WHERE arg IS NOT NULL AND prev IS NOT NULL AND len(prev.shape) = len(arg.shape)
        AND prev.shape <> arg.shape
),
shape_changes AS (
    -- new and removed arguments, dtype, rank, then per-dimension size changes
    SELECT rid, 0 AS ord, 'new_arg' AS change, arg.name AS arg, NULL::BIGINT AS dim,
        NULL AS old_value,
        coalesce('[' || array_to_string(arg.shape, ',') || ']', '') || coalesce(':' || arg.dtype, '')
            AS new_value
    FROM arg_pairs WHERE prev IS NULL
    UNION ALL
    SELECT rid, 4, 'removed_arg', prev.name, NULL,
        coalesce('[' || array_to_string(prev.shape, ',') || ']', ''), NULL
    FROM arg_pairs WHERE arg IS NULL
    UNION ALL
    SELECT rid, 1, 'dtype', arg.name, NULL, prev.dtype, arg.dtype
    FROM arg_pairs
    WHERE arg IS NOT NULL AND prev IS NOT NULL AND prev.dtype IS DISTINCT FROM arg.dtype
    UNION ALL
    SELECT rid, 2, 'rank', arg.name, NULL,
        CAST(len(prev.shape) AS VARCHAR), CAST(len(arg.shape) AS VARCHAR)
    FROM arg_pairs
    WHERE arg IS NOT NULL AND prev IS NOT NULL AND len(prev.shape) IS DISTINCT FROM len(arg.shape)
    UNION ALL
    SELECT rid, 3, 'shape', arg, dim, CAST(old_size AS VARCHAR), CAST(new_size AS VARCHAR)
    FROM dims WHERE old_size IS DISTINCT FROM new_size
),
cur_statics AS (
    SELECT rid, unnest(statics) AS sv FROM re WHERE position IS NOT NULL
),
prev_statics AS (
    SELECT rid, unnest(previous_statics) AS sv FROM re WHERE position IS NOT NULL
),
static_changes AS (
    SELECT cu.rid, 5 AS ord, 'static' AS change, cu.sv.name AS arg, NULL::BIGINT AS dim,
        CAST(pr.sv.value AS VARCHAR) AS old_value, CAST(cu.sv.value AS VARCHAR) AS new_value
    FROM cur_statics cu
    LEFT JOIN prev_statics pr ON pr.rid = cu.rid AND pr.sv.name = cu.sv.name
    WHERE CAST(pr.sv.value AS VARCHAR) IS DISTINCT FROM CAST(cu.sv.value AS VARCHAR)
),
jit_changes AS (
    SELECT rid, 6 AS ord, 'jit:' || ch.what AS change, ch.arg AS arg, NULL::BIGINT AS dim,
        ch.old AS old_value, ch.new AS new_value
    FROM (SELECT rid, unnest(jit_changes) AS ch FROM re WHERE fun_name IS NOT NULL)
),
all_changes AS (
    SELECT * FROM shape_changes
    UNION ALL SELECT * FROM static_changes
    UNION ALL SELECT * FROM jit_changes
),
changes_per AS (
    -- list_sort of (ord, arg, dim, ...) structs orders the changes; an aggregate with
    -- ORDER BY would sort each group on its own, which is many times slower
    SELECT
        rid,
        list_transform(
            list_sort(list({
                'ord': ord, 'arg': arg, 'dim': dim, 'change': change,
                'old_value': old_value, 'new_value': new_value
            })),
            lambda ch: {
                'change': ch.change, 'arg': ch.arg, 'dim': ch.dim,
                'old_value': ch.old_value, 'new_value': ch.new_value
            }
        ) AS changes
    FROM all_changes
    GROUP BY rid
),
grouped AS (
    SELECT
        rid,
        changes,
        array_to_string(list_transform(changes, lambda ch:
            CASE
                WHEN ch.change = 'shape'
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
    FROM changes_per
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
        WHEN re.key_seen_before THEN 'same_key'
        WHEN re.outside_jit AND g.changes IS NULL THEN 'outside_jit'
        ELSE coalesce(g.changes[1].change, 'other')
    END AS change,
    g.changes[1].arg AS arg,
    g.changes[1].dim AS dim,
    g.changes[1].old_value AS old_value,
    g.changes[1].new_value AS new_value,
    coalesce(g.changes, []) AS changes,
    CASE
        WHEN re.after_eviction THEN 're-compile after eviction: '
        WHEN re.key_seen_before THEN 'compiled before and never evicted (another compiled '
            || 'model of the same source?): '
        ELSE ''
    END
        || coalesce(
            g.reason_text,
            re.retrace_reason,
            CASE WHEN re.outside_jit THEN 'JAX compiled ' || re.fun_name
                || ' (run outside jit) again' || coalesce(': ' || re.jax_explanation, '') END,
            re.jax_explanation,
            CASE WHEN re.key = re.previous_key THEN 'same key as the previous compile'
                 ELSE 'key changed: ' || coalesce(re.previous_key, '?') || ' -> ' || re.key END
        ) AS reason,
    coalesce(re.outside_jit, false) AS outside_jit,
    re.compiled
FROM re
LEFT JOIN grouped g ON g.rid = re.rid
