-- spans: one row per span (a span_start with its span_end, if it has one).
--
-- reads: tables only
--
-- run_id        VARCHAR       the run
-- span_id       BIGINT        the span's id (unique within a run)
-- parent_id     BIGINT        the enclosing span, NULL at the top
-- name          VARCHAR       the event prefix ('ember.call', 'ember.segment.compile', ...) or a
--                             user name
-- span_kind     VARCHAR       load | compile | call | run | segment_compile | break | hub_download
--                             | hub_info | op | step | user | jit
-- start_ns      BIGINT        ts_ns of the start (ns since the run started)
-- end_ns        BIGINT        ts_ns of the end, NULL if open
-- duration_ns   BIGINT        end - start as the span measured it; NULL while open
-- status        VARCHAR       ok | error | open (no span_end: the process stopped inside the span)
-- error_kind    VARCHAR       the kind of error an 'error' span failed with
-- error_reason  VARCHAR       why it failed
-- source        VARCHAR       the model source of the span (start or end attrs)
-- position      BIGINT        the graph position (segment_compile, break spans)
-- start_attrs   STRUCT        the span_start record's typed attributes
-- end_attrs     STRUCT        the span_end record's typed attributes
-- started_at    TIMESTAMP_NS  the start as an absolute time (UTC, from runs.wall_time_ns)
-- ended_at      TIMESTAMP_NS  the end as an absolute time (UTC); NULL if open
SELECT
    span_s.run_id,
    span_s.span_id,
    span_s.parent_id,
    span_s.name,
    span_s.span_kind,
    span_s.ts_ns AS start_ns,
    span_e.ts_ns AS end_ns,
    span_e.duration_ns,
    coalesce(span_e.status, 'open') AS status,
    span_e.error.kind AS error_kind,
    span_e.error.reason AS error_reason,
    coalesce(span_e.attrs.source, span_s.attrs.source) AS source,
    coalesce(span_e.attrs.position, span_s.attrs.position) AS position,
    span_s.attrs AS start_attrs,
    span_e.attrs AS end_attrs,
    ember_at(r.wall_time_ns, span_s.ts_ns) AS started_at,
    ember_at(r.wall_time_ns, span_e.ts_ns) AS ended_at
FROM span_start span_s
LEFT JOIN span_end span_e ON span_e.run_id = span_s.run_id AND span_e.span_id = span_s.span_id
LEFT JOIN runs r ON r.run_id = span_s.run_id
