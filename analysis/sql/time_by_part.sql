-- time_by_part: one row per (run, part): where the run's time went, most expensive first.
--
-- The parts of call_breakdown summed over the run's calls (each segment position, eager
-- segment, break node with its host transfer and subgraph, Ember's overhead), plus what
-- happens outside calls: compiles at each position (all of them, also those made ahead of
-- time when the model was compiled), model loads and Hub downloads.
--
-- reads: breaks, call_breakdown, spans
--
-- run_id             VARCHAR  the run
-- part_kind          VARCHAR  segment | eager_segment | break | compile | overhead | unattributed
--                             (as in call_breakdown; a break is whole here: its own time, host
--                             transfer and subgraph), load | hub_download (outside calls)
-- position           BIGINT   graph position (segments, breaks, compiles); NULL otherwise
-- node               VARCHAR  the break node's name ('If_0') for a break; NULL for other parts
-- op_type            VARCHAR  the break node's op ('If') for a break; NULL for other parts
-- reason             VARCHAR  for a break: what its value is needed for (as in `breaks`: 'the If
--                             condition', 'the trip count of a Loop')
-- part               VARCHAR  the part for a person (as in call_breakdown; 'compile 27' counts
--                             every compile at position 27; 'Hub download', 'model load')
-- spans              BIGINT   spans of this part in the run
-- calls_with         BIGINT   calls in which this part took time (0 for parts outside calls)
-- total_ns           BIGINT   the part's time in the run (ns)
-- in_calls_ns        BIGINT   the part of total_ns spent inside calls
-- host_transfer_ns   BIGINT   for a break: the part of total_ns spent moving its inputs to the
--                             host; NULL when not recorded and for other parts
-- program_ns         BIGINT   for a break: the part of total_ns spent running compiled programs for
--                             its subgraph (an If branch or Loop that runs compiled at the break);
--                             NULL when none ran and for other parts
-- subgraph_ns        BIGINT   for a break: the rest of its subgraph's time (node by node, between
--                             programs); NULL when not recorded and for other parts
-- share_of_wall      DOUBLE   total_ns / run_summary.wall_ns (the run's wall time up to its last
--                             span)
-- share_of_calls     DOUBLE   in_calls_ns / the run's total call time (NULL outside calls)
-- per_call_ns        DOUBLE   in_calls_ns / the run's calls: the mean cost per call
-- p50_call_ns        DOUBLE   the median of this part's time in the calls it took time in (ns)
-- p50_share_of_call  DOUBLE   the median, over those calls, of the part's share of the call: '95 %
--                             of each call' (a call that also compiled weighs no more than another)
-- rank               BIGINT   1 = the part that cost the run the most time
-- latency_kind       VARCHAR  'to results' | 'dispatch only' (see run_summary)
WITH per_call AS (
    -- each part's time in each call (a break with its host transfer and subgraph)
    SELECT run_id, call_span_id, any_value(call_ns) AS call_ns,
        CASE WHEN part_kind LIKE 'break%' THEN 'break' ELSE part_kind END AS part_kind,
        position, node, op_type,
        arg_min(part, length(part)) AS part,
        sum(spans) FILTER (
            WHERE part_kind NOT IN ('break_host_transfer', 'break_program', 'break_subgraph')
        ) AS spans,
        sum(ns) AS ns,
        sum(ns) FILTER (WHERE part_kind = 'break_host_transfer') AS host_transfer_ns,
        sum(ns) FILTER (WHERE part_kind = 'break_program') AS program_ns,
        sum(ns) FILTER (WHERE part_kind = 'break_subgraph') AS subgraph_ns
    FROM call_breakdown
    WHERE part_kind <> 'compile'
    GROUP BY ALL
),
in_calls AS (
    SELECT run_id, part_kind, position, node, op_type, any_value(part) AS part,
        CAST(sum(spans) AS BIGINT) AS spans,
        count(*) FILTER (WHERE ns > 0) AS calls_with,
        CAST(sum(ns) AS BIGINT) AS ns,
        CAST(sum(host_transfer_ns) AS BIGINT) AS host_transfer_ns,
        CAST(sum(program_ns) AS BIGINT) AS program_ns,
        CAST(sum(subgraph_ns) AS BIGINT) AS subgraph_ns,
        quantile_cont(ns, 0.5) AS p50_call_ns,
        quantile_cont(ns / nullif(call_ns, 0), 0.5) AS p50_share_of_call
    FROM per_call
    GROUP BY ALL
),
compiles AS (
    -- every segment compile, in a call (also inside one of its breaks) or ahead of time
    SELECT s.run_id, 'compile' AS part_kind, s.position, NULL AS node, NULL AS op_type,
        'compile ' || s.position AS part, count(*) AS spans,
        count(DISTINCT coalesce(c.span_id, g.span_id)) AS calls_with,
        CAST(sum(s.duration_ns) AS BIGINT) AS total_ns,
        CAST(coalesce(sum(s.duration_ns) FILTER (
            WHERE c.span_id IS NOT NULL OR g.span_id IS NOT NULL), 0) AS BIGINT)
            AS in_calls_ns,
        CAST(NULL AS BIGINT) AS host_transfer_ns, CAST(NULL AS BIGINT) AS program_ns,
        CAST(NULL AS BIGINT) AS subgraph_ns,
        CAST(NULL AS DOUBLE) AS p50_call_ns, CAST(NULL AS DOUBLE) AS p50_share_of_call
    FROM spans s
    LEFT JOIN spans p ON p.run_id = s.run_id AND p.span_id = s.parent_id
    LEFT JOIN spans c ON c.run_id = p.run_id AND c.span_id = p.span_id
        AND c.span_kind = 'call'
    LEFT JOIN spans g ON g.run_id = p.run_id AND g.span_id = p.parent_id
        AND p.span_kind = 'break' AND g.span_kind = 'call'
    WHERE s.span_kind = 'segment_compile' AND s.status <> 'open'
    GROUP BY s.run_id, s.position
),
outside AS (
    SELECT run_id, span_kind AS part_kind, CAST(NULL AS BIGINT) AS position, NULL AS node,
        NULL AS op_type,
        CASE span_kind WHEN 'hub_download' THEN 'Hub download' ELSE 'model load' END AS part,
        count(*) AS spans, 0 AS calls_with,
        CAST(sum(duration_ns) AS BIGINT) AS total_ns, CAST(0 AS BIGINT) AS in_calls_ns,
        CAST(NULL AS BIGINT) AS host_transfer_ns, CAST(NULL AS BIGINT) AS program_ns,
        CAST(NULL AS BIGINT) AS subgraph_ns,
        CAST(NULL AS DOUBLE) AS p50_call_ns, CAST(NULL AS DOUBLE) AS p50_share_of_call
    FROM spans
    WHERE span_kind IN ('hub_download', 'load') AND status <> 'open'
    GROUP BY run_id, span_kind
),
run_totals AS (
    -- as run_summary counts them (wall_ns, calls, total_call_ns, latency_kind), without
    -- the rest of run_summary
    SELECT e.run_id, max(e.ts_ns) AS wall_ns,
        count(*) FILTER (WHERE e.span_kind = 'call') AS calls,
        sum(e.duration_ns) FILTER (WHERE e.span_kind = 'call') AS total_call_ns,
        CASE WHEN count(*) FILTER (WHERE e.span_kind = 'call') > 0 THEN 'call' END
            AS latency_of,
        CASE WHEN any_value(r.sync) THEN 'to results' ELSE 'dispatch only' END
            AS latency_kind
    FROM span_end e LEFT JOIN runs r ON r.run_id = e.run_id
    GROUP BY e.run_id
),
everything AS (
    SELECT run_id, part_kind, position, node, op_type, part, spans, calls_with,
        ns AS total_ns, ns AS in_calls_ns, host_transfer_ns, program_ns, subgraph_ns,
        p50_call_ns, p50_share_of_call
    FROM in_calls
    UNION ALL SELECT * FROM compiles
    UNION ALL SELECT * FROM outside
)
SELECT
    e.run_id,
    e.part_kind,
    e.position,
    e.node,
    e.op_type,
    b.reason,
    e.part,
    e.spans,
    e.calls_with,
    e.total_ns,
    e.in_calls_ns,
    e.host_transfer_ns,
    e.program_ns,
    e.subgraph_ns,
    e.total_ns / nullif(s.wall_ns, 0) AS share_of_wall,
    CASE WHEN e.in_calls_ns > 0 THEN e.in_calls_ns / nullif(s.total_call_ns, 0) END
        AS share_of_calls,
    CASE WHEN s.latency_of = 'call' THEN e.in_calls_ns / nullif(s.calls, 0) END AS per_call_ns,
    e.p50_call_ns,
    e.p50_share_of_call,
    row_number() OVER (PARTITION BY e.run_id ORDER BY e.total_ns DESC, e.part) AS rank,
    s.latency_kind
FROM everything e
LEFT JOIN run_totals s ON s.run_id = e.run_id
LEFT JOIN (
    SELECT run_id, position, node, any_value(reason) AS reason FROM breaks GROUP BY ALL
) b ON e.part_kind = 'break' AND b.run_id = e.run_id AND b.position = e.position
    AND b.node = e.node
