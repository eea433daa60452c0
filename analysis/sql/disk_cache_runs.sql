-- disk_cache_runs: one row per run with segment compiles: what its disk cache did.
--
-- run_id
-- model, name   the model tag; the scenario tag (else the run id)
-- started_at    when the run started
-- segments      segment compiles
-- disk_hits, disk_misses   compiled segments loaded from / not found in the disk cache
-- disk_segments compiled segments that looked in a disk cache (hits + misses)
-- compile_ns    the segment compiles' time
-- miss_ns       the time of those that missed the disk cache
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
