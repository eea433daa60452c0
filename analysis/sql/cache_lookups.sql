-- cache_lookups: one row per lookup of the segment cache (a cache hit or miss), in order.
--
-- reads: tables only
--
-- run_id        VARCHAR       the run
-- source        VARCHAR       the model source (its path or Hub address); NULL for a model loaded
--                             from memory (a ModelProto or bytes)
-- position      BIGINT        the segment position looked up (index in the sorted graph)
-- seq           BIGINT        1, 2, 3... the order of lookups at this (run, source, position)
-- ts_ns         BIGINT        when the lookup happened (ns since the run started)
-- ts            TIMESTAMP_NS  ts_ns as an absolute time (TIMESTAMP_NS, UTC)
-- action        VARCHAR       hit | miss
-- call_span_id  BIGINT        the call span that looked it up
-- key           VARCHAR       the cache key (as recorded, or built from shapes and static values)
-- shapes        STRUCT[]      the segment's argument shapes, a list of {name, shape, dtype,
--                             sequence}
-- statics       STRUCT[]      the static values the segment reads on the host (part of its key), a
--                             list of {name, value}; empty when it has none
-- shapes_text   VARCHAR       the shapes as text: 'input_ids[1,17]:int64'
-- prev_seq      BIGINT        seq of the previous lookup of the same key here (NULL: its first
--                             lookup)
-- evictions     BIGINT        how many times the cache evicted this key here before this lookup
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
