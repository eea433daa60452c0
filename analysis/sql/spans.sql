-- spans: one row per span (a span_start with its span_end, if it has one).
--
-- run_id        the run
-- span_id       the span's id (unique within a run); parent_id: the enclosing span or NULL
-- name          the event prefix ('ember.call', 'ember.segment.compile', ...) or a user name
-- span_kind     load | compile | call | run | segment_compile | break | hub_download |
--               hub_info | op | step | user | jit
-- start_ns      ts_ns of the start (ns since the run started); end_ns: of the end, NULL if open
-- duration_ns   end - start as the span measured it; NULL while open
-- status        ok | error | open (no span_end: the process stopped inside the span)
-- error_kind, error_reason   why an 'error' span failed
-- source        the model source of the span (start or end attrs)
-- position      the graph position (segment_compile, break spans)
-- start_attrs, end_attrs     the typed attributes of each record (STRUCT)
-- started_at, ended_at       absolute times (TIMESTAMP_NS, UTC) from runs.wall_time_ns
SELECT
    s.run_id,
    s.span_id,
    s.parent_id,
    s.name,
    s.span_kind,
    s.ts_ns AS start_ns,
    e.ts_ns AS end_ns,
    e.duration_ns,
    coalesce(e.status, 'open') AS status,
    e.error.kind AS error_kind,
    e.error.reason AS error_reason,
    coalesce(e.attrs.source, s.attrs.source) AS source,
    coalesce(e.attrs.position, s.attrs.position) AS position,
    s.attrs AS start_attrs,
    e.attrs AS end_attrs,
    ember_at(r.wall_time_ns, s.ts_ns) AS started_at,
    ember_at(r.wall_time_ns, e.ts_ns) AS ended_at
FROM span_start s
LEFT JOIN span_end e ON e.run_id = s.run_id AND e.span_id = s.span_id
LEFT JOIN runs r ON r.run_id = s.run_id
