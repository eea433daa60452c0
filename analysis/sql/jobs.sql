-- jobs: one row per job (many processes, one trace each): how many of its ranks were
-- recorded, which are missing, where and when it ran, and what its ranks compiled.
--
-- reads: job_ranks, rank_compiles
--
-- job_id          VARCHAR       the job (see job_ranks)
-- ranks_seen      BIGINT        distinct ranks recorded
-- runs            BIGINT        traces of the job (more than ranks_seen: a rank recorded twice,
--                               or runs without a rank)
-- world_size      BIGINT        the job's size, as its ranks said it (the largest; NULL: none
--                               said)
-- ranks_missing   BIGINT        world_size - ranks_seen: ranks with no trace (NULL when the size
--                               is unknown)
-- missing_ranks   BIGINT[]      which ranks those are, in order (NULL: none, or the size is
--                               unknown)
-- hosts           VARCHAR[]     the machines its ranks ran on, sorted
-- started_at      TIMESTAMP_NS  the first rank's start (UTC)
-- ended_at        TIMESTAMP_NS  the last rank's last record (UTC)
-- compiles        BIGINT        compiles over every rank (rank_compiles)
-- compile_ns      BIGINT        their time, summed over ranks (ns)
WITH ranks AS (
    SELECT job_id, count(DISTINCT rank) AS ranks_seen, count(*) AS runs,
        max(world_size) AS world_size, list(DISTINCT host ORDER BY host) AS hosts,
        min(started_at) AS started_at, max(ended_at) AS ended_at
    FROM job_ranks
    GROUP BY job_id
),
expected AS (
    SELECT job_id, unnest(range(0, world_size)) AS rank
    FROM ranks
    WHERE world_size IS NOT NULL
),
missing AS (
    SELECT e.job_id, list(e.rank ORDER BY e.rank) AS missing_ranks
    FROM expected e
    LEFT JOIN job_ranks j ON j.job_id = e.job_id AND j.rank = e.rank
    WHERE j.run_id IS NULL
    GROUP BY e.job_id
),
compiled AS (
    SELECT job_id, CAST(sum(compiles) AS BIGINT) AS compiles,
        CAST(sum(compile_ns) AS BIGINT) AS compile_ns
    FROM rank_compiles
    GROUP BY job_id
)
SELECT
    r.job_id,
    r.ranks_seen,
    r.runs,
    r.world_size,
    CASE WHEN r.world_size IS NOT NULL THEN greatest(r.world_size - r.ranks_seen, 0) END
        AS ranks_missing,
    m.missing_ranks,
    r.hosts,
    r.started_at,
    r.ended_at,
    coalesce(c.compiles, 0) AS compiles,
    coalesce(c.compile_ns, 0) AS compile_ns
FROM ranks r
LEFT JOIN missing m ON m.job_id = r.job_id
LEFT JOIN compiled c ON c.job_id = r.job_id
