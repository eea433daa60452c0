-- recompiles: one row per compile after the first at a position (or of a jitted function),
-- with the part of the key that changed since the previous compile there.
--
-- run_id, source, position, fun_name, compile_index, ts_ns, ts, call_span_id, key,
-- shapes_text, compile_ns   as in `compiles` (compile_index >= 2 here)
-- previous_key        the key of the previous compile at this position
-- previous_shapes_text
-- after_eviction      true when this exact key was compiled before here and evicted since
--                     (the cache was too small for the keys in use: see cache_what_if)
-- change              what changed first: shape | rank | dtype | static | new_arg |
--                     removed_arg | after_eviction | jit:<what> | other
-- arg                 the input (argument or static value) that changed
-- dim                 the dimension (0-based) for a shape change, else NULL
-- old_value, new_value  before -> after, as text (a size, a dtype, a static value)
-- changes             every change, as a list of {change, arg, dim, old_value, new_value}
-- reason              for a person: 'input_ids dim 1: 17 -> 23', several joined by '; ',
--                     prefixed 're-compile after eviction: ' when after_eviction
WITH c AS (
    SELECT
        *,
        lag(key) OVER w AS previous_key,
        lag(shapes) OVER w AS previous_shapes,
        lag(statics) OVER w AS previous_statics,
        lag(shapes_text) OVER w AS previous_shapes_text,
        position IS NOT NULL AND count(*) OVER (
            PARTITION BY run_id, source, position, fun_name, key
            ORDER BY compile_index ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
        ) > 1 AS after_eviction
    FROM compiles
    WINDOW w AS (PARTITION BY run_id, source, position, fun_name ORDER BY compile_index)
),
re AS (SELECT * FROM c WHERE compile_index > 1),
cur_args AS (
    SELECT re.run_id, re.source, re.position, re.fun_name, re.compile_index, cur_u.arg,
        list_filter(re.previous_shapes, lambda _prev: _prev.name = cur_u.arg.name)[1] AS prev
    FROM re, unnest(re.shapes) AS cur_u(arg)
    WHERE re.position IS NOT NULL
),
shape_changes AS (
    -- dtype, rank, then per-dimension size changes of arguments present before and now
    SELECT run_id, source, position, fun_name, compile_index, 0 AS ord, 'new_arg' AS change,
        arg.name AS arg, NULL::BIGINT AS dim, NULL AS old_value,
        coalesce('[' || array_to_string(arg.shape, ',') || ']', '') || coalesce(':' || arg.dtype, '')
            AS new_value
    FROM cur_args WHERE prev IS NULL
    UNION ALL
    SELECT run_id, source, position, fun_name, compile_index, 1, 'dtype', arg.name, NULL,
        prev.dtype, arg.dtype
    FROM cur_args WHERE prev IS NOT NULL AND prev.dtype IS DISTINCT FROM arg.dtype
    UNION ALL
    SELECT run_id, source, position, fun_name, compile_index, 2, 'rank', arg.name, NULL,
        CAST(len(prev.shape) AS VARCHAR), CAST(len(arg.shape) AS VARCHAR)
    FROM cur_args
    WHERE prev IS NOT NULL AND len(prev.shape) IS DISTINCT FROM len(arg.shape)
    UNION ALL
    SELECT run_id, source, position, fun_name, compile_index, 3, 'shape', arg.name, i - 1,
        CAST(prev.shape[i] AS VARCHAR), CAST(arg.shape[i] AS VARCHAR)
    FROM cur_args, range(1, coalesce(len(arg.shape), 0) + 1) AS r(i)
    WHERE prev IS NOT NULL AND len(prev.shape) = len(arg.shape)
        AND prev.shape[i] IS DISTINCT FROM arg.shape[i]
),
removed_args AS (
    SELECT re.run_id, re.source, re.position, re.fun_name, re.compile_index, 4 AS ord,
        'removed_arg' AS change, prev_u.arg.name AS arg, NULL::BIGINT AS dim,
        coalesce('[' || array_to_string(prev_u.arg.shape, ',') || ']', '') AS old_value,
        NULL AS new_value
    FROM re, unnest(re.previous_shapes) AS prev_u(arg)
    WHERE re.position IS NOT NULL
        AND len(list_filter(re.shapes, lambda _cur: _cur.name = prev_u.arg.name)) = 0
),
static_changes AS (
    SELECT re.run_id, re.source, re.position, re.fun_name, re.compile_index, 5 AS ord,
        'static' AS change, stat_u.sv.name AS arg, NULL::BIGINT AS dim,
        CAST(list_filter(re.previous_statics, lambda _prev: _prev.name = stat_u.sv.name)[1].value AS VARCHAR)
            AS old_value,
        CAST(stat_u.sv.value AS VARCHAR) AS new_value
    FROM re, unnest(re.statics) AS stat_u(sv)
    WHERE re.position IS NOT NULL
        AND CAST(list_filter(re.previous_statics, lambda _prev: _prev.name = stat_u.sv.name)[1].value AS VARCHAR)
            IS DISTINCT FROM CAST(stat_u.sv.value AS VARCHAR)
),
jit_changes AS (
    SELECT re.run_id, re.source, re.position, re.fun_name, re.compile_index, 6 AS ord,
        'jit:' || jit_u.ch.what AS change, jit_u.ch.arg AS arg, NULL::BIGINT AS dim,
        jit_u.ch.old AS old_value, jit_u.ch.new AS new_value
    FROM re, unnest(re.jit_changes) AS jit_u(ch)
    WHERE re.fun_name IS NOT NULL
),
all_changes AS (
    SELECT * FROM shape_changes
    UNION ALL SELECT * FROM removed_args
    UNION ALL SELECT * FROM static_changes
    UNION ALL SELECT * FROM jit_changes
),
grouped AS (
    SELECT
        run_id, source, position, fun_name, compile_index,
        list({
            'change': change, 'arg': arg, 'dim': dim,
            'old_value': old_value, 'new_value': new_value
        } ORDER BY ord, arg, dim) AS changes,
        string_agg(
            CASE
                WHEN change = 'shape' THEN arg || ' dim ' || dim || ': ' || old_value || ' -> ' || new_value
                WHEN change = 'new_arg' THEN arg || ': new argument ' || new_value
                WHEN change = 'removed_arg' THEN arg || ': argument gone (was ' || old_value || ')'
                WHEN change = 'static' THEN 'static ' || arg || ': ' || coalesce(old_value, '(none)') || ' -> ' || new_value
                ELSE arg || ' ' || replace(change, 'jit:', '') || ': '
                    || coalesce(old_value, '?') || ' -> ' || coalesce(new_value, '?')
            END, '; ' ORDER BY ord, arg, dim
        ) AS reason_text
    FROM all_changes
    GROUP BY ALL
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
        ELSE coalesce(g.changes[1].change, 'other')
    END AS change,
    g.changes[1].arg AS arg,
    g.changes[1].dim AS dim,
    g.changes[1].old_value AS old_value,
    g.changes[1].new_value AS new_value,
    coalesce(g.changes, []) AS changes,
    CASE WHEN re.after_eviction THEN 're-compile after eviction: ' ELSE '' END
        || coalesce(
            g.reason_text,
            re.retrace_reason,
            CASE WHEN re.key = re.previous_key THEN 'same key as the previous compile'
                 ELSE 'key changed: ' || coalesce(re.previous_key, '?') || ' -> ' || re.key END
        ) AS reason
FROM re
LEFT JOIN grouped g
    ON g.run_id = re.run_id
    AND g.source IS NOT DISTINCT FROM re.source
    AND g.position IS NOT DISTINCT FROM re.position
    AND g.fun_name IS NOT DISTINCT FROM re.fun_name
    AND g.compile_index = re.compile_index
