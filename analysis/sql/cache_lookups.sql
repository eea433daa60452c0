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
--
-- Speed: key and shapes_text are computed at ingest (cache.lookup_key, cache.shapes_text);
-- the windows sort narrow rows (rowid, partition, order) and the wide columns are joined
-- back by rowid afterwards, so millions of lookups do not drag their shapes through a sort.
WITH ordered AS (
    SELECT
        c.rowid AS rid,
        c.run_id,
        c.source,
        c.position,
        c.lookup_key AS key,
        row_number() OVER (
            PARTITION BY c.run_id, c.source, c.position ORDER BY c.ts_ns, c.rowid
        ) AS seq
    FROM cache c
    WHERE c.action IN ('hit', 'miss')
),
numbered AS (
    SELECT rid, run_id, seq,
        lag(seq) OVER (PARTITION BY run_id, source, position, key ORDER BY seq) AS prev_seq
    FROM ordered
)
SELECT
    c.run_id,
    c.source,
    c.position,
    n.seq,
    c.ts_ns,
    ember_at(r.wall_time_ns, c.ts_ns) AS ts,
    c.action,
    c.span_id AS call_span_id,
    c.lookup_key AS key,
    c.shapes,
    c.statics,
    c.shapes_text,
    n.prev_seq
FROM numbered n
JOIN cache c ON c.rowid = n.rid AND c.run_id = n.run_id
LEFT JOIN runs r ON r.run_id = c.run_id
