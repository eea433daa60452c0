-- recompile_positions: one row per segment position compiled more than once in a run.
--
-- reads: cache_lookups, compiles
--
-- run_id        VARCHAR  the run
-- source        VARCHAR  the model source (its path or Hub address)
-- position      BIGINT   the segment position (index in the sorted graph)
-- compiles      BIGINT   compiles at this position (compiles rows)
-- compile_ns    BIGINT   their total time
-- recompile_ns  BIGINT   the time of all but the first
-- lookups       BIGINT   cache lookups at this position (NULL: none, all compiled ahead of time)
WITH lk AS (
    SELECT run_id, source, position, count(*) AS lookups
    FROM cache_lookups GROUP BY ALL
)
SELECT c.run_id, c.source, c.position, count(*) AS compiles,
    CAST(coalesce(sum(c.compile_ns), 0) AS BIGINT) AS compile_ns,
    CAST(coalesce(sum(c.compile_ns) FILTER (WHERE c.compile_index > 1), 0) AS BIGINT)
        AS recompile_ns,
    any_value(lk.lookups) AS lookups
FROM compiles c LEFT JOIN lk ON lk.run_id = c.run_id
    AND lk.source IS NOT DISTINCT FROM c.source AND lk.position = c.position
WHERE c.position IS NOT NULL
GROUP BY ALL HAVING count(*) > 1
