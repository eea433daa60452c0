-- breaks: one row per graph break (run, source, position, node): where a graph stops
-- being one compiled program, why, and what running the break node eagerly costs.
--
-- reads: spans
--
-- run_id       VARCHAR       the run
-- source       VARCHAR       the model source (its path or Hub address)
-- position     BIGINT        the break node's position in the sorted graph
-- node         VARCHAR       the break node's name ('nonzero_0')
-- op_type      VARCHAR       the break node's op ('NonZero')
-- reason       VARCHAR       what the break node's value is needed for (from the segment that stops
--                            here: 'the shape of a Reshape', 'the If condition', ...); for a
--                            torch.compile graph break (imported TORCH_TRACE) torch's explanation,
--                            with position the frame id, node the user's file:line, op_type torch's
--                            short reason ('Data-dependent branching')
-- host_values  VARCHAR[]     names of values that enter the next segment as static values
-- runs         BIGINT        times the break node ran (break spans)
-- errors       BIGINT        runs that raised
-- total_ns     BIGINT        the break node's eager run time, summed (ns)
-- mean_ns      DOUBLE        its mean (ns)
-- p50_ns       DOUBLE        its median (ns)
-- max_ns       BIGINT        its longest (ns)
-- first_ts_ns  BIGINT        its first run (ns since the run started)
-- first_at     TIMESTAMP_NS  its first run (UTC)
WITH b AS (
    SELECT run_id, source, position, start_attrs.node AS node, start_attrs.op_type AS op_type,
        duration_ns, status, start_ns, started_at, start_attrs.reason AS own_reason
    FROM spans WHERE span_kind = 'break'
),
why AS (
    SELECT run_id, source, TRY_CAST(end_attrs.stop AS BIGINT) AS position,
        arg_max(end_attrs.reason, start_ns) AS reason,
        list_distinct(flatten(list(end_attrs.host_values))) AS host_values
    FROM spans
    WHERE span_kind = 'segment_compile' AND end_attrs.stop IS NOT NULL
        AND end_attrs.stop <> 'end'
    GROUP BY ALL
)
SELECT
    b.run_id, b.source, b.position, b.node, b.op_type,
    coalesce(any_value(w.reason), any_value(b.own_reason)) AS reason,
    any_value(w.host_values) AS host_values,
    count(*) AS runs,
    count(*) FILTER (WHERE b.status = 'error') AS errors,
    CAST(sum(b.duration_ns) AS BIGINT) AS total_ns,
    avg(b.duration_ns) AS mean_ns,
    quantile_cont(b.duration_ns, 0.5) AS p50_ns,
    max(b.duration_ns) AS max_ns,
    min(b.start_ns) AS first_ts_ns,
    min(b.started_at) AS first_at
FROM b
LEFT JOIN why w ON w.run_id = b.run_id AND w.source IS NOT DISTINCT FROM b.source
    AND w.position = b.position
GROUP BY b.run_id, b.source, b.position, b.node, b.op_type
