-- recompile_changes: one row per (run, source, position, change, arg, dim): how often each
-- part of a segment's key changed at a recompile there.
--
-- reads: recompiles
--
-- run_id          VARCHAR  the run
-- source          VARCHAR  the model source (its path or Hub address)
-- position        BIGINT   the segment position (index in the sorted graph)
-- change          VARCHAR  one change a recompile here names (shape | rank | dtype | static |
--                          new_arg | removed_arg), or its `recompiles.change` when it names none
--                          (after_eviction, same_key, other); a recompile counts once per change it
--                          names
-- arg             VARCHAR  the argument or static value that changed ('input_ids'); NULL where the
--                          change names none
-- dim             BIGINT   the dimension (0-based) of a shape change; NULL for other changes
-- n               BIGINT   recompiles that name this change
-- after_eviction  BIGINT   of them, recompiles after an eviction
-- example         VARCHAR  the reason of the first of them
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
