-- cache_events: one row per cache event (hit, miss, evict) with the life of the cached
-- segment it belongs to: a miss compiles a segment, the hits reuse it, an evict ends it.
--
-- run_id, source, position, key   where, and which cached segment
-- ord           the order of events at this (run, source, position)
-- ts_ns         when (ns since run start)
-- action        hit | miss | evict
-- call_span_id  the call that caused it
-- shapes_text   the segment's argument shapes as text
-- cache_size    the cache size (evict events)
-- life          1, 2, 3...: which compile of this key the event belongs to (a miss starts
--               a new life; hits and the evict that ends it share its number)
-- life_start_ns ts_ns of the miss that started this life
-- hits_in_life  hits of this key in this life up to and including this event
-- next_miss_ns  ts_ns of the next miss of this key here (NULL: never compiled again)
WITH ev AS (
    SELECT
        c.run_id, c.source, c.position,
        ember_key(c.key, c.shapes, c.statics) AS key,
        row_number() OVER (PARTITION BY c.run_id, c.source, c.position ORDER BY c.ts_ns, c.rowid)
            AS ord,
        c.ts_ns, c.action, c.span_id AS call_span_id,
        ember_shapes_text(c.shapes) AS shapes_text,
        c.cache_size
    FROM cache c
),
lives AS (
    SELECT *,
        count(*) FILTER (WHERE action = 'miss') OVER w_run AS life
    FROM ev
    WINDOW w_run AS (PARTITION BY run_id, source, position, key ORDER BY ord
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
)
SELECT
    run_id, source, position, key, ord, ts_ns, action, call_span_id, shapes_text, cache_size,
    life,
    min(ts_ns) FILTER (WHERE action = 'miss') OVER w_life AS life_start_ns,
    count(*) FILTER (WHERE action = 'hit') OVER (
        PARTITION BY run_id, source, position, key, life ORDER BY ord
        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW
    ) AS hits_in_life,
    min(ts_ns) FILTER (WHERE action = 'miss') OVER (
        PARTITION BY run_id, source, position, key ORDER BY ord
        ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING
    ) AS next_miss_ns
FROM lives
WINDOW w_life AS (PARTITION BY run_id, source, position, key, life)
