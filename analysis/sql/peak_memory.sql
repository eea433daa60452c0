-- peak_memory: one row per (run, device, series): the highest memory and when it happened.
--
-- reads: memory_timeline
--
-- run_id       VARCHAR              the run
-- device       VARCHAR              the device
-- series       VARCHAR              tensors (live bytes from alloc/free records) | used | peak |
--                                   reserved | rss (device readings; see memory_timeline)
-- source       VARCHAR              memory (tensor records) | memory_stats (the device's allocator)
--                                   | live_arrays (on the CPU: live JAX arrays, and the process's
--                                   RSS)
-- peak_bytes   BIGINT               the highest value
-- peak_ts_ns   BIGINT               when it was first reached (ns since run start)
-- peak_at      TIMESTAMP_NS         the same as an absolute time (UTC)
-- span_id      BIGINT               the span open around that moment (the call or step it happened
--                                   in)
-- by_category  MAP(VARCHAR,BIGINT)  tensors only: live bytes per category at the peak, as a MAP
-- samples      BIGINT               rows of memory_timeline this peak is taken from
--
-- Speed: aggregates, not a window sorting every row of memory_timeline; the live bytes per
-- category at the peak come from one join of the tensor rows with the few peaks.
WITH agg AS (
    SELECT run_id, device, series, any_value(source) AS source, max(device_bytes) AS peak_bytes,
        count(*) AS samples
    FROM memory_timeline GROUP BY run_id, device, series
),
peaks AS (
    -- the first row that reached the peak
    SELECT a.run_id, a.device, a.series, a.source, a.peak_bytes AS device_bytes, a.samples,
        arg_min({'ts_ns': t.ts_ns, 'ts': t.ts, 'span_id': t.span_id}, t.ts_ns) AS first
    FROM memory_timeline t
    JOIN agg a ON a.run_id = t.run_id AND a.device IS NOT DISTINCT FROM t.device
        AND a.series = t.series AND t.device_bytes = a.peak_bytes
    GROUP BY a.run_id, a.device, a.series, a.source, a.peak_bytes, a.samples
),
cat_at_peak AS (
    SELECT run_id, device,
        map_from_entries(list({'key': category, 'value': bytes} ORDER BY category))
            AS by_category
    FROM (
        SELECT p.run_id, p.device, t.category, arg_max(t.bytes, t.ts_ns) AS bytes
        FROM peaks p
        JOIN memory_timeline t ON t.run_id = p.run_id AND t.device = p.device
            AND t.series = 'tensors' AND t.ts_ns <= p.first.ts_ns
        WHERE p.series = 'tensors'
        GROUP BY p.run_id, p.device, t.category
    )
    GROUP BY ALL
)
SELECT
    p.run_id, p.device, p.series, p.source,
    p.device_bytes AS peak_bytes,
    p.first.ts_ns AS peak_ts_ns,
    p.first.ts AS peak_at,
    p.first.span_id AS span_id,
    c.by_category,
    p.samples
FROM peaks p
LEFT JOIN cat_at_peak c ON c.run_id = p.run_id AND c.device = p.device AND p.series = 'tensors'
