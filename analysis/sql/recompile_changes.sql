-- recompile_changes: one row per (run, source, position, change, arg, dim): how often each
-- part of a segment's key changed at a recompile there.
--
-- run_id, source, position
-- change, arg, dim   as in recompiles (one recompile counts once per change it names)
-- n                  recompiles that name this change
-- after_eviction     of them, recompiles after an eviction
-- example            the reason of the first of them
SELECT run_id, source, position, ch.change AS change, ch.arg AS arg, ch.dim AS dim,
    count(*) AS n,
    count(*) FILTER (WHERE after_eviction) AS after_eviction,
    any_value(reason ORDER BY compile_index) AS example
FROM (
    SELECT *, unnest(CASE WHEN len(changes) = 0
        THEN [{'change': change, 'arg': arg, 'dim': dim,
               'old_value': old_value, 'new_value': new_value}]
        ELSE changes END) AS ch
    FROM recompiles WHERE position IS NOT NULL
)
GROUP BY ALL
