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
-- evictions     how many times the cache evicted this key here before this lookup
--
-- Speed: key, shapes_text, seq, prev_seq and evictions are computed once at ingest
-- (columns of `cache`; see analysis/db.py), so this is a scan.
SELECT
    c.run_id,
    c.source,
    c.position,
    c.seq,
    c.ts_ns,
    ember_at(r.wall_time_ns, c.ts_ns) AS ts,
    c.action,
    c.span_id AS call_span_id,
    c.lookup_key AS key,
    c.shapes,
    c.statics,
    c.shapes_text,
    c.prev_seq,
    c.evictions
FROM cache c
LEFT JOIN runs r ON r.run_id = c.run_id
WHERE c.action IN ('hit', 'miss')
