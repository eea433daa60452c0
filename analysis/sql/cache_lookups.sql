-- cache_lookups: one row per lookup of the segment cache (a cache hit or miss), in order.
--
-- run_id, source, position   which compiled function and which segment (graph position)
-- seq           1, 2, 3... the order of lookups at this (run, source, position)
-- ts_ns, ts     when (ns since run start; absolute TIMESTAMP_NS, UTC)
-- action        hit | miss
-- call_span_id  the call span that looked it up
-- key           the cache key (as recorded, or built from shapes and static values)
-- shapes, statics            the segment's argument shapes and static values
-- shapes_text   the shapes as text: 'input_ids[1,17]:int64'
-- prev_seq      seq of the previous lookup of the same key here (NULL: its first lookup)
WITH ordered AS (
    SELECT
        c.run_id,
        c.source,
        c.position,
        row_number() OVER (
            PARTITION BY c.run_id, c.source, c.position ORDER BY c.ts_ns, c.rowid
        ) AS seq,
        c.ts_ns,
        c.action,
        c.span_id AS call_span_id,
        ember_key(c.key, c.shapes, c.statics) AS key,
        c.shapes,
        c.statics
    FROM cache c
    WHERE c.action IN ('hit', 'miss')
)
SELECT
    o.run_id,
    o.source,
    o.position,
    o.seq,
    o.ts_ns,
    ember_at(r.wall_time_ns, o.ts_ns) AS ts,
    o.action,
    o.call_span_id,
    o.key,
    o.shapes,
    o.statics,
    ember_shapes_text(o.shapes) AS shapes_text,
    lag(o.seq) OVER (PARTITION BY o.run_id, o.source, o.position, o.key ORDER BY o.seq) AS prev_seq
FROM ordered o
LEFT JOIN runs r ON r.run_id = o.run_id
