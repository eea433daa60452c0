-- memory_peaks: one row per (run, device, series) memory peak (all but 'limit'), with the
-- name the report gives it and the call or step it happened in.
--
-- reads: peak_memory, spans
--
-- run_id       VARCHAR              the run
-- device       VARCHAR              the device ('cpu:0', 'cuda:0', ...)
-- series       VARCHAR              tensors | used | peak | reserved | rss: the memory_timeline
--                                   series that peaked (never limit here)
-- source       VARCHAR              memory (tensor records) | memory_stats (the device's allocator)
--                                   | live_arrays (on the CPU: live JAX arrays, and the process's
--                                   RSS)
-- peak_bytes   BIGINT               the series' highest value (bytes; as in `peak_memory`)
-- peak_ts_ns   BIGINT               when it was first reached (ns since the run started)
-- by_category  MAP(VARCHAR,BIGINT)  tensors only: live bytes per category at the peak, as a MAP;
--                                   NULL for readings
-- label        VARCHAR              'tensors' | 'RSS' | 'live arrays' | 'device <series>' (the
--                                   names of run_summary.peak_source)
-- during       VARCHAR              'call #3' / 'step #1': the call or step the reading was tied
--                                   to, else the shortest one open at the peak; NULL outside calls
--                                   and steps
WITH call_n AS (
    SELECT run_id, span_id, span_kind, start_ns, end_ns,
        row_number() OVER (PARTITION BY run_id, span_kind ORDER BY start_ns) AS n
    FROM spans WHERE span_kind IN ('call', 'step')
)
SELECT p.run_id, p.device, p.series, p.source, p.peak_bytes, p.peak_ts_ns, p.by_category,
    CASE WHEN p.series = 'tensors' THEN 'tensors'
        WHEN p.series = 'rss' THEN 'RSS'
        WHEN p.source = 'live_arrays' THEN 'live arrays'
        ELSE 'device ' || p.series END AS label,
    coalesce(
        (SELECT any_value(c.span_kind || ' #' || c.n) FROM call_n c
         WHERE c.run_id = p.run_id AND c.span_id = p.span_id),
        (SELECT arg_min(c.span_kind || ' #' || c.n, c.end_ns - c.start_ns)
         FROM call_n c WHERE c.run_id = p.run_id AND c.start_ns <= p.peak_ts_ns
            AND c.end_ns >= p.peak_ts_ns)
    ) AS during
FROM peak_memory p
WHERE p.series <> 'limit'
