-- peak_memory: one row per (run, device, series): the highest memory and when it happened.
--
-- run_id, device
-- series        tensors (live bytes from alloc/free records) | used | peak | reserved | rss
--               (device readings; see memory_timeline)
-- peak_bytes    the highest value
-- peak_ts_ns, peak_at   when it was first reached (ns since run start; TIMESTAMP_NS, UTC)
-- span_id       the span open around that moment (the call or step it happened in)
-- by_category   tensors only: live bytes per category at the peak, as a MAP
-- samples       rows of memory_timeline this peak is taken from
WITH ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY run_id, device, series ORDER BY device_bytes DESC, ts_ns)
            AS rk,
        count(*) OVER (PARTITION BY run_id, device, series) AS samples
    FROM memory_timeline
),
peaks AS (SELECT * FROM ranked WHERE rk = 1),
cat_at_peak AS (
    SELECT p.run_id, p.device,
        map_from_entries(list({'key': t.category, 'value': t.bytes} ORDER BY t.category))
            AS by_category
    FROM peaks p,
        LATERAL (
            SELECT category, arg_max(bytes, ts_ns) AS bytes
            FROM memory_timeline t
            WHERE t.run_id = p.run_id AND t.device = p.device AND t.series = 'tensors'
                AND t.ts_ns <= p.ts_ns
            GROUP BY category
        ) t
    WHERE p.series = 'tensors'
    GROUP BY ALL
)
SELECT
    p.run_id, p.device, p.series,
    p.device_bytes AS peak_bytes,
    p.ts_ns AS peak_ts_ns,
    p.ts AS peak_at,
    p.span_id,
    c.by_category,
    p.samples
FROM peaks p
LEFT JOIN cat_at_peak c ON c.run_id = p.run_id AND c.device = p.device AND p.series = 'tensors'
