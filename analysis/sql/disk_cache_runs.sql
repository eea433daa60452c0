-- disk_cache_runs: one row per run with segment compiles: what its disk cache did.
--
-- reads: compiles
--
-- run_id         VARCHAR       the run
-- model          VARCHAR       the run's model tag (NULL without one)
-- name           VARCHAR       the run's scenario tag, else its run id
-- started_at     TIMESTAMP_NS  when the run started
-- segments       BIGINT        segment compiles
-- disk_hits      BIGINT        segment compiles whose program was loaded from the disk cache
-- disk_misses    BIGINT        segment compiles that looked in the disk cache and did not find
--                              their program (they compiled it)
-- disk_segments  BIGINT        compiled segments that looked in a disk cache (hits + misses)
-- compile_ns     BIGINT        the segment compiles' time
-- miss_ns        BIGINT        the time of those that missed the disk cache
SELECT r.run_id, json_extract_string(r.tags, '$.model') AS model,
    coalesce(json_extract_string(r.tags, '$.scenario'), r.run_id) AS name,
    r.started_at,
    count(c.position) AS segments,
    count(*) FILTER (WHERE c.position IS NOT NULL AND c.disk_cache = 'hit') AS disk_hits,
    count(*) FILTER (WHERE c.position IS NOT NULL AND c.disk_cache = 'miss') AS disk_misses,
    count(*) FILTER (WHERE c.position IS NOT NULL AND c.disk_cache IS NOT NULL)
        AS disk_segments,
    CAST(coalesce(sum(c.compile_ns) FILTER (WHERE c.position IS NOT NULL), 0) AS BIGINT)
        AS compile_ns,
    CAST(coalesce(sum(c.compile_ns) FILTER (WHERE c.position IS NOT NULL
        AND c.disk_cache = 'miss'), 0) AS BIGINT) AS miss_ns
FROM runs r JOIN compiles c ON c.run_id = r.run_id
GROUP BY ALL
-- a run whose compiles were all of jitted functions has no segment: no row
HAVING count(c.position) > 0
