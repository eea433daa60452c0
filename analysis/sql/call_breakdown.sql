-- call_breakdown: one row per (call, part): where each model call's time went.
--
-- A call's parts are its child spans, one row per kind and place: each compiled segment,
-- each eager segment (run node by node), each break node (split into its own time, the
-- time moving its inputs to the host, the compiled programs it ran for its subgraph, and
-- the rest of the subgraph: If branch, Loop or Scan body), each compile (a cache miss
-- compiles inside the call, also a break's program compiled inside the break), and the
-- rest of the call's time, which is Ember's own work (cache lookups, keys, argument
-- checks). The parts of a call add up to its duration.
--
-- reads: spans
--
-- run_id         VARCHAR  the run
-- source         VARCHAR  the model source (its path or Hub address)
-- call_span_id   BIGINT   the call
-- call_index     BIGINT   1, 2, 3... the calls of the run in start order
-- call_start_ns  BIGINT   when the call started (ns since the run started)
-- call_ns        BIGINT   the call's duration (to results when the run is synced: see latency_kind)
-- part_kind      VARCHAR  segment | eager_segment | break | break_host_transfer | break_program |
--                         break_subgraph | compile | overhead | unattributed (a trace without
--                         segment spans: the segments' time and Ember's own, not recorded apart)
-- position       BIGINT   the graph position of the segment, break node or compile (NULL: overhead)
-- node           VARCHAR  the break node's name ('If_0') for the break parts; NULL for other parts
-- op_type        VARCHAR  the break node's op ('If') for the break parts; NULL for other parts
-- part           VARCHAR  the part for a person: 'segment 0', 'eager segment 31', 'break If_0
--                         (If)', 'break If_0 (If): host transfer', 'break Loop_0 (Loop): compiled
--                         program', 'break If_0 (If): subgraph', 'compile 27', 'Ember overhead'
-- spans          BIGINT   spans of this part in the call (a part can run more than once)
-- start_ns       BIGINT   when the part first started in the call (ns since the run started)
-- ns             BIGINT   time of this part in this call (ns)
-- share          DOUBLE   ns / call_ns
-- latency_kind   VARCHAR  'to results' | 'dispatch only' (see run_summary)
WITH calls AS (
    SELECT run_id, span_id, source, start_ns, duration_ns AS call_ns,
        row_number() OVER (PARTITION BY run_id ORDER BY start_ns, span_id) AS call_index
    FROM spans
    WHERE span_kind = 'call' AND status <> 'open'
),
kids AS (
    SELECT k.run_id, k.span_id, k.parent_id AS call_span_id, k.span_kind, k.position,
        k.start_ns, k.duration_ns, k.start_attrs.node AS node, k.start_attrs.op_type AS op_type,
        coalesce(k.end_attrs.compiled, k.start_attrs.compiled) AS compiled,
        k.end_attrs.host_transfer_ns AS host_transfer_ns,
        k.end_attrs.subgraph_ns AS subgraph_ns
    FROM spans k
    WHERE k.span_kind IN ('segment', 'break', 'segment_compile') AND k.status <> 'open'
        AND k.parent_id IS NOT NULL
),
in_breaks AS (
    -- what a break ran inside itself for its subgraph: compiled programs at the break's
    -- position (segment spans; one run node by node stays in the subgraph's time) and
    -- their compiles, all within its subgraph time
    SELECT b.run_id, b.span_id AS break_span_id,
        coalesce(sum(n.duration_ns) FILTER (
            WHERE n.span_kind = 'segment' AND n.compiled IS NOT DISTINCT FROM true), 0)
            AS program_ns,
        coalesce(sum(n.duration_ns) FILTER (WHERE n.span_kind = 'segment_compile'), 0)
            AS compile_ns
    FROM kids b
    JOIN kids n ON n.run_id = b.run_id AND n.call_span_id = b.span_id
    WHERE b.span_kind = 'break'
    GROUP BY b.run_id, b.span_id
),
breaks AS (
    SELECT k.*, coalesce(i.program_ns, 0) AS program_ns, coalesce(i.compile_ns, 0) AS compile_ns
    FROM kids k
    LEFT JOIN in_breaks i ON i.run_id = k.run_id AND i.break_span_id = k.span_id
    WHERE k.span_kind = 'break'
),
parts AS (
    -- segments and compiles of the call, and the compiles inside its breaks
    SELECT k.run_id, coalesce(b.call_span_id, k.call_span_id) AS call_span_id,
        CASE WHEN k.span_kind = 'segment_compile' THEN 'compile'
            WHEN k.compiled IS NOT DISTINCT FROM false THEN 'eager_segment'
            ELSE 'segment' END AS part_kind,
        k.position, NULL AS node, NULL AS op_type, k.start_ns, k.duration_ns AS ns
    FROM kids k
    LEFT JOIN breaks b ON b.run_id = k.run_id AND b.span_id = k.call_span_id
    WHERE k.span_kind = 'segment_compile' OR (k.span_kind = 'segment' AND b.span_id IS NULL)
    UNION ALL
    -- a break node: its own time, then the host transfer, the compiled programs it ran and
    -- the rest of its subgraph (a subgraph without a recorded time holds them in the own)
    SELECT run_id, call_span_id, 'break', position, node, op_type, start_ns,
        duration_ns - coalesce(host_transfer_ns, 0)
            - coalesce(subgraph_ns, program_ns + compile_ns)
    FROM breaks
    UNION ALL
    SELECT run_id, call_span_id, 'break_host_transfer', position, node, op_type, start_ns,
        host_transfer_ns
    FROM breaks WHERE host_transfer_ns IS NOT NULL
    UNION ALL
    SELECT run_id, call_span_id, 'break_program', position, node, op_type, start_ns,
        program_ns
    FROM breaks WHERE program_ns > 0
    UNION ALL
    SELECT run_id, call_span_id, 'break_subgraph', position, node, op_type, start_ns,
        subgraph_ns - program_ns - compile_ns
    FROM breaks WHERE subgraph_ns IS NOT NULL
),
per_call AS (
    SELECT run_id, call_span_id, part_kind, position, node, op_type, count(*) AS spans,
        min(start_ns) AS start_ns, CAST(sum(ns) AS BIGINT) AS ns
    FROM parts GROUP BY ALL
),
with_segments AS (
    SELECT DISTINCT run_id FROM span_start WHERE span_kind = 'segment'
),
rest AS (
    SELECT c.run_id, c.span_id AS call_span_id,
        CASE WHEN w.run_id IS NULL THEN 'unattributed' ELSE 'overhead' END AS part_kind,
        CAST(NULL AS BIGINT) AS position, NULL AS node, NULL AS op_type, 1 AS spans,
        c.start_ns, CAST(c.call_ns - coalesce(sum(p.ns), 0) AS BIGINT) AS ns
    FROM calls c
    LEFT JOIN per_call p ON p.run_id = c.run_id AND p.call_span_id = c.span_id
    LEFT JOIN with_segments w ON w.run_id = c.run_id
    GROUP BY c.run_id, c.span_id, c.call_ns, c.start_ns, w.run_id
),
everything AS (
    SELECT * FROM per_call UNION ALL SELECT * FROM rest
)
SELECT
    c.run_id,
    c.source,
    c.span_id AS call_span_id,
    c.call_index,
    c.start_ns AS call_start_ns,
    c.call_ns,
    e.part_kind,
    e.position,
    e.node,
    e.op_type,
    CASE e.part_kind
        WHEN 'segment' THEN 'segment ' || e.position
        WHEN 'eager_segment' THEN 'eager segment ' || e.position
        WHEN 'compile' THEN 'compile ' || e.position
        WHEN 'break' THEN 'break ' || e.node || ' (' || e.op_type || ')'
        WHEN 'break_host_transfer' THEN 'break ' || e.node || ' (' || e.op_type || '): host transfer'
        WHEN 'break_program' THEN 'break ' || e.node || ' (' || e.op_type || '): compiled program'
        WHEN 'break_subgraph' THEN 'break ' || e.node || ' (' || e.op_type || '): subgraph'
        WHEN 'overhead' THEN 'Ember overhead'
        ELSE 'segments and Ember overhead (not recorded apart)'
    END AS part,
    e.spans,
    e.start_ns,
    e.ns,
    e.ns / nullif(c.call_ns, 0) AS share,
    CASE WHEN r.sync THEN 'to results' ELSE 'dispatch only' END AS latency_kind
FROM calls c
JOIN everything e ON e.run_id = c.run_id AND e.call_span_id = c.span_id
LEFT JOIN runs r ON r.run_id = c.run_id
