-- job_ranks: one row per run that is a rank of a job: which job, which rank, where it ran.
-- The job identity is the run's `process` record (what JAX said once the program started
-- it: jax.distributed's process index and count) where there is one, else its meta (the
-- launcher's environment, `ember record --job`, an imported torch log's folder and rank).
-- A run that names no job is in no row.
--
-- reads: tables only
--
-- job_id            VARCHAR       the job ('slurm:4242.0', 'torchrun:RUN_ID', 'jax:HOST:PORT',
--                                 the --job NAME, a TORCH_TRACE folder's name)
-- run_id            VARCHAR       the run: one process of the job
-- rank              BIGINT        its rank (NULL when nothing said it)
-- world_size        BIGINT        how many processes the job has, as this rank saw it (NULL:
--                                 not said)
-- job_source        VARCHAR       what named the job or the rank: ember, torchrun, slurm,
--                                 openmpi, pmi, jax.distributed, torch_trace
-- host              VARCHAR       the machine it ran on
-- pid               BIGINT        its process id
-- backend           VARCHAR       JAX's platform (cpu, gpu, tpu; torch.compile for a torch log)
-- local_device_ids  BIGINT[]      the ids of its own devices (NULL when not recorded)
-- started_at        TIMESTAMP_NS  when its recording started (UTC)
-- ended_at          TIMESTAMP_NS  its last recorded span end or memory reading (UTC)
WITH found AS (
    SELECT run_id, any_value(job_id) AS job_id, any_value(rank) AS rank,
        any_value(world_size) AS world_size, any_value(job_source) AS job_source,
        any_value(backend) AS backend, any_value(local_device_ids) AS local_device_ids
    FROM process
    GROUP BY run_id
),
last_ts AS (
    SELECT run_id, max(ts_ns) AS ts_ns
    FROM (
        SELECT run_id, ts_ns FROM span_end
        UNION ALL
        SELECT run_id, ts_ns FROM device_memory
        UNION ALL
        SELECT run_id, ts_ns FROM process
    ) AS t
    GROUP BY run_id
)
SELECT
    coalesce(p.job_id, r.job_id) AS job_id,
    r.run_id,
    coalesce(p.rank, r.rank) AS rank,
    coalesce(p.world_size, r.world_size) AS world_size,
    coalesce(p.job_source, r.job_source) AS job_source,
    r.host,
    r.pid,
    coalesce(r.backend, p.backend) AS backend,
    p.local_device_ids,
    r.started_at,
    ember_at(r.wall_time_ns, coalesce(l.ts_ns, 0)) AS ended_at
FROM runs r
LEFT JOIN found p ON p.run_id = r.run_id
LEFT JOIN last_ts l ON l.run_id = r.run_id
WHERE coalesce(p.job_id, r.job_id) IS NOT NULL
