-- memory_timeline: one row per memory change or reading, over time, per run and device.
--
-- Two kinds of rows:
--   series = 'tensors'   from `memory` records (alloc/free): cumulative bytes per category
--   series = 'used' | 'peak' | 'reserved' | 'limit' | 'rss'   from `device_memory` readings
--                        (memory_stats of a GPU/TPU; on the CPU live JAX arrays and the
--                        process's resident set)
--
-- reads: tables only
--
-- run_id        VARCHAR       the run
-- device        VARCHAR       the device ('cpu:0', 'cuda:0', ...)
-- series        VARCHAR       see above
-- source        VARCHAR       memory (tensor records) | memory_stats | live_arrays
-- category      VARCHAR       parameter | input | activation | output | temporary | gradient |
--                             optimizer_state | unknown (tensor rows); NULL for readings
-- ts_ns         BIGINT        when the change or reading happened (ns since the run started)
-- delta_bytes   BIGINT        + alloc / - free (tensor rows); NULL for readings
-- bytes         BIGINT        tensor rows: live bytes of this category on this device after this
--                             change; readings: the value read
-- device_bytes  BIGINT        tensor rows: live bytes of all categories on this device; readings:
--                             bytes
-- tensor_id     VARCHAR       the tensor allocated or freed (tensor rows); NULL for readings
-- op_name       VARCHAR       the op that made the tensor (tensor rows, when recorded); NULL for
--                             readings
-- span_id       BIGINT        the enclosing span (a call, a step)
-- ts            TIMESTAMP_NS  ts_ns as an absolute time (TIMESTAMP_NS, UTC)
--
-- Speed: the running sums (bytes, device_bytes of tensor rows) are computed once at ingest
-- (columns of `memory`: category_live_bytes, device_live_bytes; see analysis/db.py).
WITH tensor_rows AS (
    SELECT
        run_id, device, 'tensors' AS series, 'memory' AS source, category, ts_ns,
        CASE WHEN action = 'alloc' THEN bytes ELSE -bytes END AS delta_bytes,
        category_live_bytes AS bytes,
        device_live_bytes AS device_bytes,
        tensor_id, op_name, span_id
    FROM memory
),
readings AS (
    SELECT run_id, device, v.series, source, NULL AS category, ts_ns, NULL::BIGINT AS delta_bytes,
        v.bytes, v.bytes AS device_bytes, NULL AS tensor_id, NULL AS op_name, span_id
    FROM device_memory,
        unnest([
            {'series': 'used', 'bytes': used_bytes},
            {'series': 'peak', 'bytes': peak_bytes},
            {'series': 'reserved', 'bytes': reserved_bytes},
            {'series': 'limit', 'bytes': limit_bytes},
            {'series': 'rss', 'bytes': rss_bytes}
        ]) AS u(v)
    WHERE v.bytes IS NOT NULL
)
SELECT t.*, ember_at(r.wall_time_ns, t.ts_ns) AS ts
FROM (SELECT * FROM tensor_rows UNION ALL SELECT * FROM readings) t
LEFT JOIN runs r ON r.run_id = t.run_id
