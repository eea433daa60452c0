-- call_latency: one row per (run, source, input shapes): how long calls took.
--
-- reads: _compiling_spans, spans
--
-- run_id           VARCHAR  the run
-- source           VARCHAR  the model source (its path or Hub address)
-- shapes_text      VARCHAR  the call's input shapes, 'input_ids[1,17]:int64'
-- calls            BIGINT   finished calls (ok or error)
-- errors           BIGINT   calls that raised
-- p50_ns           DOUBLE   the median call duration (ns, interpolated; calls that compiled
--                           included)
-- p90_ns           DOUBLE   the 90th percentile call duration (ns, interpolated)
-- p99_ns           DOUBLE   the 99th percentile call duration (ns, interpolated)
-- mean_ns          DOUBLE   the mean call duration (ns)
-- max_ns           BIGINT   the longest call (ns)
-- min_ns           BIGINT   the shortest call (ns)
-- first_ns         BIGINT   the duration of the first call with these shapes (it usually compiles)
-- compiling_calls  BIGINT   calls that compiled at least one segment (a cache miss inside the call,
--                           also inside one of its breaks: _compiling_spans)
-- p50_warm_ns      DOUBLE   median of the calls that did not compile
-- total_ns         BIGINT   time spent in these calls
WITH calls AS (
    -- grouped by the shapes themselves; their text is made once per group, not per call
    SELECT span_row.run_id, span_row.span_id, span_row.source, span_row.start_ns, span_row.duration_ns, span_row.status,
        span_row.start_attrs.shapes AS shapes
    FROM spans span_row
    WHERE span_row.span_kind = 'call' AND span_row.status <> 'open'
),
compiling AS (
    SELECT run_id, span_id AS call_span_id FROM _compiling_spans
)
SELECT
    c.run_id,
    c.source,
    ember_shapes_text(c.shapes) AS shapes_text,
    count(*) AS calls,
    count(*) FILTER (WHERE c.status = 'error') AS errors,
    quantile_cont(c.duration_ns, 0.5) AS p50_ns,
    quantile_cont(c.duration_ns, 0.9) AS p90_ns,
    quantile_cont(c.duration_ns, 0.99) AS p99_ns,
    avg(c.duration_ns) AS mean_ns,
    max(c.duration_ns) AS max_ns,
    min(c.duration_ns) AS min_ns,
    arg_min(c.duration_ns, c.start_ns) AS first_ns,
    count(k.call_span_id) AS compiling_calls,
    quantile_cont(c.duration_ns, 0.5) FILTER (WHERE k.call_span_id IS NULL) AS p50_warm_ns,
    CAST(sum(c.duration_ns) AS BIGINT) AS total_ns
FROM calls c
LEFT JOIN compiling k ON k.run_id = c.run_id AND k.call_span_id = c.span_id
GROUP BY c.run_id, c.source, c.shapes
