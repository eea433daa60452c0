-- cache_events: one row per cache event (hit, miss, evict) with the life of the cached
-- segment it belongs to: a miss compiles a segment, the hits reuse it, an evict ends it.
--
-- reads: tables only
--
-- run_id         VARCHAR  the run
-- source         VARCHAR  the model source (its path or Hub address)
-- position       BIGINT   the segment position (index in the sorted graph)
-- key            VARCHAR  where, and which cached segment
-- ord            BIGINT   the order of events at this (run, source, position)
-- ts_ns          BIGINT   when (ns since run start)
-- action         VARCHAR  hit | miss | evict
-- call_span_id   BIGINT   the call that caused it
-- shapes_text    VARCHAR  the segment's argument shapes as text
-- cache_size     BIGINT   the cache size (evict events)
-- life           BIGINT   1, 2, 3...: which compile of this key the event belongs to (a miss starts
--                         a new life; hits and the evict that ends it share its number)
-- life_start_ns  BIGINT   ts_ns of the miss that started this life
-- hits_in_life   BIGINT   hits of this key in this life up to and including this event
-- next_miss_ns   BIGINT   ts_ns of the next miss of this key here (NULL: never compiled again)
--
-- Speed: key, shapes_text, ord, life and hits so far are computed once at ingest (columns
-- of `cache`: lookup_key, shapes_text, ord, life, hits_so_far; see analysis/db.py).
WITH running AS (
    SELECT
        c.run_id, c.source, c.position, c.lookup_key AS key, c.ord,
        c.ts_ns, c.action, c.span_id AS call_span_id, c.shapes_text, c.cache_size,
        c.life, c.hits_so_far
    FROM cache c
),
lives AS (
    SELECT run_id, source, position, key, life,
        min(ts_ns) FILTER (WHERE action = 'miss') AS life_start_ns,
        min(hits_so_far - CASE WHEN action = 'hit' THEN 1 ELSE 0 END) AS hits_before
    FROM running GROUP BY ALL
),
lives_next AS (
    SELECT *,
        lead(life_start_ns) OVER (PARTITION BY run_id, source, position, key ORDER BY life)
            AS next_miss_ns
    FROM lives
)
SELECT
    r.run_id, r.source, r.position, r.key, r.ord, r.ts_ns, r.action, r.call_span_id,
    r.shapes_text, r.cache_size,
    CAST(r.life AS BIGINT) AS life,
    l.life_start_ns,
    CAST(r.hits_so_far - l.hits_before AS BIGINT) AS hits_in_life,
    l.next_miss_ns
FROM running r
JOIN lives_next l ON l.run_id = r.run_id AND l.source IS NOT DISTINCT FROM r.source
    AND l.position = r.position AND l.key = r.key AND l.life = r.life
